"""Shards: how each object a loop calls splits over replicas and joins back, whoever wrote it.

fragnb's components carry the protocol themselves (:meth:`Component.shard`, ``merge``,
``shardwise``); the ecosystem's objects get it here, by type, so that a loop written for
Gymnasium and torch distributes as it stands:

- a Gymnasium ``SyncVectorEnv`` splits into the same vector env over a slice of its sub-environments,
  which travel with their state (an env reset in an earlier cell goes on where it was); a shard's
  ``reset(seed=s)`` seeds its sub-environment ``i`` with ``s + i`` counted in the whole batch, as
  plain Python's ``reset`` does, so the seeds do not depend on the split;
- networks and optimisers are not split: each replica holds a whole copy (a learner's weights go to
  the actors' copies after each update, see :mod:`fragnb.plan.script`); :func:`torch_held` finds them
  wherever a loop keeps them (an agent's attributes, a network's own optimiser, a dict per agent group).

Objects of other ecosystem types (one Gymnasium env, an ``AsyncVectorEnv``, a vector wrapper) are
refused under distributed policies: :func:`unsupported` says why.

Copies keep state: Gymnasium's MuJoCo environments pickle and deepcopy (through ``EzPickle``) as their
constructor's arguments, so a copy is a fresh environment, its simulator and random generator not
where the original's were. :func:`faithful_copies` makes them copy whole wherever fragnb copies or
ships them.
"""

from __future__ import annotations

import copy
import copyreg
import inspect
import sys
import types
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch

from .components import Component, modules_of, shard_slice

__all__ = [
    "reseed",
    "SEED_STRIDE",
    "num_envs",
    "splits",
    "shard",
    "merge",
    "shardwise",
    "invariant",
    "absorb",
    "to_cpu",
    "unsupported",
    "networks",
    "network",
    "faithful_copies",
    "torch_held",
    "reached",
]

#: A vector env's attributes that every shard has as the whole batch has them: reading one where
#: no shard lives (the learner's `envs.single_observation_space.shape`) needs no environment there.
_VECTOR_INVARIANT = frozenset(
    {
        "single_observation_space",
        "single_action_space",
        "spec",
        "metadata",
        "render_mode",
        "autoreset_mode",
        "observation_mode",
        "copy",
    }
)


def _sync_vector_env(obj: Any) -> bool:
    vector = sys.modules.get("gymnasium.vector")
    return vector is not None and type(obj) is vector.SyncVectorEnv


def num_envs(obj: Any) -> int | None:
    """How many environments ``obj`` holds, if it holds a batch of them that replicas split."""
    if isinstance(obj, Component) and "num_envs" in vars(obj):
        return obj.num_envs
    if _sync_vector_env(obj):
        return obj.num_envs
    return None


def splits(obj: Any) -> bool:
    """Whether each replica of a group holds its own share of ``obj`` (else a whole copy)."""
    return num_envs(obj) is not None


def shard(obj: Any, index: int, count: int) -> Any:
    """Replica ``index`` of ``count``'s share of ``obj`` (``obj`` itself where it does not split)."""
    if isinstance(obj, Component):
        return obj.shard(index, count)
    if _sync_vector_env(obj):
        return _shard_vector_env(obj, index, count)
    return obj


def merge(parts: list) -> Any:
    """The inverse of :func:`shard`: one object over all environments of ``parts``, in order."""
    if isinstance(parts[0], Component):
        return type(parts[0]).merge(parts) if len(parts) > 1 else parts[0]
    if _sync_vector_env(parts[0]):
        return _merge_vector_envs(parts)
    return parts[0]  # a network or an optimiser: every replica's copy is the same


def shardwise(obj: Any, method: str) -> bool:
    """Whether ``obj.method`` called on a shard does to its environments what the call on the whole
    batch does to them (a replay buffer's ``sample`` does not: its component stays unreplicated)."""
    if isinstance(obj, Component):
        declared = type(obj).shardwise
        return declared is None or method in declared
    return True  # a vector env steps each sub-env alone; a network computes each input alone


def invariant(obj: Any) -> frozenset[str]:
    """Attributes of ``obj`` that are the same on every shard and on the whole."""
    return _VECTOR_INVARIANT if _sync_vector_env(obj) else frozenset()


def networks(obj: Any) -> dict[str, torch.nn.Module]:
    """The networks ``obj`` holds, by attribute (``{"": obj}`` for a bare ``nn.Module`` the loop calls)."""
    return {"": obj} if isinstance(obj, torch.nn.Module) else modules_of(obj)


