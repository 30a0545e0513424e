"""The policy explorer: pick a distribution policy and its parameters and see the placement redrawn;
compare two policies; compose your own; run the loop from Run and Stop buttons.

Plain ipywidgets rather than a custom front end (anywidget): graphviz already lays placements out
as SVG, which an ``HTML`` widget shows, so no JavaScript has to be written, built or kept in step
with JupyterLab, and the explorer works wherever ipywidgets do (JupyterLab, Notebook 7, VS Code).
A run happens in a thread of the kernel, so the widgets stay live while it lasts; its progress goes
to the explorer's own widgets, whose updates reach the browser from any thread.

:class:`Explorer` composes one part per area, each in a module of its own: the policy controls and
their placement (:mod:`.placing`), the predictions (:mod:`.predicting`), the comparison
(:mod:`.comparing`), your own policy (:mod:`.composing`), Run and Stop (:mod:`.running`) and the
seeds box (:mod:`.seeding`). It lays them out, says what a change in one redraws in the others, and
gives their widgets the names notebooks use.
"""

from __future__ import annotations

import html
import time
from importlib.resources import files

import ipywidgets as W

from fragnb import policies
from fragnb.policies import DistributionPolicy

from .comparing import Comparison
from .composing import OwnPolicy
from .placing import PolicyControls
from .predicting import Predictions, profiled
from .running import Runner
from .seeding import SeedRuns
from .showing import Drawings

__all__ = ["Explorer"]

STYLE = files(__package__).joinpath("style.css").read_text()


