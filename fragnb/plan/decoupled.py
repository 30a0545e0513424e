"""What a decoupled policy (``async``, ``srl``) cannot run, refused before any worker starts.

Free groups do not wait for the learner inside the loop, so they may take nothing from it but
weights; the walk itself is :mod:`fragnb.runtime.worker.free`.
"""

from __future__ import annotations

import ast

from ..errors import FragmentError
from .program import DrivenLoop, Program, header_names, segments_of

__all__ = ["refuse"]


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
    for seg in inside:
        if seg.group == home:
            continue
        names = (seg.reads | header_names(loop.body)) & written.keys()
        if names:
            name = sorted(names)[0]
            line = next(
                (n.lineno for n in seg.nodes for x in ast.walk(n) if isinstance(x, ast.Name) and x.id == name),
                seg.nodes[0].lineno,
            )
            raise error(
                f"under {policy!r} the {seg.group} run free of the learner, but this line reads `{name}`, which the "
                f"learner's side assigns inside the loop ({written[name].group!r}, line {written[name].nodes[0].lineno}): "
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
