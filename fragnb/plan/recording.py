"""What a run records of its fragments, and what a failure ships: the cell's statements by what they read and write.

``fragnb.run(..., record=["actor@step"])`` keeps, for the chosen iterations, every execution of that
fragment's statements on every replica: the values each statement read before it ran (with the global
generators' states), and what it assigned and the components it used after. The plan wraps those
statements, and only those, in ``__fragnb_run__.recording(index)``
(:func:`~fragnb.plan.instrument.instrument`); each replica keeps its calls within its share of
:data:`RECORD_BYTES` (:mod:`fragnb.runtime.worker.recorder`), and ``RunResult.replay`` runs one again in
the kernel (:mod:`fragnb.runtime.replay`).

The same table of statements tells a replica of a run that cannot be replayed (a decoupled policy) what
the statement that raised had read, to ship with the error.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ..errors import FragmentError
from .segments import Table

__all__ = ["RECORD_BYTES", "Recorded", "Recording", "recording_of", "recorded", "parse_record"]

#: The most a run keeps of recorded calls, all replicas together (each replica its equal share); calls
#: past it are counted, not kept (``RunResult.records`` says how many).
RECORD_BYTES = 64 * 2**20


@dataclass(frozen=True)
class Recorded:
    """One statement of the cell as a recording sees it."""

    fragment: str
    line: int
    reads: tuple[str, ...]
    #: What it leaves behind: the names it assigns, then the components it uses (their state after it).
    writes: tuple[str, ...]


@dataclass(frozen=True)
class Recording:
    """The cell's statements (index -> :class:`Recorded`), and which fragments a run records at which
    iterations (fragment -> iterations, ``None``: all)."""

    statements: Table
    fragments: Table = field(default_factory=Table)
    bytes: int = RECORD_BYTES

    def wanted(self, index: int, iteration: int) -> bool:
        """Whether statement ``index`` is recorded when it runs in ``iteration``."""
        iterations = self.fragments.get(self.statements[index].fragment, ())
        return iterations is None or iteration in iterations

    @property
    def recorded(self) -> frozenset[int]:
        """The statements the plan wraps: those of the recorded fragments."""
        return frozenset(i for i, s in self.statements.items() if s.fragment in self.fragments)

    def at_line(self, line: int) -> int | None:
        """The statement that ``line`` of the cell belongs to (the last one that starts at or before it)."""
        before = [i for i, s in self.statements.items() if s.line <= line]
        return max(before, key=lambda i: self.statements[i].line) if before else None


def recording_of(graph, record=None) -> Recording:
    """The graph's statements, with ``record`` (fragment names, or fragment -> iteration(s)) checked
    against its fragments: a name that is none of them is refused, listing them."""
    statements = Table(
        {
            s.index: Recorded(
                graph.fragment_of(s).name,
                s.lineno,
                tuple(sorted(s.reads)),
                tuple(sorted(s.writes)) + tuple(c for c in s.components if c not in s.writes),
            )
            for s in graph.statements
        }
    )
    if not record:
        return Recording(statements)
    if isinstance(record, str):
        record = [record]
    chosen = dict(record) if isinstance(record, dict) else dict.fromkeys(record)
    names = [f.name for f in graph.fragments]
    for name in chosen:
        if name not in names:
            raise FragmentError(f"record={name!r}: {graph.name!r} has no fragment of that name; its fragments: {names}")
    return Recording(statements, Table({name: _iterations(name, its) for name, its in chosen.items()}))


def recorded(recording: Recording) -> str:
    """What a run says before it starts about what it records."""
    what = "; ".join(
        f"{name} at {'every iteration' if its is None else 'iterations ' + ', '.join(map(str, its))}"
        for name, its in recording.fragments.items()
    )
    return (
        f"recording {what}, on every replica: what each of their statements reads and leaves, up to "
        f"{recording.bytes / 2**20:.0f} MiB for the run (result.records says what it kept; result.replay(...) runs it again)"
    )


def _iterations(name: str, its) -> tuple[int, ...] | None:
    if its is None:
        return None
    if isinstance(its, int) and not isinstance(its, bool):
        its = [its]
    if not isinstance(its, Iterable) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in its):
        raise ValueError(
            f"record={{{name!r}: {its!r}}}: give the iterations to record as numbers from 0 (one, a list or a "
            "range), or None for all"
        )
    return tuple(sorted(set(its)))


def parse_record(spec: str) -> tuple[str, tuple[int, ...] | None]:
    """``--record`` of the magic: ``FRAGMENT`` (every iteration), ``FRAGMENT:3`` or ``FRAGMENT:2-4``."""
    name, _, its = spec.partition(":")
    if not its:
        return name, None
    first, _, last = its.partition("-")
    try:
        return name, tuple(range(int(first), int(last or first) + 1))
    except ValueError:
        raise ValueError(f"--record {spec}: write FRAGMENT, FRAGMENT:ITERATION or FRAGMENT:FIRST-LAST") from None
