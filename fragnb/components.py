"""Base classes for what a training loop calls: Env, Actor (policy inference), Learner, Buffer.

Capture gives a statement its role from the type of the component it calls, so a user's own
class becomes an actor by subclassing :class:`Actor`. Components know three protocols that
distribution relies on:

- ``shard(index, count)`` splits the environment axis across replicas. Attributes named in
  ``per_env`` have the environment as their leading axis and are sliced; everything else is shared.
- ``state_dict()`` / ``load_state_dict()`` move state in and out (checkpoints, and trained state
  coming back into the notebook). The default covers modules, optimisers, tensors, generators and
  random streams held as attributes.
- per-environment random streams (:class:`fragnb.streams.EnvStreams`) make results independent of
  sharding.
"""

from __future__ import annotations

import copy
import functools
import time
import warnings
from typing import Any, ClassVar, NamedTuple

import numpy as np
import torch

from .streams import EnvStreams

__all__ = ["Component", "Env", "Actor", "Learner", "Buffer", "Episode", "ROLES", "role_of", "shard_slice", "device_of"]


def device_of(module: torch.nn.Module) -> torch.device:
    """Where a network's parameters live (a replica may have moved it to a GPU).

    Parameters
    ----------
    module : torch.nn.Module
        A network with at least one parameter.

    Returns
    -------
    torch.device
        The device of its first parameter.

    Examples
    --------
    An actor feeds its observations to the network where the network is:

    >>> import torch
    >>> from fragnb.components import device_of
    >>> net = torch.nn.Linear(4, 2)
    >>> device_of(net)
    device(type='cpu')
    >>> net(torch.zeros(3, 4).to(device_of(net))).shape
    torch.Size([3, 2])
    """
    return next(module.parameters()).device


def shard_slice(num_envs: int, index: int, count: int) -> slice:
    """The environments that replica ``index`` of ``count`` serves, as a slice of the batch.

    Parameters
    ----------
    num_envs : int
        Environments in the whole batch; ``count`` must divide it.
    index : int
        Which replica, from 0 to ``count - 1``.
    count : int
        Replicas the environments are split across.

    Returns
    -------
    slice
        Consecutive environments, ``num_envs // count`` of them.

    Raises
    ------
    ValueError
        If ``count`` is below 1, ``index`` is out of range or ``count`` does not divide ``num_envs``.

    Examples
    --------
    >>> from fragnb.components import shard_slice
    >>> [shard_slice(8, i, 4) for i in range(4)]
    [slice(0, 2, None), slice(2, 4, None), slice(4, 6, None), slice(6, 8, None)]
    >>> shard_slice(10, 0, 4)
    Traceback (most recent call last):
        ...
    ValueError: num_envs=10 is not divisible by 4 shards; pick a divisor of 10
    """
    if count < 1:
        raise ValueError(f"shard count must be at least 1, got {count}")
    if not 0 <= index < count:
        raise ValueError(f"shard index must be in [0, {count}), got {index}")
    if num_envs % count:
        raise ValueError(f"num_envs={num_envs} is not divisible by {count} shards; pick a divisor of {num_envs}")
    size = num_envs // count
    return slice(index * size, (index + 1) * size)


