"""Progress of a run: a tqdm bar over training iterations and a live dashboard (learning curve, env
steps/s over time, each fragment's share of the time). Written to a file or a pipe (a batch job's log:
``python -m fragnb run ... > run.log``), the bar is a line every :data:`LINE_EVERY_S` seconds instead, and
one at the end: a log holds lines, not a bar redrawn in place.

The dashboard follows the display-handle pattern (``display(..., display_id=True)`` then
``handle.update``), which both JupyterLab and nbval accept.
"""

from __future__ import annotations

import functools
import io
import sys
import time
from collections.abc import Sequence

__all__ = ["LiveProgress", "learning_curve", "dashboard", "timeline", "in_notebook", "png", "shown_in_place"]


def in_notebook() -> bool:
    """Whether we run inside a Jupyter kernel (where rich display works)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and hasattr(shell, "kernel")


def learning_curve(
    curve: Sequence[tuple[int, float]], title: str = "", window: int = 20, staleness: Sequence[float] = ()
):
    """A matplotlib ``Figure`` of episode returns against environment steps, with a rolling mean; and
    below it, for decoupled policies, the mean staleness of what the learner trained on per iteration."""
    fig = _figure_class()(figsize=(6, 4.4 if staleness else 3.2), layout="constrained")
    _returns_panel(fig, curve, title, window, staleness)
    return fig


def dashboard(
    curve: Sequence[tuple[int, float]],
    title: str = "",
    rates: Sequence[tuple[float, float]] = (),
    seconds: dict[str, float] | None = None,
    staleness: Sequence[float] = (),
    window: int = 20,
    idle: dict[str, float] | None = None,
    mean_rate: float | None = None,
):
    """What a run shows while it lasts: the learning curve (and staleness) on the left; on the right,
    env steps/s over time (``rates``: seconds since the start, steps/s over the last few iterations)
    and each fragment's share of the time so far (``seconds``: fragment to seconds, a replicated
    fragment's those of its slowest replica, as in :attr:`~fragnb.runtime.result.RunResult.fragment_seconds`),
    with each group's share of its time spent waiting for another (``idle``, distributed runs). Once
    the run has ended, ``mean_rate`` (its env steps/s over the whole run) is drawn dashed across the rates."""
    fig = _figure_class()(figsize=(9, 3.6), layout="constrained")
    left, right = fig.subfigures(1, 2, width_ratios=(3, 2))
    _returns_panel(left, curve, title, window, staleness)
    speed, split = right.subplots(2, 1)
    if rates:
        speed.plot(*zip(*rates), color="#55a868", lw=1.2, label="last iterations")
    if mean_rate is not None:
        speed.axhline(mean_rate, color="#333333", ls="--", lw=1.0, label=f"whole run: {mean_rate:,.0f}")
        speed.legend(loc="lower right", fontsize=7)
    speed.set_xlabel("seconds")
    speed.set_ylabel("env steps/s")
    speed.set_ylim(bottom=0)
    speed.grid(alpha=0.3)
    if seconds:
        from .render import ROLE_COLORS

        names = sorted(seconds, key=seconds.get)
        total = sum(seconds.values()) or 1.0
        split.barh(
            names,
            [100 * seconds[n] / total for n in names],
            color=[ROLE_COLORS.get(n.split("@")[0], "#cccccc") for n in names],
        )
        split.tick_params(axis="y", labelsize=7)
    waiting = ", ".join(f"{g} {100 * share:.0f} %" for g, share in sorted((idle or {}).items()))
    split.set_xlabel("% of fragment time" + (f"; idle: {waiting}" if waiting else ""), fontsize=8 if waiting else None)
    split.set_xlim(0, 100)
    return fig


def _returns_panel(
    fig, curve: Sequence[tuple[int, float]], title: str, window: int, staleness: Sequence[float]
) -> None:
    if staleness:
        ax, below = fig.subplots(2, 1, height_ratios=(3, 1))
        below.step(range(1, len(staleness) + 1), staleness, where="mid", color="#8172b3", lw=1.2)
        below.set_xlabel("learner iteration")
        below.set_ylabel("staleness")
        below.set_ylim(bottom=0)
        below.grid(alpha=0.3)
    else:
        ax = fig.add_subplot()
    if curve:
        steps, rets = zip(*curve)
        ax.plot(steps, rets, ".", ms=2, alpha=0.35, color="#4c72b0", label="episode return")
        means = [sum(rets[max(0, i - window + 1) : i + 1]) / (i + 1 - max(0, i - window + 1)) for i in range(len(rets))]
        ax.plot(steps, means, color="#c44e52", lw=1.5, label=f"mean of last {window}")
        ax.legend(loc="lower right", fontsize=8)
    ax.set_xlabel("environment steps")
    ax.set_ylabel("return")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)


def timeline(intervals: Sequence[tuple[str, str, str, float, float]], title: str = ""):
    """A Gantt-style ``Figure``: one row per replica, its fragments' busy time coloured by role, its
    waits for other groups hatched grey. ``intervals`` as in ``RunResult.intervals``."""
    from matplotlib.patches import Patch

    from .render import ROLE_COLORS

    rows = list(dict.fromkeys(r for r, *_ in intervals))
    span = max((b for *_, b in intervals), default=1.0)
    fig = _figure_class()(figsize=(8, 1.0 + 0.4 * max(2, len(rows))), layout="constrained")
    ax = fig.add_subplot()
    roles = set()
    for y, row in enumerate(rows):
        bars: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for _, label, kind, a, b in (i for i in intervals if i[0] == row):
            spans = bars.setdefault((label, kind), [])
            if spans and a - (spans[-1][0] + spans[-1][1]) < span / 2000:  # closer than a pixel: one bar
                spans[-1] = (spans[-1][0], b - spans[-1][0])
            else:
                spans.append((a, b - a))
        for (label, kind), spans in bars.items():
            if kind == "wait":
                ax.broken_barh(
                    spans, (y - 0.3, 0.6), facecolors="#f4f4f4", edgecolors="#bdbdbd", hatch="///", linewidth=0
                )
            else:
                role = label.split("@")[0]
                roles.add(role)
                ax.broken_barh(spans, (y - 0.4, 0.8), facecolors=ROLE_COLORS.get(role, "#cccccc"), edgecolors="none")
    ax.set_yticks(range(len(rows)), rows)
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the loop started")
    ax.set_title(title, fontsize=10)
    handles = [Patch(facecolor=ROLE_COLORS.get(r, "#cccccc"), label=r) for r in sorted(roles)]
    handles.append(Patch(facecolor="#f4f4f4", edgecolor="#bdbdbd", hatch="///", label="waiting"))
    ax.legend(handles=handles, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8, frameon=False)
    return fig


@functools.cache
def _figure_class():
    """matplotlib's Figure, showing itself as a PNG in a notebook. A Figure made without pyplot (which
    fragnb does not import: no global figure state) shows only its repr unless pyplot was imported."""
    from matplotlib.figure import Figure

    class NotebookFigure(Figure):
        def _repr_png_(self) -> bytes:
            return png(self)

    return NotebookFigure


def png(fig) -> bytes:
    """``fig`` as PNG bytes, at the resolution the notebook shows."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    return buf.getvalue()


