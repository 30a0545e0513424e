"""Checkpoints on storage: what a run keeps written where it is told, and read back by a run that resumes.

A synchronous run fetches every replica's state into the notebook after every ``checkpoint_every``
iterations (:mod:`fragnb.runtime.recovery` restarts a run from it when a worker is lost). With
``checkpoint_dir=`` (a directory, or any fsspec URL: ``memory://runs/ppo``, ``s3://bucket/ppo``) each such
checkpoint is also written there, on a thread of its own (the watch goes on), under a temporary name
renamed into place once whole: a crash while writing leaves the previous checkpoint usable. The newest
:data:`KEEP` are kept.

A checkpoint holds every replica's state (its namespace, the walk's bookkeeping, its global generators),
the iteration after which they kept it, and what it belongs to: the cell's source, the policy and its
parameters, the components' types, fragnb's version. ``resume=`` in a new kernel (after the setup cells
ran again) reads the newest and refuses one of another cell, placement, components or version, naming the
difference; a run that resumes goes on from that iteration and ends as the uninterrupted run would have.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import pickle
import sys
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import fsspec

from ..errors import FragmentError

__all__ = ["Checkpoint", "Store", "identity", "cell_identity", "latest", "holds_checkpoint", "KEEP", "FORMAT"]

#: How many checkpoints a directory keeps, the newest: the last one and the one before, in case the last
#: was being written when the machine went down (it is then absent: a write is renamed into place whole).
KEEP = 2
#: The layout of a checkpoint file; another is refused by name (a checkpoint of another fragnb).
FORMAT = 1
_PREFIX, _SUFFIX = "checkpoint-", ".fragnb"


def identity(placement) -> dict:
    """What a checkpoint belongs to: the cell (its source's SHA-256), the policy, its parameters, the
    replica counts and the components' types (a resume with others would load state into other objects)."""
    cell = cell_identity(placement.graph)
    return {
        "cell": cell["cell"],
        "policy": placement.policy.name,
        "params": {
            k: v if isinstance(v, (int, float, str, bool, type(None))) else repr(v)
            for k, v in sorted(placement.params.items())
        },
        "groups": {g: n for g, (n, _) in sorted(placement.groups.items())},
        "components": cell["components"],
    }


def cell_identity(graph) -> dict:
    """The cell's part of :func:`identity`: its source's SHA-256 and its components' types."""
    return {
        "cell": hashlib.sha256(graph.source.encode()).hexdigest(),
        "components": {
            name: f"{type(graph.namespace[name]).__module__}.{type(graph.namespace[name]).__qualname__}"
            for name in sorted(graph.components)
            if name in graph.namespace
        },
    }


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint as it is stored: the iteration after which every replica kept its state, the
    states by replica name, what it belongs to (:func:`identity`), fragnb's version, and where it is."""

    iteration: int
    replicas: dict[str, bytes]
    identity: dict
    version: str
    path: str = ""


def _version() -> str:
    """fragnb's version as installed (its distribution's metadata: the package itself is a later layer)."""
    return importlib.metadata.version("fragnb")


def _name(iteration: int) -> str:
    return f"{_PREFIX}{iteration:09d}{_SUFFIX}"


class Store:
    """Where a run writes its checkpoints: ``url`` (a directory or an fsspec URL), for ``placement``'s run.
    The directory is made and tried with a small write before the run starts: one that cannot be written
    is refused then, not after an hour of training."""

    def __init__(self, url: str, placement):
        self.url, self.identity = str(url), identity(placement)
        try:
            self.fs, self.root = fsspec.core.url_to_fs(self.url)
            self.fs.makedirs(self.root, exist_ok=True)
            probe = f"{self.root}/.fragnb-probe-{uuid.uuid4().hex[:8]}"
            with self.fs.open(probe, "wb") as f:
                f.write(b"")
            self.fs.rm(probe)
        except Exception as e:  # a read-only or missing place, an unknown protocol, no credentials
            raise FragmentError(
                f"checkpoint_dir={self.url!r} cannot be written ({type(e).__name__}: {e}): give a directory this "
                "kernel may write, or an fsspec URL it can reach (memory://, s3://bucket/path, ...)"
            ) from None
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fragnb checkpoint")
        self._pending: list[Future] = []
        self.written: list[str] = []  # the paths written, oldest first
        self.seconds = 0.0  # what the writes took, on their own thread
        self._lock = threading.Lock()

    def write(self, iteration: int, replicas: dict[str, bytes]) -> None:
        """Write the checkpoint after ``iteration`` in the background; the previous one stays until it is whole."""
        self._pending.append(self._writer.submit(self._write, iteration, dict(replicas)))

    def _write(self, iteration: int, replicas: dict[str, bytes]) -> None:
        start = time.perf_counter()
        blob = pickle.dumps(
            {
                "format": FORMAT,
                "version": _version(),
                "identity": self.identity,
                "iteration": iteration,
                "replicas": replicas,
            },
            protocol=pickle.HIGHEST_PROTOCOL,
        )
        final = f"{self.root}/{_name(iteration)}"
        partial = f"{final}.{uuid.uuid4().hex[:8]}.partial"
        with self.fs.open(partial, "wb") as f:
            f.write(blob)
        self.fs.mv(partial, final)  # a rename on a file system: readers see the old or the whole new one
        with self._lock:
            self.written.append(final)
            self.seconds += time.perf_counter() - start
        for old in _checkpoints(self.fs, self.root)[:-KEEP]:
            self.fs.rm(old)

    def close(self) -> None:
        """Wait for the writes under way; a write that failed is said, not raised (the run itself ended)."""
        for future in self._pending:
            try:
                future.result()
            except Exception as e:
                print(
                    f"fragnb: a checkpoint could not be written to {self.url!r}: {type(e).__name__}: {e}",
                    file=sys.stderr,
                )
        self._writer.shutdown(wait=True)


def _checkpoints(fs, root: str) -> list[str]:
    """The whole checkpoints under ``root``, oldest first (their names sort by iteration)."""
    try:
        names = fs.ls(root, detail=False)
    except FileNotFoundError:
        return []
    whole = [n for n in names if n.rsplit("/", 1)[-1].startswith(_PREFIX) and n.endswith(_SUFFIX)]
    return sorted(whole, key=lambda n: n.rsplit("/", 1)[-1])


def holds_checkpoint(url: str) -> bool:
    """Whether ``url`` holds a whole checkpoint to resume from (a batch job's first run has none yet)."""
    fs, root = fsspec.core.url_to_fs(str(url))
    return fs.isfile(root) or bool(_checkpoints(fs, root))


def latest(url: str) -> Checkpoint:
    """The newest whole checkpoint at ``url`` (a directory of them, or one checkpoint file)."""
    try:
        fs, root = fsspec.core.url_to_fs(str(url))
        paths = [root] if fs.isfile(root) else _checkpoints(fs, root)
    except Exception as e:
        raise FragmentError(f"resume={str(url)!r} cannot be read ({type(e).__name__}: {e})") from None
    if not paths:
        raise FragmentError(
            f"resume={str(url)!r} holds no checkpoint: a run writes them with checkpoint_dir= "
            f"(files named {_PREFIX}NNNNNNNNN{_SUFFIX}), after its first checkpoint_every iterations"
        )
    with fs.open(paths[-1], "rb") as f:
        try:
            data = pickle.load(f)
        except Exception as e:
            raise FragmentError(f"{paths[-1]} is not a fragnb checkpoint ({type(e).__name__}: {e})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise FragmentError(
            f"{paths[-1]} was written by another version of fragnb (format {data.get('format')!r} "
            f"if a dict, this one reads {FORMAT}): resume it with that version, or start the run again"
        )
    return Checkpoint(data["iteration"], data["replicas"], data["identity"], data["version"], paths[-1])


def resumable(url: str, placement) -> Checkpoint:
    """The newest checkpoint at ``url``, refused (naming the difference) unless it is of this placement's run."""
    found = latest(url)
    ours = identity(placement)
    if found.version != _version():
        raise FragmentError(
            f"{found.path} was written by fragnb {found.version}, and this is {_version()}: resume it with that "
            "version (a replica's state is pickled as that version's classes hold it)"
        )
    said = {
        "cell": "the cell's source differs from the one that wrote it (edit it back, or start the run again)",
        "policy": f"it was written under policy {found.identity['policy']!r}, and this run is under {ours['policy']!r}",
        "params": f"its policy's parameters were {found.identity['params']}, and these are {ours['params']}",
        "groups": f"its replicas were {found.identity['groups']}, and these are {ours['groups']}",
        "components": f"its components were {found.identity['components']}, and these are {ours['components']}",
    }
    for key, why in said.items():
        if found.identity.get(key) != ours[key]:
            raise FragmentError(f"resume={str(url)!r} is not a checkpoint of this run: {why}")
    return found
