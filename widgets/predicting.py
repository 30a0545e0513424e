"""The explorer's predictions: a placement's predicted throughput on a cluster preset, and the scaling
plot of the built-in policies on that preset.

Both come from the loop's :class:`~fragnb.predict.profile.Profile`, taken once when the explorer
opens (or given): a model, not a measurement, so the explorer shows it beside what a run measures.
"""

from __future__ import annotations

import html

import ipywidgets as W

from fragnb.policies import resolve
from fragnb.predict import Profile, profile
from fragnb.predict.model import PRESETS, predict, scaling
from fragnb.ui.live import png

from .showing import picture

__all__ = ["Predictions", "profiled"]


def profiled(graph) -> tuple[Profile | None, BaseException | None]:
    """The loop's profile, or None and why where it cannot be taken (the explorer still places and runs)."""
    try:
        return profile(graph), None
    except Exception as e:  # the explorer still places and runs; it predicts nothing
        return None, e


class Predictions:
    """The preset dropdown, the chosen placement's prediction, and the Scaling plot button and plot.

    Parameters
    ----------
    graph : FragmentGraph
        The loop the explorer places.
    profile : Profile or None
        The loop's profile; None where profiling failed.
    profile_error : BaseException or None
        Why profiling failed, shown where the prediction would be.
    predict_on : str
        The preset shown first (:data:`fragnb.predict.model.PRESETS`).
    """

    def __init__(self, graph, profile: Profile | None, profile_error: BaseException | None, predict_on: str):
        self.graph = graph
        self.profile = profile
        self.profile_error = profile_error
        self.preset = W.Dropdown(
            description="predict on", options=[(c.name, k) for k, c in PRESETS.items()], value=predict_on
        )
        self.prediction = W.HTML().add_class("fragnb-prediction")
        self.scaling_button = W.Button(
            description="Scaling plot",
            icon="line-chart",
            tooltip="predicted env steps/s of each policy at 1 to 1,024 replicas on this cluster",
        )
        self.scaling_plot = W.Image(format="png", layout=W.Layout(max_width="100%", display="none")).add_class(
            "fragnb-scaling"
        )
        self._scaling: dict[str, bytes] = {}  # preset -> its plot
        self.scaling_button.on_click(lambda _: self.show_scaling())

    def prediction_for(self, placement):
        """The chosen preset's prediction for ``placement`` (None without a profile)."""
        return None if self.profile is None else predict(placement, self.profile, self.preset.value)

    def describe(self, placement) -> str:
        """The prediction for ``placement`` as HTML, or why there is none."""
        if self.profile is None:
            return f"<p>No prediction: profiling the loop under single failed ({html.escape(str(self.profile_error))}).</p>"
        p = self.prediction_for(placement)
        shares = ", ".join(f"{html.escape(g)} {b:.0%}" for g, b in p.busy.items())
        terms = ", ".join(f"{html.escape(t)} {share:.0%}" for t, share in p.shares().items())
        return (
            f"<p><b>Predicted</b> (a model, not a measurement) on {html.escape(p.cluster)}: "
            f"<b>{p.env_steps_per_s:,.0f}{p.span} env steps/s</b>, {p.seconds_per_iteration * 1e3:,.0f} ms per iteration; "
            f"busy: {shares}; passing values {p.communication:.0%}.<br>{html.escape(p.bottleneck[0].upper() + p.bottleneck[1:])}."
            f"<br>The iteration's terms: {terms}.</p>"
        )

    def show_scaling(self) -> None:
        """Draw the predicted scaling plot for the chosen preset (what the Scaling plot button does)."""
        if self.profile is None:
            return
        if self.preset.value not in self._scaling:
            import matplotlib.pyplot as plt

            sweep = scaling(self.graph, self.profile, self.preset.value, policies=_scalable(self.graph))
            fig, ax = plt.subplots(figsize=(7, 4.2))
            sweep.plot(ax)
            self._scaling[self.preset.value] = png(fig)
            plt.close(fig)
        picture(self.scaling_plot, self._scaling[self.preset.value])

    def show_drawn_scaling(self) -> None:
        """The chosen preset's scaling plot if it was drawn, else none: another preset's is not shown stale."""
        picture(self.scaling_plot, self._scaling.get(self.preset.value, b""))


def _scalable(graph) -> tuple[str, ...]:
    """The built-in policies with a replica count that place this loop with 2 replicas."""
    fits = []
    for name in ("coarse", "fine", "async", "multi_learner"):
        count = next(n for n in resolve(name).replicas.values() if isinstance(n, str))  # actors, learners
        try:
            graph.place(name, **{count: 2})
        except ValueError:
            continue
        fits.append(name)
    return tuple(fits)
