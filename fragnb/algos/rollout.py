"""A rollout of on-policy experience and its advantages: :class:`RolloutBuffer` and :func:`gae`.

What PPO, A2C (``gae_lambda=1.0``: discounted returns minus values) and MAPPO's buffer share, apart
from any one algorithm's networks and update (:mod:`fragnb.algos.ppo`, which re-exports both). The
buffer stores experience environment-first, shape ``(num_envs, num_steps, ...)``, so that gathering
the buffers of several actors is a concatenation along the first axis, and GAE runs per environment:
each actor can hold a shard of the buffer.
"""

from __future__ import annotations

import torch

from ..components import Buffer

__all__ = ["RolloutBuffer", "gae", "minibatches"]


class RolloutBuffer(Buffer):
    """One rollout of ``num_steps`` per environment, with GAE computed per environment.

    Parameters
    ----------
    num_envs, num_steps : int
        Shape of the rollout.
    obs_shape : tuple of int
        Shape of one observation.
    gamma, gae_lambda : float
        Discount and GAE lambda.
    action_shape : tuple of int
        Shape of one action: ``()`` stores discrete (int64) actions, anything else float32
        actions of that shape (pass the environment's ``action_shape``).

    Examples
    --------
    One rollout of 3 steps in 2 CartPole environments (constant actions, no network), then its batch:

    >>> import torch
    >>> from fragnb.algos.ppo import RolloutBuffer
    >>> from fragnb.envs import CartPole
    >>> env = CartPole(num_envs=2, seed=0)
    >>> buffer = RolloutBuffer(num_envs=2, num_steps=3, obs_shape=env.obs_shape, gamma=0.9, gae_lambda=1.0)
    >>> obs, zeros = env.reset(), torch.zeros(2)
    >>> for step in range(3):
    ...     action = torch.ones(2, dtype=torch.int64)
    ...     next_obs, reward, terminated, truncated, info = env.step(action)
    ...     buffer.add(obs, action, zeros, zeros, reward, terminated | truncated)  # logprob, value: 0
    ...     obs = next_obs
    >>> batch = buffer.batch(last_value=zeros)
    >>> sorted(batch)
    ['actions', 'advantages', 'dones', 'last_value', 'logprobs', 'obs', 'returns', 'rewards', 'values']
    >>> batch["obs"].shape, batch["actions"].shape  # environment-first
    (torch.Size([2, 3, 4]), torch.Size([2, 3]))
    >>> [round(r, 2) for r in batch["returns"][0].tolist()]  # rewards of 1, discounted by 0.9
    [2.71, 1.9, 1.0]
    """

    per_env = ("obs", "actions", "logprobs", "values", "rewards", "dones")
    shardwise = ("add", "batch")  # GAE runs per environment: actors can each hold a shard

    def __init__(
        self,
        num_envs: int,
        num_steps: int,
        obs_shape: tuple[int, ...],
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
        action_shape: tuple[int, ...] = (),
    ):
        self.num_envs, self.num_steps = num_envs, num_steps
        self.gamma, self.gae_lambda = gamma, gae_lambda
        self.obs = torch.zeros(num_envs, num_steps, *obs_shape)
        action_dtype = torch.float32 if tuple(action_shape) else torch.int64
        self.actions = torch.zeros(num_envs, num_steps, *action_shape, dtype=action_dtype)
        self.logprobs, self.values, self.rewards, self.dones = (torch.zeros(num_envs, num_steps) for _ in range(4))
        self.cursor = 0

    def add(self, obs, action, logprob, value, reward, done) -> None:
        """Store one step of every environment; ``done`` is whether the step ended its episode."""
        if self.cursor == self.num_steps:
            raise RuntimeError(f"buffer is full ({self.num_steps} steps); call batch() to empty it")
        t = self.cursor
        self.obs[:, t], self.actions[:, t], self.logprobs[:, t] = obs, action, logprob
        self.values[:, t], self.rewards[:, t], self.dones[:, t] = value, reward, done
        self.cursor += 1

    def batch(self, last_value: torch.Tensor) -> dict[str, torch.Tensor]:
        """Advantages and returns for the stored rollout (then empty the buffer).

        Returns a dict of ``(num_envs, num_steps, ...)`` tensors: obs, actions, logprobs,
        values, rewards, dones, advantages, returns; and ``last_value``, ``(num_envs,)`` (with
        rewards and dones, what V-trace needs: ``PPOConfig.vtrace``).
        """
        if self.cursor != self.num_steps:
            raise RuntimeError(f"buffer holds {self.cursor} of {self.num_steps} steps")
        advantages = gae(self.rewards, self.values, self.dones, last_value, self.gamma, self.gae_lambda)
        self.cursor = 0
        return {
            "rewards": self.rewards.clone(),  # with dones and last_value: what V-trace needs (PPOConfig.vtrace)
            "dones": self.dones.clone(),
            "last_value": last_value.to(self.rewards.device).clone(),
            "obs": self.obs.clone(),
            "actions": self.actions.clone(),
            "logprobs": self.logprobs.clone(),
            "values": self.values.clone(),
            "advantages": advantages,
            "returns": advantages + self.values,
        }


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    dones: torch.Tensor,
    last_value: torch.Tensor,
    gamma: float,
    gae_lambda: float,
) -> torch.Tensor:
    """Generalised advantage estimates of a rollout of ``(num_envs, num_steps, ...)`` rewards and values;
    ``dones`` is ``(num_envs, num_steps)``: further axes (a multi-agent rollout's agents) share their
    environment's end."""
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(values[:, 0])
    next_value = last_value.to(rewards.device)
    for t in reversed(range(rewards.shape[1])):
        nonterminal = (1.0 - dones[:, t]).reshape(-1, *[1] * (values.dim() - 2))
        delta = rewards[:, t] + gamma * next_value * nonterminal - values[:, t]
        running = delta + gamma * gae_lambda * nonterminal * running
        advantages[:, t] = running
        next_value = values[:, t]
    return advantages


def minibatches(batch_size: int, count: int) -> list[tuple[int, int]]:
    """``count`` minibatches that cover a batch of ``batch_size`` samples, as ``(start, stop)``, their sizes at
    most one apart (none empty). Where ``count`` divides the batch they are CleanRL's; where it does not, the
    batch is not cut into full minibatches and a remainder, whose advantages of one sample would normalise to
    NaN (a standard deviation of one value) and turn every weight into NaN.

    Examples
    --------
    >>> from fragnb.algos.rollout import minibatches
    >>> minibatches(8, 2)
    [(0, 4), (4, 8)]
    >>> minibatches(9, 2)
    [(0, 4), (4, 9)]
    """
    bounds = [i * batch_size // count for i in range(count + 1)]
    return [(start, stop) for start, stop in zip(bounds, bounds[1:]) if stop > start]
