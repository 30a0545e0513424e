"""Program: a Placement --> what each worker group executes, in order.

The cell's top level and its iteration loop are driven from the notebook; every maximal run of
statements placed in one worker group becomes a *segment* that the group's replicas execute. A
loop whose whole body sits in one group stays inside a segment (a ``coarse`` rollout is one task
per actor); a loop that spans groups is driven too (a ``fine`` rollout synchronises every step).
Pure: no cluster library is imported here. The data it builds (Segment, DrivenLoop, Program, the
frozen tables) is :mod:`fragnb.plan.segments`'s, re-exported here: this module is how a placement
becomes one.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from ..components import modules_of, role_of
from ..errors import FragmentError
from .instrument import DRIVER, instrument, plain_env_steps
from .keys import record_key
from .segments import (
    DrivenLoop,
    Program,
    Segment,
    Table,
    _Draft,
    header_names,
    loop_targets,
    loops_in,
    replaced,
    segments_of,
)
from .values import env_axes, keys_read, kinds, origins

if TYPE_CHECKING:
    from ..graph import FragmentGraph
    from ..policies import Placement

__all__ = ["Segment", "DrivenLoop", "Program", "plan", "replaced", "segments_of", "header_names"]


def plan(placement: Placement, recorded: frozenset[int] = frozenset()) -> Program:
    """The cell as Segments and DrivenLoops, each segment's code instrumented for timing (and the
    ``recorded`` statements, by index, for :mod:`fragnb.plan.recording`).

    A loop whose statements sit in several groups is *split* (loop fission) when its groups depend
    on each other one way only: each group runs the whole loop over its own statements, the
    earlier group recording, at the place of each later group's statement, the values that
    statement reads; the later group replays them in order. A ``coarse`` rollout thus stays one
    task per actor, while the learner side still sees every step as plain Python would (episode
    lists in order, buffer inserts, running sums). Loops whose groups depend on each other both
    ways are driven step by step.
    """
    graph = placement.graph
    stmt_of = {id(s.node): s for s in graph.statements}
    group_of = {s.index: placement.fragments[graph.fragment_of(s).name].group for s in graph.statements}
    owner = graph.owners()  # extended below with the record/replay nodes the split loops add
    segments: list[Segment] = []
    replayed: dict[int, tuple[str, ...]] = {}  # statement index -> variables replayed before it
    helper: dict[int, tuple] = {}  # id(record/replay node) -> (statement it stands for, op, names, key)

    def groups_in(node: ast.stmt) -> set[str]:
        return {group_of[stmt_of[id(n)].index] for n in _leaves(node)}

    def add(items: list, group: str, node: ast.stmt) -> None:
        if not items or not isinstance(items[-1], _Draft) or items[-1].group != group:
            segments.append(_Draft(len(segments), group, []))
            items.append(segments[-1])
        items[-1].nodes.append(node)

    def build(nodes: list[ast.stmt], top: bool) -> list:
        items: list = []
        for node in nodes:
            groups = groups_in(node)
            if isinstance(node, ast.For) and (top or len(groups) > 1):
                _refuse_jumps(node, top, groups_in, graph)
                split = None if top else _fission(node, graph, group_of, stmt_of, placement)
                if split is None:
                    items.append(DrivenLoop(node, build(node.body, False)))
                    continue
                order, crossing = split
                replayed.update(
                    {
                        i if isinstance(i, int) else i[2]: tuple(names)
                        for i, (_, names) in crossing.items()
                        if isinstance(i, int) or i[0] == "before"
                    }
                )
                for g in order:
                    add(items, g, _project(node, g, group_of, stmt_of, crossing, helper))
                continue
            (group,) = groups
            add(items, group, node)
        return items

    items = build(graph.tree.body, True)
    for seg in segments:
        leaves = [stmt_of[id(n)] for node in seg.nodes for n in _leaves(node) if id(n) in stmt_of]
        seg.reads = _outer_reads(seg.nodes, stmt_of, replayed)
        seg.writes = set().union(*(s.writes for s in leaves)) | loop_targets(seg.nodes)
        seg.components = {c for s in leaves for c in s.components}
        seg.statements = {s.index for s in leaves}
        for node in (n for top in seg.nodes for n in _all_nodes(top) if id(n) in helper):
            stmt, op, names, key = helper[id(node)]
            (seg.records if op == "record" else seg.replays)[key] = names
            if op == "record":
                seg.reads |= set(names)
            owner[id(node)] = graph.fragment_of(stmt).name
    items = _regroup(items, graph.namespace)
    segments = segments_of(items)
    for index, seg in enumerate(segments):
        seg.index = index
        leaves = [stmt_of[id(n)] for node in seg.nodes for n in _leaves(node) if id(n) in stmt_of]
        steps = plain_env_steps(graph, leaves, placement.groups[seg.group][0])
        record = {id(s.node): s.index for s in leaves if s.index in recorded}
        seg.module = ast.fix_missing_locations(ast.Module(instrument(seg.nodes, owner, steps=steps, record=record), []))
        compile(seg.module, graph.filename, "exec")  # fail here, not on a worker; tracebacks name cell lines
    for seg in segments:
        seg.exports = {v for v in seg.writes if any(v in other.reads for other in segments if other.group != seg.group)}
        seg.exports |= set(seg.records)
    of_value = kinds(graph)
    frozen = {id(seg): seg.frozen() for seg in segments}

    def freeze(items: list) -> tuple:
        return tuple(DrivenLoop(i.node, freeze(i.body)) if isinstance(i, DrivenLoop) else frozen[id(i)] for i in items)

    return Program(
        freeze(items),
        tuple(frozen[id(seg)] for seg in segments),
        Table(of_value),
        Table(origins(graph)),
        Table(env_axes(graph, of_value)),
    )


def _refuse_jumps(loop: ast.For, top: bool, groups_in, graph: FragmentGraph) -> None:
    """A ``break`` or ``continue`` runs where its whole loop runs; a loop the driver iterates, or
    whose groups run apart, has no one place to jump from."""
    groups = groups_in(loop)
    for inner in (n for n in loop.body if isinstance(n, ast.For) and len(groups_in(n)) > 1):
        _refuse_jumps(inner, False, groups_in, graph)
    for leaf in _leaves_of_body(loop):
        jump = next((n for n in _own_nodes(leaf) if isinstance(n, (ast.Break, ast.Continue))), None)
        if jump is None:
            continue
        word = "break" if isinstance(jump, ast.Break) else "continue"
        if top:
            why = (
                "only `if condition: break` directly in the training loop's body can stop a run (at an iteration's end, "
                "on every replica at once)"
                if word == "break"
                else "write it as `if condition: continue` directly in the loop's body (fragnb turns that into a condition "
                "guarding the rest of the body)"
            )
        else:
            why = (
                f"this inner loop's statements run in groups {sorted(groups)}, which run apart and cannot stop together. "
                "Step every environment together for a fixed number of steps (`for step in range(num_steps):`, "
                "a vectorised rollout: a finished episode resets by itself) and keep episode ends as data (`dones`)"
            )
        raise FragmentError.in_source(
            f"this `{word}` is not supported under a distributed policy: {why} (`single` runs it as plain Python)",
            jump.lineno,
            graph.source,
        )


def _leaves_of_body(loop: ast.For):
    """The leaf statements directly in ``loop`` (not in a loop nested in it)."""
    return [n for n in loop.body if not isinstance(n, ast.For)]


def _own_nodes(node: ast.AST):
    """``node``'s nodes, not descending into loops nested in it (their jumps are theirs), nor into
    ``node`` itself where it is a loop (an inner ``while`` a whole-cell policy keeps in one segment)."""
    yield node
    if isinstance(node, (ast.For, ast.While)):
        return
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, (ast.For, ast.While, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            yield from _own_nodes(child)


def _regroup(items: list, ns: dict) -> list:
    """Move each segment back to the previous segment of its group when nothing between them
    depends on it, and join them: after a split rollout the actors' next statements and the
    learner's replay are independent, so each group gets one task per iteration, not two."""
    out: list = []
    for item in items:
        if isinstance(item, DrivenLoop):
            out.append(DrivenLoop(item.node, _regroup(item.body, ns)))
            continue
        j = len(out) - 1
        while j >= 0 and isinstance(out[j], _Draft) and out[j].group != item.group and _independent(out[j], item, ns):
            j -= 1
        if j >= 0 and isinstance(out[j], _Draft) and out[j].group == item.group:
            into = out[j]
            into.nodes += item.nodes
            into.reads |= item.reads
            into.writes |= item.writes
            into.components |= item.components
            into.statements |= item.statements
            into.records.update(item.records)
            into.replays.update(item.replays)
        else:
            out.append(item)
    return out