class Component:
    """Anything a fragment calls. Subclass :class:`Env`, :class:`Actor`, :class:`Learner` or :class:`Buffer`.

    Examples
    --------
    The protocols every component has, on a small one: attributes named in ``per_env`` have the
    environment as their leading axis, so :meth:`shard` slices them and :meth:`merge` joins them again;
    :meth:`state_dict` saves tensors (and modules, optimisers, generators, streams) and the ``counters``.

    >>> import torch
    >>> from fragnb.components import Component
    >>> class Tally(Component):
    ...     per_env = ("totals",)
    ...     counters = ("calls",)
    ...
    ...     def __init__(self, num_envs):
    ...         self.num_envs, self.totals, self.calls = num_envs, torch.zeros(num_envs), 0
    ...
    ...     def add(self, reward):
    ...         self.totals += reward
    ...         self.calls += 1
    >>> tally = Tally(num_envs=4)
    >>> tally.add(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    >>> part = tally.shard(1, 2)  # replica 1 of 2: environments 2 and 3
    >>> part, part.totals.tolist()
    (Tally(num_envs=2), [3.0, 4.0])
    >>> Tally.merge([tally.shard(0, 2), part]).totals.tolist()
    [1.0, 2.0, 3.0, 4.0]
    >>> tally.state_dict()
    {'totals': tensor([1., 2., 3., 4.]), 'calls': 1}
    """

    role: ClassVar[str] = "component"
    #: Attributes whose leading axis is the environment; ``shard`` slices them.
    per_env: ClassVar[tuple[str, ...]] = ()
    #: Methods that work environment by environment: called on a shard, they do to its
    #: environments exactly what the call on the whole batch does to them, and return
    #: environment-first results. ``None``: every method. A component whose loop calls another
    #: method (a replay buffer's ``sample``) is never replicated: it stays with the learner.
    shardwise: ClassVar[tuple[str, ...] | None] = ()
    #: Plain number attributes (step counters, cursors) that :meth:`state_dict` saves too.
    counters: ClassVar[tuple[str, ...]] = ()

    def shard(self, index: int, count: int) -> Component:
        """Replica ``index`` of ``count``: the same component over its share of the environments.

        Components without per-environment state return a copy that shares their modules.
        """
        part = copy.copy(self)
        if "num_envs" in vars(self):
            sl = shard_slice(self.num_envs, index, count)
            part.num_envs = sl.stop - sl.start
            for name in self.per_env:
                setattr(part, name, _take(getattr(self, name), sl))
        return part

    @classmethod
    def merge(cls, parts: list[Component]) -> Component:
        """The inverse of :meth:`shard`: one component over all environments of ``parts`` (in order)."""
        whole = copy.copy(parts[0])
        if len(parts) > 1 and "num_envs" in vars(whole):
            whole.num_envs = sum(p.num_envs for p in parts)
            for name in cls.per_env:
                setattr(whole, name, _concat([getattr(p, name) for p in parts]))
        return whole

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume this component: modules, optimisers, tensors, generators, streams."""
        state = {}
        for name, value in vars(self).items():
            if isinstance(value, (torch.nn.Module, torch.optim.Optimizer, EnvStreams)):
                state[name] = value.state_dict()
            elif isinstance(value, torch.Tensor):
                state[name] = value.detach().clone()
            elif isinstance(value, torch.Generator):
                state[name] = value.get_state()
        return {**state, **{name: getattr(self, name) for name in self.counters}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (in place: modules stay the same objects)."""
        for name, value in state.items():
            current = getattr(self, name)
            if name in self.counters:
                setattr(self, name, value)
            elif isinstance(current, (torch.nn.Module, torch.optim.Optimizer, EnvStreams)):
                current.load_state_dict(value)
            elif isinstance(current, torch.Tensor):
                current.data = value.detach().clone().to(current.device)
            elif isinstance(current, torch.Generator):
                current.set_state(value)
            else:
                raise KeyError(f"{type(self).__name__} has no restorable attribute {name!r}")

    def to(self, device: str | torch.device) -> Component:
        """Move the networks, optimiser state and tensors this component holds to ``device``, in
        place (its random streams only count, on the CPU); return it."""
        for name, value in vars(self).items():
            if isinstance(value, torch.nn.Module):
                value.to(device)
            elif isinstance(value, torch.Tensor):
                setattr(self, name, value.to(device))
        for value in vars(self).values():
            if isinstance(value, torch.optim.Optimizer):  # loading casts its state to its parameters' devices
                value.load_state_dict(value.state_dict())
        return self

    def __repr__(self) -> str:
        envs = f"num_envs={self.num_envs}" if "num_envs" in vars(self) else ""
        return f"{type(self).__name__}({envs})"


def _concat(values: list):
    if isinstance(values[0], torch.Tensor):
        return torch.cat(values)
    if isinstance(values[0], EnvStreams):
        return EnvStreams.cat(values)
    return [x for v in values for x in v]


