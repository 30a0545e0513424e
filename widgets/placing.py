"""The "Place and run" tab's policy controls, and the placement they show: the policy's summary, its
drawing and the table of what crosses between processes.

Each parameter's dropdown offers only the values :func:`fragnb.policies.choices` says ``place``
accepts given the other parameters, so the explorer never offers a placement that fails. Under them,
one dropdown per crossing edge that may take another operator (:meth:`fragnb.policies.Placement.operators`),
and the staleness bound a versioned pull or a stream takes (:mod:`fragnb.policies.relaxing`).
"""

from __future__ import annotations

import html
from collections.abc import Callable

import ipywidgets as W

from fragnb import policies
from fragnb.policies import DistributionPolicy, Operator, choices, relaxing

from .showing import error, size, total

__all__ = ["PolicyControls", "traffic_table", "BOUNDS"]

#: The staleness bounds the explorer offers a relaxed edge (versions of the weights behind the learner).
BOUNDS = (0, 1, 2, 4)


class PolicyControls:
    """The policy dropdown, one dropdown per parameter of the chosen policy, and the placement they give.

    Parameters
    ----------
    graph : FragmentGraph
        The loop the explorer places.
    policy : str or DistributionPolicy
        The policy shown first.
    params : dict
        The user's choices, kept across policies (a policy's controls start from them).
    place : callable
        ``place(policy, **params)``: the placement, as the explorer labels it.
    draw : callable
        ``draw(placement)``: its drawing, as HTML.
    changed : callable
        Called (without arguments) after the user changes the policy or a parameter.
    """

    def __init__(
        self,
        graph,
        policy,
        params: dict,
        place: Callable,
        draw: Callable[..., str],
        changed: Callable[[], None],
    ):
        self.graph = graph
        self.params = params
        self._place, self._draw, self._changed = place, draw, changed
        self._quiet = False  # set while controls are rebuilt, so their events do not redraw
        self.policy = W.Dropdown(
            description="policy", options=sorted(policies.POLICIES), value=policies.resolve(policy).name
        )
        self.controls = W.HBox()
        self.edges = W.HBox().add_class("fragnb-edges")  # one dropdown per crossing edge that may be relaxed, a bound
        self.bound = W.Dropdown(description="bound", options=BOUNDS, value=1, layout=W.Layout(width="max-content"))
        self.bound.observe(lambda _: self._edge_changed(), "value")
        self._labels: dict[str, str] = {}  # edge dropdown's description -> the label place(edges=...) takes
        self.summary = W.HTML().add_class("fragnb-summary")
        self.drawing = W.HTML().add_class("fragnb-drawing")
        self.traffic = W.HTML().add_class("fragnb-traffic")
        self.policy.observe(lambda _: self.policy_changed(), "value")

    def select(self, policy: str, **params) -> None:
        """Show ``policy`` with ``params`` (as the controls would)."""
        self.params.update(params)
        if self.policy.value == policy:
            self.policy_changed()
        else:
            self.policy.value = policy

    def current(self) -> tuple[DistributionPolicy, dict]:
        """The chosen policy and the parameters the controls give it (``edges``: the edges chosen otherwise
        than the policy moves them)."""
        policy = policies.resolve(self.policy.value)
        params = {k: self.params[k] for k in policy.parameters if k in self.params}
        edges = {}
        for control in self.edges.children:
            if control is self.bound or control.value == control.options[0]:
                continue
            bounded = Operator(control.value).bounded
            edges[self._labels[control.description]] = (control.value, self.bound.value) if bounded else control.value
        return policy, ({**params, "edges": edges} if edges else params)

    def policy_changed(self) -> None:
        """One dropdown per parameter of the chosen policy, offering what fits; then :attr:`changed`."""
        policy = policies.resolve(self.policy.value)
        self._quiet = True
        try:
            controls = []
            for name in policy.parameters:
                control = W.Dropdown(description=name.replace("_", " "), layout=W.Layout(width="max-content"))
                control.observe(lambda change, name=name: self._param_changed(name, change["new"]), "value")
                controls.append(control)
            self.controls.children = controls
            self._fit_controls(policy)
            self._edge_controls(policy)
        finally:
            self._quiet = False
        self._changed()

    def _edge_controls(self, policy: DistributionPolicy) -> None:
        """A dropdown per crossing edge of the chosen placement that may take another operator, its own first."""
        try:
            placement = self.graph.place(policy, **{k: self.params[k] for k in policy.parameters if k in self.params})
        except (TypeError, ValueError):  # the drawing says why
            self.edges.children = ()
            return
        controls, self._labels = [], {}
        given = {  # what explore(..., edges=...) asked for, by transfer
            relaxing.transfer_named(placement, label).key: choice if isinstance(choice, tuple) else (choice, None)
            for label, choice in (self.params.pop("edges", None) or {}).items()
        }
        for label, transfer in relaxing.labels(placement).items():
            operators = placement.operators(label)
            where = f"{transfer.src} → {transfer.dst}"
            if len(operators) < 2 or where in self._labels:
                continue
            self._labels[where] = label
            operator, bound = given.get(transfer.key, (operators[0], None))
            operator = Operator.named(operator)
            if bound is not None and bound in BOUNDS:
                self.bound.value = bound
            control = W.Dropdown(
                description=where,
                options=operators,
                value=operator if operator in operators else operators[0],
                tooltip=f"{', '.join(transfer.carries)}: {' or '.join(operators)}",
                layout=W.Layout(width="max-content"),
                style={"description_width": "initial"},
            )
            control.observe(lambda _: self._edge_changed(), "value")
            controls.append(control)
        self.edges.children = (*controls, self.bound) if controls else ()
        self._show_bound()

    def _show_bound(self) -> None:
        """The bound, where an edge is relaxed from the policy's own operator to one that takes it (under
        async, whose edges are relaxed already, its own max staleness control is the bound)."""
        bounded = any(
            c.value != c.options[0] and Operator(c.value).bounded for c in self.edges.children if c is not self.bound
        )
        self.bound.layout.display = "" if bounded else "none"

    def _edge_changed(self) -> None:
        if self._quiet:
            return
        self._show_bound()
        self._changed()

    def _param_changed(self, name: str, value) -> None:
        if self._quiet:
            return
        self.params[name] = value
        self._quiet = True
        try:
            self._fit_controls(policies.resolve(self.policy.value))  # e.g. srl: the rings that fit these actors
        finally:
            self._quiet = False
        self._changed()

    def _fit_controls(self, policy: DistributionPolicy) -> None:
        """Offer each parameter the values ``place`` accepts given the others; keep the user's where it fits."""
        for control, name in zip(self.controls.children, policy.parameters):
            others = {k: v for k, v in self.current()[1].items() if k not in (name, "edges")}
            fits = choices(self.graph, policy, name, **others) or [policy.parameters[name]]
            value = self.params.get(name, policy.parameters[name])
            control.options = fits
            control.value = value if value in fits else fits[0]
            self.params[name] = control.value

    def show(self):
        """Show the chosen placement: the policy's summary, its drawing and its traffic.

        Returns
        -------
        Placement or None
            The placement shown; None where the policy cannot place this loop (its drawing says why).
        """
        policy, params = self.current()
        lines = [
            f"<b>{html.escape(policy.name)}</b> mirrors {html.escape(policy.mirrors)}: {html.escape(policy.description)}."
        ]
        if policy.tradeoff:
            lines.append(f"<span class='fragnb-tradeoff'>Trade-off: {html.escape(policy.tradeoff)}.</span>")
        self.summary.value = "<br>".join(lines)
        try:
            placement = self._place(policy, **params)
        except ValueError as e:  # a policy that cannot place this loop: say why
            self.drawing.value = error(e)
            self.traffic.value = ""
            return None
        self.drawing.value = self._draw(placement)
        self.traffic.value = traffic_table(placement)
        return placement


