"""A sweep's runs carried out: one loop from several seeds (and settings), each run as plain Python does
it in a fresh process, watched until they end.

:func:`fragnb.sweep` (:mod:`fragnb.seeds`) checks what it is given, makes the runs and shows them; this
module runs them. Under ``single`` they go side by side, one Dask task each on a worker of the cluster
(at most one worker per core: more runs than workers queue, since Dask gives a single-threaded worker
one task at a time), reporting after every iteration on the sweep's topic of Dask's event log
(:class:`~fragnb.runtime.events.EventStream`, which a distributed run's watch uses too). Under a
distributed policy they go one after another, each on the whole cluster through :func:`fragnb.run`.

The runtime comes before the results layer, so nothing of :mod:`fragnb.seeds` is imported here: the
setup comes as the function that makes a run's namespace, and the runs and the view as objects with
the attributes and methods :class:`SweepRun` and :class:`SweepShow` name, which this module fills in.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, Protocol

from ..graph import capture
from ..policies import resolve
from ..stats import LAST_EPISODES
from .events import EventStream
from .pipeline import run
from .result import RunResult

__all__ = ["run_sweep", "run_one", "SweepRun", "SweepShow"]

#: Makes a run's namespace: the setup run with a seed and its settings (``Setup.namespace``).
Namespace = Callable[[int, dict], dict]


class SweepRun(Protocol):
    """What the runner reads of a sweep's run (its place, seed and settings) and fills in: its result
    or error, its namespace's values, and what it reported while it ran."""

    index: int  # its place in the sweep's list of runs: its reports name it so
    seed: int
    settings: dict[str, Any]
    result: RunResult | None
    error: str
    values: dict[str, Any]
    unreturned: list[str]
    progress: list[tuple[int, float]]
    restarts: int
    iteration: int


class SweepShow(Protocol):
    """What the runner tells the sweep's view: runs reported, and a run ended (finished or failed)."""

    def update(self) -> None: ...

    def finished(self, run: SweepRun) -> None: ...


def run_sweep(
    namespace: Namespace,
    cell: str,
    name: str,
    roles: dict[str, str],
    runs: list[SweepRun],
    policy,
    cluster,
    view: SweepShow,
    stop: threading.Event | None,
    options: dict[str, Any],
) -> str:
    """Carry out ``runs``, filling each in, and say why the sweep ended early ("" if it did not).

    Parameters
    ----------
    namespace : callable
        ``namespace(seed, settings)``: a fresh namespace after the setup ran with them.
    cell, name, roles : str, str, dict
        The loop's source, its name and the roles :func:`fragnb.capture` takes.
    runs : list of SweepRun
        In the sweep's order; each is filled in as it ends.
    policy : str or DistributionPolicy
        ``single``: side by side; a distributed policy: one after another, ``options`` as
        :func:`fragnb.run` takes them.
    cluster : optional
        As :func:`fragnb.run` takes it.
    view : SweepShow
        Told when runs report and when one ends.
    stop : threading.Event, optional
        Set (the explorer's Stop) to end every run at an iteration boundary, as a first Ctrl-C does.

    Returns
    -------
    str
        "" when every run ended on its own; else what ended them, "stopped: ..." or "interrupted: ...".
    """
    if not resolve(policy).mode.on_workers():
        if options:
            raise TypeError(f"single takes no {', '.join(options)}")
        return _side_by_side(namespace, cell, name, roles, runs, cluster, view, stop)
    return _one_after_another(namespace, cell, name, roles, runs, policy, cluster, view, stop, options)


# -- one run, on a worker -----------------------------------------------------------------------------
def run_one(
    namespace: Namespace,
    cell: str,
    name: str,
    roles: dict,
    seed: int,
    settings: dict,
    report: Callable[[RunResult], bool],
) -> tuple[RunResult, dict, list[str]]:
    """What plain Python does in a fresh process: the setup with ``seed``, the settings, the loop (under
    ``single``, ``report`` called after every iteration; it returns True to stop there). Returns the run,
    its namespace's values that travel (pickle) and the names of those that do not."""
    import cloudpickle

    ns = namespace(seed, settings)
    graph = capture(cell, ns, name=name, roles=roles)
    result = run(graph, "single", progress=False, plot=False, until=report)
    values, unreturned = {}, []
    for k, v in ns.items():
        if k.startswith("__") or _is_module(v):
            continue
        try:
            cloudpickle.dumps(v)
        except Exception:
            unreturned.append(k)
        else:
            values[k] = v
    return result, values, unreturned


def _is_module(v) -> bool:
    import types

    return isinstance(v, types.ModuleType)


