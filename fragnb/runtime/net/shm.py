"""Shared memory: the all-reduce of replicas whose processes share one machine, through a file in ``/dev/shm``.

gloo sums two replicas' gradients over loopback TCP: about 0.9 ms for a tiny tensor on this 2-core
machine, where the update it serves takes a fraction of that. NCCL and gloo themselves move data between
processes of one host through shared memory; so does this group. Each replica owns a slot of one mapped
file; an all-reduce writes its tensor into its slot, stamps its arrival with the call's sequence number,
waits until every replica's stamp has reached it, and sums the slots in rank order (two replicas: gloo's
sum to the bit, as a + b = b + a). Slots alternate between two areas by the sequence's parity, so a replica
may write its next call while a slower one still reads the last: one wait per call.

The wait spins a short while (a peer that arrives within tens of microseconds costs no sleep), then sleeps
in growing steps; it ends with a named error, never a hang, when a peer's process is gone or the run is
aborted (any process that maps the file may set its abort word: :func:`abort`). The file is removed when
the run leaves the group, and by name after a failed run (:func:`remove`): nothing is left in ``/dev/shm``.
A run whose notebook and workers were all killed at once (``kill -9`` of the kernel, whose workers end with
it) removes nothing; the next group made on the machine removes such a file (:func:`sweep`): every replica
stamped its process id in it, and none of those processes is alive.

Why a file and ``mmap`` rather than :mod:`multiprocessing.shared_memory`: the latter registers every
segment a process attaches with the resource tracker, which on Python 3.11 unlinks it when that process
exits (bpo-39959), and the replicas are Dask workers that start and end on their own.
"""

from __future__ import annotations

import mmap
import os
import time
from pathlib import Path

import torch

__all__ = ["SharedMemory", "available", "path_of", "remove", "abort", "sweep", "CAPACITY"]

_DIR = Path("/dev/shm")
_LINE = 64  # bytes per replica's header line: its arrival stamp, its pid (one cache line each: no false sharing)
_ABORT = 0  # the first line: the abort word (non-zero: aborted)
#: Bytes of each replica's slot, per area; a larger tensor goes through gloo (what sizes a run's slots).
CAPACITY = 4 << 20
_SPIN_S = 200e-6  # spin this long before sleeping: a peer usually arrives within it
_LIVENESS_S = 0.5  # check the peers' processes this often while waiting


def available() -> bool:
    """Whether this machine has a ``/dev/shm`` (Linux): elsewhere the replicas keep gloo."""
    return _DIR.is_dir() and os.access(_DIR, os.W_OK)


def path_of(name: str) -> Path:
    return _DIR / f"fragnb-{name}"


def remove(name: str) -> bool:
    """Remove group ``name``'s file if it is left (a failed run); whether one was."""
    try:
        path_of(name).unlink()
        return True
    except FileNotFoundError:
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: alive
        return True
    return True


def sweep() -> list[str]:
    """Remove the groups' files whose every replica's process is gone (a run killed with its notebook); the
    names removed. A file none has stamped yet (being made) is kept, as is one any live process stamped."""
    removed = []
    for path in _DIR.glob("fragnb-*"):
        if path.suffix == ".new":
            continue
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                world = (size - _LINE) // (_LINE + 2 * CAPACITY)
                header = f.read(_LINE * (world + 1))
        except OSError:
            continue
        words = [int.from_bytes(header[i : i + 8], "little") for i in range(0, len(header) - 7, 8)]
        stride = _LINE // 8
        pids = [words[(rank + 1) * stride + 1] for rank in range(world) if (rank + 1) * stride + 1 < len(words)]
        stamped = [pid for pid in pids if pid]
        if stamped and not any(_alive(pid) for pid in stamped):
            try:
                path.unlink()
                removed.append(path.name)
            except FileNotFoundError:
                pass
    return removed


def abort(name: str) -> None:
    """End every wait in group ``name``'s all-reduces (they raise): a run that is stopping."""
    try:
        with open(path_of(name), "r+b") as f, mmap.mmap(f.fileno(), _LINE) as m:
            m[0:8] = (1).to_bytes(8, "little")
    except (FileNotFoundError, ValueError, OSError):
        pass


