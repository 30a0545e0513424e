"""Replay: a distributed run that raised in the cell's code on a worker, reproduced in the kernel for the debugger.

A run whose mode replays (:meth:`fragnb.policies.modes.Mode.unreplayable` is empty) is value for value
reproducible: every replica walks the same Script from the same payloads, packed once before it
started, and draws from generators the Script seeds. When a replica raises, the notebook keeps that
Job and the last checkpoint every replica kept (:func:`keep`); :func:`debug` walks the same Script
again here, every replica a thread (as the safety net does), from that checkpoint, until the replica
raises again, and raises that exception with its traceback from the cell's frame on. ``%debug`` (or
``pdb.pm()``) then opens in the user's own frame (the cell line, a component's method) with the
replica's locals, which a worker's process took with it.

A run that cannot be replayed exactly (a decoupled policy, whose arrivals depend on timing) ships, with
the error, what the statement that raised had read (:func:`~fragnb.runtime.worker.recorder.shipped`);
:func:`debug` runs that statement once here on those values, the closest it can. (A run that recorded
fragments runs them again the same way: :mod:`fragnb.runtime.records`.)

Nothing the replay computes reaches the notebook: its namespace stays as the failed run left it.
"""

from __future__ import annotations

import pickle
import time
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

from .records import rerun
from .threads import InThreads
from .worker.recorder import Call
from .worker.travel import classes_kept

if TYPE_CHECKING:
    from .job import Job

__all__ = ["Failure", "keep", "debug", "last"]

#: Where the cell's code runs on a replica: its frames' filenames start so (:attr:`FragmentGraph.filename`).
_CELL = "<fragment "


@dataclass(frozen=True)
class Failure:
    """A run that raised in the cell's code: what reproduces it (its Job, planned and packed once, and the
    last checkpoint all replicas kept: iteration, each replica's state), and what it raised."""

    job: Job
    saved: tuple[int, dict[str, bytes]] | None
    error: BaseException
    #: A run that cannot be replayed: what the statement that raised had read, shipped with the error.
    inputs: Call | None = None

    @property
    def start(self) -> str:
        return f"the checkpoint after iteration {self.saved[0]}" if self.saved else "the beginning of the run"


_LAST: dict[str, Failure] = {}


def last() -> Failure | None:
    """This kernel's last failed run that :func:`debug` can replay (None if there is none)."""
    return _LAST.get("failure")


def keep(job: Job, saved: tuple[int, dict[str, bytes]] | None, error: BaseException) -> None:
    """Keep what reproduces ``error`` (raised by a replica of ``job``'s run, with ``saved`` its last
    checkpoint) for :func:`debug`, and tell the user in a note; or say why it cannot be replayed."""
    why = job.script.mode.unreplayable()
    inputs = getattr(error, "_fragnb_inputs", None)
    if why and inputs is None:
        _LAST.pop("failure", None)
        error.add_note(f"fragnb.debug() cannot replay this run in the kernel: {why}.")
        return
    if why:
        _LAST["failure"] = Failure(job, None, error, inputs)
        with classes_kept(job.namespace):
            values = pickle.loads(inputs.inputs)
        error.add_note(
            f"fragnb.debug() cannot replay this run exactly ({why}): it runs line {inputs.line} once in this kernel "
            f"on what {inputs.replica} held when it raised in iteration {inputs.iteration} (then `%debug`):\n"
            + "\n".join(f"    {name} = {_brief(value)}" for name, value in values.items())
            + "".join(f"\n    {name}: not shipped ({why})" for name, why in inputs.missing)
        )
        return
    _LAST["failure"] = Failure(job, saved, error)
    error.add_note(
        "To stop where it failed, with the replica's values: `fragnb.debug()` (or `%fragment_debug`) replays "
        "the run in this kernel and raises it there; then `%debug`."
    )


def debug() -> None:
    """Replay this kernel's last failed distributed run here until the replica that failed raises again,
    and raise that exception, its traceback starting at the cell's frame: ``%debug`` (or ``pdb.pm()``)
    then opens where it failed, with the replica's locals. A note says where the replay started and how
    long it took. Raises RuntimeError when there is no run to replay, or when the replay ends without the
    error (it then says so: something outside the run changed what it computes)."""
    failure = last()
    if failure is None:
        raise RuntimeError(
            "no failed run to replay in this kernel: fragnb.debug() replays the last distributed run whose cell "
            "code raised on a worker (a `single` run fails in the kernel itself: use %debug)"
        )
    job = failure.job
    if failure.inputs is not None:
        _closest(failure)

    def replay() -> None:
        with classes_kept(job.namespace):  # the replicas' objects are unpickled here, beside the notebook's
            InThreads(resume=failure.saved[1] if failure.saved else None, keep=False, own=True).execute(job)

    _raise_again(
        replay,
        f"replayed in this kernel from {failure.start}",
        lambda took: (
            f"the replay from {failure.start} ended without an error ({took:.1f} s): "
            f"{type(failure.error).__name__} did not happen again here. What the run computes must have changed since "
            "(a notebook object its code reads but does not take along, a file, the time)."
        ),
    )


def _raise_again(work, done: str, otherwise) -> None:
    """Run ``work`` and raise what it raises, its traceback from the cell's frame on, with a note saying what
    was ``done`` and how long it took; RuntimeError(``otherwise(seconds)``) when it raises nothing."""
    began = time.perf_counter()
    try:
        work()
    except Exception as e:
        e.add_note(
            f"fragnb.debug(): {done} in {time.perf_counter() - began:.1f} s; %debug opens in the frame that raised it."
        )
        raise e.with_traceback(from_the_cell(e.__traceback__)) from None
    raise RuntimeError(otherwise(time.perf_counter() - began))


def from_the_cell(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` from its first frame in the cell's code on (the walker's frames above it cut), or whole if
    it never enters the cell."""
    first = tb
    while first is not None and not first.tb_frame.f_code.co_filename.startswith(_CELL):
        first = first.tb_next
    return first if first is not None else tb


def _closest(failure: Failure) -> None:
    """:func:`debug` for a run that cannot be replayed: the statement that raised, once, on what it had read."""
    call, why = failure.inputs, failure.job.script.mode.unreplayable()
    _raise_again(
        lambda: rerun(failure.job.placement.graph, call),
        f"line {call.line} ran again in this kernel on what {call.replica} held when it raised "
        f"(iteration {call.iteration}); not a replay of the run ({why})",
        lambda _: (
            f"line {call.line} ran without error on what {call.replica} held when it raised: "
            f"{type(failure.error).__name__} depended on more than those values (what the statement changed before it "
            f"raised, or the run's timing: {why})"
        ),
    )


def _brief(value: Any) -> str:
    """A value in a few words, for an error's note: a tensor by its shape and type, a number as it is."""
    shape = getattr(value, "shape", None)
    if shape is not None and hasattr(value, "dtype"):
        return f"{type(value).__name__}{list(shape)} {value.dtype}"
    if isinstance(value, (int, float, bool, str)) or value is None:
        text = repr(value)
        return text if len(text) <= 60 else text[:57] + "..."
    return f"<{type(value).__name__}>"
