"""What a decoupled policy (``async``, ``srl``) cannot run, refused before any worker starts.

Free groups do not wait for the learner inside the loop, so they may take nothing from it but
weights; the walk itself is :mod:`fragnb.runtime.worker.free`.
"""

from __future__ import annotations

import ast
from dataclasses import replace

from ..errors import FragmentError
from .instrument import DRIVER
from .segments import DrivenLoop, Program, header_names, replaced, segments_of

__all__ = ["refuse", "sample_ahead"]


def refuse(placement, program: Program) -> None:
    """Raise FragmentError, before any worker starts, for a loop a decoupled policy cannot run: free
    groups may take nothing but weights from the learner inside the loop, since they do not wait for it."""
    graph = placement.graph
    policy = placement.policy.name
    loop = next((i for i in program.items if isinstance(i, DrivenLoop)), None)

    def error(message: str, lineno: int) -> FragmentError:
        return FragmentError.in_source(message, lineno, graph.source)

    if loop is None:
        raise FragmentError(f"policy {policy!r} needs an iteration loop (`for it in range(n):`) around the cell's work")
    if not (
        isinstance(loop.node.iter, ast.Call)
        and isinstance(loop.node.iter.func, ast.Name)
        and loop.node.iter.func.id == "range"
    ):
        raise error(
            f"policy {policy!r} runs the actors free of the learner, each counting its own iterations: the "
            "iteration loop must be `for NAME in range(...)`",
            loop.node.lineno,
        )
    if graph.stop_flags:
        raise error(
            f"policy {policy!r} runs the actors free of the learner: a loop that ends on its own condition (`break`, "
            "`while`) would need every actor to wait for it each iteration. Use a stop condition instead "
            "(fragnb.run(..., until=...) or --until-return), or a synchronous policy such as 'coarse' or 'data_parallel'",
            loop.node.lineno,
        )
    home = placement.home
    if placement.groups[home][0] != 1:
        raise FragmentError(f"policy {policy!r} needs one learner replica")
    inside = segments_of(loop.body)
    written = {v: s for s in inside if s.group == home for v in s.writes}

    def last_writer(at: int, name: str):
        """The segment that assigned ``name`` last when ``inside[at]`` runs, as every replica's walk records it
        (:class:`fragnb.runtime.worker.machine.Holdings`): the one before it in the iteration, else the last of the
        iteration before (None: none inside the loop). `srl`'s environments read the `action` the policy workers
        assign just before, every step, whatever the learner rebinds the name to afterwards."""
        earlier = [inside[j] for j in range(at)][::-1] + [inside[j] for j in range(at + 1, len(inside))][::-1]
        return next((seg for seg in earlier if name in seg.writes), None)

    for at, seg in enumerate(inside):
        if seg.group == home:
            continue
        names = {n for n in seg.reads & written.keys() if (w := last_writer(at, n)) is not None and w.group == home}
        names |= header_names(loop.body) & written.keys()
        if names:
            name = sorted(names)[0]
            line = _first(seg, name, ast.Load)
            writer = last_writer(at, name) or written[name]
            raise error(
                f"under {policy!r} the {seg.group} run free of the learner, but this line reads `{name}`, which the "
                f"learner's side assigns inside the loop ({writer.group!r}, line {_first(writer, name, ast.Store)}): "
                "they would have to wait for it every iteration. Only the weights travel that way; compute "
                f"`{name}` on the {seg.group}' side, or use a synchronous policy: 'coarse', or 'data_parallel', "
                "which runs any loop with an optimiser whole in each replica",
                line,
            )
    after = program.items[program.items.index(loop) + 1 :]
    for seg in segments_of(after):
        if seg.group != home or seg.reads & {v for s in program.segments if s.group != home for v in s.writes}:
            raise error(
                f"under {policy!r} the actors stop wherever they are when the learner ends the run, so statements "
                "after the loop may only use what the learner's side holds; move this line into the loop or "
                "run it in a cell of its own afterwards",
                seg.nodes[0].lineno,
            )


def _first(seg, name: str, ctx: type) -> int:
    """The line where ``seg`` first reads (``ast.Load``) or binds (``ast.Store``) ``name``, else its first line."""
    found = (n.lineno for node in seg.nodes for n in ast.walk(node) if isinstance(n, ast.Name) and n.id == name)
    typed = (
        n.lineno
        for node in seg.nodes
        for n in ast.walk(node)
        if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ctx)
    )
    return next(typed, next(found, seg.nodes[0].lineno))