class SharedMemory:
    """Replica ``rank`` of ``world`` replicas of group ``name``, all on this machine: the collectives
    :class:`~fragnb.runtime.net.collectives.Member` calls (``all_reduce``, ``broadcast``) through one
    mapped file. Rank 0 creates the file; the others wait for it (``timeout_s``). ``fallback``: the group
    tensors it cannot hold go through (a GPU's, one larger than :data:`CAPACITY`)."""

    def __init__(self, name: str, rank: int, world: int, fallback=None, timeout_s: float = 60.0):
        self.name, self.rank, self.world, self.fallback = name, rank, world, fallback
        self.path = path_of(name)
        self.header = _LINE * (world + 1)
        size = self.header + 2 * world * CAPACITY
        if rank == 0:
            sweep()  # what runs killed with their notebook left
            tmp = self.path.with_suffix(".new")
            with open(tmp, "wb") as f:
                f.truncate(size)
            tmp.rename(self.path)  # whole before the others see it
        deadline = time.monotonic() + timeout_s
        while not self.path.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"shared-memory group {name!r}: replica 0's file did not appear in {timeout_s:.0f} s"
                )
            time.sleep(0.001)
        with open(self.path, "r+b") as f:
            self.map = mmap.mmap(f.fileno(), size)
        self.words = torch.frombuffer(self.map, dtype=torch.int64, count=self.header // 8)
        self.stride = _LINE // 8
        self.words[self._stamp(rank) + 1] = os.getpid()
        self.seq = 0
        self.pids: dict[int, int] = {}

    def _stamp(self, rank: int) -> int:
        return (rank + 1) * self.stride

    def _slot(self, rank: int, seq: int, dtype: torch.dtype, count: int) -> torch.Tensor:
        offset = self.header + ((seq % 2) * self.world + rank) * CAPACITY
        return torch.frombuffer(self.map, dtype=dtype, count=count, offset=offset)

    def _fits(self, tensor: torch.Tensor) -> bool:
        return tensor.device.type == "cpu" and tensor.numel() * tensor.element_size() <= CAPACITY

    def all_reduce(self, tensor: torch.Tensor) -> None:
        """``tensor`` becomes the sum of every replica's, added in rank order."""
        if not self._fits(tensor):
            return self.fallback.all_reduce(tensor)
        flat = tensor.detach().reshape(-1)
        seq = self._arrive(flat)
        total = self._slot(0, seq, flat.dtype, flat.numel()).clone()
        for r in range(1, self.world):
            total += self._slot(r, seq, flat.dtype, flat.numel())
        tensor.copy_(total.view_as(tensor))

    def broadcast(self, tensor: torch.Tensor, src: int) -> None:
        """``tensor`` becomes replica ``src``'s."""
        if not self._fits(tensor):
            return self.fallback.broadcast(tensor, src)
        flat = tensor.detach().reshape(-1)
        seq = self._arrive(flat)
        if self.rank != src:
            tensor.copy_(self._slot(src, seq, flat.dtype, flat.numel()).view_as(tensor))

    def _arrive(self, flat: torch.Tensor) -> int:
        """Write ``flat`` into this replica's slot, stamp the call, and wait for every replica's stamp."""
        self.seq += 1
        seq = self.seq
        self._slot(self.rank, seq, flat.dtype, flat.numel()).copy_(flat)
        self.words[self._stamp(self.rank)] = seq  # after the data: x86 keeps stores in order
        stamps = [self._stamp(r) for r in range(self.world)]
        began = time.perf_counter()
        checked, nap = began, 1e-5
        while min(int(self.words[s]) for s in stamps) < seq:
            if self.words[_ABORT]:
                raise RuntimeError(f"shared-memory all-reduce of group {self.name!r}: the run was aborted")
            now = time.perf_counter()
            if now - began < _SPIN_S:
                continue
            if now - checked > _LIVENESS_S:
                self._check_peers(seq)
                checked = now
            time.sleep(nap)
            nap = min(nap * 2, 1e-3)
        return seq

    def _check_peers(self, seq: int) -> None:
        for r in range(self.world):
            if int(self.words[self._stamp(r)]) >= seq:
                continue
            pid = int(self.words[self._stamp(r) + 1])
            if pid == 0:
                continue  # not mapped yet: it may still be joining
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                raise RuntimeError(
                    f"shared-memory all-reduce of group {self.name!r}: replica {r}'s process ({pid}) is gone, so "
                    f"call {seq} cannot complete"
                ) from None
            except PermissionError:  # alive, another user's
                pass

    def close(self) -> None:
        """Unmap the file; replica 0 removes it."""
        try:
            del self.words
            self.map.close()
        except (BufferError, AttributeError):  # a tensor still views the map: the process's end frees it
            pass
        if self.rank == 0:
            remove(self.name)
