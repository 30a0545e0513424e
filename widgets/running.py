"""Run and Stop: the chosen policy run in a thread of the kernel, its progress in the explorer's bar,
status line and live dashboard, and Stop at an iteration boundary.

A run happens in a thread so that the widgets stay live while it lasts; its progress goes to these
widgets, whose updates reach the browser from any thread. Whatever ends a run is shown, not raised:
no cell waits for the thread. Where the cell's code raised on a worker, "Debug here" replays it in the
kernel (:func:`fragnb.debug`) and leaves its exception where ``%debug`` looks (``sys.last_value``), as a
cell that raised would: a button cannot open the debugger itself, whose prompt needs a running cell.
"""

from __future__ import annotations

import html
import sys
import threading
from collections.abc import Callable

import ipywidgets as W

from fragnb.policies import DistributionPolicy
from fragnb.runtime import replay, run
from fragnb.ui.live import LiveProgress, png

from .showing import error, picture

__all__ = ["Runner", "EMBEDDED"]

#: The clusters fragnb starts itself, which the cluster box always offers (``cuda`` where there is a GPU).
EMBEDDED = ("local", "cuda")


class Runner:
    """The cluster box, the Run and Stop buttons, and what shows a run's progress and its end.

    Parameters
    ----------
    graph : FragmentGraph
        The loop to run.
    cluster : str or distributed.Client, optional
        What the cluster box shows first.
    current : callable
        ``current()``: the chosen policy and its parameters, read when a run starts.
    predicted : callable
        ``predicted(policy, params)``: the prediction a run is compared with, or None.
    ended : callable
        Called (without arguments) once a run has ended and the buttons are live again.

    Attributes
    ----------
    result : RunResult or None
        The last run's result; ``error`` the exception that ended the last run, if one did.
    starters : list of Button
        The buttons that start a run (Run, Run seeds): disabled while one lasts.
    """

    def __init__(self, graph, cluster, current: Callable, predicted: Callable, ended: Callable[[], None]):
        self.graph = graph
        self._current, self._predicted, self._ended_callback = current, predicted, ended
        self._client = None if cluster is None or isinstance(cluster, str) else cluster  # a distributed.Client given
        self.result = self.error = None
        self._thread: threading.Thread | None = None
        self._active = False  # a run is under way (its thread may still be tidying up after)
        self._stop = threading.Event()
        self.cluster = W.Combobox(
            description="cluster",
            value=self._client.scheduler.address if self._client else cluster or "local",
            options=_clusters(),
            ensure_option=False,
            placeholder="local, cuda or tcp://host:port",
        )
        self.run_button = W.Button(description="Run", icon="play", button_style="success")
        self.stop_button = W.Button(description="Stop", icon="stop", button_style="danger", disabled=True)
        self.debug_button = W.Button(
            description="Debug here",
            icon="bug",
            button_style="warning",
            tooltip="replay the failed run in this kernel up to the error, for %debug",
            layout=W.Layout(display="none"),
        )
        self.starters = [self.run_button]
        self.status = W.HTML().add_class("fragnb-status")
        self.bar = W.IntProgress(value=0, min=0, max=1, description="iterations")
        self.link = W.HTML()
        self.plot = W.Image(format="png", layout=W.Layout(max_width="100%", display="none")).add_class("fragnb-live")
        self.run_button.on_click(lambda _: self.run())
        self.stop_button.on_click(lambda _: self.stop())
        self.debug_button.on_click(lambda _: self.debug())

    @property
    def running(self) -> bool:
        """Whether a run is under way."""
        return self._active

    def run(self) -> None:
        """Start the chosen policy in a thread (what the Run button does); the kernel stays free."""
        self.start(self._work)

    def start(self, work: Callable) -> None:
        """Start ``work(policy, cluster, params, stop)`` in a thread, unless a run is under way: what
        it raises is shown in the status line, and the buttons come back when it ends."""
        if self.running:
            return
        policy, params = self._current()
        from fragnb.runtime.cluster.clusters import ClusterError

        try:
            cluster = self._cluster()
        except ClusterError as e:  # a name that holds no Client
            self.status.value = error(e)
            return
        self.result = self.error = None
        self.debug_button.layout.display = "none"
        self._stop = threading.Event()
        self._active = True
        for button in self.starters:
            button.disabled = True
        self.stop_button.disabled = False
        self.bar.value, self.link.value = 0, ""
        picture(self.plot, b"")
        self.status.value = f"running {html.escape(policy.name)} {html.escape(str(params or ''))}: starting"
        self._thread = threading.Thread(
            target=self._go, args=(work, policy, cluster, params), name="fragnb-explorer", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """End the run after the current iteration (what the Stop button does)."""
        if self.running:
            self._stop.set()
            self.stop_button.disabled = True
            self.status.value = "stopping after the current iteration"

    def debug(self) -> None:
        """Replay the failed run in this kernel up to its error (what "Debug here" does), and leave that
        error as a cell's would be left: ``%debug`` in a cell then opens where it was raised."""
        self.status.value = "replaying the failed run in this kernel up to its error ..."
        try:
            replay.debug()
        except Exception as e:
            sys.last_type, sys.last_value, sys.last_traceback = type(e), e, e.__traceback__
            if sys.version_info >= (3, 12):
                sys.last_exc = e
            shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
            if shell is not None:
                shell.InteractiveTB.tb = None  # %debug reads sys.last_traceback, not an older cell's
            where = [line for line in getattr(e, "__notes__", []) if line.startswith("fragnb.debug()")]
            self.status.value = (
                error(e)
                + "".join(f"<br>{html.escape(line)}" for line in where)
                + "<br>Type <code>%debug</code> in a cell: it opens in the frame that raised it, with the replica's values."
            )

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the run to end; whether it has."""
        if self._thread is not None:
            self._thread.join(timeout)
        return self._thread is None or not self._thread.is_alive()

    def _go(self, work: Callable, policy: DistributionPolicy, cluster, params: dict) -> None:
        try:
            work(policy, cluster, params, self._stop)
        except BaseException as e:  # shown, not raised: no cell waits for this thread
            self.error = e
            self.status.value = error(e)
            if (failure := replay.last()) is not None and failure.error is e:  # fragnb.debug() can replay it
                self.debug_button.layout.display = ""
        finally:
            self._ended(cluster)

    def _work(self, policy: DistributionPolicy, cluster, params: dict, stop: threading.Event) -> None:
        self.result = run(self.graph, policy, cluster, progress=_WidgetView(self), stop=stop, **params)
        self.status.value = html.escape(str(self.result).splitlines()[0]) + (
            f"<br>{html.escape(self.result.stopped)}" if self.result.stopped else ""
        )
        for edge, waited in self.result.edge_waits.items():  # what each edge cost its receivers, to relax or not
            self.status.value += f"<br>{html.escape(edge)}: its receivers waited {waited:.2f} s"
        if ages := [a for per in self.result.staleness for a in per]:
            self.status.value += f"<br>staleness: mean {sum(ages) / len(ages):.2f}, max {max(ages)} versions"
        if self.result.iterations > 1:  # what ran beside what was predicted
            predicted = self._predicted(policy, params)
            if predicted is not None:
                self.status.value += f"<br>Against the prediction: {html.escape(str(predicted.compare(self.result)))}"

    def _ended(self, cluster) -> None:
        if self._stop.is_set() and cluster in (None, "cuda") and "fragnb.runtime.cluster.clusters" in sys.modules:
            sys.modules["fragnb.runtime.cluster.clusters"].shutdown(
                cluster or "local"
            )  # Stop: no worker process is left
            self.link.value = ""
        self._active = False
        for button in self.starters:
            button.disabled = False
        self.stop_button.disabled = True
        self._ended_callback()

    def _cluster(self):
        """The cluster box's value as ``run`` takes it; a name in the notebook holding a Client is that client."""
        from fragnb.runtime.cluster.clusters import named

        value = self.cluster.value.strip() or "local"
        if self._client is not None and value == self._client.scheduler.address:
            return self._client
        return None if value == "local" else named(value, self.graph.namespace)


class _WidgetView(LiveProgress):
    """A run's progress in the runner's bar, status line and dashboard image."""

    def __init__(self, runner: Runner):
        super().__init__(progress=False, plot=False, plot_every=0.5)
        self.x = runner
        self.plot = True

    def started(self, total: int | None, title: str) -> LiveProgress:
        self.x.bar.max, self.x.bar.value = total or 1, 0
        self.x.bar.description = "iterations"
        return super().started(total, title)

    def show_bar(self, postfix: dict) -> None:
        self.x.bar.value = min(self.iterations, self.x.bar.max)
        done = f"iteration {self.iterations}" + (f"/{self.total}" if self.total else "")
        self.x.status.value = html.escape(
            f"running {self.title}: {done}, " + ", ".join(f"{k} {v}" for k, v in postfix.items())
        )

    def show_figure(self, fig) -> None:
        picture(self.x.plot, png(fig))

    def show_link(self, link: str) -> None:
        self.x.link.value = f'<a href="{html.escape(link)}" target="_blank">Dask dashboard</a>'


def _clusters() -> list[str]:
    import torch

    known = (
        sys.modules["fragnb.runtime.cluster.clusters"].remote_addresses()
        if "fragnb.runtime.cluster.clusters" in sys.modules
        else []
    )
    return [*EMBEDDED[: 2 if torch.cuda.is_available() else 1], *known]
