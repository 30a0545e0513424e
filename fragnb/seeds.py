"""Seeds side by side: one loop run from several seeds (and a small grid of settings), each run on a
worker of the cluster, with a live view of every run and of each configuration's mean.

A seed must change what the setup seeds (the network's initialisation, the environments' seeds,
``args.seed``), not only the draws inside the loop, so a sweep takes the setup with the loop: a
:class:`Setup` is a cell's source, run with ``seed`` defined, or a function of the seed returning the
namespace. Run ``k`` of a sweep does on its worker what plain Python does in a fresh process: the
setup with ``seed = s``, each grid setting assigned (``args.learning_rate = 1e-3``), then the loop
under ``single`` (the loop's own statements, in that process). What it leaves is compared value for
value with plain Python in ``tests/test_sweep.py``.

A distributed policy's runs go one after another, each on the whole cluster (a run already takes
the workers it needs); ``single``'s go side by side, one worker each, and more runs than workers
queue (Dask gives a single-threaded worker one task at a time), so the cores are never
oversubscribed.

The notebook's namespace is left as it was: each run's variables are in ``SweepResult.values``.
"""

from __future__ import annotations

import ast
import contextlib
import itertools
import math
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .graph import FragmentGraph, capture
from .policies import resolve
from .runtime.result import RunResult, first_solved
from .stats import LAST_EPISODES, confidence_interval, iqm

__all__ = ["Setup", "SweepResult", "sweep", "seeds_from", "configurations", "assign"]


@dataclass(frozen=True)
class Setup:
    """What a run executes before the loop, for a given seed: ``source`` run as plain Python with
    ``seed`` defined (a ``%%setup`` cell's), or ``function(seed)`` returning the namespace."""

    name: str
    source: str | None = None
    function: Callable[[int], dict] | None = None

    def namespace(self, seed: int, settings: dict[str, Any] | None = None) -> dict:
        """A fresh namespace after the setup ran with ``seed`` and ``settings`` ({"args.learning_rate":
        1e-3}). A setting is assigned right after each top-level statement of the source that binds its
        first name (``args = Args(seed=seed)``), so what the setup derives from it afterwards (an
        optimiser's learning rate, CleanRL's ``batch_size``) follows it; a function's, after it returns.
        A KeyError names a setting the namespace has no place for."""
        settings = settings or {}
        if self.function is not None:
            ns = dict(self.function(seed))
            ns.setdefault("seed", seed)
            for key, value in settings.items():
                assign(ns, key, value)
            return ns
        ns: dict = {"seed": seed}
        tree = ast.parse(self.source)
        filename = f"<setup {self.name}>"
        pending = dict(settings)
        for statement in tree.body:
            exec(compile(ast.Module([statement], type_ignores=[]), filename, "exec"), ns)
            bound = _bound(statement)
            for key in [k for k in settings if k.split(".")[0] in bound]:
                assign(ns, key, settings[key])
                pending.pop(key, None)
        for key, value in pending.items():  # bound inside a block, or not at all: a KeyError says which
            assign(ns, key, value)
        return ns

    @classmethod
    def of(cls, setup) -> Setup:
        """``setup`` as a Setup: one already, a cell's source, or a function of the seed."""
        if isinstance(setup, Setup):
            return setup
        if isinstance(setup, str):
            try:
                ast.parse(setup)
            except SyntaxError as e:
                raise ValueError(f"the setup's line {e.lineno}: {e.msg}") from None
            return cls("setup", source=setup)
        if callable(setup):
            return cls(getattr(setup, "__name__", "setup"), function=setup)
        raise TypeError(f"setup= takes a cell's source or a function of the seed, not {type(setup).__name__}")


