"""Render: fragment graphs as graphviz digraphs, shown as SVG in a notebook.

Without the ``dot`` binary a graph shows its DOT source and a one-line hint instead of failing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import graphviz

from ..text import workers

if TYPE_CHECKING:  # graphs and placements draw themselves through this module, so it cannot import them
    from ..graph import FragmentGraph, Loop
    from ..policies import Placement

__all__ = ["ROLE_COLORS", "render_graph", "render_placement", "svg", "mimebundle", "DOT_MISSING_HINT"]

ROLE_COLORS = {
    "env": "#c7e9c0",
    "actor": "#c6dbef",
    "buffer": "#fee391",
    "learner": "#fcbba1",
    "driver": "#e0e0e0",
}
DOT_MISSING_HINT = (
    "(graphviz's `dot` program is not installed, so here is the graph's DOT source; "
    "install it with `apt-get install graphviz` or `conda install graphviz` to see the drawing)"
)


#: Largest drawing, in inches: graphviz scales anything wider down, so that a placement fits
#: JupyterLab's output area (about 900 px beside its file browser), which shows SVG as an image at its own size.
FIT = "9,12"


def render_graph(graph: FragmentGraph) -> graphviz.Digraph:
    """Draw fragments as boxes coloured by role, loops as nested clusters, edges labelled with variables."""
    dot = graphviz.Digraph(
        name=graph.name,
        graph_attr={
            "rankdir": "TB",
            "fontname": "Helvetica",
            "label": f"%%fragment {graph.name}" + (f"\nthe loop of {graph.read_from}" if graph.read_from else ""),
            "labelloc": "t",
            "size": FIT,
        },
    )
    dot.attr("node", shape="box", style="rounded,filled", fontname="Helvetica", fontsize="11")
    dot.attr("edge", fontname="Helvetica", fontsize="9")

    def add_fragments(into: graphviz.Digraph, loop: Loop | None) -> None:
        for frag in graph.fragments:
            if frag.loop is loop:
                code = "\\l".join(_escape(s.source.splitlines()[0]) for s in frag.statements) + "\\l"
                into.node(frag.name, f"{frag.name}\\n{code}", fillcolor=ROLE_COLORS.get(frag.role, "#ffffff"))
        for child in graph.loops:
            if child.parent is loop:
                with into.subgraph(name=f"cluster_{child.var}") as sub:
                    sub.attr(label=child.header, style="dashed", fontname="Helvetica", fontsize="10", labeljust="l")
                    add_fragments(sub, child)

    add_fragments(dot, None)
    for edge in graph.edges:
        if edge.kind == "state":
            dot.edge(edge.src, edge.dst, label=edge.label, style="dashed", color="#7f7f7f", fontcolor="#7f7f7f")
        else:
            dot.edge(edge.src, edge.dst, label=_variables(graph, edge.variables))
    return dot


def render_placement(placement: Placement) -> graphviz.Digraph:
    """Draw one cluster per worker group (replicas x device), fragments inside, edges as operators."""
    graph = placement.graph
    title = f"{graph.name} under {placement.policy.name!r}"
    dot = graphviz.Digraph(
        name=f"{graph.name}_{placement.policy.name}",
        graph_attr={"fontname": "Helvetica", "label": title, "labelloc": "t", "size": FIT},
    )
    dot.attr("node", shape="box", style="rounded,filled", fontname="Helvetica", fontsize="11")
    dot.attr("edge", fontname="Helvetica", fontsize="9")
    for group, (replicas, device) in placement.groups.items():
        with dot.subgraph(name=f"cluster_{group}") as sub:
            ring = placement.colocated.get(group)
            count = f"{workers(replicas // ring)} x ring {ring}" if ring else f"x{replicas}"
            sub.attr(
                label=f"{group}  {count}  ({device})",
                style="rounded" + (",bold" if replicas > 1 else ""),
                fontname="Helvetica",
                fontsize="10",
            )
            for frag in graph.fragments:
                if placement.fragments[frag.name].group == group:
                    sub.node(frag.name, frag.name, fillcolor=ROLE_COLORS.get(frag.role, "#ffffff"))
    for edge in placement.edges:
        crossing = edge.operator.crosses
        names = _variables(graph, edge.variables)
        dot.edge(
            edge.src,
            edge.dst,
            label=edge.labelled(names) if crossing else names,
            style="dashed" if edge.kind == "state" else "solid",
            penwidth="2" if crossing else "1",
            color="#b2182b" if crossing else "#7f7f7f",
        )
    # the policy's words for its all-reduce, where the placement's transfers average gradients
    collectives = placement.policy.collectives if placement.averaged else ()
    for i, note in enumerate([*collectives, *placement.notes]):
        dot.node(f"note_{i}", note, shape="note", style="", fontsize="9")
    return dot


def _variables(graph: FragmentGraph, names: tuple[str, ...]) -> str:
    return _escape(graph.describe(names))


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def svg(dot: graphviz.Digraph) -> str | None:
    """The drawing as SVG (without the XML prolog, so that it also sits inside HTML), or ``None``
    when graphviz's ``dot`` program is missing."""
    try:
        drawn = dot.pipe(format="svg", encoding="utf-8")
    except graphviz.ExecutableNotFound:
        return None
    return drawn[drawn.index("<svg") :]


def mimebundle(dot: graphviz.Digraph, include=None, exclude=None) -> dict:
    """What a notebook shows for a graph: SVG, or the DOT source and a hint when ``dot`` is missing."""
    drawn = svg(dot)
    return {"text/plain": f"{DOT_MISSING_HINT}\n{dot.source}"} if drawn is None else {"image/svg+xml": drawn}
