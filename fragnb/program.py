"""Program: a Placement --> what each worker group executes, in order.

The cell's top level and its iteration loop are driven from the notebook; every maximal run of
statements placed in one worker group becomes a *segment* that the group's replicas execute. A
loop whose whole body sits in one group stays inside a segment (a ``coarse`` rollout is one task
per actor); a loop that spans groups is driven too (a ``fine`` rollout synchronises every step).
Pure: no cluster library is imported here.
"""

from __future__ import annotations

import ast
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .graph import FragmentGraph
    from .policies import Placement

__all__ = ["DRIVER", "Timer", "Segment", "DrivenLoop", "plan", "instrument"]

DRIVER = "__fragnb_run__"  # the one name fragnb puts in a namespace, only while code of a run executes


class Timer:
    """Adds the wall-clock time of a ``with`` block to ``seconds[name]`` (what ``timer(name)`` returns)."""

    __slots__ = ("seconds", "name", "start")

    def __init__(self, seconds: dict[str, float], name: str):
        self.seconds, self.name = seconds, name

    def __enter__(self):
        self.start = time.perf_counter()

    def __exit__(self, *exc):
        self.seconds[self.name] = self.seconds.get(self.name, 0.0) + time.perf_counter() - self.start


@dataclass
class Segment:
    """Consecutive statements of one worker group, executed by each of its replicas."""

    index: int
    group: str
    nodes: list[ast.stmt] = field(repr=False)
    reads: set[str] = field(default_factory=set)
    writes: set[str] = field(default_factory=set)
    exports: set[str] = field(default_factory=set)  # writes that statements of other groups read
    components: set[str] = field(default_factory=set)
    module: ast.Module = field(default=None, repr=False)  # instrumented; shipped as AST, compiled where it runs


@dataclass
class DrivenLoop:
    """A loop the driver iterates itself, because its body spans groups (always the outermost)."""

    node: ast.For = field(repr=False)
    body: list  # of Segment | DrivenLoop


def instrument(body: list[ast.stmt], owner: dict[int, str], hook_loop: bool = False, trace: dict[int, int] | None = None) -> list[ast.stmt]:
    """``body`` with each run of consecutive statements of one fragment timed by
    ``__fragnb_run__.timer(fragment)``; with ``hook_loop`` the top-level loop iterates through
    ``__fragnb_run__.iterate`` (progress); with ``trace`` (node id -> statement index) every statement
    is followed by ``__fragnb_run__.done(index)``."""

    def call(method: str, *args: ast.expr) -> ast.Call:
        return ast.Call(ast.Attribute(ast.Name(DRIVER, ast.Load()), method, ast.Load()), list(args), [])

    def timed(name: str, run: list[ast.stmt]) -> ast.With:
        return ast.copy_location(ast.With([ast.withitem(call("timer", ast.Constant(name)))], run), run[0])

    def build(nodes: list[ast.stmt], top: bool) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        run: list[ast.stmt] = []
        current = None
        for node in nodes:
            name = None if isinstance(node, ast.For) else owner[id(node)]
            if run and name != current:
                out.append(timed(current, run))
                run = []
            current = name
            if isinstance(node, ast.For):
                it = ast.copy_location(call("iterate", node.iter), node.iter) if top and hook_loop else node.iter
                out.append(ast.copy_location(ast.For(node.target, it, build(node.body, False), [], None), node))
            else:
                run.append(node)
                if trace is not None:
                    run.append(ast.copy_location(ast.Expr(call("done", ast.Constant(trace[id(node)]))), node))
        if run:
            out.append(timed(current, run))
        return out

    return build(body, True)


def plan(placement: Placement) -> list:
    """The cell as a list of Segments and DrivenLoops, each segment's code instrumented for timing."""
    graph = placement.graph
    group_of = {id(s.node): placement.fragments[graph.fragment_of(s).name].group for s in graph.statements}
    owner = {id(s.node): graph.fragment_of(s).name for s in graph.statements}
    stmt_of = {id(s.node): s for s in graph.statements}
    segments: list[Segment] = []

    def groups_in(node: ast.stmt) -> set[str]:
        if isinstance(node, ast.For):
            return set().union(*(groups_in(n) for n in node.body))
        return {group_of[id(node)]}

    def build(nodes: list[ast.stmt], top: bool) -> list:
        items: list = []
        for node in nodes:
            groups = groups_in(node)
            if isinstance(node, ast.For) and (top or len(groups) > 1):
                items.append(DrivenLoop(node, build(node.body, False)))
                continue
            (group,) = groups
            if not items or not isinstance(items[-1], Segment) or items[-1].group != group:
                segments.append(Segment(len(segments), group, []))
                items.append(segments[-1])
            items[-1].nodes.append(node)
        return items

    items = build(graph.tree.body, True)
    filename = f"<fragment {graph.name}>"  # as the single policy compiles it: tracebacks name cell lines
    for seg in segments:
        leaves = [stmt_of[id(n)] for node in seg.nodes for n in _leaves(node)]
        seg.reads = set().union(*(s.reads for s in leaves)) | _header_reads(seg.nodes)
        seg.writes = set().union(*(s.writes for s in leaves)) | _header_writes(seg.nodes)
        seg.components = {c for s in leaves for c in s.components}
        seg.module = ast.fix_missing_locations(ast.Module(instrument(seg.nodes, owner), []))
        compile(seg.module, filename, "exec")  # fail here, not on a worker
    for seg in segments:
        seg.exports = {v for v in seg.writes if any(v in other.reads for other in segments if other.group != seg.group)}
    return items


def _leaves(node: ast.stmt):
    if isinstance(node, ast.For):
        for child in node.body:
            yield from _leaves(child)
    else:
        yield node


def _loops(nodes: list[ast.stmt]):
    for node in nodes:
        if isinstance(node, ast.For):
            yield node
            yield from _loops(node.body)


def _header_reads(nodes: list[ast.stmt]) -> set[str]:
    return {n.id for loop in _loops(nodes) for n in ast.walk(loop.iter) if isinstance(n, ast.Name)}


def _header_writes(nodes: list[ast.stmt]) -> set[str]:
    return {n.id for loop in _loops(nodes) for n in ast.walk(loop.target) if isinstance(n, ast.Name)}


def segments_of(items: list) -> list[Segment]:
    """Every segment in execution order of first appearance."""
    out = []
    for item in items:
        out += segments_of(item.body) if isinstance(item, DrivenLoop) else [item]
    return out


def graph_writes(graph: FragmentGraph) -> set[str]:
    """Every name the cell assigns, loop variables included."""
    names = set().union(*(s.writes for s in graph.statements))
    return names | {n.id for node in ast.walk(graph.tree) if isinstance(node, ast.For) for n in ast.walk(node.target) if isinstance(n, ast.Name)}
