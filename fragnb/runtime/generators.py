"""The global random generators (torch's, NumPy's, Python's): their states, kept, restored, seeded per replica."""

from __future__ import annotations

import contextlib
import random
import zlib

import numpy as np
import torch

__all__ = ["GENERATORS", "NAMES", "states", "restore", "generators", "moved", "seed_replica"]

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
