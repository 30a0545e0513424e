"""Def-use across the cell, and the roles it gives statements that call no component.

:class:`Reach` answers which assignments of a variable can reach a statement that reads it (cell
order, ``if`` blocks that may not run, loops that come round again); :func:`assign_roles` gives each
statement that uses no component the role of the statements that need its values.
"""

from __future__ import annotations

import ast
import bisect
from dataclasses import replace

from ..components import role_of
from .flow import names, stores
from .model import Loop, Statement
from .roles import MODULE

__all__ = ["Reach", "assign_roles"]


class Reach:
    """Per variable, where it is assigned, in cell order: by statements (an ``if`` only maybe), and
    by loop headers (``for value in`` rebinds ``value`` on every iteration).

    Parameters
    ----------
    statements : list of Statement
        The cell's statements, in cell order.
    loops : list of Loop
        The cell's ``for`` loops.
    """

    def __init__(self, statements: list[Statement], loops: list[Loop]):
        events = []  # (position, statement or None, loop it runs in, always runs there)
        for s in statements:
            events += [(2 * s.index + 1, s, s.loop, not isinstance(s.node, ast.If), v) for v in s.writes]
        for loop in loops:
            events += [(2 * loop.first, None, loop, True, v) for v in names(loop.node.target)[1]]
        self.defs: dict[str, list] = {}
        for event in sorted(events, key=lambda e: e[0]):
            self.defs.setdefault(event[4], []).append(event)

    def producers(self, stmt: Statement, var: str) -> list[Statement]:
        """Statements whose assignment of ``var`` can reach ``stmt``: those before it back to one that
        always runs before it, and later ones in a loop around both unless such an assignment
        comes first in that loop's iteration."""
        defs = self.defs.get(var, ())
        read = 2 * stmt.index + 1
        i = bisect.bisect_left([d[0] for d in defs], read)
        found, stop = [], -1
        for pos, s, where, always, _ in reversed(defs[:i]):
            if s is not None:
                found.append(s)
            if always and (where is None or where.encloses(stmt.loop)):
                stop = pos
                break
        for pos, s, where, _, _ in defs[i:]:
            common = _innermost_common(where, stmt.loop)
            if s is not None and pos > read and common is not None and stop < 2 * common.first:
                found.append(s)
        return found[::-1]


def assign_roles(
    statements: list[Statement], reach: Reach, namespace: dict
) -> tuple[list[Statement], dict[int, dict[str, tuple[int, ...]]]]:
    """Statements that use no component take the role of the statements that need their values:
    a value only one role needs is computed there; bookkeeping no component needs runs with the
    driver (once, on gathered values, wherever a policy replicates the rest).

    Returns
    -------
    statements : list of Statement
        ``statements`` with their roles.
    reached : dict
        Statement index -> variable it reads -> the indices of the statements whose assignment of
        it can reach that read (the graph's ``reach``).
    """
    roles = {s.index: s.role or None for s in statements}
    readers: dict[int, list[int]] = {s.index: [] for s in statements}
    reached: dict[int, dict[str, tuple[int, ...]]] = {}
    for r in statements:
        for v in sorted(r.reads):
            producers = reach.producers(r, v)
            reached.setdefault(r.index, {})[v] = tuple(p.index for p in producers)
            for p in producers:
                if p.index != r.index:
                    readers[p.index].append(r.index)
    for i in (s.index for s in statements if roles[s.index] == MODULE):
        roles[i] = "actor" if _reaches_env(i, readers, roles) else "learner"
    plain = [s.index for s in statements if roles[s.index] is None]
    need: dict[int, set[str]] = {i: set() for i in plain}
    changed = True
    while changed:  # needs flow backwards through chains of plain statements
        changed = False
        for i in reversed(plain):
            new = set().union(*({roles[r]} if roles[r] else need[r] for r in readers[i]))
            if new != need[i]:
                need[i], changed = new, True
    for i in plain:
        if len(need[i]) < 2 and not isinstance(statements[i].node, ast.Delete):  # `del` goes where its name lives
            roles[i] = next(iter(need[i]), "driver")
    # Needed by several roles: computed with what it reads (latest producer), else its first reader.
    for s in statements:
        if roles[s.index] is None:
            sources = sorted((p for ps in reached.get(s.index, {}).values() for p in ps if roles[p]), reverse=True)
            firsts = [roles[r] for r in readers[s.index] if roles[r]]
            roles[s.index] = roles[sources[0]] if sources else (firsts[0] if firsts else "driver")
    if not any(role_of(namespace[c]) for s in statements for c in s.components):
        _find_buffer(statements, roles)
    return [replace(s, role=roles[s.index]) for s in statements], reached


def _reaches_env(start: int, readers: dict[int, list[int]], roles: dict) -> bool:
    """Whether a network's results reach an environment's ``step`` (through statements of no
    other role): then the call is the actor's."""
    seen, todo = {start}, [start]
    while todo:
        for r in readers[todo.pop()]:
            if roles[r] == "env":
                return True
            if r not in seen and roles[r] in (None, MODULE):
                seen.add(r)
                todo.append(r)
    return False


def _find_buffer(statements: list[Statement], roles: dict) -> None:
    """In a loop of plain objects, statements of the rollout (a loop that steps an environment)
    that only store values for the learner (``obs[step] = next_obs``, ``memory.append(x)``)
    are the buffer. (A fragnb Buffer marks its own.)"""
    rollouts = {s.loop for s in statements if roles[s.index] == "env"}
    for s in statements:
        if s.role == "" and roles[s.index] == "learner" and s.loop in rollouts and stores(s.node):
            roles[s.index] = "buffer"


def _innermost_common(a: Loop | None, b: Loop | None) -> Loop | None:
    while a is not None and not a.encloses(b):
        a = a.parent
    return a
