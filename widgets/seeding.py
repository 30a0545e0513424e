"""Run seeds: the chosen policy run once per seed, each after the notebook's latest ``%%setup`` cell
with its seed, side by side (:func:`fragnb.sweep`), in the runner's thread and widgets: every run's
curve faintly and their mean with a 95 % band, then the sweep's table.
"""

from __future__ import annotations

import html
import threading

import ipywidgets as W

from fragnb.policies import DistributionPolicy
from fragnb.seeds import sweep
from fragnb.setups import Setup
from fragnb.ui.live import png
from fragnb.ui.seeds import SweepView

from .running import Runner
from .showing import picture

__all__ = ["SeedRuns"]


class SeedRuns:
    """The seeds box and the Run seeds button, which run through ``runner`` (its Stop ends a sweep too).

    Parameters
    ----------
    runner : Runner
        Whose thread, Stop button, bar, status line and image a sweep uses.

    Attributes
    ----------
    sweep : SweepResult or None
        The last Run seeds' result.
    """

    def __init__(self, runner: Runner):
        self.runner = runner
        self.seeds = W.BoundedIntText(value=4, min=2, max=64, description="seeds", layout=W.Layout(width="140px"))
        self.button = W.Button(
            description="Run seeds",
            icon="random",
            tooltip="run the loop once per seed, side by side, each after the notebook's %%setup cell with its seed",
        )
        self.sweep = None
        runner.starters.append(self.button)
        self.button.on_click(lambda _: self.run())

    def run(self) -> None:
        """Run the chosen policy once per seed in the runner's thread (what Run seeds does)."""
        self.runner.start(self._work)

    def _work(self, policy: DistributionPolicy, cluster, params: dict, stop: threading.Event) -> None:
        graph = self.runner.graph
        setups = [v for v in graph.namespace.values() if isinstance(v, Setup)]
        if not setups:
            raise ValueError(
                "Run seeds runs each seed's setup first: run a %%setup NAME cell in the notebook (its cell "
                "builds what the loop uses from `seed`)"
            )
        self.sweep = sweep(
            graph,
            setups[-1],  # the latest %%setup cell
            seeds=range(self.seeds.value),
            policy=policy.name,
            cluster=cluster,
            progress=_SeedsView(self.runner),
            stop=stop,
            **params,
        )
        self.runner.status.value = "<br>".join(html.escape(line) for line in str(self.sweep).splitlines())


class _SeedsView(SweepView):
    """A sweep's progress in the runner's bar, status line and image."""

    def __init__(self, runner: Runner):
        super().__init__(progress=False, plot=False, every=0.5)
        self.x = runner
        self.plot = True

    def begin(self, name: str, policy, runs) -> SweepView:
        self.x.bar.max, self.x.bar.value = len(runs), 0
        self.x.bar.description = "runs"
        return super().begin(name, policy, runs)

    def show_bar(self, run) -> None:
        self.x.bar.value = min(self.x.bar.value + 1, self.x.bar.max)
        failed = sum(bool(r.error) for r in self.runs)
        self.x.status.value = html.escape(
            f"running {self.graph}: {self.x.bar.value} of {len(self.runs)} runs ended"
            + (f", {failed} failed" if failed else "")
        )

    def show_figure(self, fig) -> None:
        picture(self.x.plot, png(fig))
