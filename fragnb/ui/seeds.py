"""A sweep's live view: a progress bar over its runs, and a figure with one faint curve per run and,
per configuration, the mean with a 95 % bootstrap band, redrawn in place as runs report."""

from __future__ import annotations

import time

from ..stats import LAST_EPISODES, band
from .live import _figure_class, in_notebook, shown_in_place

__all__ = ["SweepView", "draw"]


def draw(sweep, ax=None, title: str = ""):
    """``sweep``'s runs (finished ones by their episodes, running ones by what they reported) on ``ax``
    (a new figure's if None): faint per run, each configuration's mean and 95 % band in its colour."""
    if ax is None:
        fig = _figure_class()(figsize=(6.4, 3.6), layout="constrained")
        ax = fig.add_subplot()
    colours = {}
    for run in sweep.runs:
        colour = colours.setdefault(run.configuration, f"C{len(colours)}")
        points = _points(run)
        if points:
            ax.plot(*zip(*points), color=colour, alpha=0.25, lw=0.8)
    for configuration, colour in colours.items():
        curves = [_points(r) for r in sweep.runs if r.configuration == configuration]
        xs, mean, low, high = band([c for c in curves if c])
        if xs:
            n = sum(bool(c) for c in curves)
            ax.plot(xs, mean, color=colour, lw=2, label=f"{configuration} (mean of {n}, 95 % CI)")
            ax.fill_between(xs, low, high, color=colour, alpha=0.2, lw=0)
    ax.set(xlabel="env steps", ylabel=f"mean return (last {LAST_EPISODES} episodes)", title=title or _title(sweep))
    if colours and ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="lower right")
    return ax.figure


def _points(run) -> list[tuple[int, float]]:
    """A run's (env steps, mean return of its last episodes): from its episodes once it finished."""
    if run.result is not None and run.result.curve:
        returns, out = [], []
        for steps, r, _ in run.result.curve:
            returns.append(r)
            last = returns[-LAST_EPISODES:]
            out.append((steps, sum(last) / len(last)))
        return out
    return [(s, m) for s, m in run.progress if m == m]  # NaN: no episode yet


def _title(sweep) -> str:
    return f"{getattr(sweep, 'graph', '')}: {len(sweep.runs)} runs"


class SweepView:
    """What a sweep shows while it runs: a tqdm bar over its runs and, in a notebook, the figure of
    :func:`draw` redrawn at most every ``every`` seconds (the display-handle pattern).

    Subclasses show the same elsewhere (the explorer: in its widgets) by overriding :meth:`show_bar`
    and :meth:`show_figure`; a sweep takes one through ``fragnb.sweep(..., progress=...)``."""

    def __init__(self, progress: bool = True, plot: bool = True, every: float = 1.0):
        self.progress, self.every = progress, every
        self.runs: list = []
        self.name = self.graph = ""
        self.bar = None
        self.plot = plot and in_notebook()
        self.handle = None
        self.last = 0.0

    def begin(self, name: str, policy, runs) -> SweepView:
        """This view, for a sweep of ``runs`` of the loop ``name`` under ``policy`` (called as it starts)."""
        self.name, self.runs = name, runs
        self.graph = f"{name} under {getattr(policy, 'name', policy)}"
        if self.progress:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=len(runs), desc=f"{name}: runs", unit="run", leave=True)
        return self

    def update(self) -> None:
        """Runs have reported: redraw if the last drawing is ``every`` seconds old."""
        if self.plot and time.perf_counter() - self.last >= self.every:
            self._show()

    def finished(self, run) -> None:
        self.show_bar(run)
        self.update()

    def show_bar(self, run) -> None:
        """``run`` has ended (finished or failed)."""
        if self.bar is not None:
            self.bar.update(1)
            if run.error:
                self.bar.write(f"{self.name}, {run.label}: failed: {run.error}")

    def _show(self) -> None:
        done = sum(r.result is not None for r in self.runs)
        self.show_figure(draw(self, title=f"{self.graph}: {done} of {len(self.runs)} runs finished"))
        self.last = time.perf_counter()

    def show_figure(self, fig) -> None:
        """Show ``fig`` in place of the last one."""
        self.handle = shown_in_place(fig, self.handle)

    def close(self, result) -> None:
        if self.plot:
            self._show()
        if self.bar is not None:
            self.bar.close()
