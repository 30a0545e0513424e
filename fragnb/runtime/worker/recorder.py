"""A replica's record of the statements a run records (:mod:`fragnb.plan.recording`), and what it ships with an error.

Each recorded statement's run is a :class:`Call`: what it read, pickled before it ran, the global
generators' states then, and what it assigned and the components it used, pickled after. A replica
keeps its calls up to its share of the run's bound and counts the rest. ``RunResult.replay``
(:mod:`fragnb.runtime.replay`) unpickles one in the kernel and runs the statement again.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...plan.recording import Recording
from .generators import states
from .travel import pickled

__all__ = ["Call", "Recorder", "shipped"]


@dataclass(frozen=True)
class Call:
    """One run of a recorded statement on one replica: its values, pickled (unpickle them where the
    notebook's classes are: :func:`~fragnb.runtime.worker.travel.classes_kept`)."""

    fragment: str
    iteration: int
    replica: str
    statement: int
    line: int
    inputs: bytes  # {name: value} as the statement read them
    generators: dict  # the global generators' states before it ran
    outputs: bytes = b""  # {name: value} after it: what it assigned, the components it used
    #: What it read but could not be kept (names -> why): a replay cannot run without them.
    missing: tuple[tuple[str, str], ...] = ()

    @property
    def size(self) -> int:
        return len(self.inputs) + len(self.outputs)


class Recorder:
    """What replica ``replica`` keeps of ``recording``'s statements, within ``budget`` bytes; ``now()``
    is the iteration its walk is in, ``ns`` its namespace."""

    def __init__(self, recording: Recording, replica: str, budget: int, ns: Callable[[], dict], now: Callable[[], int]):
        self.recording, self.replica, self.budget, self.ns, self.now = recording, replica, budget, ns, now
        self.calls: list[Call] = []
        self.kept = 0  # bytes
        self.dropped = 0  # calls past the budget

    def around(self, index: int) -> contextlib.AbstractContextManager:
        iteration = self.now()
        if not self.recording.wanted(index, iteration):
            return contextlib.nullcontext()
        return self._record(index, iteration)

    @contextlib.contextmanager
    def _record(self, index: int, iteration: int):
        if self.kept >= self.budget:
            self.dropped += 1
            yield
            return
        stmt = self.recording.statements[index]
        ns = self.ns()
        inputs, missing = _pickle_names(ns, stmt.reads)
        call = Call(stmt.fragment, iteration, self.replica, index, stmt.line, inputs, states(), missing=missing)
        yield
        outputs, _ = _pickle_names(ns, stmt.writes)
        call = dataclasses.replace(call, outputs=outputs)
        if self.kept + call.size > self.budget:
            self.dropped += 1
            return
        self.kept += call.size
        self.calls.append(call)


def _pickle_names(ns: dict, names) -> tuple[bytes, tuple[tuple[str, str], ...]]:
    """The values of ``names`` in ``ns`` pickled together (shared objects stay shared), without those that
    do not pickle (named with why)."""
    values = {n: ns[n] for n in names if n in ns}
    try:
        return pickled(values), ()
    except Exception:
        missing = []
        for name in list(values):
            try:
                pickled(values[name])
            except Exception as e:
                missing.append((name, f"{type(e).__name__}: {e}"))
                del values[name]
        return pickled(values), tuple(missing)


#: The most a failure ships of what the statement that raised had read.
SHIPPED_BYTES = 16 * 2**20


def shipped(recording: Recording, error: BaseException, ns: dict, replica: str, iteration: int) -> Any:
    """What the statement of the cell that raised ``error`` had read, as ``ns`` holds it now (the names it
    would have assigned are not yet; objects it changed in place are as it left them): a :class:`Call`
    without outputs or generators, or None when no cell line is in the traceback or it is too large."""
    tb, line = error.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.startswith("<fragment "):
            line = tb.tb_lineno
        tb = tb.tb_next
    index = None if line is None else recording.at_line(line)
    if index is None:
        return None
    stmt = recording.statements[index]
    try:
        inputs, missing = _pickle_names(ns, stmt.reads)
    except Exception:  # what the replica holds cannot travel at all: the error goes on without it
        return None
    if len(inputs) > SHIPPED_BYTES:
        return None
    return Call(stmt.fragment, iteration, replica, index, stmt.line, inputs, {}, missing=missing)