class Explorer:
    """Widgets that place ``graph`` under any registered policy, compare two, and run it.

    Parameters
    ----------
    graph : FragmentGraph
        A captured loop; profiled once under ``single`` on copies when the explorer opens
        (:func:`fragnb.profile`: a few iterations), so edges show their bytes and placements their
        predicted throughput.
    policy, cluster, **params
        What the controls show first (as for :func:`fragnb.run`).
    predict_on : str
        The cluster preset predictions are for (:data:`fragnb.predict.model.PRESETS`).
    profile : Profile, optional
        The loop's profile, if you took one (``p = fragnb.profile(graph)``): the explorer then runs
        nothing when it opens.

    Attributes
    ----------
    profile : Profile or None
        The loop's profile the explorer predicts from and labels edges with; None where profiling
        failed (the explorer still places and runs).
    result : RunResult or None
        The last run's result; ``error`` the exception that ended the last run, if one did.
    sweep : SweepResult or None
        The last Run seeds' result.
    placing, predicting, comparing, composing, runner, seeding
        The explorer's parts (:class:`~.placing.PolicyControls`, :class:`~.predicting.Predictions`,
        :class:`~.comparing.Comparison`, :class:`~.composing.OwnPolicy`, :class:`~.running.Runner`,
        :class:`~.seeding.SeedRuns`), whose widgets the explorer also names (``policy``, ``drawing``,
        ``run_button``, ...).

    Run starts the chosen policy in a thread of the kernel. Stop ends it after the current iteration:
    the namespace is then what plain Python leaves after that many iterations (as with ``until``),
    and fragnb's embedded cluster is closed, so no worker process is left.
    """

    def __init__(self, graph, policy="single", cluster=None, predict_on="here", profile=None, **params):
        self.graph = graph
        self.redraw_seconds = 0.0  # how long the last change took to show (placement, drawing, table)
        self._draw = Drawings()  # one for the three tabs: what one has drawn, another does not draw again
        profile, profile_error = (profile, None) if profile is not None else profiled(graph)
        self.predicting = Predictions(graph, profile, profile_error, predict_on)
        self.placing = PolicyControls(graph, policy, dict(params), self._place, self._draw, changed=self._show)
        self.runner = Runner(graph, cluster, self.current, self._predicted_run, ended=self._show)
        self.seeding = SeedRuns(self.runner)
        self.comparing = Comparison(graph, self._place, self._draw, self.prediction_for, chosen=lambda: self.params)
        self.composing = OwnPolicy(graph, self._place, self._draw, chosen=lambda: self.params)
        self._name_widgets()
        self.tabs = W.Tab(
            children=[self._place_tab(), self.comparing.tab, self.composing.tab],
            titles=("Place and run", "Compare two", "Your own policy"),
        )
        title = W.HTML(
            f"<span class='fragnb-title'>Explore distribution policies for <code>{html.escape(graph.name)}</code></span>"
        )
        self.widget = W.VBox([W.HTML(f"<style>{STYLE}</style>"), title, self.tabs]).add_class("fragnb-explorer")
        self.preset.observe(lambda _: self._preset_changed(), "value")
        self.register_button.on_click(lambda _: self.register())
        self.placing.policy_changed()
        self.comparing.show()
        self.composing.show()

    def _name_widgets(self) -> None:
        """The parts' widgets under the explorer's names for them (what notebooks and tests read)."""
        placing, predicting, runner = self.placing, self.predicting, self.runner
        self.policy, self.controls, self.edges, self.bound = (
            placing.policy,
            placing.controls,
            placing.edges,
            placing.bound,
        )
        self.summary, self.drawing, self.traffic = placing.summary, placing.drawing, placing.traffic
        self.preset, self.prediction = predicting.preset, predicting.prediction
        self.scaling_button, self.scaling_plot = predicting.scaling_button, predicting.scaling_plot
        self.cluster, self.run_button, self.stop_button = runner.cluster, runner.run_button, runner.stop_button
        self.debug_button = runner.debug_button
        self.status, self.bar, self.link, self.plot = runner.status, runner.bar, runner.link, runner.plot
        self.seeds, self.seeds_button = self.seeding.seeds, self.seeding.button
        compare, own = self.comparing, self.composing
        self.left, self.right, self.comparison = compare.left, compare.right, compare.table
        self.left_drawing, self.right_drawing = compare.left_drawing, compare.right_drawing
        self.own_name, self.own_groups, self.own_drawing, self.own_code = own.name, own.groups, own.drawing, own.code
        self.register_button = own.register_button

    def _place_tab(self) -> W.VBox:
        return W.VBox(
            [
                W.HBox([self.policy, self.cluster]),
                self.controls,
                self.edges,
                self.summary,
                self.drawing,
                self.traffic,
                W.HBox([self.preset, self.scaling_button]),
                self.prediction,
                self.scaling_plot,
                W.HBox(
                    [
                        self.run_button,
                        self.stop_button,
                        self.seeds,
                        self.seeds_button,
                        self.bar,
                        self.link,
                        self.debug_button,
                    ]
                ),
                self.status,
                self.plot,
            ]
        )

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)

    # -- what the parts hold ---------------------------------------------------------------------

    @property
    def params(self) -> dict:
        """The user's parameter choices, kept across policies."""
        return self.placing.params

    @params.setter
    def params(self, value: dict) -> None:
        self.placing.params = value

    @property
    def profile(self):
        """The loop's profile (see the class's attributes)."""
        return self.predicting.profile

    @profile.setter
    def profile(self, value) -> None:
        self.predicting.profile = value

    @property
    def result(self):
        """The last run's result, or None."""
        return self.runner.result

    @property
    def error(self) -> BaseException | None:
        """The exception that ended the last run, if one did."""
        return self.runner.error

    @property
    def sweep(self):
        """The last Run seeds' :class:`~fragnb.seeds.SweepResult`, or None."""
        return self.seeding.sweep

    # -- placing ---------------------------------------------------------------------------------

    def select(self, policy: str, **params) -> None:
        """Show ``policy`` with ``params`` (as the controls would)."""
        self.placing.select(policy, **params)

    def current(self) -> tuple[DistributionPolicy, dict]:
        """The chosen policy and the parameters the controls give it."""
        return self.placing.current()

    def _place(self, policy, **params):
        """``graph.place(policy, **params)``, its edges labelled with the profile's bytes where there is one."""
        placement = self.graph.place(policy, **params)
        return placement if self.profile is None else placement.measured(self.profile.edge_bytes)

    def _show(self) -> None:
        """Show the chosen placement and its prediction, and offer Run where it places."""
        start = time.perf_counter()
        placement = self.placing.show()
        if placement is None:  # a policy that cannot place this loop: its drawing says why; no Run
            self.run_button.disabled = True
        else:
            self.prediction.value = self.predicting.describe(placement)
            self.run_button.disabled = self.running
        self.redraw_seconds = time.perf_counter() - start

    # -- predicting ------------------------------------------------------------------------------

    def prediction_for(self, placement):
        """The chosen preset's prediction for ``placement`` (None without a profile)."""
        return self.predicting.prediction_for(placement)

    def show_scaling(self) -> None:
        """Draw the predicted scaling plot for the chosen preset (what the Scaling plot button does)."""
        self.predicting.show_scaling()

    def _preset_changed(self) -> None:
        self._show()
        self.comparing.show()
        self.predicting.show_drawn_scaling()

    def _predicted_run(self, policy: DistributionPolicy, params: dict):
        """What a run of ``policy`` with ``params`` is compared with: its prediction (None without a profile)."""
        return None if self.profile is None else self.prediction_for(self._place(policy, **params))

    # -- your own policy -------------------------------------------------------------------------

    def own_policy(self) -> DistributionPolicy:
        """The policy the "your own policy" tab composes."""
        return self.composing.policy()

    def register(self) -> DistributionPolicy:
        """Register the composed policy and show it in the other tabs."""
        policy = policies.register(self.own_policy())
        names = sorted(policies.POLICIES)
        for dropdown in (self.left, self.right, self.policy):
            value = dropdown.value
            dropdown.options = names
            dropdown.value = value
        self.policy.value = policy.name
        self.placing.policy_changed()
        self.tabs.selected_index = 0
        return policy

    # -- running ---------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether a run (or a Run seeds) is under way."""
        return self.runner.running

    def run(self) -> None:
        """Start the chosen policy in a thread (what the Run button does); the kernel stays free."""
        self.runner.run()

    def run_seeds(self) -> None:
        """Run the chosen policy once per seed (the seeds box), side by side, each after the notebook's
        ``%%setup`` cell with its seed, in a thread (what Run seeds does): every run's curve faintly and
        their mean with a 95 % band, then the sweep's table (:func:`fragnb.sweep`)."""
        self.seeding.run()

    def stop(self) -> None:
        """End the run after the current iteration (what the Stop button does)."""
        self.runner.stop()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the run to end; whether it has."""
        return self.runner.wait(timeout)

    def debug(self) -> None:
        """Replay the failed run in this kernel up to its error, for ``%debug`` (what Debug here does)."""
        self.runner.debug()