def network(obj: Any, attribute: str) -> torch.nn.Module:
    """The network ``attribute`` of ``obj``; ``obj`` itself for ``""`` (a bare ``nn.Module`` the loop calls)."""
    return getattr(obj, attribute) if attribute else obj


def absorb(target: Any, merged: Any) -> None:
    """Take ``merged``'s state into the notebook's ``target`` in place: networks and optimisers load
    their state, so objects the notebook shares (one network for actor and learner, an optimiser
    over its parameters) stay shared."""
    if isinstance(target, (torch.nn.Module, torch.optim.Optimizer)):
        target.load_state_dict(merged.state_dict())
        return
    for name, value in vars(merged).items():
        current = vars(target).get(name)
        if isinstance(current, (torch.nn.Module, torch.optim.Optimizer)):
            current.load_state_dict(value.state_dict())
        else:
            setattr(target, name, value)


def to_cpu(obj: Any) -> Any:
    """``obj`` with its tensors on the CPU, for the notebook (which may have no GPU)."""
    if isinstance(obj, (Component, torch.nn.Module)):
        return obj.to("cpu")
    return obj


def unsupported(obj: Any) -> str | None:
    """Why a distributed policy cannot move an ecosystem object the loop calls (``None``: it can)."""
    schedulers = (torch.optim.lr_scheduler.LRScheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)
    if isinstance(obj, (Component, torch.nn.Module, torch.optim.Optimizer, *schedulers)) or _sync_vector_env(obj):
        return None
    vector = sys.modules.get("gymnasium.vector")
    if vector is not None and isinstance(obj, vector.AsyncVectorEnv):
        return (
            "an AsyncVectorEnv's environments live in processes of its own, which cannot be sent to a worker: "
            "use gym.vector.SyncVectorEnv (each replica already runs in its own process)"
        )
    if vector is not None and isinstance(obj, vector.VectorWrapper):
        return (
            "a vector wrapper keeps state across the whole batch, which fragnb cannot split: wrap each environment "
            "instead (`gym.wrappers.RecordEpisodeStatistics(gym.make(env_id))` in make_env, as CleanRL does)"
        )
    gymnasium = sys.modules.get("gymnasium")
    if gymnasium is not None and isinstance(obj, gymnasium.Env):
        return (
            "it is one environment, stepped episode by episode: use policy 'data_parallel', which runs the whole loop "
            "in each replica on a copy of its own, or make a vector env of several "
            "(gym.vector.SyncVectorEnv([make_env(...) for _ in range(num_envs)])) and step them together for a fixed "
            "number of steps, so that replicas can split them"
        )
    return "fragnb does not know how to split or send it"


#: What replica ``i`` of a whole-cell policy adds to every integer seed its Gymnasium environments
#: are reset with, times ``i``: a loop that seeds episode ``k`` with ``seed + k`` meets no other
#: replica's episodes within a million of them.
SEED_STRIDE = 1_000_000


def reseed(objects: dict[str, Any], index: int, seed: int) -> None:
    """Make replica ``index``'s whole copies of ``objects`` (the cell's, as the notebook holds them)
    draw other random numbers than replica 0's, in place; replica 0 keeps the notebook's.

    - fragnb components with per-environment streams (environments, actors) serve environment
      ``j + index * num_envs`` for their ``j``: N replicas draw what one batch N times as large would;
    - Gymnasium environments, vector environments and their wrappers add ``index * SEED_STRIDE`` to
      every integer seed ``reset`` gets, and their generators and spaces (``action_space.sample()``)
      start from ``(seed, index)`` for the resets and draws that get none.

    Those held by the objects (an agent's ``self.env``, a list of environments) are found as
    :func:`reached` finds them; an environment reached twice is reseeded once.
    """
    if index == 0:
        return
    from .streams import EnvStreams

    seen: set[int] = set()
    rng = np.random.default_rng([seed & 0xFFFFFFFF, index])
    # what the loop reaches through attributes too (a tutorial agent's `self.env`), not inside what is reseeded
    for obj in reached(objects.values(), stop=lambda o: isinstance(o, (EnvStreams, Component)) or _gymnasium_env(o)):
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, EnvStreams):
            obj.relabel(index * len(obj))
        elif isinstance(obj, Component) and "env_ids" in vars(obj):
            offset = index * len(obj.env_ids)
            obj.env_ids = obj.env_ids + offset
            for value in vars(obj).values():
                if isinstance(value, EnvStreams) and id(value) not in seen:
                    seen.add(id(value))
                    value.relabel(offset)
        elif _gymnasium_env(obj):
            obj.reset = _OffsetSeed(obj, index * SEED_STRIDE)  # on the object the loop calls: its wrappers stay
            base = obj.unwrapped
            for env in getattr(base, "envs", [base]):  # a vector env's sub-environments, or the env itself
                env.unwrapped.np_random = np.random.default_rng(rng.integers(2**63))
                for space in (env.action_space, env.observation_space):
                    space.seed(int(rng.integers(2**31)))
            for name in ("action_space", "observation_space", "single_action_space", "single_observation_space"):
                if getattr(obj, name, None) is not None:
                    getattr(obj, name).seed(int(rng.integers(2**31)))


