"""The "Your own policy" tab: a policy composed by choosing each role's worker group, drawn, and
written out as the code that registers it (what a user pastes into a cell to keep it).
"""

from __future__ import annotations

import html
from collections.abc import Callable

import ipywidgets as W

from fragnb.policies import ROLES, DistributionPolicy

from .comparing import compared_params
from .showing import error

__all__ = ["OwnPolicy", "policy_source", "OWN_GROUPS", "OWN_DEFAULT"]

#: Worker groups the "your own policy" tab offers each role, and the roles' defaults there (coarse's).
OWN_GROUPS = ("learner", "actors", "envs", "buffer")
OWN_DEFAULT = {"env": "actors", "actor": "actors", "buffer": "actors", "learner": "learner", "driver": "learner"}


class OwnPolicy:
    """A name, one worker-group dropdown per role the loop has, the composed policy drawn and its code.

    Parameters
    ----------
    graph : FragmentGraph
        The loop the explorer places; its roles are the dropdowns offered.
    place, draw : callable
        ``place(policy, **params)`` and ``draw(placement)``, as the explorer places and draws.
    chosen : callable
        The user's parameter choices (a dict), which the drawing takes where the policy has them.
    """

    def __init__(self, graph, place: Callable, draw: Callable[..., str], chosen: Callable[[], dict]):
        self.graph = graph
        self._place, self._draw, self._chosen = place, draw, chosen
        roles = [r for r in ROLES if r in {f.role for f in graph.fragments}] or ["driver"]
        self.name = W.Text(description="name", value="my_policy")
        self.groups = {r: W.Dropdown(description=r, options=OWN_GROUPS, value=OWN_DEFAULT[r]) for r in roles}
        self.drawing = W.HTML().add_class("fragnb-drawing")
        self.code = W.HTML().add_class("fragnb-code")
        self.register_button = W.Button(
            description="Register", icon="plus", tooltip="add it to fragnb's policies and place it"
        )
        self.tab = W.VBox(
            [
                W.HTML(
                    "Choose each role's worker group; every group other than the driver's gets a replica count "
                    "parameter of its name. Copy the code into a cell to keep the policy."
                ),
                W.HBox([self.name, self.register_button]),
                W.HBox(list(self.groups.values())),
                self.drawing,
                self.code,
            ]
        )
        self.name.observe(lambda _: self.show(), "value")
        for dropdown in self.groups.values():
            dropdown.observe(lambda _: self.show(), "value")

    def policy(self) -> DistributionPolicy:
        """The policy the dropdowns compose."""
        groups = {r: self.groups[r].value if r in self.groups else None for r in ROLES}
        home = groups["driver"] or groups["learner"] or "learner"
        groups = {r: g or home for r, g in groups.items()}
        used = list(dict.fromkeys(groups.values()))
        where = "; ".join(
            f"{', '.join(r for r in self.groups if groups[r] == g)} on {g}" + ("" if g == home else " x N")
            for g in used
            if any(groups[r] == g for r in self.groups)
        )
        return DistributionPolicy(
            self.name.value.strip() or "my_policy",
            "your own",
            where,
            groups=groups,
            replicas={g: 1 if g == home else g for g in used},
            gpu_groups=(groups["learner"],),
            required_roles=tuple(r for r in self.groups if r != "driver"),
        )

    def show(self) -> None:
        """Show the composed policy's code and its placement."""
        policy = self.policy()
        self.code.value = f"<pre>{html.escape(policy_source(policy))}</pre>"
        try:
            placement = self._place(policy, **compared_params(self.graph, policy, self._chosen()))
        except ValueError as e:
            self.drawing.value = error(e)
        else:
            self.drawing.value = self._draw(placement)


def policy_source(policy: DistributionPolicy) -> str:
    """Python that registers ``policy``: what a user pastes into a cell to keep it."""
    return (
        "from fragnb.policies import DistributionPolicy, register\n\n"
        "register(DistributionPolicy(\n"
        f"    {policy.name!r}, {policy.mirrors!r}, {policy.description!r},\n"
        f"    groups={policy.groups!r},\n"
        f"    replicas={policy.replicas!r},\n"
        f"    gpu_groups={policy.gpu_groups!r}, required_roles={policy.required_roles!r},\n"
        "))\n"
    )
