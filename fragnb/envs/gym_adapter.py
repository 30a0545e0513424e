"""Any Gymnasium environment id as a batched fragnb Env."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import torch

from ..components import Env

__all__ = ["GymnasiumEnv"]


class GymnasiumEnv(Env):
    """``num_envs`` copies of a Gymnasium environment, stepped one after another in this process.

    Discrete spaces take integer actions; a ``Box`` takes float actions of ``action_shape``, clipped
    to its bounds (the policy's sample, unclipped, is what the buffer keeps).

    Environment ``i`` is seeded from ``(seed, i)`` on its first reset and then follows its own
    generator, so a shard reproduces exactly what its environments do in the full batch. The
    environments are created on first reset, so an unstarted batch pickles cheaply to a worker.

    It speaks Gymnasium where a vector-env loop needs it: ``reset(seed=...)`` answers ``(obs, info)``,
    ``step`` takes NumPy actions and reports ``info["episode"]``/``info["_episode"]``, and
    ``single_observation_space``, ``single_action_space`` and ``spec`` are there.

    Parameters
    ----------
    env_id : str
        A registered Gymnasium id, e.g. ``"CartPole-v1"`` or ``"HalfCheetah-v5"``.
    num_envs : int
        Copies to run.
    seed : int
        Experiment seed.
    **make_kwargs
        Passed to ``gymnasium.make``.

    Examples
    --------
    >>> from fragnb.envs import GymnasiumEnv
    >>> env = GymnasiumEnv("CartPole-v1", num_envs=2, seed=0)
    >>> env.reset().shape
    torch.Size([2, 4])
    >>> import numpy as np
    >>> obs, reward, terminated, truncated, info = env.step(np.ones(2, dtype=np.int64))  # NumPy actions, too
    >>> obs.dtype, reward.tolist(), sorted(info)
    (torch.float32, [1.0, 1.0], ['_episode', 'episode', 'episode_returns'])
    >>> env.close()
    """

    per_env = Env.per_env + ("envs",)

    def __init__(self, env_id: str, num_envs: int, seed: int = 0, **make_kwargs):
        super().__init__(num_envs, seed)
        self.env_id, self.make_kwargs = env_id, make_kwargs
        _mujoco_warnings_to_python(env_id)
        probe = gym.make(env_id, **make_kwargs)  # fails here, in the notebook, for an unknown id
        self.observation_space, self.action_space = probe.observation_space, probe.action_space
        probe.close()
        self.obs_shape = tuple(self.observation_space.shape)
        self.num_actions = int(self.action_space.n) if isinstance(self.action_space, gym.spaces.Discrete) else 0
        self.action_shape = () if self.num_actions else tuple(self.action_space.shape)
        self.envs: list[gym.Env | None] = [None] * self.num_envs

    @property
    def single_observation_space(self):
        """One environment's observation space (Gymnasium's vector environments' name for it)."""
        return self.observation_space

    @property
    def single_action_space(self):
        """One environment's action space."""
        return self.action_space

    @property
    def spec(self):
        """The Gymnasium ``EnvSpec`` of ``env_id`` (``spec.reward_threshold``, ``spec.max_episode_steps``)."""
        return gym.spec(self.env_id)

    def _reseeded(self) -> None:
        self.close()  # made again on the next reset, each seeded from (seed, environment)
        self.envs = [None] * self.num_envs

    def _reset(self, mask: torch.Tensor) -> torch.Tensor:
        obs = []
        for i in mask.nonzero().flatten().tolist():
            if self.envs[i] is None:
                _mujoco_warnings_to_python(self.env_id)
                self.envs[i] = gym.make(self.env_id, **self.make_kwargs)
                seed = int(np.random.SeedSequence([self.seed, int(self.env_ids[i])]).generate_state(1)[0])
                obs.append(self.envs[i].reset(seed=seed)[0])
            else:
                obs.append(self.envs[i].reset()[0])
        return torch.as_tensor(np.stack(obs), dtype=torch.float32)

    def _step(self, actions: torch.Tensor):
        discrete = self.num_actions > 0
        if not discrete:  # a Gaussian policy's actions are unbounded: clip them to the Box, as Stable-Baselines3 does
            low, high = self.action_space.low, self.action_space.high
            actions = actions.cpu().numpy().clip(low, high).astype(self.action_space.dtype)
        results = [
            env.step(int(a) if discrete else a)
            for env, a in zip(self.envs, actions if not discrete else actions.cpu(), strict=True)
        ]
        obs, reward, terminated, truncated, _ = zip(*results, strict=True)
        return (
            torch.as_tensor(np.stack(obs), dtype=torch.float32),
            torch.as_tensor(reward, dtype=torch.float32),
            torch.as_tensor(terminated),
            torch.as_tensor(truncated),
        )

    def close(self) -> None:
        """Close the Gymnasium environments that were started."""
        for env in self.envs:
            if env is not None:
                env.close()


def _mujoco_warnings_to_python(env_id: str) -> None:
    """MuJoCo writes its warnings (e.g. a deprecated attribute in Gymnasium's own model files) to a
    MUJOCO_LOG.TXT in the working directory, the notebook's folder: show them as Python warnings."""
    if "mujoco" not in str(gym.spec(env_id).entry_point):
        return
    import mujoco

    if mujoco.get_mju_user_warning() is None:
        mujoco.set_mju_user_warning(lambda message: warnings.warn(f"MuJoCo: {message}", RuntimeWarning, stacklevel=2))