def _gymnasium_env(obj: Any) -> bool:
    gymnasium = sys.modules.get("gymnasium")
    return gymnasium is not None and isinstance(obj, (gymnasium.Env, gymnasium.vector.VectorEnv))


class _OffsetSeed:
    """A whole copy's ``reset``: an integer seed moves ``offset`` on (a vector env then seeds its
    sub-environment ``i`` with ``seed + offset + i``, as its own ``reset`` does). It passes on what the
    loop passed and nothing more, whatever the class's ``reset`` takes: Gymnasium's ``reset(*, seed,
    options)``, an older ``reset(self)`` or ``reset(self, seed)``, a wrapper's own (the generators
    :func:`reseed` gave the copy serve a reset that gets no seed)."""

    def __init__(self, env, offset: int):
        self.env, self.offset = env, offset

    def _moved(self, seed):
        if isinstance(seed, int) and not isinstance(seed, bool):
            return seed + self.offset
        if isinstance(seed, list):
            return [s + self.offset if isinstance(s, int) else s for s in seed]
        return seed

    def __call__(self, *args, **kwargs):
        reset = type(self.env).reset
        if "seed" in kwargs:
            kwargs["seed"] = self._moved(kwargs["seed"])
        elif args and _first_parameter(reset) == "seed":  # reset(42), where the class takes its seed first
            args = (self._moved(args[0]), *args[1:])
        return reset(self.env, *args, **kwargs)


