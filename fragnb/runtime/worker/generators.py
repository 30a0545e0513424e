"""The global random generators (torch's, NumPy's, Python's): their states, kept, restored, seeded per replica."""

from __future__ import annotations

import contextlib
import random
import threading
import zlib

import numpy as np
import torch

__all__ = [
    "GENERATORS",
    "NAMES",
    "states",
    "restore",
    "generators",
    "moved",
    "seed_replica",
    "seeded",
    "Own",
    "own_random",
]

#: The global generators a loop may draw from, by the name messages give them.
GENERATORS = ("torch", "numpy", "random")


def states() -> dict:
    """The global generators' states (torch's CPU generator, NumPy's legacy one, Python's)."""
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "random": random.getstate()}


def restore(saved: dict) -> None:
    torch.set_rng_state(saved["torch"])
    np.random.set_state(saved["numpy"])
    random.setstate(saved["random"])


@contextlib.contextmanager
def generators():
    """Leave the global generators as they were, whatever runs inside."""
    saved = states()
    try:
        yield
    finally:
        restore(saved)


def moved(before: dict, after: dict) -> list[str]:
    moved = []
    if not torch.equal(before["torch"], after["torch"]):
        moved.append("torch")
    b, a = before["numpy"], after["numpy"]
    if b[2] != a[2] or not np.array_equal(b[1], a[1]):
        moved.append("numpy")
    if before["random"] != after["random"]:
        moved.append("random")
    return moved


NAMES = {"torch": "torch's global generator", "numpy": "NumPy's global generator", "random": "Python's `random`"}


def seed_replica(seed: int, replica: str) -> None:
    """Seed this process's global generators for ``replica`` (``"actors[1]"``): its own numbers, the same every run."""
    value = zlib.crc32(f"{seed}:{replica}".encode())
    torch.manual_seed(value)
    np.random.seed(value)
    random.seed(value)


# -- replicas sharing a process ------------------------------------------------------------------
# Replicas that share a worker process as threads (a group folded onto fewer workers, srl's ring, a
# worker with several threads) share its global generators too: their draws would interleave as the
# threads happen to run, and a run would draw other numbers every time. Each holds its generators'
# states of its own instead, swapped in under one lock around the statements that draw: it draws
# what it would draw in a process of its own.
_SWAP = threading.Lock()


def seeded(seed: int, replica: str) -> dict:
    """The generators' states :func:`seed_replica` gives ``replica``, leaving this process's as they were."""
    with _SWAP, generators():
        seed_replica(seed, replica)
        return states()


class Own:
    """One replica's own global-generator states, in a process it shares with other replicas."""

    def __init__(self, state: dict):
        self.state = state
        self.holding = False  # inside drawing(): the process's generators are this replica's

    @contextlib.contextmanager
    def drawing(self):
        """Draw from this replica's states: the others' draws wait until it has drawn."""
        with _SWAP:
            restore(self.state)
            self.holding = True
            try:
                yield
            finally:
                self.holding = False
                self.state = states()

    @contextlib.contextmanager
    def aside(self):
        """Let the other replicas draw while this one waits for them (a collective in the middle of a segment
        that draws: its peers must reach the same collective, and may have to draw on the way)."""
        if not self.holding:
            yield
            return
        self.state, self.holding = states(), False
        _SWAP.release()
        try:
            yield
        finally:
            _SWAP.acquire()
            restore(self.state)
            self.holding = True


# -- Python's `random` on a Dask worker ---------------------------------------------------------------
# A worker's own threads draw from Python's global generator too (tornado jitters its periodic
# callbacks with random.random(), distributed picks peers with random.choice), so a replica that must
# draw plain Python's numbers from it would get others. On a worker, the module's functions draw from
# a generator of the replicas' own when called from a replica's thread, and from the global one else.
_REPLICA_THREADS: set[int] = set()
_REPLICA_RANDOM = random.Random()
_FUNCTIONS = (
    "seed",
    "random",
    "uniform",
    "triangular",
    "randint",
    "choice",
    "randrange",
    "sample",
    "shuffle",
    "choices",
    "normalvariate",
    "lognormvariate",
    "expovariate",
    "vonmisesvariate",
    "gammavariate",
    "gauss",
    "betavariate",
    "paretovariate",
    "weibullvariate",
    "getstate",
    "setstate",
    "getrandbits",
    "randbytes",
    "binomialvariate",
)


def _dispatch(name: str):
    shared = getattr(random._inst, name)

    def draw(*args, **kwargs):
        own = threading.get_ident() in _REPLICA_THREADS
        return getattr(_REPLICA_RANDOM, name)(*args, **kwargs) if own else shared(*args, **kwargs)

    draw.__name__ = draw.__qualname__ = name
    draw.__doc__ = shared.__doc__
    draw.fragnb_dispatch = True
    return draw


@contextlib.contextmanager
def own_random():
    """Run the replicas of this thread (a Dask task's) on a `random` generator the worker's other threads
    do not touch; :func:`states`, :func:`restore` and :func:`seed_replica` then mean that one."""
    if not getattr(random.random, "fragnb_dispatch", False):
        for name in _FUNCTIONS:
            if hasattr(random._inst, name):
                setattr(random, name, _dispatch(name))
    me = threading.get_ident()
    _REPLICA_THREADS.add(me)
    try:
        yield
    finally:
        _REPLICA_THREADS.discard(me)
