"""Payload: what a group's replicas receive before the run, and the error when something cannot travel."""

from __future__ import annotations

import pickle
from typing import NamedTuple

import numpy as np
import torch

from ...errors import FragmentError
from ...plan.program import header_names
from ...shards import splits
from ...sinks import stand_in
from ...streams import EnvStreams, reached
from .travel import blocker, described, pickled

__all__ = ["Payload", "pack"]


class Payload(NamedTuple):
    """The notebook objects a group's statements and the loops' headers read (cloudpickled), its
    segments' code (pickled AST, compiled where it runs), which of its components are split per
    replica, and which of its values are cut to a replica's environments (by their environment axis)."""

    objects: bytes
    codes: bytes
    sharded: list[str]
    scattered: dict[str, int]
    streams: list[
        str
    ]  # EnvStreams it draws from (by name in its classes' methods, or handed to a call): they come back
    reseed: int | None = None  # whole copies (data_parallel): the run's seed, which replicas 1.. re-seed them from
    rebound: tuple[str, ...] = ()  # whole copies: the notebook's functions, to run on the replica's namespace


def pack(graph, ns: dict, script, group: str) -> Payload:
    """``group``'s payload from the objects in ``ns``; what cannot be pickled raises FragmentError."""
    segs = [s for s in script.program.segments if s.group == group]
    names = {v for s in segs for v in s.reads | s.components if v in ns} | {
        v for v in header_names(script.program.items) if v in ns
    }
    names |= {v for v in script.function_globals if v in ns}
    n = script.mode.shares(script.groups[group])  # whole copies: nothing is split
    sharded = sorted(v for v in names if n > 1 and splits(ns[v]))
    scattered = {v: axis for v in sorted(names) if n > 1 and (axis := _env_axis(ns[v], v, script)) is not None}
    # a sink (a logger, TensorBoard's writer) stays in the notebook: the replica keeps its calls (fragnb.sinks)
    objects = {v: stand_in(ns[v], v, rehearsal=False) for v in sorted(names)}
    streams = reached(objects.values(), ns)
    # and those the cell hands to a call itself (`policy.generate(prompts, n, streams=streams)`)
    streams.update({v: obj for v, obj in objects.items() if isinstance(obj, EnvStreams)})
    objects.update(streams)  # one pickle: the replica's methods and its namespace hold the same object
    try:
        blob = pickled(objects)
    except Exception as e:
        raise _cannot_travel(graph, objects, group) from e
    whole = script.mode.whole_copies()
    reseed = script.seed if whole else None
    rebound = tuple(v for v in sorted(names) if whole and getattr(ns[v], "__globals__", None) is ns)
    codes = pickle.dumps({s.index: s.module for s in segs} | {("ahead", s.index): s.ahead for s in segs if s.ahead})
    return Payload(blob, codes, sharded, scattered, sorted(streams), reseed, rebound)


def _env_axis(value, name: str, script) -> int | None:
    """Where a notebook value the loop goes on filling per environment (storage preallocated in an
    earlier cell, the first observations) holds its environments, if it does: each replica starts
    from its share."""
    program = script.program
    if (
        program.kinds.get(name) != "sharded"
        or not isinstance(value, (torch.Tensor, np.ndarray))
        or script.num_envs is None
    ):
        return None
    axis = program.axes.get(name, 0)
    return axis if value.ndim > axis and value.shape[axis] == script.num_envs else None


def _cannot_travel(graph, objects: dict, group: str) -> FragmentError:
    """The error for objects a worker cannot receive: which one, why, and the first line that uses it."""
    for name, value in objects.items():
        found = blocker(value, pickled, name)
        if found:
            return FragmentError.in_source(
                f"`{name}` ({type(value).__name__}) cannot be sent to the workers of group {group!r}: {described(found)}. "
                "What a distributed policy ships must pickle (cloudpickle): keep locks, open files, sockets and threads "
                "out of its attributes (create them lazily, or drop them in __getstate__), or run it under 'single'",
                graph.first_use(name),
                graph.source,
            )
    return FragmentError(
        f"the objects of group {group!r} cannot be sent to its workers (they pickle one by one, not together)"
    )
