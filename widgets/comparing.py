"""The "Compare two" tab: two policies' placements side by side, and a table of what each costs and
what it is predicted to give.
"""

from __future__ import annotations

import html
from collections.abc import Callable

import ipywidgets as W

from fragnb import policies
from fragnb.policies import DistributionPolicy, choices

from .showing import error, size, total

__all__ = ["Comparison", "compared_params", "comparison_table"]

#: The comparison table's rows, in order.
FACTS = (
    "parameters",
    "worker groups",
    "processes",
    "edges crossing",
    "bytes/iteration",
    "predicted env steps/s",
    "predicted bottleneck",
    "mirrors",
    "trade-off",
)


class Comparison:
    """Two policy dropdowns, their placements drawn side by side, and the table comparing them.

    Parameters
    ----------
    graph : FragmentGraph
        The loop the explorer places.
    place, draw : callable
        ``place(policy, **params)`` and ``draw(placement)``, as the explorer places and draws.
    predict : callable
        ``predict(placement)``: the chosen preset's prediction, or None without a profile.
    chosen : callable
        The user's parameter choices (a dict), which each side takes where its policy has them.
    """

    def __init__(self, graph, place: Callable, draw: Callable[..., str], predict: Callable, chosen: Callable[[], dict]):
        self.graph = graph
        self._place, self._draw, self._predict, self._chosen = place, draw, predict, chosen
        names = sorted(policies.POLICIES)
        self.left = W.Dropdown(description="compare", options=names, value="coarse" if "coarse" in names else names[0])
        self.right = W.Dropdown(description="with", options=names, value="fine" if "fine" in names else names[-1])
        self.left_drawing = W.HTML(layout=W.Layout(width="50%")).add_class("fragnb-drawing")
        self.right_drawing = W.HTML(layout=W.Layout(width="50%")).add_class("fragnb-drawing")
        self.table = W.HTML().add_class("fragnb-traffic")
        self.tab = W.VBox(
            [W.HBox([self.left, self.right]), W.HBox([self.left_drawing, self.right_drawing]), self.table]
        )
        self.left.observe(lambda _: self.show(), "value")
        self.right.observe(lambda _: self.show(), "value")

    def show(self) -> None:
        """Place and draw both chosen policies, and compare them in the table."""
        placed = []
        for dropdown, out in ((self.left, self.left_drawing), (self.right, self.right_drawing)):
            policy = policies.resolve(dropdown.value)
            try:
                placement = self._place(policy, **compared_params(self.graph, policy, self._chosen()))
            except ValueError as e:
                out.value = error(e)
                placed.append(None)
            else:
                out.value = self._draw(placement)
                placed.append(placement)
        self.table.value = comparison_table(*placed, predictions=[p and self._predict(p) for p in placed])


def compared_params(graph, policy: DistributionPolicy, chosen: dict) -> dict:
    """The user's choices (``chosen``) where the policy takes them; otherwise 2 replicas where that
    fits, so that both sides show something distributed."""
    params = {}
    for name, default in policy.parameters.items():
        if name in chosen and chosen[name] in choices(graph, policy, name, **params):
            params[name] = chosen[name]
        elif isinstance(default, int) and name not in policy.options and 2 in choices(graph, policy, name, **params):
            params[name] = 2
    return params


def comparison_table(*placements, predictions=(None, None)) -> str:
    """Two placements (None: a policy that cannot place the loop) side by side, with their predictions."""
    left, right = (_facts(p, guess) for p, guess in zip(placements, predictions))
    names = [p.policy.name if p else "?" for p in placements]
    rows = "".join(
        f"<tr><th>{k}</th><td>{html.escape(left[k])}</td><td>{html.escape(right[k])}</td></tr>" for k in left
    )
    return f"<table><tr><th></th><th>{html.escape(names[0])}</th><th>{html.escape(names[1])}</th></tr>{rows}</table>"


def _facts(p, guess) -> dict[str, str]:
    """A column of the table: :data:`FACTS` for placement ``p`` with its prediction ``guess``."""
    if p is None:
        return dict.fromkeys(FACTS, "cannot place this loop")
    groups = ", ".join(f"{g} x{n}" for g, (n, _) in p.groups.items())
    processes = sum(n // p.colocated.get(g, 1) for g, (n, _) in p.groups.items())
    operators = sorted({e.operator for e, _ in p.traffic()})
    extra = " + all-reduce" if p.averaged else ""
    return {
        "parameters": ", ".join(f"{k}={v}" for k, v in p.params.items()) or "none",
        "worker groups": groups,
        "processes": str(processes),
        "edges crossing": f"{len(p.traffic())} ({', '.join(operators) or 'none'})",
        "bytes/iteration": size(total(p)) + extra,
        "predicted env steps/s": f"{guess.env_steps_per_s:,.0f} on {guess.cluster}" if guess else "no profile",
        "predicted bottleneck": guess.bottleneck if guess else "no profile",
        "mirrors": p.policy.mirrors,
        "trade-off": p.policy.tradeoff,
    }
