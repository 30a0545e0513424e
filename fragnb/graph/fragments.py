"""Statements with their roles, grouped into fragments, and the edges between fragments.

A fragment is the statements of one role inside one loop: what a distribution policy places and
replicates. Data edges carry the variables that cross fragments (def-use, :class:`.defuse.Reach`);
state edges mark components and networks that two fragments share by object identity.
"""

from __future__ import annotations

from ..components import modules_of, role_of
from .defuse import Reach
from .model import Edge, Fragment, Loop, Statement

__all__ = ["group", "data_edges", "state_edges"]


def group(statements: list[Statement]) -> list[Fragment]:
    """One fragment per role and loop, in cell order; named by its role alone where the role has one
    fragment, else ``role@loop variable`` (``role@cell`` outside loops)."""
    groups: dict[tuple[str, Loop | None], list[Statement]] = {}
    for s in statements:
        groups.setdefault((s.role, s.loop), []).append(s)
    role_count: dict[str, int] = {}
    for name, _ in groups:
        role_count[name] = role_count.get(name, 0) + 1
    return [
        Fragment(name if role_count[name] == 1 else f"{name}@{loop.var if loop else 'cell'}", name, loop, stmts)
        for (name, loop), stmts in groups.items()
    ]


def data_edges(statements: list[Statement], fragments: list[Fragment], reach: Reach) -> list[Edge]:
    """The variables each fragment reads that another fragment's assignment can reach."""
    owner = {s.index: f for f in fragments for s in f.statements}
    flows: dict[tuple[str, str], dict[str, None]] = {}
    for s in statements:
        for var in sorted(s.reads):
            for p in reach.producers(s, var):
                src, dst = owner[p.index].name, owner[s.index].name
                if src != dst:
                    flows.setdefault((src, dst), {})[var] = None
    return [Edge(src, dst, tuple(vs)) for (src, dst), vs in flows.items()]


def state_edges(fragments: list[Fragment], namespace: dict) -> list[Edge]:
    """Shared component state: one component called from two fragments, or one network held by
    components in two fragments (weights flow from the learner to the others)."""
    edges: list[Edge] = []
    for i, a in enumerate(fragments):
        for b in fragments[i + 1 :]:
            shared = [f"{c} state" for c in a.components if c in b.components]
            shared += _shared_modules(a, b, namespace)
            if not shared:
                continue
            src, dst = (b, a) if b.role == "learner" and a.role != "learner" else (a, b)
            edges.append(Edge(src.name, dst.name, tuple(shared), kind="state"))
    return edges


def _shared_modules(a: Fragment, b: Fragment, namespace: dict) -> list[str]:
    mods_a = _modules(a, namespace)
    return [
        f"{label.split('.')[1]} weights"
        for key, label in _modules(b, namespace).items()
        if key in mods_a and not _same_component(a, b, label)
    ]


def _modules(frag: Fragment, namespace: dict) -> dict[int, str]:
    found: dict[int, str] = {}
    for comp in frag.components:
        if role_of(namespace[comp]) is None:
            continue  # a plain object: shared by name, its state edge says so
        for attr, value in modules_of(namespace[comp]).items():
            found.setdefault(id(value), f"{comp}.{attr}")
    return found


def _same_component(a: Fragment, b: Fragment, label: str) -> bool:
    # A component called from both fragments already has a state edge; don't list its modules twice.
    comp = label.split(".")[0]
    return comp in a.components and comp in b.components