def _independent(earlier: Segment, later: Segment, ns: dict) -> bool:
    def modules(seg: Segment) -> set[int]:
        return {id(v) for c in seg.components for v in modules_of(ns[c]).values()}

    return not (
        earlier.writes & later.reads
        or later.writes & earlier.reads
        or earlier.writes & later.writes
        or set(earlier.records) & set(later.replays)
        or modules(earlier) & modules(later)
    )


def _fission(loop: ast.For, graph: FragmentGraph, group_of: dict, stmt_of: dict, placement: Placement):
    """(groups in run order, {statement index: (sending group, variables)}) if ``loop`` can be split
    per group, else ``None``."""
    inside = {stmt_of[id(n)].index for n in _leaves(loop)}
    edges: set[tuple[str, str]] = set()
    crossing: dict = {}  # statement index or ("loop", id of an inner loop) -> (sending group, variables)
    for inner in loops_in(loop.body):  # an inner loop's header is evaluated by every group with statements in it
        groups = {group_of[stmt_of[id(n)].index] for n in _leaves(inner)}
        for var in sorted({n.id for n in ast.walk(inner.iter) if isinstance(n, ast.Name)}):
            senders = {group_of[i] for i in inside if var in graph.statements[i].writes}
            if len(senders) > 1:
                return None
            for sender in senders - groups if len(groups) == 1 else senders:  # a group's own values need no record
                edges |= {(sender, g) for g in groups if g != sender}
                if crossing.setdefault(("loop", id(inner)), (sender, []))[0] != sender:
                    return None  # values of two groups in one header
                crossing[("loop", id(inner))][1].append(var)
    for i in sorted(inside):
        g = group_of[i]
        for var, producers in graph.reach.get(i, {}).items():
            others = {group_of[p] for p in producers if p in inside and group_of[p] != g}
            if not others:
                continue
            senders = {group_of[p] for p in producers}
            if len(senders) > 1:
                return None  # the value comes from this group at times, from another at others
            (sender,) = senders
            edges.add((sender, g))
            crossing.setdefault(i, (sender, []))[1].append(var)
    for i, (sender, names) in list(crossing.items()):
        if (
            isinstance(i, int)
            and (outer := _hoist(loop, graph.statements[i].node, sender, set(names), group_of, stmt_of)) is not None
        ):
            crossing[("before", id(outer), i)] = crossing.pop(i)
    edges |= _weight_flows(loop, graph, group_of, stmt_of)
    groups = list(dict.fromkeys(group_of[i] for i in sorted(inside)))
    order: list[str] = []
    while len(order) < len(groups):  # topological order, stable by first appearance
        ready = [
            g for g in groups if g not in order and not any(a not in order and b == g and a != g for a, b in edges)
        ]
        if not ready:
            return None  # the groups depend on each other both ways: drive the loop step by step
        order.append(ready[0])
    return order, crossing