def traffic_table(placement) -> str:
    """The edges that cross between worker groups, with their operator and bytes per iteration: all that moves,
    so an edge that each of several replicas receives whole (a broadcast) says so beside the size the drawing
    labels it with (one copy's)."""
    rows = [
        f"<tr><td>{html.escape(e.src)} &rarr; {html.escape(e.dst)}</td><td>{html.escape(e.operator)}</td>"
        f"<td>{html.escape(placement.graph.describe(e.variables))}</td><td class='fragnb-bytes'>{_moved(placement, e, n)}</td></tr>"
        for e, n in placement.traffic()
    ]
    if not rows:
        return "<p>Nothing crosses between processes: every edge is a local reference.</p>"
    rows.append(
        f"<tr><th colspan='3'>predicted per iteration</th><th class='fragnb-bytes'>{size(total(placement))}</th></tr>"
    )
    collectives = "".join(f"<p>+ {html.escape(c)}</p>" for c in placement.policy.collectives)
    return f"<table><tr><th>edge</th><th>becomes</th><th>values</th><th>bytes/iteration</th></tr>{''.join(rows)}</table>{collectives}"


def _moved(placement, edge, n: int | None) -> str:
    """An edge's bytes per iteration, as ``73 kB (2 x 37 kB)`` where each of several replicas receives it whole."""
    each = placement.fragments[edge.dst].replicas if edge.operator.to_each else 1
    if n is None or each == 1:
        return size(n)
    return f"{size(n)} ({each} &times; {size(n // each)})"
