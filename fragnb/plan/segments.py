"""A planned Program's data: segments, the loops the driver iterates, the Program that holds them.

Frozen all the way down (a Script holds the Program, and its payloads are packed from it): a plan is
changed by building another (:func:`replaced`). :mod:`fragnb.plan.program` plans them; the walkers
(:mod:`fragnb.runtime.worker.walker`, :mod:`~fragnb.runtime.worker.free`) and the prediction read them.
Pure: nothing here imports more than the standard library.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field, replace

__all__ = [
    "Table",
    "Segment",
    "DrivenLoop",
    "Program",
    "replaced",
    "segments_of",
    "header_names",
    "loops_in",
    "loop_targets",
]


class Table(dict):
    """A dict that cannot change once built: a plan's tables (it pickles, and copies, as a dict does)."""

    def _frozen(self, *args, **kwargs):
        raise TypeError("a planned Program cannot change: plan another (fragnb.plan.program.replaced)")

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _frozen

    def __reduce__(self):
        return (Table, (dict(self),))


@dataclass(frozen=True)
class Segment:
    """Consecutive statements of one worker group, executed by each of its replicas."""

    index: int
    group: str
    nodes: tuple[ast.stmt, ...] = field(repr=False)
    reads: frozenset[str] = frozenset()
    writes: frozenset[str] = frozenset()
    exports: frozenset[str] = frozenset()  # writes that statements of other groups read
    components: frozenset[str] = frozenset()
    statements: frozenset[int] = frozenset()  # indices of the graph's statements it holds
    module: ast.Module = field(default=None, repr=False)  # instrumented; shipped as AST, compiled where it runs
    records: Table = field(default_factory=Table)  # key -> variables it records for a later group
    replays: Table = field(default_factory=Table)  # key -> variables it replays from them
    #: ``samples_per_insert`` (async): the learner's segment without what takes the actors' trajectories,
    #: run in an iteration that samples the replay buffer alone (:func:`fragnb.plan.decoupled.sample_ahead`).
    ahead: ast.Module | None = field(default=None, repr=False)


# beside Segment, not with the planner that alone builds it: the two must hold the same fields, and
# frozen() says how each one freezes
@dataclass
class _Draft:
    """A segment while :func:`plan` builds it (the same fields, changeable); frozen into a Segment at the end."""

    index: int
    group: str
    nodes: list[ast.stmt] = field(repr=False)
    reads: set[str] = field(default_factory=set)
    writes: set[str] = field(default_factory=set)
    exports: set[str] = field(default_factory=set)
    components: set[str] = field(default_factory=set)
    statements: set[int] = field(default_factory=set)
    module: ast.Module = field(default=None, repr=False)
    records: dict[str, tuple[str, ...]] = field(default_factory=dict)
    replays: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def frozen(self) -> Segment:
        return Segment(
            self.index,
            self.group,
            tuple(self.nodes),
            frozenset(self.reads),
            frozenset(self.writes),
            frozenset(self.exports),
            frozenset(self.components),
            frozenset(self.statements),
            self.module,
            Table(self.records),
            Table(self.replays),
        )


@dataclass(frozen=True)
class DrivenLoop:
    """A loop the driver iterates itself: the iteration loop, and loops whose groups depend on
    each other step by step (``fine``: observations one way, actions back)."""

    node: ast.For = field(repr=False)
    body: tuple  # of Segment | DrivenLoop


@dataclass(frozen=True)
class Program:
    """A placement as the driver runs it; frozen, as the Script that holds it.

    ``kinds`` says how each variable's values combine across replicas: ``"sharded"`` (computed from
    the environments a replica holds: concatenated along the environment axis) or
    ``"replicated"`` (computed from the loop counters and notebook values alone: the same on every
    replica, checked). ``origin`` names the cell line that assigns a variable, for messages.
    ``axes`` gives the environment axis of sharded storage that is not the leading one."""

    items: tuple
    segments: tuple[Segment, ...]
    kinds: Table
    origin: Table
    axes: Table = field(default_factory=Table)


def replaced(program: Program, segments: dict[int, Segment]) -> Program:
    """``program`` with the segments of those indices in place of its own, its loops rebuilt to hold them:
    a plan is changed by building another, never in place (a Script holds it, and its payloads)."""

    def items(body: tuple) -> tuple:
        return tuple(
            segments.get(i.index, i) if isinstance(i, Segment) else replace(i, body=items(i.body)) for i in body
        )

    return replace(
        program, items=items(program.items), segments=tuple(segments.get(s.index, s) for s in program.segments)
    )


def segments_of(items: list) -> list[Segment]:
    """Every segment in execution order of first appearance."""
    out = []
    for item in items:
        out += segments_of(item.body) if isinstance(item, DrivenLoop) else [item]
    return out


def header_names(items: list) -> set[str]:
    """Names the headers of the driven loops among ``items`` read."""
    out: set[str] = set()
    for item in items:
        if isinstance(item, DrivenLoop):
            out |= {n.id for n in ast.walk(item.node.iter) if isinstance(n, ast.Name)} | header_names(item.body)
    return out


def loops_in(nodes) -> list[ast.For]:
    """The ``for`` loops among ``nodes`` and nested in their bodies, outermost first."""
    out = []
    for node in nodes:
        if isinstance(node, ast.For):
            out += [node, *loops_in(node.body)]
    return out


def loop_targets(nodes) -> set[str]:
    """Names the ``for`` loops among ``nodes`` bind: a split loop's counter is each group's own."""
    return {n.id for loop in loops_in(nodes) for n in ast.walk(loop.target) if isinstance(n, ast.Name)}
