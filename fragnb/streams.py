"""Per-environment random streams that do not depend on how environments are sharded.

Each environment ``i`` owns a stream keyed by ``(seed, domain, i)``; draw ``k`` of that stream is a
hash of the key and a per-environment counter (SplitMix's construction: one finaliser applied to a
Weyl sequence that the key offsets). A shard of environments 32..63 therefore draws
exactly the numbers those environments draw inside the full batch of 64, which is what lets every
distribution policy reproduce the single-process result (DESIGN.md, invariant 1).
"""

from __future__ import annotations

import zlib
from functools import lru_cache

import torch

__all__ = ["EnvStreams"]

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


@lru_cache(maxsize=None)
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

    def uniform(self, n: int = 1, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Next ``n`` numbers in [0, 1) of each stream (of the masked streams only, if ``mask``).

        Returns a float64 tensor of shape ``(streams, n)`` and advances those streams by one draw.
        """
        if mask is not None:
            mask = mask.cpu()  # the streams count on the CPU wherever their environments run
        keys, steps, counters = (self.keys, self.increments, self.counters) if mask is None else (
            self.keys[mask], self.increments[mask], self.counters[mask])
        # One finaliser round per number: the keys are already well mixed, and each draw costs a
        # dozen tensor ops, which matters because the actor draws at every environment step.
        x = torch.addcmul(keys, counters, steps).unsqueeze(1)
        draws = _mix(x if n == 1 else x + _lanes(n))  # the first lane's offset is 0
        self.counters += 1 if mask is None else mask  # adding the bool mask skips two masked indexings
        return draws.to(torch.float64) * 2.0**-32

    def state_dict(self) -> dict:
        return {"counters": self.counters.clone()}

    def load_state_dict(self, state: dict) -> None:
        self.counters = state["counters"].clone()