def _take(value, sl: slice):
    if isinstance(value, list):
        return value[sl]
    return value[sl].clone() if isinstance(value, torch.Tensor) else value[sl]


class Episode(NamedTuple):
    """A finished episode: which environment, its return and length, and when it ended.

    An :class:`Env` appends one to its ``episodes`` list each time an episode ends.

    Parameters
    ----------
    env_id : int
        Global index of the environment (the same whatever the sharding).
    ret : float
        Sum of the episode's rewards.
    length : int
        Steps in the episode.
    step : int
        Vector step of the batch at which it ended (the same in every shard).
    time : float
        ``time.perf_counter()`` when it ended.

    Examples
    --------
    >>> import torch
    >>> from fragnb.components import Episode
    >>> from fragnb.envs import CartPole
    >>> env = CartPole(num_envs=2, seed=0)
    >>> obs = env.reset()
    >>> for _ in range(40):  # always push right: the pole falls within a few dozen steps
    ...     obs, reward, terminated, truncated, info = env.step(torch.ones(2, dtype=torch.int64))
    >>> episode = env.episodes[0]
    >>> episode.ret == episode.length, episode.step == episode.length  # 1 per step; its environment's first
    (True, True)
    >>> isinstance(episode, Episode), episode._fields
    (True, ('env_id', 'ret', 'length', 'step', 'time'))
    """

    env_id: int
    ret: float
    length: int
    step: int  # vector step of the batch at which it ended (the same in every shard)
    time: float  # time.perf_counter() when it ended


