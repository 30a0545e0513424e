"""Values: what each variable of the cell is, for the plan: sharded (computed from what components return,
split over replicas with them) or replicated, where sharded storage holds its environments, the line that
assigns it first, every name the cell assigns, and the keys a record of a dict-valued one needs. Pure, from the graph alone.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..graph import FragmentGraph

__all__ = ["kinds", "from_components", "per_env_lines", "env_axes", "origins", "keys_read", "graph_writes"]


def from_components(graph: FragmentGraph) -> set[int]:
    """The statements computed from what components return (directly, or from values that were)."""
    tainted = {s.index for s in graph.statements if s.components}
    changed = True
    while changed:
        changed = False
        for s in graph.statements:
            if s.index not in tainted and any(p in tainted for ps in graph.reach.get(s.index, {}).values() for p in ps):
                tainted.add(s.index)
                changed = True
    return tainted


def per_env_lines(graph: FragmentGraph) -> frozenset[int]:
    """The lines of the statements computed from components' results: a replica holding a share of the
    environments makes its own share of such a statement's calls (a sink's: :mod:`fragnb.sinks`)."""
    tainted = from_components(graph)
    return frozenset(line for s in graph.statements if s.index in tainted for line in range(s.lineno, s.end_lineno + 1))


def kinds(graph: FragmentGraph) -> dict[str, str]:
    """Variables computed from component results are sharded; the rest (counters, constants,
    notebook values) are replicated."""
    tainted = from_components(graph)
    kinds: dict[str, str] = {}
    for s in graph.statements:
        for v in s.writes:
            if s.index in tainted or kinds.get(v) != "sharded":
                kinds[v] = "sharded" if s.index in tainted else kinds.get(v, "replicated")
    return kinds


def env_axes(graph: FragmentGraph, kinds: dict[str, str]) -> dict[str, int]:
    """The environment axis of sharded storage, from how the loop fills it: ``obs[step] = next_obs``
    puts ``next_obs``'s environments (its leading axis) on ``obs``'s second, whatever the sizes
    (CartPole's 4 observations beside 4 environments cannot be told apart by shape). Only axes
    other than the leading one are listed."""
    axes: dict[str, int] = {}
    for _ in range(len(graph.statements)):  # a fixed point: storage filled from storage
        before = dict(axes)
        for s in graph.statements:
            node = s.node
            while isinstance(node, ast.With) and len(node.body) == 1:
                node = node.body[0]
            if not (
                isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Subscript)
            ):
                continue
            target = node.targets[0]
            index = target.slice.elts if isinstance(target.slice, ast.Tuple) else [target.slice]
            if (
                not isinstance(target.value, ast.Name)
                or kinds.get(target.value.id) != "sharded"
                or any(isinstance(i, ast.Slice) for i in index)
            ):
                continue
            axis = len(index) + (axes.get(node.value.id, 0) if isinstance(node.value, ast.Name) else 0)
            axes.setdefault(target.value.id, axis)
        if axes == before:
            break
    return {v: a for v, a in axes.items() if a}


def origins(graph: FragmentGraph) -> dict[str, str]:
    """Each variable's first assignment, as the plan's errors quote it (``"line 7: loss = ..."``)."""
    origin: dict[str, str] = {}
    for s in graph.statements:
        for v in s.writes:
            origin.setdefault(v, f"line {s.lineno}: {s.source.splitlines()[0].strip()}")
    return origin


def graph_writes(graph: FragmentGraph) -> set[str]:
    """Every name the cell assigns, loop variables included."""
    names = set().union(*(s.writes for s in graph.statements))
    names |= {
        n.id
        for node in ast.walk(graph.tree)
        if isinstance(node, ast.For)
        for n in ast.walk(node.target)
        if isinstance(n, ast.Name)
    }
    return names - set(graph.temps)


def keys_read(node: ast.AST, names) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """For each of ``names`` that ``node`` reads only by constant keys (``infos["episode"]``, ``"episode" in
    infos``, ``infos.get("episode")``) and never assigns: (name, its keys). A record of a vector env's
    ``infos`` for the learner's episode log then carries the keys the log reads, not every array of every
    step: on CleanRL's HalfCheetah loop that was a quarter of a second per iteration on the learner,
    unpickling and joining them."""
    parents = {id(c): p for p in ast.walk(node) for c in ast.iter_child_nodes(p)}
    out = []
    for name in names:
        keys, ok = set(), True
        for n in ast.walk(node):
            if not (isinstance(n, ast.Name) and n.id == name):
                continue
            parent = parents.get(id(n))
            if isinstance(n.ctx, (ast.Store, ast.Del)):
                ok = False
            elif (
                isinstance(parent, ast.Subscript)
                and parent.value is n
                and isinstance(parent.slice, ast.Constant)
                and isinstance(parent.slice.value, str)
                and isinstance(parent.ctx, ast.Load)
            ):
                keys.add(parent.slice.value)
            elif (
                isinstance(parent, ast.Compare)
                and len(parent.ops) == 1
                and isinstance(parent.ops[0], (ast.In, ast.NotIn))
                and parent.comparators[0] is n
                and isinstance(parent.left, ast.Constant)
                and isinstance(parent.left.value, str)
            ):
                keys.add(parent.left.value)
            elif (
                isinstance(parent, ast.Attribute)
                and parent.attr == "get"
                and isinstance(call := parents.get(id(parent)), ast.Call)
                and call.func is parent
                and call.args
                and isinstance(call.args[0], ast.Constant)
                and isinstance(call.args[0].value, str)
            ):
                keys.add(call.args[0].value)
            else:
                ok = False
            if not ok:
                break
        if ok and keys:
            out.append((name, tuple(sorted(keys))))
    return tuple(out)