def _hoist(
    loop: ast.For, node: ast.stmt, sender: str, names: set[str], group_of: dict, stmt_of: dict
) -> ast.For | None:
    """The outermost loop nested in ``loop`` around ``node`` inside which ``sender`` does not change
    ``names``: recorded once before it, they need not make the sender run that loop too (a rollout's
    `for i in np.nonzero(infos["_episode"])[0]: writer.append(...)` on the learner's side)."""
    path, body = [], loop.body
    while True:
        inner = next((n for n in body if isinstance(n, ast.For) and any(leaf is node for leaf in _leaves(n))), None)
        if inner is None:
            break
        path.append(inner)
        body = inner.body
    for inner in path:
        bound = loop_targets([inner])
        written = {v for n in _leaves(inner) if group_of[stmt_of[id(n)].index] == sender for v in stmt_of[id(n)].writes}
        if not names & (bound | written):
            return inner
    return None


def _weight_flows(loop: ast.For, graph: FragmentGraph, group_of: dict, stmt_of: dict) -> set[tuple[str, str]]:
    """Within ``loop``, a learner whose network another group's component holds sends it weights."""
    used: dict[str, set[str]] = {}
    for n in _leaves(loop):
        s = stmt_of[id(n)]
        used.setdefault(group_of[s.index], set()).update(s.components)
    modules = {g: {id(v) for c in comps for v in modules_of(graph.namespace[c]).values()} for g, comps in used.items()}
    flows = set()
    for g, comps in used.items():
        if any(role_of(graph.namespace[c]) == "learner" for c in comps):
            flows |= {(g, h) for h in used if h != g and modules[g] & modules[h]}
    return flows


