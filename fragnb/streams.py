"""Per-environment random streams that do not depend on how environments are sharded.

Each environment ``i`` owns a stream keyed by ``(seed, domain, i)``; draw ``k`` of that stream is a
hash of the key and a per-environment counter (SplitMix's construction: one finaliser applied to a
Weyl sequence that the key offsets). A shard of environments 32..63 therefore draws
exactly the numbers those environments draw inside the full batch of 64, which is what lets every
distribution policy reproduce the single-process result: however the environments are split across
replicas, the namespace ends as plain Python's.
"""

from __future__ import annotations

import contextlib
import math
import threading
import zlib
from functools import cache

import torch

__all__ = ["EnvStreams", "serving", "reached", "advanced"]

_MASK = 0xFFFFFFFF
# Odd multipliers below 2**31 keep every product of 32-bit values inside int64 (no overflow).
_M1, _M2, _GOLDEN = 0x7FEB352D, 0x5BD1E995, 0x1E3779B9


def _mix(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer finaliser (xor-shift-multiply rounds) on int64 tensors."""
    x = x & _MASK
    x = x ^ (x >> 16)
    x = (x * _M1) & _MASK
    x = x ^ (x >> 15)
    x = (x * _M2) & _MASK
    return x ^ (x >> 16)


@cache
def _lanes(n: int) -> torch.Tensor:
    """Offsets of the ``n`` numbers of one draw (cached: the actor draws every step, never mutates them)."""
    return torch.arange(n, dtype=torch.int64) * _M2


class EnvStreams:
    """One independent stream of uniform numbers per environment.

    Parameters
    ----------
    seed : int
        Experiment seed.
    env_ids : torch.Tensor
        Global indices of the environments this object serves (int64).
    domain : str
        What the numbers are for (``"reset"``, ``"action"``); different domains never share numbers.

    Examples
    --------
    The streams of environments 2 and 3 draw the same numbers on their own as inside the batch of 4:

    >>> import torch
    >>> from fragnb.streams import EnvStreams
    >>> full = EnvStreams(0, torch.arange(4), "action")
    >>> half = full[2:4]
    >>> bool((full.uniform(3)[2:] == half.uniform(3)).all())
    True
    """

    def __init__(self, seed: int, env_ids: torch.Tensor, domain: str):
        self.seed, self.domain = int(seed), domain
        self.env_ids = torch.as_tensor(env_ids, dtype=torch.int64)
        base = _mix(torch.tensor(self.seed & _MASK) ^ _mix(torch.tensor(zlib.crc32(domain.encode()))))
        self.keys = _mix(base ^ _mix(self.env_ids + _GOLDEN))
        # Each stream steps by its own odd increment (2 key + 1): with one shared increment, every
        # stream would be every other one shifted by some number of draws.
        self.increments = 2 * self.keys + 1
        self.counters = torch.zeros(len(self.env_ids), dtype=torch.int64)

    def __len__(self) -> int:
        return len(self.env_ids)

    def __getitem__(self, index) -> EnvStreams:
        part = object.__new__(EnvStreams)
        part.seed, part.domain = self.seed, self.domain
        part.env_ids, part.keys, part.increments = self.env_ids[index], self.keys[index], self.increments[index]
        part.counters = self.counters[index].clone()
        return part

    @staticmethod
    def cat(parts: list[EnvStreams]) -> EnvStreams:
        """The streams of several shards as one object (the inverse of slicing)."""
        whole = object.__new__(EnvStreams)
        whole.seed, whole.domain = parts[0].seed, parts[0].domain
        whole.env_ids = torch.cat([p.env_ids for p in parts])
        whole.keys = torch.cat([p.keys for p in parts])
        whole.increments = torch.cat([p.increments for p in parts])
        whole.counters = torch.cat([p.counters for p in parts])
        return whole

    def relabel(self, offset: int) -> None:
        """Serve environments ``offset`` further on, in place: the streams of ``env_ids + offset``, at
        the draws these had reached (a whole copy of a batch standing for the next batch of a larger one)."""
        counters = self.counters
        self.__init__(self.seed, self.env_ids + offset, self.domain)
        self.counters = counters

    def uniform(self, n: int = 1, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Next ``n`` numbers in [0, 1) of each stream (of the masked streams only, if ``mask``).

        Returns a float64 tensor of shape ``(streams, n)`` and advances those streams by one draw.
        """
        if mask is not None:
            mask = mask.cpu()  # the streams count on the CPU wherever their environments run
        keys, steps, counters = (
            (self.keys, self.increments, self.counters)
            if mask is None
            else (self.keys[mask], self.increments[mask], self.counters[mask])
        )
        # One finaliser round per number: the keys are already well mixed, and each draw costs a
        # dozen tensor ops, which matters because the actor draws at every environment step.
        x = torch.addcmul(keys, counters, steps).unsqueeze(1)
        draws = _mix(x if n == 1 else x + _lanes(n))  # the first lane's offset is 0
        self.counters += 1 if mask is None else mask  # adding the bool mask skips two masked indexings
        return draws.to(torch.float64) * 2.0**-32

    # -- samplers: each draws from every stream (one environment's row) once -------------------------
    def _open(self, n: int) -> torch.Tensor:
        """``n`` numbers per stream in the open interval (0, 1): inverse CDFs never see 0."""
        return self.uniform(n) + 2.0**-33

    def normal(self, shape: tuple[int, ...] | int = (), mean=0.0, std=1.0) -> torch.Tensor:
        """Normal numbers of ``shape`` per stream, ``(streams, *shape)``: each the inverse normal CDF of one uniform."""
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        z = torch.special.ndtri(self._open(max(1, math.prod(shape)))).reshape(len(self), *shape)
        return torch.as_tensor(mean) + torch.as_tensor(std) * z

    def categorical(self, probs: torch.Tensor | None = None, logits: torch.Tensor | None = None) -> torch.Tensor:
        """One choice per stream from ``probs`` or ``logits`` of shape ``(streams, choices)``, by inverse CDF."""
        if (probs is None) == (logits is None):
            raise ValueError("give either probs or logits")
        p = torch.softmax(logits, -1) if probs is None else probs / probs.sum(-1, keepdim=True)
        u = self._open(1).to(p.dtype).to(p.device)
        return (p.cumsum(-1) < u).sum(-1).clamp_(max=p.shape[-1] - 1)

    def bernoulli(self, p: torch.Tensor | float, shape: tuple[int, ...] = ()) -> torch.Tensor:
        """1.0 with probability ``p`` (per stream, or of ``shape`` per stream), else 0.0."""
        p = torch.as_tensor(p, dtype=torch.float64)
        shape = tuple(shape) or tuple(p.shape[1:])
        u = self._open(max(1, math.prod(shape))).reshape(len(self), *shape)
        return (u < p).to(torch.get_default_dtype())

    def integers(self, low: int, high: int, shape: tuple[int, ...] | int = ()) -> torch.Tensor:
        """Integers in ``[low, high)``, ``(streams, *shape)``."""
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        u = self.uniform(max(1, math.prod(shape))).reshape(len(self), *shape)
        return (low + (u * (high - low)).floor().to(torch.int64)).clamp_(max=high - 1)

    def permutation(self, n: int) -> torch.Tensor:
        """A random permutation of ``range(n)`` per stream, ``(streams, n)``: minibatch order, e.g.
        from a one-stream ``EnvStreams(seed, torch.arange(1), "minibatch")`` on the learner's side."""
        return self.uniform(n).argsort(-1)

    def dropout(self, x: torch.Tensor, p: float = 0.5) -> torch.Tensor:
        """``torch.nn.functional.dropout(x, p)`` with each environment's row masked from its own stream."""
        if not 0 <= p < 1:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        keep = self.bernoulli(1 - p, tuple(x.shape[1:])).to(x.dtype).to(x.device)
        return x * keep / (1 - p)

    def sample(self, dist: torch.distributions.Distribution) -> torch.Tensor:
        """What ``dist.sample()`` draws, from these streams: the one line a loop changes for exactness.

        ``dist`` is batched over the environments (first axis ``streams``): a ``Categorical``, a
        ``Normal``, a ``Bernoulli``, or one of them in ``Independent``. On a replica that steps a share
        of the environments (:func:`serving`), streams over the whole batch draw that share's rows.
        """
        D = torch.distributions
        base = dist.base_dist if isinstance(dist, D.Independent) else dist
        share = getattr(_REPLICA, "share", None)
        if share and len(base.batch_shape) and base.batch_shape[0] == share[1] != len(self) == share[2]:
            part = self[share[0] : share[0] + share[1]]  # this replica's environments, advanced here alone
            drawn = part.sample(dist)
            self.counters[share[0] : share[0] + share[1]] = part.counters
            return drawn
        if len(base.batch_shape) == 0 or base.batch_shape[0] != len(self):
            raise ValueError(
                f"the distribution's batch shape {tuple(base.batch_shape)} does not start with this object's "
                f"{len(self)} streams (one per environment)"
            )
        if isinstance(base, D.Categorical):
            return self.categorical(probs=base.probs)
        if isinstance(base, D.Normal):
            z = self.normal(tuple(base.batch_shape[1:])).to(base.loc.dtype).to(base.loc.device)
            return (base.loc + base.scale * z).detach()
        if isinstance(base, D.Bernoulli):
            return (
                self.bernoulli(base.probs.detach().cpu(), tuple(base.batch_shape[1:]))
                .to(base.probs.dtype)
                .to(base.probs.device)
            )
        raise TypeError(
            f"no per-environment sampler for {type(base).__name__}; sample Categorical, Normal or Bernoulli "
            "distributions, or draw from `uniform`/`normal` yourself"
        )

    def state_dict(self) -> dict:
        return {"counters": self.counters.clone()}

    def load_state_dict(self, state: dict) -> None:
        self.counters = state["counters"].clone()


# -- a replica's share -----------------------------------------------------------------------------------
# A field loop samples inside its network's method (`action = streams.sample(probs)` in CleanRL's
# `get_action_and_value`), on an EnvStreams object of its own over the whole batch, which every replica
# receives whole. On a replica's thread fragnb says which environments that replica steps, and a
# whole-batch object draws from their streams only: the numbers those environments draw in plain Python.
_REPLICA = threading.local()


@contextlib.contextmanager
def serving(first: int, count: int, total: int):
    """On this thread, an EnvStreams over all ``total`` environments asked for ``count`` rows draws
    from the streams of environments ``first .. first + count - 1``.

    Parameters
    ----------
    first, count, total : int
        The first environment this replica steps, how many it steps, and the whole batch's size.

    Examples
    --------
    A replica that steps environments 2 and 3 of 4 samples for its 2 rows from a whole-batch object,
    and draws what those environments draw in the whole batch:

    >>> import torch
    >>> from fragnb.streams import EnvStreams, serving
    >>> def uniform(rows):
    ...     return torch.distributions.Categorical(probs=torch.full((rows, 3), 1 / 3))
    >>> whole = EnvStreams(0, torch.arange(4), "action").sample(uniform(4))
    >>> streams = EnvStreams(0, torch.arange(4), "action")
    >>> with serving(2, 2, 4):
    ...     mine = streams.sample(uniform(2))
    >>> torch.equal(mine, whole[2:]), streams.counters.tolist()
    (True, [0, 0, 1, 1])
    """
    _REPLICA.share = (first, count, total)
    try:
        yield
    finally:
        _REPLICA.share = None


def reached(values, ns: dict) -> dict[str, EnvStreams]:
    """EnvStreams of the notebook ``ns`` that the methods of ``values``' classes (and the functions
    among ``values``) draw from by name: CleanRL's ``Agent.get_action_and_value`` sampling from a
    global ``streams``. They must travel, and come back, with what calls them.

    Parameters
    ----------
    values : iterable
        Objects (whose classes' methods are looked at) and functions the cell uses.
    ns : dict
        The notebook's namespace: only functions defined there count.

    Returns
    -------
    dict
        Name in ``ns`` to the EnvStreams it holds.

    Examples
    --------
    >>> import torch
    >>> from fragnb.streams import EnvStreams, reached
    >>> streams = EnvStreams(0, torch.arange(4), "action")
    >>> class Agent:
    ...     def act(self, probs):
    ...         return streams.sample(torch.distributions.Categorical(probs=probs))
    >>> found = reached([Agent()], globals())
    >>> list(found), found["streams"] is streams
    (['streams'], True)
    """
    import types

    found: dict[str, EnvStreams] = {}
    functions = [v for v in values if isinstance(v, types.FunctionType)]
    functions += [
        f for v in values for cls in type(v).__mro__ for f in vars(cls).values() if isinstance(f, types.FunctionType)
    ]
    for fn in functions:
        if fn.__globals__ is ns:
            found.update({n: ns[n] for n in fn.__code__.co_names if isinstance(ns.get(n), EnvStreams)})
    return found


def advanced(start: torch.Tensor, copies: list[torch.Tensor]) -> torch.Tensor:
    """The counters of streams that replicas drew from, each its own environments' share: where a
    copy moved on from ``start``, its count.

    Parameters
    ----------
    start : torch.Tensor
        The counters before the replicas drew.
    copies : list of torch.Tensor
        Each replica's counters after it drew.

    Returns
    -------
    torch.Tensor
        The counters of the whole batch.

    Examples
    --------
    Two replicas each draw for their own two of four environments, one of them twice:

    >>> import torch
    >>> from fragnb.streams import EnvStreams, advanced
    >>> first, second = EnvStreams(0, torch.arange(4), "action"), EnvStreams(0, torch.arange(4), "action")
    >>> _ = first.uniform(mask=torch.tensor([True, True, False, False]))
    >>> for _ in range(2):
    ...     _ = second.uniform(mask=torch.tensor([False, False, True, True]))
    >>> advanced(torch.zeros(4, dtype=torch.int64), [first.counters, second.counters]).tolist()
    [1, 1, 2, 2]
    """
    counters = start.clone()
    for c in copies:
        moved = c != start
        counters[moved] = c[moved]
    return counters