class Env(Component):
    """A batch of ``num_envs`` environments stepped together, with auto-reset.

    Subclasses set ``obs_shape`` and ``num_actions`` and implement :meth:`_reset` and
    :meth:`_step`; this class does auto-reset, episode bookkeeping and sharding. Reset noise must
    come from ``self.streams`` so that it does not depend on sharding.

    Parameters
    ----------
    num_envs : int
        Environments in the batch.
    seed : int
        Seed of every per-environment stream.

    Examples
    --------
    A corridor of three cells: action 1 moves one cell right, and reaching the end pays 1 and ends the
    episode. The subclass only moves its state; :meth:`step` resets finished environments, records
    their episodes and answers in Gymnasium's shape.

    >>> import torch
    >>> from fragnb.components import Env
    >>> class Corridor(Env):
    ...     per_env = Env.per_env + ("position",)  # sharded with the environments
    ...     obs_shape, num_actions = (1,), 2
    ...
    ...     def __init__(self, num_envs, seed=0):
    ...         super().__init__(num_envs, seed)
    ...         self.position = torch.zeros(num_envs)
    ...
    ...     def _reset(self, mask):
    ...         self.position[mask] = 0.0
    ...         return self.position[mask, None].clone()
    ...
    ...     def _step(self, actions):
    ...         self.position += actions
    ...         terminated = self.position >= 3
    ...         reward = terminated.float()
    ...         return self.position[:, None].clone(), reward, terminated, torch.zeros_like(terminated)
    >>> env = Corridor(num_envs=2)
    >>> env.reset().tolist()
    [[0.0], [0.0]]
    >>> for action in ([1, 0], [1, 1], [1, 1]):
    ...     obs, reward, terminated, truncated, info = env.step(torch.tensor(action))
    >>> obs.tolist(), terminated.tolist(), info["episode_returns"]  # environment 0 ended and was reset
    ([[0.0], [2.0]], [True, False], [1.0])
    >>> env.episodes[0].env_id, env.episodes[0].length, env.env_steps
    (0, 3, 6)
    >>> env.shard(1, 2).position.tolist()  # replica 1 of 2 holds environment 1
    [2.0]
    """

    role = "env"
    per_env = ("env_ids", "streams", "episode_return", "episode_length")
    shardwise = None
    counters = ("vector_steps",)
    obs_shape: tuple[int, ...] = ()
    num_actions: int = 0
    #: Shape of one environment's action: ``()`` for a discrete action (``num_actions`` choices),
    #: e.g. ``(1,)`` for a one-dimensional continuous one (then ``num_actions`` is 0).
    action_shape: tuple[int, ...] = ()

    def __init__(self, num_envs: int, seed: int = 0):
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, got {num_envs}")
        self.num_envs, self.seed = int(num_envs), int(seed)
        self.env_ids = torch.arange(self.num_envs)
        self.streams = EnvStreams(self.seed, self.env_ids, "reset")
        self.episode_return = torch.zeros(self.num_envs, dtype=torch.float64)
        self.episode_length = torch.zeros(self.num_envs, dtype=torch.int64)
        self.vector_steps = 0
        self.episodes: list[Episode] = []

    # -- to implement -------------------------------------------------------------------------
    def _reset(self, mask: torch.Tensor) -> torch.Tensor:
        """Reset the masked environments; return their first observations."""
        raise NotImplementedError

    def _step(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Advance every environment; return ``(obs, reward, terminated, truncated)``."""
        raise NotImplementedError

    # -- the interface a loop calls ---------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Reset every environment and return the observations, shape ``(num_envs, *obs_shape)``.

        Called as Gymnasium's vector environments are, ``reset(seed=...)`` (or with ``options``), it
        answers as they do, ``(obs, info)``, and ``seed`` becomes the experiment seed: environment
        ``i`` draws from the stream of ``(seed, i)``, so a shard still resets its environments as the
        whole batch does.
        """
        gymnasium_style = seed is not None or options is not None
        if seed is not None:
            self.seed = int(seed)
            self.streams = EnvStreams(self.seed, self.env_ids, "reset")
            self._reseeded()
        self.episode_return.zero_()
        self.episode_length.zero_()
        obs = self._reset(torch.ones(self.num_envs, dtype=torch.bool, device=self.env_ids.device))
        return (obs, {}) if gymnasium_style else obs

    def _reseeded(self) -> None:
        """Hook: ``reset(seed=...)`` changed ``self.seed`` (an environment with generators of its own re-seeds them)."""

    def step(self, actions: torch.Tensor):
        """Step every environment; finished ones are reset and report their next episode's first obs.

        Returns
        -------
        obs, reward, terminated, truncated, info
            ``info["episode_returns"]`` lists the returns of episodes that ended in this step, in
            environment order; ``info["episode"]`` holds each environment's return ``"r"`` and length
            ``"l"`` where ``info["_episode"]`` is true (as Gymnasium's ``RecordEpisodeStatistics``).
            ``actions`` may be a NumPy array, as a Gymnasium loop passes them.
        """
        if len(actions) != self.num_envs:
            raise ValueError(f"{type(self).__name__} has {self.num_envs} environments but got {len(actions)} actions")
        if not isinstance(actions, torch.Tensor):  # a Gymnasium loop's `action.cpu().numpy()`
            actions = torch.as_tensor(actions)
        obs, reward, terminated, truncated = self._step(actions)
        self.vector_steps += 1
        self.episode_return += reward
        self.episode_length += 1
        done = terminated | truncated
        finished = []
        if done.any():
            now = time.perf_counter()
            # Three tensor-to-list conversions instead of three scalar reads per finished episode.
            finished = self.episode_return[done].tolist()
            ids, lengths = self.env_ids[done].tolist(), self.episode_length[done].tolist()
            self.episodes.extend(
                Episode(i, ret, n, self.vector_steps, now) for i, ret, n in zip(ids, finished, lengths)
            )
            mask = done.cpu().numpy()
            episode = {
                "r": np.where(mask, self.episode_return.cpu().numpy(), 0.0),
                "l": np.where(mask, self.episode_length.cpu().numpy(), 0),
            }
            self.episode_return[done] = 0.0
            self.episode_length[done] = 0
            obs = obs.clone()
            obs[done] = self._reset(done)
        else:
            mask, episode = _no_episode(self.num_envs)
        # Where Gymnasium's RecordEpisodeStatistics puts them too, as NumPy arrays (returns and lengths
        # per environment, masked by "_episode"; no wall-clock "t", which would differ run to run).
        return obs, reward, terminated, truncated, {"episode_returns": finished, "episode": episode, "_episode": mask}

    def shard(self, index: int, count: int) -> Env:
        part = super().shard(index, count)
        part.episodes = [e for e in self.episodes if int(part.env_ids[0]) <= e.env_id <= int(part.env_ids[-1])]
        return part

    @classmethod
    def merge(cls, parts: list[Env]) -> Env:
        whole = super().merge(parts)
        whole.episodes = sorted((e for p in parts for e in p.episodes), key=lambda e: (e.step, e.env_id))
        return whole

    @property
    def env_steps(self) -> int:
        """Environment steps taken by this batch (vector steps x environments)."""
        return self.vector_steps * self.num_envs


@functools.lru_cache(maxsize=64)
def _no_episode(num_envs: int) -> tuple[np.ndarray, dict]:
    """The episode statistics of a step where no episode ended, made once per size (read-only: shared)."""
    arrays = np.zeros(num_envs, dtype=bool), np.zeros(num_envs, dtype=np.float64), np.zeros(num_envs, dtype=np.int64)
    for a in arrays:
        a.flags.writeable = False
    return arrays[0], {"r": arrays[1], "l": arrays[2]}


class Actor(Component):
    """Policy inference over a batch of environments.

    Action sampling must draw from ``self.streams`` (one stream per environment) so that an actor
    serving environments 32..63 samples exactly what they would sample in the full batch.

    Parameters
    ----------
    num_envs : int
        Environments whose observations :meth:`act` receives.
    seed : int
        Seed of the per-environment sampling streams.

    Examples
    --------
    A uniformly random policy for CartPole's two actions, drawing from the environments' streams:

    >>> import torch
    >>> from fragnb.components import Actor
    >>> from fragnb.envs import CartPole
    >>> class RandomActor(Actor):
    ...     def act(self, obs):
    ...         return (self.streams.uniform(1)[:, 0] * 2).long()  # one draw per environment
    >>> env, actor = CartPole(num_envs=4, seed=0), RandomActor(num_envs=4, seed=0)
    >>> obs = env.reset()
    >>> action = actor.act(obs)
    >>> action.shape, action.dtype
    (torch.Size([4]), torch.int64)
    >>> next_obs, reward, terminated, truncated, info = env.step(action)
    >>> next_obs.shape
    torch.Size([4, 4])

    A replica serving environments 2 and 3 samples what they sample in the whole batch:

    >>> half = RandomActor(num_envs=4, seed=0).shard(1, 2)
    >>> bool((half.act(obs[2:]) == action[2:]).all())
    True
    """

    role = "actor"
    per_env = ("env_ids", "streams")
    shardwise = None

    def __init__(self, num_envs: int, seed: int = 0):
        self.num_envs, self.seed = int(num_envs), int(seed)
        self.env_ids = torch.arange(self.num_envs)
        self.streams = EnvStreams(self.seed, self.env_ids, "action")


class Learner(Component):
    """Updates parameters from batches of experience. Replicated only by ``multi_learner``-style policies.

    A subclass gives ``update(batch)``, which returns a dict of statistics, and counts its updates in
    ``self.updates`` (a counter: :meth:`state_dict` saves it).

    Examples
    --------
    A learner that regresses a value network on a batch's returns, one step per update:

    >>> import torch
    >>> from fragnb.components import Learner
    >>> class ValueLearner(Learner):
    ...     def __init__(self, net, lr=0.1):
    ...         self.net, self.updates = net, 0
    ...         self.optimizer = torch.optim.SGD(net.parameters(), lr=lr)
    ...
    ...     def update(self, batch):
    ...         loss = (self.net(batch["obs"]).squeeze(-1) - batch["returns"]).square().mean()
    ...         self.optimizer.zero_grad()
    ...         loss.backward()
    ...         self.optimizer.step()
    ...         self.updates += 1
    ...         return {"value_loss": loss.item()}
    >>> _ = torch.manual_seed(0)
    >>> learner = ValueLearner(torch.nn.Linear(4, 1))
    >>> stats = learner.update({"obs": torch.randn(8, 4), "returns": torch.ones(8)})
    >>> sorted(stats), learner.updates
    (['value_loss'], 1)
    >>> sorted(learner.state_dict())  # the network, the optimiser and the counter
    ['net', 'optimizer', 'updates']
    """

    role = "learner"
    counters = ("updates",)  # every learner here counts its updates (learning-rate schedules, logs)

    @classmethod
    def merge(cls, parts: list[Learner]) -> Learner:
        """Replicas that all-reduce their gradients hold the same networks; say so if they do not."""
        for name, value in modules_of(parts[0]).items():
            first = value.state_dict()
            for other in parts[1:]:
                if not all(
                    torch.allclose(first[k], v, atol=1e-5) for k, v in getattr(other, name).state_dict().items()
                ):
                    warnings.warn(
                        f"learner replicas disagree on `{name}`: their updates were not synchronised",
                        RuntimeWarning,
                        stacklevel=2,
                    )
                    break
        return parts[0]


class Buffer(Component):
    """Holds experience between the actors that write it and the learner that reads it.

    Examples
    --------
    A buffer that keeps the observations of a few steps and hands them over environment-first, as the
    learner's batch (:class:`fragnb.algos.ppo.RolloutBuffer` is a complete one):

    >>> import torch
    >>> from fragnb.components import Buffer
    >>> from fragnb.envs import CartPole
    >>> class ObsBuffer(Buffer):
    ...     def __init__(self):
    ...         self.steps = []
    ...
    ...     def add(self, obs):
    ...         self.steps.append(obs)
    ...
    ...     def batch(self):
    ...         obs, self.steps = torch.stack(self.steps, 1), []
    ...         return {"obs": obs}
    >>> env, buffer = CartPole(num_envs=2, seed=0), ObsBuffer()
    >>> obs = env.reset()
    >>> for _ in range(3):
    ...     buffer.add(obs)
    ...     obs, reward, terminated, truncated, info = env.step(torch.ones(2, dtype=torch.int64))
    >>> buffer.batch()["obs"].shape  # (num_envs, steps, *obs_shape)
    torch.Size([2, 3, 4])
    """

    role = "buffer"


#: The base class of each role, by role name: a component's role is that of the class it derives from.
ROLES = {cls.role: cls for cls in (Env, Actor, Buffer, Learner)}


def modules_of(obj: Any) -> dict[str, torch.nn.Module]:
    """The networks an object holds as attributes, by attribute name: what state edges, weight
    broadcasts and gradient all-reduce are about."""
    return {name: value for name, value in vars(obj).items() if isinstance(value, torch.nn.Module)}


def role_of(obj: Any) -> str | None:
    """The role of a component instance (``"env"``, ``"actor"``, ...), or ``None`` for anything else.

    Parameters
    ----------
    obj : object
        Anything.

    Returns
    -------
    str or None
        ``"env"``, ``"actor"``, ``"buffer"`` or ``"learner"`` for an instance of a subclass of
        :class:`Env`, :class:`Actor`, :class:`Buffer` or :class:`Learner`; ``None`` otherwise.

    Examples
    --------
    Notebook 01's components, and a plain tensor:

    >>> import torch
    >>> from fragnb.algos.ppo import ActorCritic, PPOActor, PPOLearner, RolloutBuffer
    >>> from fragnb.components import role_of
    >>> from fragnb.envs import CartPole
    >>> env = CartPole(num_envs=4, seed=0)
    >>> policy = ActorCritic(obs_dim=4, num_actions=2)
    >>> actor = PPOActor(policy, num_envs=4, seed=0)
    >>> buffer = RolloutBuffer(num_envs=4, num_steps=8, obs_shape=env.obs_shape)
    >>> learner = PPOLearner(policy)
    >>> [role_of(x) for x in (env, actor, buffer, learner, policy, torch.zeros(1))]
    ['env', 'actor', 'buffer', 'learner', None, None]
    """
    for role, cls in ROLES.items():
        if isinstance(obj, cls):
            return role
    return None