def sample_ahead(placement, program: Program) -> tuple[Program, str]:
    """``samples_per_insert`` (async): let the learner sample its replay buffer while no trajectory has
    arrived, as Ape-X's learner does, within the bound. Each of the learner's segments in the iteration loop
    gets an *ahead* variant (``Segment.ahead``): itself without the statements that take the actors'
    trajectories (the replayed inserts, and what reads the actors' values). Returns the program with them,
    and the replay buffer whose ``inserted`` and ``sampled`` counts the bound is checked on. Refused before any worker starts where an
    iteration without a trajectory would not be the loop's updates on the replay: the updates read a value
    that only comes with a trajectory, or the learner holds no buffer that counts."""
    graph = placement.graph
    home, policy = placement.home, placement.policy.name
    bound = placement.params["samples_per_insert"]
    loop = next(i for i in program.items if isinstance(i, DrivenLoop))
    inside = segments_of(loop.body)
    from_actors = {v for s in inside if s.group != home for v in s.writes}
    ns = graph.namespace
    counted = sorted(
        c
        for s in inside
        if s.group == home
        for c in s.components
        if hasattr(ns.get(c), "inserted") and hasattr(ns.get(c), "sampled")
    )
    if not counted:
        raise FragmentError(
            f"policy {policy!r} with samples_per_insert={bound!r} bounds how often the learner samples its replay "
            "buffer per transition inserted, so the learner's side must hold a buffer that counts both "
            "(`inserted` and `sampled`, as fragnb.algos.dqn.ReplayBuffer does); this loop's learner holds none. "
            "Leave samples_per_insert out: each learner iteration then takes one trajectory per actor"
        )

    why = (
        f"under {policy!r} with samples_per_insert the learner may run an iteration's updates before a new "
        "trajectory arrives, sampling its replay buffer alone; "
    )

    def loads(node: ast.AST) -> list[ast.Name]:
        return [n for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]

    def calls(node: ast.AST) -> list[tuple[str, str]]:
        return [
            (n.func.value.id, n.func.attr)
            for n in ast.walk(node)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)
        ]

    learning = {c for c, role in graph.components.items() if role in ("learner", "buffer")}

    def takes(node: ast.stmt) -> bool:
        """Whether ``node`` takes the actors' trajectories: their inserts replayed, or the bookkeeping of what
        they send (refused if it also learns: without a trajectory it would silently not run)."""
        if (DRIVER, "replay") in calls(node):
            return True
        late = next((n for n in loads(node) if n.id in from_actors), None)
        if late is None:
            return False
        trains = sorted((graph.components[c] != "learner", f"{c}.{m}") for c, m in calls(node) if c in learning)
        learns = trains[0][1] if trains else None  # the learner's own call first: it is what would not run
        if learns:
            raise FragmentError.in_source(
                f"{why}this line reads `{late.id}`, which comes "
                f"with the actors' trajectories, where the learner trains (`{learns}`): without a trajectory it "
                "would not run, and the updates would differ from the loop's. Count on the learner's side (the "
                "loop's `it`, or `learner.updates`) instead, or leave samples_per_insert out",
                late.lineno,
                graph.source,
            )
        return True

    samples, ahead = False, {}
    for seg in inside:
        if seg.group != home:
            continue
        taken = [node for node in seg.module.body if takes(node)]
        if not taken:
            continue
        kept = [node for node in seg.module.body if node not in taken]
        assigned = {
            n.id for node in taken for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
        }
        for node in kept:
            late = next((n for n in loads(node) if n.id in assigned), None)
            if late is not None:
                raise FragmentError.in_source(
                    f"{why}this line reads `{late.id}`, which "
                    "only the part that takes the actors' trajectories assigns: it would read the last "
                    f"trajectory's `{late.id}` again. Let the updates read the replay buffer "
                    f"({', '.join(f'`{c}`' for c in counted)}) and the learner's own objects, or leave samples_per_insert out",
                    late.lineno,
                    graph.source,
                )
        ahead[seg.index] = replace(seg, ahead=ast.fix_missing_locations(ast.Module(kept, [])))
        samples |= any(n.id in counted for node in kept for n in loads(node))
    if not samples:
        raise FragmentError(
            f"policy {policy!r} with samples_per_insert={bound!r}: this loop's learner trains only on what the "
            "actors send, not on a replay buffer it samples, so an iteration without a new trajectory has nothing to "
            "learn from (on-policy data is used once). Leave samples_per_insert out"
        )
    return replaced(program, ahead), counted[0]