def _first_parameter(function) -> str | None:
    """The name of ``function``'s first parameter after ``self`` (None if it has none, or no signature)."""
    try:
        names = list(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return None
    return names[1] if len(names) > 1 else None


def _shard_vector_env(env, index: int, count: int):
    from gymnasium.vector.utils import batch_space

    sl = shard_slice(env.num_envs, index, count)
    part = copy.copy(env)
    part.envs, part.env_fns, part._env_obs = env.envs[sl], list(env.env_fns)[sl], env._env_obs[sl]
    part.num_envs = sl.stop - sl.start
    for name in ("_rewards", "_terminations", "_truncations", "_autoreset_envs"):
        setattr(part, name, getattr(env, name)[sl].copy())
    part.action_space = batch_space(env.single_action_space, part.num_envs)
    part.observation_space = batch_space(env.single_observation_space, part.num_envs)
    part._observations = (
        env._observations[sl].copy() if isinstance(env._observations, np.ndarray) else _empty_observations(part)
    )
    # An instance attribute shadows the class's reset: this shard seeds as its place in the batch says.
    part.reset = _OffsetReset(part, sl.start)
    return part


def _merge_vector_envs(parts: list):
    from gymnasium.vector.utils import batch_space

    whole = copy.copy(parts[0])
    vars(whole).pop("reset", None)
    whole.envs = [e for p in parts for e in p.envs]
    whole.env_fns = [f for p in parts for f in p.env_fns]
    whole._env_obs = [o for p in parts for o in p._env_obs]
    whole.num_envs = len(whole.envs)
    for name in ("_rewards", "_terminations", "_truncations", "_autoreset_envs"):
        setattr(whole, name, np.concatenate([getattr(p, name) for p in parts]))
    whole.action_space = batch_space(whole.single_action_space, whole.num_envs)
    whole.observation_space = batch_space(whole.single_observation_space, whole.num_envs)
    observations = [p._observations for p in parts]
    whole._observations = (
        np.concatenate(observations)
        if all(isinstance(o, np.ndarray) for o in observations)
        else _empty_observations(whole)
    )
    return whole


def _empty_observations(env):
    # The batch buffer the next step or reset writes into (the sub-environments hold the observations).
    from gymnasium.vector.utils import create_empty_array

    return create_empty_array(env.single_observation_space, n=env.num_envs, fn=np.zeros)


class _OffsetReset:
    """A shard's ``reset``: an integer seed counts from the shard's first environment in the whole batch."""

    def __init__(self, env, offset: int):
        self.env, self.offset = env, offset

    def __call__(self, *, seed=None, options=None):
        if isinstance(seed, int):
            seed = [seed + self.offset + i for i in range(self.env.num_envs)]
        return type(self.env).reset(self.env, seed=seed, options=options)


def faithful_copies() -> None:
    """Make every loaded MuJoCo environment class pickle and deepcopy with its whole state (simulator,
    random generator, step counters), in this process: gymnasium's ``EzPickle`` rebuilds one from its
    constructor's arguments, which would start a replica's environments, and the safety net's copies,
    from a fresh simulator where plain Python's had been reset and stepped (a CleanRL-style HalfCheetah
    loop under ``fine`` then differed from plain Python after one iteration, and the safety net, whose
    copies both lost the state alike, saw nothing). Called wherever fragnb copies a namespace's
    objects: the safety net, a payload, a checkpoint, a replica's results. About 1.2 MB a HalfCheetah."""
    module = sys.modules.get("gymnasium.envs.mujoco.mujoco_env")
    if module is None:  # no MuJoCo environment was made in this process
        return
    pending = [module.MujocoEnv]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls not in copyreg.dispatch_table:
            copyreg.pickle(cls, _whole)


def _whole(env):
    return _rebuilt, (type(env), dict(vars(env)))


def _rebuilt(cls, state: dict):
    env = cls.__new__(cls)
    vars(env).update(state)
    return env


#: How far :func:`reached` looks inside what it is given, and the longest list or dict it looks through
#: (a replay buffer's list of transitions holds no optimiser and no environment).
_HELD_DEPTH, _HELD_WIDTH = 3, 256


def reached(values: Iterable[Any], depth: int = _HELD_DEPTH, stop: Callable[[Any], bool] = lambda obj: False):
    """Every object among ``values`` and held by them, each once, in the order first found: in dicts,
    lists and tuples, objects' attributes (a tutorial's agent class; a network's public ones, such as an
    optimiser it keeps as ``self.optimizer``), what a function reaches through the globals its code names
    and its closure (a DQN tutorial's ``optimize_model()``) and a bound method's object; ``depth`` levels
    deep, not inside an object ``stop`` holds true for (it is yielded). The order depends only on how the
    objects are built, so every replica of a loop finds its copies in the same order."""
    visited: set[int] = set()

    def visit(value: Any, left: int):
        if id(value) in visited or isinstance(value, (type, types.ModuleType)):
            return
        visited.add(id(value))
        yield value
        if left == 0 or isinstance(value, (torch.Tensor, torch.optim.Optimizer)) or stop(value):
            return
        if isinstance(value, types.MethodType):
            inner = [value.__self__, value.__func__]
        elif isinstance(value, types.FunctionType):
            inner = [value.__globals__[n] for n in value.__code__.co_names if n in value.__globals__]
            inner += [c.cell_contents for c in value.__closure__ or () if c.cell_contents is not None]
        elif isinstance(value, torch.nn.Module):  # its public attributes: its submodules' tensors are its own
            inner = [v for k, v in vars(value).items() if not k.startswith("_")]
        elif isinstance(value, dict):
            inner = list(value.values())[:_HELD_WIDTH]
        elif isinstance(value, (list, tuple)):
            inner = list(value)[:_HELD_WIDTH]
        elif hasattr(value, "__dict__"):
            inner = list(vars(value).values())
        else:
            return
        for v in inner:
            yield from visit(v, left - 1)

    for value in values:
        yield from visit(value, depth)


def torch_held(values: Iterable[Any]) -> list:
    """The torch optimisers and networks among ``values`` and held by them (:func:`reached`), in the order
    first found.

    Examples
    --------
    >>> import torch
    >>> class Agent:
    ...     def __init__(self):
    ...         self.net = torch.nn.Linear(2, 1)
    ...         self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.1)
    >>> [type(v).__name__ for v in torch_held([Agent()])]
    ['Linear', 'SGD']
    """
    return [v for v in reached(values) if isinstance(v, (torch.optim.Optimizer, torch.nn.Module))]