def _bound(statement: ast.stmt) -> set[str]:
    """Names a top-level statement binds (assignments, imports, definitions, ``for`` and ``with`` targets)."""
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {statement.name}
    if isinstance(statement, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in statement.names}
    return {n.id for n in ast.walk(statement) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def seeds_from(text: str) -> list[int]:
    """``"0-3"`` -> [0, 1, 2, 3]; ``"1,5,9"`` -> [1, 5, 9]; ``"4"`` -> [4] (the magic's ``--seeds``)."""
    seeds: list[int] = []
    for part in text.split(","):
        lo, dash, hi = part.strip().partition("-")
        try:
            seeds += list(range(int(lo), int(hi) + 1)) if dash else [int(lo)]
        except ValueError:
            raise ValueError(f"--seeds {text!r}: give seeds as 0-3 or 1,5,9") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds {text!r}: give distinct seeds, as 0-3 or 1,5,9")
    return seeds


# -- where a setting goes in the setup's namespace -------------------------------------------------
def _parent(ns: dict, name: str) -> tuple[Any, str]:
    """The object holding ``name``'s last part (``args`` for ``args.learning_rate``) and that part;
    a KeyError names what the namespace lacks."""
    first, *rest = name.split(".")
    if not all(p.isidentifier() for p in [first, *rest]):
        raise KeyError(f"{name!r} is not a dotted name such as args.learning_rate")
    if first not in ns:
        raise KeyError(f"{name!r}: the setup defines no `{first}`")
    obj, path = ns, [first]
    if not rest:
        return ns, first
    obj = ns[first]
    for part in rest[:-1]:
        path.append(part)
        obj = obj[part] if isinstance(obj, dict) else getattr(obj, part, _MISSING)
        if obj is _MISSING:
            raise KeyError(f"{name!r}: `{'.'.join(path)}` is not in the setup's namespace")
    last = rest[-1]
    present = last in obj if isinstance(obj, dict) else hasattr(obj, last)
    if not present:
        raise KeyError(f"{name!r}: `{'.'.join(path)}` has no `{last}`")
    return obj, last


_MISSING = object()


def assign(ns: dict, name: str, value: Any) -> None:
    """Set ``name`` (``"lr"``, ``"args.learning_rate"``, ``"config['lr']"`` is not one) in ``ns``."""
    obj, last = _parent(ns, name)
    if isinstance(obj, dict):
        obj[last] = value
    else:
        setattr(obj, last, value)


def configurations(params: dict[str, Iterable] | None) -> list[dict[str, Any]]:
    """Every combination of ``params``' values, in order ({} alone without a grid)."""
    if not params:
        return [{}]
    names = list(params)
    values = [list(params[n]) for n in names]
    for n, v in zip(names, values):
        if not v:
            raise ValueError(f"params[{n!r}] has no values")
    return [dict(zip(names, combo)) for combo in itertools.product(*values)]


# -- results -----------------------------------------------------------------------------------------
@dataclass
class Run:
    """One run of a sweep: its seed and settings, and what it did (``result``) or why it failed."""

    index: int
    seed: int
    settings: dict[str, Any]
    result: RunResult | None = None
    error: str = ""
    values: dict[str, Any] = field(default_factory=dict, repr=False)  # its namespace's values at the end
    unreturned: list[str] = field(default_factory=list, repr=False)  # names whose values could not travel back
    progress: list[tuple[int, float]] = field(default_factory=list, repr=False)  # (env steps, mean return) live
    #: times it ran again from its start on another worker (its worker was lost; Dask resubmitted it)
    restarts: int = 0
    iteration: int = 0  # the last iteration it reported

    @property
    def label(self) -> str:
        return f"seed {self.seed}" + "".join(f", {k}={v!r}" for k, v in self.settings.items())

    @property
    def configuration(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.settings.items()) or "all runs"


@dataclass
class SweepResult:
    """What a sweep did: every run (``runs``: each with its seed, settings, ``RunResult`` and values),
    per configuration a table of final returns (mean, IQM, 95 % bootstrap interval), time and env steps
    to a threshold per seed, and env steps/s."""

    graph: str
    policy: str
    runs: list[Run]
    seconds: float = 0.0
    threshold: float | None = None
    stopped: str = ""

    @property
    def failed(self) -> list[Run]:
        return [r for r in self.runs if r.error]

    def configurations(self) -> dict[str, list[Run]]:
        """Configuration (its settings in words) -> its finished runs, in the sweep's order."""
        out: dict[str, list[Run]] = {}
        for r in self.runs:
            out.setdefault(r.configuration, [])
            if r.result is not None:
                out[r.configuration].append(r)
        return out

    def rows(self) -> list[dict[str, Any]]:
        """One row per configuration: what :meth:`to_dataframe` and the printed table show."""
        rows = []
        for name, runs in self.configurations().items():
            finals = [r.result.mean_return(LAST_EPISODES) for r in runs if r.result.curve]
            low, high = confidence_interval(finals) if finals else (float("nan"), float("nan"))
            row = {
                "configuration": name,
                "runs": len(runs),
                "final return (mean)": sum(finals) / len(finals) if finals else float("nan"),
                "IQM": iqm(finals),
                "95% CI low": low,
                "95% CI high": high,
                "seconds (mean)": sum(r.result.seconds for r in runs) / len(runs) if runs else float("nan"),
                "env steps/s (mean)": sum(r.result.env_steps_per_s for r in runs) / len(runs) if runs else float("nan"),
            }
            if self.threshold is not None:
                reached = [_reached(r.result, self.threshold) for r in runs]
                row["env steps to threshold"] = [s for s, _ in reached]
                row["seconds to threshold"] = [t for _, t in reached]
            rows.append(row)
        return rows

    def to_dataframe(self):
        """:meth:`rows` as a pandas DataFrame, one row per configuration."""
        import pandas as pd

        return pd.DataFrame(self.rows()).set_index("configuration")

    def best(self) -> Run:
        """The best configuration's best run: the configuration with the highest mean final return,
        and in it the run (seed) with the highest."""
        rows = [r for r in self.rows() if r["runs"]]
        if not rows:
            raise ValueError("no run of the sweep finished")
        top = max(rows, key=lambda r: r["final return (mean)"])["configuration"]
        return max(self.configurations()[top], key=lambda r: r.result.mean_return(LAST_EPISODES))

    def plot(self, ax=None):
        """One faint curve per run and, per configuration, its mean with a 95 % bootstrap band."""
        from .ui.seeds import draw

        return draw(self, ax)

    def table(self) -> str:
        """The rows in words, one line per configuration."""
        lines = []
        for row in self.rows():
            line = (
                f"{row['configuration']}: {row['runs']} runs, final return {row['final return (mean)']:.1f} "
                f"(IQM {row['IQM']:.1f}, 95 % CI {row['95% CI low']:.1f}-{row['95% CI high']:.1f}), "
                f"{row['seconds (mean)']:.1f} s, {row['env steps/s (mean)']:,.0f} env steps/s"
            )
            if self.threshold is not None:
                steps = ", ".join("-" if s is None else f"{s:,}" for s in row["env steps to threshold"])
                line += f"; env steps to {self.threshold:g} per seed: {steps}"
            lines.append(line)
        lines += [f"{r.label}: failed: {r.error}" for r in self.failed]
        lines += [
            f"{r.label}: its worker was lost; it ran again from its start ({r.restarts} time{'s' * (r.restarts > 1)})"
            for r in self.runs
            if r.restarts
        ]
        return "\n".join(lines)

    def __str__(self) -> str:
        done = sum(r.result is not None for r in self.runs)
        head = f"sweep of {self.graph} under {self.policy}: {done} of {len(self.runs)} runs finished in {self.seconds:.1f} s"
        return head + (f" ({self.stopped})" if self.stopped else "") + "\n" + self.table()

    def _repr_pretty_(self, p, cycle):
        p.text(str(self))


def _reached(result: RunResult, threshold: float) -> tuple[int | None, float | None]:
    """Env steps and seconds at which ``result``'s mean return of the last 20 episodes first reached
    ``threshold`` (None, None if never)."""
    at = first_solved([r for _, r, _ in result.curve], threshold, LAST_EPISODES)
    if at is None:
        return None, None
    steps, _, seconds = result.curve[at]
    return steps, seconds


# -- one run, on a worker -----------------------------------------------------------------------------
def run_one(
    setup: Setup, cell: str, name: str, roles: dict, seed: int, settings: dict, report: Callable[[RunResult], bool]
) -> tuple[RunResult, dict, list[str]]:
    """What plain Python does in a fresh process: the setup with ``seed``, the settings, the loop (under
    ``single``, ``report`` called after every iteration; it returns True to stop there). Returns the run,
    its namespace's values that travel (pickle) and the names of those that do not."""
    import cloudpickle

    from .runtime import run

    ns = setup.namespace(seed, settings)
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


def _on_worker(setup, cell, name, roles, seed, settings, index, topic, stop_name):
    """A sweep's run as a Dask task: reports (index, env steps, mean return) after every iteration and
    ends at an iteration boundary when the sweep's stop event is set."""
    from distributed import Event, get_worker

    from .runtime.worker.generators import own_random

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
        return run_one(setup, cell, name, roles, seed, settings, report)


def sweep(
    graph: FragmentGraph | str,
    setup,
    seeds: Iterable[int] = (0, 1, 2),
    params: dict[str, Iterable] | None = None,
    policy: str = "single",
    cluster=None,
    *,
    threshold: float | None = None,
    progress=True,
    plot: bool = True,
    stop: threading.Event | None = None,
    name: str | None = None,
    roles: dict[str, str] | None = None,
    **run_options,
) -> SweepResult:
    """Run the loop once per seed (and per combination of ``params``), side by side on the cluster.

    ``graph``: a captured loop (its cell's source is what each run executes) or a cell's source.
    ``setup``: a ``%%setup`` cell's :class:`Setup`, a cell's source (run with ``seed`` defined) or a
    function of the seed returning the namespace. ``params``: a small grid, ``{"args.learning_rate":
    [2.5e-4, 1e-3]}``, each name assigned in the setup's namespace after it runs (an unknown name is
    refused before anything starts). ``policy``: ``single`` (each run on one worker, side by side) or
    a distributed policy (each run on the cluster, one after another), ``run_options`` as
    :func:`fragnb.run` takes them. ``threshold``: a return the table gives each seed's env steps and
    seconds to reach. ``progress`` and ``plot``: a bar over the runs and, in a notebook, the live figure;
    ``progress`` may instead be a :class:`~fragnb.ui.seeds.SweepView` that shows them elsewhere (the
    explorer's widgets). ``roles``: as :func:`fragnb.capture` takes them (``--role``). Ctrl-C or
    ``stop`` ends every run at an iteration boundary and keeps what finished; a run that fails is
    reported with its seed and settings, and the others go on.
    """
    setup = Setup.of(setup)
    seeds = list(seeds)
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds={seeds!r}: give distinct seeds")
    if isinstance(graph, FragmentGraph):
        cell, name, roles = graph.source, name or graph.name, roles or {}
    else:
        cell, name, roles = graph, name or "loop", roles or {}
    grid = configurations(params)
    # Everything checked before anything starts: the setup runs, the grid's names exist, the loop captures.
    try:
        ns = setup.namespace(seeds[0], grid[0])
    except KeyError as e:
        raise ValueError(f"params: {e.args[0]}") from None
    except NameError as e:
        raise ValueError(
            f"the setup {setup.name!r} uses {e.name!r}, which it does not define: each run starts it in a fresh "
            "namespace on its worker, so a setup brings its own imports and definitions"
        ) from None
    capture(cell, ns, name=name, roles=roles)
    runs = [Run(i, s, settings) for i, (settings, s) in enumerate(itertools.product(grid, seeds))]
    from .ui.seeds import SweepView

    view = (progress if isinstance(progress, SweepView) else SweepView(progress, plot)).begin(name, policy, runs)
    start = time.perf_counter()
    stopped = ""
    try:
        if not resolve(policy).mode.distributed:
            if run_options:
                raise TypeError(f"single takes no {', '.join(run_options)}")
            stopped = _side_by_side(setup, cell, name, roles, runs, cluster, view, stop)
        else:
            stopped = _one_after_another(setup, cell, name, roles, runs, policy, cluster, view, stop, run_options)
    finally:
        result = SweepResult(name, str(getattr(policy, "name", policy)), runs, time.perf_counter() - start, threshold)
        result.stopped = stopped
        view.close(result)
    return result


def _side_by_side(setup, cell, name, roles, runs, cluster, view, stop) -> str:
    from distributed import Event

    from .runtime.cluster import clusters
    from .runtime.cluster.budget import limit

    # one worker per core at most, within what this kernel may start (a class's FRAGNB_WORKERS, its
    # container's cores): more runs queue (a single-threaded worker takes one task at a time)
    budget = limit()
    client, _ = clusters.connect(cluster, workers=min(len(runs), max(1, int(budget.cores)), budget.workers))
    topic = f"fragnb-sweep-{uuid.uuid4().hex}"
    halt = Event(f"{topic}-stop", client=client)
    reports: queue.Queue = queue.Queue()
    client.subscribe_topic(topic, lambda event: reports.put(event[1]))
    futures = {
        client.submit(
            _on_worker,
            setup,
            cell,
            name,
            roles,
            r.seed,
            r.settings,
            r.index,
            topic,
            halt.name,
            pure=False,
        ): r
        for r in runs
    }
    pending = set(futures)
    stopped = ""
    try:
        while pending:
            try:  # a Ctrl-C anywhere in here is the first: every run ends at its next iteration boundary
                _pause()
                if stop is not None and stop.is_set() and not stopped:
                    stopped = "stopped: every run ended at an iteration boundary"
                    halt.set()
                _drain(reports, runs, view)
                for f in [f for f in pending if f.done()]:
                    _finish(futures[f], f, view)
                    pending.discard(f)
            except KeyboardInterrupt:
                if stopped.startswith("interrupted"):
                    raise  # a second Ctrl-C: cancel what still runs
                stopped = "interrupted: every run ended at an iteration boundary"
                halt.set()
    except BaseException:
        halt.set()
        client.cancel(list(pending))
        raise
    finally:
        _drain(reports, runs, view)
        client.unsubscribe_topic(topic)
        with contextlib.suppress(Exception):
            halt.clear()
    return stopped


def _pause() -> None:
    """Wait a little for runs to report or end (Dask's ``wait()`` takes the default client, which fragnb
    never sets)."""
    time.sleep(0.2)


def _finish(run: Run, future, view) -> None:
    """Take a finished task's outcome (or its error, with the run's seed and settings) into ``run``."""
    try:
        run.result, run.values, run.unreturned = future.result()
    except Exception as e:
        run.error = f"{type(e).__name__}: {e}"
    view.finished(run)


def _drain(reports: queue.Queue, runs: list[Run], view) -> None:
    changed = False
    while True:
        try:
            index, steps, mean, iteration = reports.get_nowait()
        except queue.Empty:
            break
        run = runs[index]
        if iteration <= run.iteration:  # its worker was lost and Dask runs it again elsewhere, from its start
            run.restarts += 1
            run.progress.clear()
        run.iteration = iteration
        run.progress.append((steps, mean))
        changed = True
    if changed:
        view.update()


def _one_after_another(setup, cell, name, roles, runs, policy, cluster, view, stop, options) -> str:
    from .runtime import run

    halt = stop or threading.Event()
    for r in runs:
        if halt.is_set():
            return "stopped: the runs not started were left out"
        ns = setup.namespace(r.seed, r.settings)
        graph = capture(cell, ns, name=name, roles=roles)

        def report(result: RunResult, r=r) -> bool:
            r.progress.append((result.env_steps, result.mean_return(LAST_EPISODES) if result.curve else math.nan))
            view.update()
            return False

        try:
            r.result = run(graph, policy, cluster, progress=False, plot=False, until=report, stop=halt, **options)
            r.values = {k: v for k, v in ns.items() if not k.startswith("__") and not _is_module(v)}
        except KeyboardInterrupt:
            halt.set()
            r.error = "interrupted"
            view.finished(r)
            return "interrupted: the run under way ended, the runs not started were left out"
        except Exception as e:
            r.error = f"{type(e).__name__}: {e}"
        view.finished(r)
    return "stopped: the runs not started were left out" if stop is not None and stop.is_set() else ""