def _on_worker(namespace, cell, name, roles, seed, settings, index, topic, stop_name):
    """A sweep's run as a Dask task: reports (index, env steps, mean return, iteration) after every
    iteration and ends at an iteration boundary when the sweep's stop event is set."""
    from distributed import Event, get_worker

    from .worker.generators import own_random

    worker = get_worker()
    stop = Event(stop_name)
    last = [0.0]

    def report(result: RunResult) -> bool:
        now = time.perf_counter()
        if now - last[0] > 0.25 or result.iterations == 1:  # a few reports a second at most
            last[0] = now
            mean = result.mean_return(LAST_EPISODES) if result.curve else float("nan")
            worker.log_event(topic, (index, result.env_steps, mean, result.iterations))
        return stop.is_set()

    # Python's `random` drawn from this thread's own generator: the worker's threads draw from the
    # global one too (tornado's jitter), which plain Python's run would not see.
    with own_random():
        return run_one(namespace, cell, name, roles, seed, settings, report)


# -- single: side by side -----------------------------------------------------------------------------
def _side_by_side(namespace, cell, name, roles, runs, cluster, view, stop) -> str:
    from distributed import Event

    from .cluster import clusters
    from .cluster.budget import limit

    # one worker per core at most, within what this kernel may start (a class's FRAGNB_WORKERS, its
    # container's cores): more runs queue (a single-threaded worker takes one task at a time)
    budget = limit()
    client, _ = clusters.connect(cluster, workers=min(len(runs), max(1, int(budget.cores)), budget.workers))
    topic = f"fragnb-sweep-{uuid.uuid4().hex}"
    halt = Event(f"{topic}-stop", client=client)  # every run reads it after each iteration
    asked: list[bool] = []

    def ask() -> None:  # a first Ctrl-C or `stop`: every run ends at its next iteration boundary
        asked.append(True)
        halt.set()

    with EventStream(client, topic) as stream:
        args = (namespace, cell, name, roles)
        futures = {stream.submit(_on_worker, *args, r.seed, r.settings, r.index, topic, halt.name): r for r in runs}
        pending = set(futures)

        def step() -> bool:
            _pause()
            _take(stream.received(), runs, view)
            for f in [f for f in pending if f.done()]:
                _finish(futures[f], f, view)
                pending.discard(f)
            return not pending

        try:
            stream.watch(step, ask, stop)
        except BaseException:  # a second Ctrl-C, or the cluster failing: cancel what still runs
            halt.set()
            client.cancel(list(pending))
            raise
        finally:
            came: list = []
            stream.drain(came.append)  # the reports still here once the runs ended
            _take(came, runs, view)
            with contextlib.suppress(Exception):
                halt.clear()
    if stream.interrupted:
        return "interrupted: every run ended at an iteration boundary"
    return "stopped: every run ended at an iteration boundary" if asked else ""


def _pause() -> None:
    """Wait a little for runs to report or end (Dask's ``wait()`` takes the default client, which fragnb
    never sets)."""
    time.sleep(0.2)


def _finish(run: SweepRun, future, view: SweepShow) -> None:
    """Take a finished task's outcome (or its error, with the run's seed and settings) into ``run``."""
    try:
        run.result, run.values, run.unreturned = future.result()
    except Exception as e:
        run.error = f"{type(e).__name__}: {e}"
    view.finished(run)


def _take(came: list, runs: list[SweepRun], view: SweepShow) -> None:
    """Reports (index, env steps, mean return, iteration), into their runs; the view redrawn once if any came."""
    for index, steps, mean, iteration in came:
        run = runs[index]
        if iteration <= run.iteration:  # its worker was lost and Dask runs it again elsewhere, from its start
            run.restarts += 1
            run.progress.clear()
        run.iteration = iteration
        run.progress.append((steps, mean))
    if came:
        view.update()


# -- a distributed policy: one after another ----------------------------------------------------------
def _one_after_another(namespace, cell, name, roles, runs, policy, cluster, view, stop, options) -> str:
    # each run watches its own replicas (its first Ctrl-C ends it after the iteration, through `halt`)
    halt = stop or threading.Event()
    for r in runs:
        if halt.is_set():
            return "stopped: the runs not started were left out"
        ns = namespace(r.seed, r.settings)
        graph = capture(cell, ns, name=name, roles=roles)

        def report(result: RunResult, r=r) -> bool:
            r.progress.append((result.env_steps, result.mean_return(LAST_EPISODES) if result.curve else math.nan))
            view.update()
            return False

        try:
            r.result = run(graph, policy, cluster, progress=False, plot=False, until=report, stop=halt, **options)
            r.values = {k: v for k, v in ns.items() if not k.startswith("__") and not _is_module(v)}
        except KeyboardInterrupt:  # its second Ctrl-C aborted it
            halt.set()
            r.error = "interrupted"
            view.finished(r)
            return "interrupted: the run under way ended, the runs not started were left out"
        except Exception as e:
            r.error = f"{type(e).__name__}: {e}"
        view.finished(r)
    return "stopped: the runs not started were left out" if stop is not None and stop.is_set() else ""