def _project(loop: ast.For, group: str, group_of: dict, stmt_of: dict, crossing: dict, helper: dict) -> ast.For:
    """``loop`` with only ``group``'s statements; at the place of another group's statement that
    reads this group's values, a record of them; before one of this group's that reads another's,
    their replay."""

    by_index = {s.index: s for s in stmt_of.values()}

    def call(method: str, *args) -> ast.stmt:
        return ast.Expr(
            ast.Call(
                ast.Attribute(ast.Name(DRIVER, ast.Load()), method, ast.Load()), [ast.Constant(a) for a in args], []
            )
        )

    # A dict that every reader in the loop reads only by constant keys is recorded cut to them; one reader
    # reading it otherwise keeps it whole: the replays of one name overwrite it, so each carries them all.
    readers = {id(n): n.iter for n in ast.walk(loop) if isinstance(n, ast.For)}
    keys: dict[str, set[str] | None] = {}
    for place, (_, names) in crossing.items():
        if isinstance(place, int):
            reader = by_index[place].node
        else:
            reader = by_index[place[2]].node if place[0] == "before" else readers[place[1]]
        read = dict(keys_read(reader, names))
        for name in names:
            whole = name not in read or (name in keys and keys[name] is None)
            keys[name] = None if whole else {*keys.get(name, ()), *read[name]}

    def record(place: str, names) -> ast.stmt:
        cut = tuple((n, tuple(sorted(keys[n]))) for n in names if keys.get(n))
        return call("record", place, tuple(names), *((cut,) if cut else ()))

    def project(nodes: list[ast.stmt]) -> list[ast.stmt]:
        out = []
        for node in nodes:
            if isinstance(node, ast.For):
                for key, (sender, names) in crossing.items():  # values recorded once before the loop, not in it
                    if isinstance(key, tuple) and key[0] == "before" and key[1] == id(node):
                        s = by_index[key[2]]
                        op = "replay" if group_of[s.index] == group else "record" if sender == group else None
                        if op:
                            out.append(
                                ast.copy_location(
                                    call(op, str(record_key(s.index)))
                                    if op == "replay"
                                    else record(str(record_key(s.index)), names),
                                    node,
                                )
                            )
                            helper[id(out[-1])] = (s, op, tuple(names), record_key(s.index))
                body = project(node.body)
                sender, names = crossing.get(("loop", id(node)), (None, ()))
                first = stmt_of[id(next(_leaves(node)))]
                if sender == group:
                    out.append(ast.copy_location(record(str(record_key(f"L{node.lineno}")), names), node))
                    helper[id(out[-1])] = (first, "record", tuple(names), record_key(f"L{node.lineno}"))
                elif names and body:
                    out.append(ast.copy_location(call("replay", str(record_key(f"L{node.lineno}"))), node))
                    helper[id(out[-1])] = (first, "replay", tuple(names), record_key(f"L{node.lineno}"))
                if body:
                    out.append(ast.copy_location(ast.For(node.target, node.iter, body, [], None), node))
                continue
            s = stmt_of[id(node)]
            sender, names = crossing.get(s.index, (None, ()))
            if group_of[s.index] == group:
                if names:
                    out.append(ast.copy_location(call("replay", str(record_key(s.index))), node))
                    helper[id(out[-1])] = (s, "replay", tuple(names), record_key(s.index))
                out.append(node)
            elif sender == group:
                out.append(ast.copy_location(record(str(record_key(s.index)), names), node))
                helper[id(out[-1])] = (s, "record", tuple(names), record_key(s.index))
        return out

    return ast.copy_location(ast.For(loop.target, loop.iter, project(loop.body), [], None), loop)


def _leaves(node: ast.stmt):
    if isinstance(node, ast.For):
        for child in node.body:
            yield from _leaves(child)
    else:
        yield node


def _all_nodes(node: ast.stmt):
    yield node
    if isinstance(node, ast.For):
        for child in node.body:
            yield from _all_nodes(child)


def _outer_reads(nodes: list[ast.stmt], stmt_of: dict, replayed: dict) -> set[str]:
    """What a segment's statements and loop headers read from outside it: less what a replay gives a
    statement, less what a loop of the segment binds around it, and less what an assignment of the segment
    has bound before it in every way to it. A rollout's `for step in ...` split between groups binds `step`
    in each group's own copy; read as another group's value, it made the actors wait for the learner's
    `step` (or ``async`` refuse the loop). A rollout that assigns `action` before storing it reads no
    `action` from the learner that last assigned one: received, it crossed no edge the placement draws."""
    out: set[str] = set()

    def visit(body: list[ast.stmt], bound: frozenset[str]) -> None:
        bound = set(bound)
        for node in body:
            if isinstance(node, ast.For):
                out.update({n.id for n in ast.walk(node.iter) if isinstance(n, ast.Name)} - bound)
                # a loop may run no time: what its body binds is bound inside it only
                visit(node.body, frozenset(bound | {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}))
            elif id(node) in stmt_of:
                s = stmt_of[id(node)]
                out.update(s.reads - set(replayed.get(s.index, ())) - bound)
                # statements of one body run in order, or jump out of it: an assignment binds for those after it
                # (a compound statement, `if` or `with`, may bind in one way through it only)
                if isinstance(node, (ast.Assign, ast.AugAssign)) or (isinstance(node, ast.AnnAssign) and node.value):
                    bound |= s.writes

    visit(nodes, frozenset())
    return out