def shown_in_place(fig, handle=None):
    """Show ``fig`` as a PNG in place of what ``handle`` shows (a new output if None): the display-handle
    pattern. Returns the handle to pass next time."""
    from IPython.display import Image, display

    image = Image(data=png(fig), format="png")
    if handle is None:
        return display(image, display_id=True)
    handle.update(image)
    return handle


#: The shortest span an env steps/s point of the live dashboard is measured over (seconds).
RATE_WINDOW_S = 0.2
#: Outside a notebook, with the bar's stream not a terminal: the least seconds between two progress lines.
LINE_EVERY_S = 10.0


class LiveProgress:
    """Shows a run's progress; :meth:`update` after each training iteration, :meth:`close` at the end.

    Parameters
    ----------
    total : int or None
        Number of training iterations, if known.
    title : str
        Shown on the bar and the plot.
    progress, plot : bool
        Switch the bar or the live dashboard (learning curve, env steps/s, fragment time split) off.
        The dashboard only shows inside a notebook.
    plot_every : float
        Least seconds between two redraws of the dashboard.

    Subclasses show the same elsewhere (the explorer: in its widgets) by overriding :meth:`show_bar`,
    :meth:`show_figure` and :meth:`show_link`; a run takes one through ``fragnb.run(..., progress=...)``.
    """

    def __init__(
        self,
        total: int | None = None,
        title: str = "",
        progress: bool = True,
        plot: bool = True,
        plot_every: float = 1.0,
    ):
        self.total, self.title, self.plot_every = total, title, plot_every
        self.bar = None
        #: a log's progress lines instead of the bar (a file or a pipe): when the last was written
        self.lines: float | None = None
        if progress and not in_notebook() and not sys.stderr.isatty():
            self.lines = -float("inf")
        elif progress:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc=title, unit="it", leave=True)
        self.handle = None
        self.plot = plot and in_notebook()
        self.last_draw = 0.0
        self.start = time.perf_counter()
        self.staleness: Sequence[float] = ()
        self.rates: list[tuple[float, float]] = []  # (seconds since the start, env steps/s)
        self.seconds: dict[str, float] = {}
        self.idle: dict[str, float] = {}
        self.mean_rate: float | None = None  # the whole run's env steps/s, once it has ended (finished)
        self.iterations = 0
        self._steps = [(0.0, 0)]

    def started(self, total: int | None, title: str) -> LiveProgress:
        """This view, for a run of ``total`` iterations named ``title`` (called as the run begins)."""
        self.total, self.title = total, title
        self.start, self._steps, self.rates = time.perf_counter(), [(0.0, 0)], []  # the loop starts now
        return self

    def update(
        self,
        curve: Sequence[tuple[int, float]],
        env_steps: int,
        staleness: Sequence[float] = (),
        seconds: dict[str, float] | None = None,
        idle: dict[str, float] | None = None,
    ) -> None:
        """After an iteration: the episodes so far, env steps, (decoupled policies) the mean staleness
        of each learner iteration so far, the seconds each fragment has taken so far, and (distributed
        runs) each group's share of its time so far spent waiting for another group."""
        self.iterations += 1
        self.staleness = staleness
        self.seconds = dict(seconds or {})
        self.idle = dict(idle or {})
        now = time.perf_counter() - self.start
        self._steps.append((now, env_steps))
        # over the last 3 iterations (steadier than one), and over at least RATE_WINDOW_S: a distributed run
        # shows several iterations at once when its slowest replica catches up, and a rate over a few
        # milliseconds drew a spike of a million steps/s
        k = max(0, len(self._steps) - 4)
        while k > 0 and now - self._steps[k][0] < RATE_WINDOW_S:
            k -= 1
        then, before = self._steps[k]
        if now > then:
            self.rates.append((now, (env_steps - before) / (now - then)))
        postfix = {"env_steps": env_steps}
        if curve:
            last = [r for _, r in curve[-20:]]
            postfix["return"] = f"{sum(last) / len(last):.1f}"
        if staleness:
            postfix["staleness"] = f"{staleness[-1]:.2f}"
        if self.idle:
            postfix["idle"] = " ".join(f"{g} {100 * share:.0f}%" for g, share in sorted(self.idle.items()))
        self.show_bar(postfix)
        if self.plot and time.perf_counter() - self.last_draw >= self.plot_every:
            self.draw(curve)

    def show_bar(self, postfix: dict) -> None:
        if self.bar is not None:
            self.bar.set_postfix(postfix, refresh=False)
            self.bar.update(1)
        elif self.lines is not None and time.perf_counter() - self.lines >= LINE_EVERY_S:
            self.line(postfix)

    def line(self, postfix: dict) -> None:
        """One progress line, for a log: ``fragnb: ppo: iteration 40 of 200, env_steps=163840, return=212.3, 14 s``."""
        self.lines = time.perf_counter()
        done = f"iteration {self.iterations}" + (f" of {self.total}" if self.total else "")
        said = ", ".join(f"{k}={v}" for k, v in postfix.items())
        name = f"{self.title}: " if self.title else ""
        print(f"fragnb: {name}{done}, {said}, {self.lines - self.start:.0f} s", file=sys.stderr, flush=True)

    def draw(self, curve: Sequence[tuple[int, float]]) -> None:
        self.show_figure(
            dashboard(
                curve, self.title, self.rates, self.seconds, self.staleness, idle=self.idle, mean_rate=self.mean_rate
            )
        )
        self.last_draw = time.perf_counter()

    def show_figure(self, fig) -> None:
        self.handle = shown_in_place(fig, self.handle)

    def show_link(self, link: str) -> None:
        """The address of the cluster's Dask dashboard, once the run's workers are ready."""
        if self.bar is not None or self.plot or self.lines is not None:
            print(f"Dask dashboard (workers, task stream): {link}")

    def close(self, curve: Sequence[tuple[int, float]]) -> None:
        if self.plot:
            self.draw(curve)
        if self.bar is not None:
            self.bar.close()
        if self.lines is not None and self.iterations:  # the log's last line: where the run ended
            last = [r for _, r in curve[-20:]]
            self.line({"episodes": len(curve), **({"return": f"{sum(last) / len(last):.1f}"} if last else {})})

    def finished(self, result) -> None:
        """The run ended with ``result`` (a :class:`~fragnb.runtime.result.RunResult`): the dashboard's last
        frame is redrawn from it, so that it shows what the result's summary prints: its episodes, each
        fragment's seconds (:attr:`~fragnb.runtime.result.RunResult.fragment_seconds`) and, dashed, its env
        steps/s over the whole run (the rates drawn as the run went are each over its last few iterations)."""
        self.seconds = dict(result.fragment_seconds)
        self.mean_rate = result.env_steps_per_s
        if self.plot:
            self.draw([(steps, ret) for steps, ret, _ in result.curve])
