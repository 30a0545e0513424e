"""Runtime: execute a captured graph under a distribution policy and report what happened.

The ``single`` policy runs the cell's own code in the notebook's namespace, instrumented only by
per-fragment timers and a progress hook on the iteration loop, so the namespace ends exactly as
plain execution of the cell would leave it.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import linecache
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from .graph import FragmentGraph
from .live import LiveProgress, learning_curve, timeline
from .program import DRIVER, Timer, instrument

__all__ = ["run", "RunResult", "first_solved"]



#: Iterations between checkpoints of synchronous distributed runs. Keeping and fetching one costs 17 ms
#: for notebook 01's loop under coarse (0.4 MB, a third of an iteration; DQN's replay buffer: 30 ms,
#: 3.3 MB; benchmarks/checkpoints.py): every 10 iterations costs about 3 %, and a lost worker at most
#: 10 iterations' work.
CHECKPOINT_EVERY = 10

@dataclass
class RunResult:
    """What a run did.

    Attributes
    ----------
    graph, policy : str
        Names of the graph and of the distribution policy.
    iterations : int
        Training iterations completed.
    seconds : float
        Wall-clock time of the loop (for distributed runs, after the workers received their components).
    env_steps : int
        Environment steps taken.
    fragment_seconds : dict
        Wall-clock seconds spent in each fragment.
    curve : list of (int, float, float)
        One entry per finished episode: environment steps so far, return, seconds since start.
    client_bytes, transfer_bytes : int
        Distributed runs: bytes the notebook received while the loop ran (progress events), and
        bytes the replicas sent each other over channels, worker to worker.
    iteration_seconds : list of float
        Wall-clock duration of each training iteration.
    """

    graph: str
    policy: str
    iterations: int = 0
    seconds: float = 0.0
    env_steps: int = 0
    fragment_seconds: dict[str, float] = field(default_factory=dict)
    curve: list[tuple[int, float, float]] = field(default_factory=list, repr=False)
    client_bytes: int = 0
    transfer_bytes: int = 0
    iteration_seconds: list[float] = field(default_factory=list, repr=False)
    #: Seconds the safety net took (its first iteration both ways, on copies; 0 when off).
    check_seconds: float = 0.0
    #: Each replica's timeline: (replica, fragment or what it waits for, "busy" or "wait", start, end), seconds since the start.
    intervals: list[tuple[str, str, str, float, float]] = field(default_factory=list, repr=False)
    #: Distributed runs: messages the replicas sent each other over channels.
    messages: int = 0
    #: Why the run ended before its loop did ("" when the loop ran out): the stop condition, or the loop's own `break`.
    stopped: str = ""
    #: Decoupled policies (async, srl): per learner iteration, the staleness of each trajectory it
    #: trained on (its version minus the version of the weights that produced it).
    staleness: list[list[int]] = field(default_factory=list, repr=False)
    #: Decoupled policies: trajectories dropped as staler than ``max_staleness``, and trajectories the
    #: actors produced that the learner never took (in flight when it stopped).
    dropped: int = 0
    unconsumed: int = 0
    #: Decoupled policies: how many replicas had a trajectory waiting each time the learner took one.
    queue_depth: list[int] = field(default_factory=list, repr=False)
    #: Environments one inference call serves (each replica of the actor fragments, e.g. srl's policy workers).
    inference_batch: int | None = None
    #: Workers the run lost, each of which made it start again (``run(restarts=...)``), and from where.
    lost_workers: list[str] = field(default_factory=list, repr=False)
    #: Synchronous distributed runs: iterations between checkpoints (0: none), the seconds they cost
    #: (the slowest replica keeping its own, plus the notebook fetching them all), and the last one's bytes.
    checkpoint_every: int = 0
    checkpoint_seconds: float = 0.0
    checkpoint_bytes: int = 0
    #: ``async``: trajectories lost with an actor's worker (the one each lost actor was producing; the
    #: run goes on with the other actors, see ``lost_workers``).
    lost_trajectories: int = 0

    @property
    def env_steps_per_s(self) -> float:
        return self.env_steps / self.seconds if self.seconds else 0.0

    @property
    def returns(self) -> list[float]:
        return [r for _, r, _ in self.curve]

    def mean_return(self, last: int = 20) -> float:
        """Mean return of the last ``last`` finished episodes (NaN before any)."""
        tail = self.returns[-last:]
        return sum(tail) / len(tail) if tail else float("nan")

    @property
    def seconds_per_iteration(self) -> float:
        """Median duration of an iteration after the first (which pays for warm-up)."""
        steady = sorted(self.iteration_seconds[1:] or self.iteration_seconds)
        return steady[len(steady) // 2] if steady else float("nan")

    def solved_at(self, threshold: float = 475.0, window: int = 20) -> tuple[int, float] | None:
        """(env steps, seconds) when the mean of the last ``window`` returns first reached ``threshold``."""
        i = first_solved(self.returns, threshold, window)
        return None if i is None else self.curve[i][::2]

    def plot(self):
        """The learning curve as a matplotlib ``Figure`` (decoupled policies: with the staleness per learner iteration below)."""
        ages = [sum(per) / len(per) for per in self.staleness if per]
        return learning_curve([(s, r) for s, r, _ in self.curve], f"{self.graph} ({self.policy})", staleness=ages)

    def timeline(self, start: float = 0.0, end: float | None = None):
        """When each replica worked on which fragment and when it waited for another group, as a
        Gantt-style matplotlib ``Figure`` (seconds ``start`` to ``end`` of the loop; all by default)."""
        end = float("inf") if end is None else end
        shown = [(r, label, kind, max(a, start), min(b, end)) for r, label, kind, a, b in self.intervals if b > start and a < end]
        return timeline(shown, f"{self.graph} ({self.policy}): what each replica does")

    def __str__(self) -> str:
        lines = [
            f"{self.graph} under {self.policy!r}: {self.iterations} iterations, {self.env_steps} env steps "
            f"in {self.seconds:.2f} s ({self.env_steps_per_s:,.0f} steps/s); "
            f"mean return of last 20 episodes {self.mean_return():.1f}"
        ]
        if self.stopped:
            lines.append(f"  stopped: {self.stopped}")
        for lost in self.lost_workers:
            lines.append(f"  {lost}")
        if self.lost_trajectories:
            lines.append(f"  trajectories lost in flight with their actors' workers: {self.lost_trajectories}")
        if self.staleness:
            ages = [a for per in self.staleness for a in per]
            lines.append(f"  staleness: mean {sum(ages) / len(ages):.2f}, max {max(ages)} versions over {len(ages)} trajectories; "
                         f"{self.dropped} dropped as too stale, {self.unconsumed} unconsumed at the end; "
                         f"{sum(self.queue_depth) / max(len(self.queue_depth), 1):.1f} replicas waiting per trajectory taken; "
                         f"{self.inference_batch} environments per inference call")
        total = sum(self.fragment_seconds.values()) or 1.0
        for name, sec in sorted(self.fragment_seconds.items(), key=lambda kv: -kv[1]):
            lines.append(f"  {name:<14} {sec:8.3f} s  {100 * sec / total:5.1f} %")
        return "\n".join(lines)

    def _repr_pretty_(self, p, cycle):
        p.text(str(self))


def first_solved(returns: list[float], threshold: float = 475.0, window: int = 20) -> int | None:
    """Index of the first episode at which the mean of the last ``window`` returns reaches ``threshold``."""
    total = 0.0
    for i, r in enumerate(returns):
        total += r - (returns[i - window] if i >= window else 0.0)
        if i + 1 >= window and total / window >= threshold:
            return i
    return None


def run(graph: FragmentGraph, policy="single", cluster=None, *, progress: bool | LiveProgress = True, plot: bool = True,
        check: bool = True, until: Callable[[RunResult], bool] | None = None, stop: threading.Event | None = None,
        threads: int | None = 1, dashboard: bool = True, restarts: int = 2, checkpoint_every: int = CHECKPOINT_EVERY,
        **params) -> RunResult:
    """Run a captured training loop under a distribution policy.

    Parameters
    ----------
    graph : FragmentGraph
        From :func:`fragnb.capture` or ``%%fragment``.
    policy : str or DistributionPolicy
        ``"single"`` runs in this process; every other registered policy (``"coarse"``, ``"fine"``,
        ``"multi_learner"``, ``"async"``, ``"srl"``, ``"gpu_only"``, your own) on Dask.
    cluster : optional
        Where distributed policies run: ``None``/``"local"`` (an embedded LocalCluster on 127.0.0.1,
        kept for the kernel's next runs), ``"cuda"``, a ``"tcp://host:port"`` scheduler or a
        ``distributed.Client``. ``single`` takes none.
    progress, plot : bool
        Show a progress bar, and a live dashboard in a notebook (learning curve, env steps/s over
        time, each fragment's share of the time). ``progress`` may instead be a
        :class:`~fragnb.live.LiveProgress` that shows them elsewhere (the explorer's widgets).
    check : bool
        Distributed policies whose replicas must reproduce plain Python (all but data-parallel ones
        such as ``multi_learner``) first run the cell's first iteration both ways on copies, in this
        process, and refuse to run if any variable or component differs (:mod:`fragnb.check`).
        Its cost is ``RunResult.check_seconds``.
    until : callable, optional
        A stop condition, e.g. ``lambda r: r.mean_return() >= 475``: called after every iteration
        with the run so far (a ``RunResult``: its ``curve``, ``iterations`` and ``env_steps``), it
        ends the run after the first iteration where it holds. The namespace is then what plain
        Python leaves after that many iterations, under every policy, and ``RunResult.stopped``
        says why the run ended.
    stop : threading.Event, optional
        Setting it (from another thread: the explorer's Stop button) ends the run after the current
        iteration, as ``until`` and a first Ctrl-C do.
    restarts, checkpoint_every : int
        Synchronous distributed policies keep every replica's state in this process after every
        ``checkpoint_every`` iterations (0: never; ``RunResult.checkpoint_seconds`` is what it cost). A
        run that loses a worker (killed, out of memory) starts again on fresh workers from the last
        checkpoint, up to ``restarts`` times; every random draw is counter-based, so the result is the
        uninterrupted run's, weight for weight, and ``RunResult.lost_workers`` says what was lost. When
        it cannot go on (no restarts left, no workers to replace the lost one), the error says so and
        the namespace holds the last checkpoint: plain Python's state after that many iterations.
        ``async`` goes on without an actor whose worker died, losing the trajectory it was producing
        (``RunResult.lost_trajectories``); losing its learner, or any worker under ``srl``, stops
        the run with the error, the namespace untouched.
    dashboard : bool
        Whether fragnb's own cluster serves Dask's dashboard (bokeh: task stream, workers' CPU and
        memory) on a free 127.0.0.1 port. Without it the scheduler still answers Dask's health checks
        there (distributed has no switch for that), and serves no dashboard. A cluster started the
        other way is replaced.
    threads : int or None
        torch's intra-op threads in this process while the run lasts (``single``'s loop, the safety
        net); ``None`` keeps torch's setting. 1 by default, as in Dask's workers: the small networks of
        RL loops gain nothing from splitting an operation, and with a browser or other processes on
        the cores, two threads made notebook 01 four times slower per iteration on a 2-core machine.
        One setting everywhere also makes every policy round floats alike.
    **params
        The policy's parameters, e.g. ``actors=2``, ``learners=2``, ``max_staleness=1`` (async, srl),
        ``policy_workers=1, ring=2`` (srl); checked before anything starts.

    Returns
    -------
    RunResult
        Timing, throughput and the learning curve. The loop's variables and the components'
        trained state are in the graph's namespace, as after running the cell as plain Python.
    """
    placement = graph.place(policy, **params)  # every parameter checked before a worker starts
    with _torch_threads(threads):
        return _run(graph, placement, cluster, _live(progress, plot), check, until, stop, dashboard, restarts, checkpoint_every)


@contextlib.contextmanager
def _torch_threads(count: int | None):
    before = torch.get_num_threads()
    if count is not None:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _live(progress: bool | LiveProgress, plot: bool) -> Callable[[int | None, str], LiveProgress]:
    """How the run shows its progress, given its iterations and title."""
    if isinstance(progress, LiveProgress):
        return progress.started
    return lambda total, title: LiveProgress(total, title, progress, plot)


def _run(graph: FragmentGraph, placement, cluster, live, check: bool, until, stop, dashboard: bool, restarts: int,
         checkpoint_every: int) -> RunResult:
    if placement.policy.name == "single":
        if cluster is not None:
            raise ValueError("the 'single' policy runs in this process and takes no cluster; choose a distributed policy")
        graph.last_run = _run_in_process(graph, live, until, stop)
    else:
        from .executor import run_distributed  # Dask is imported only when a distributed policy runs

        if placement.policy.fused:
            for note in placement.notes:
                print(f"fragnb: {placement.policy.name}: {note}", file=sys.stderr)
            if cluster is None and any(device == "cuda" for _, device in placement.groups.values()):
                cluster = "cuda"  # one worker per GPU: each replica on a device of its own

        safety_net = None
        if check and placement.exact and not placement.policy.collectives:
            from .check import check as check_first_iteration

            safety_net = functools.partial(check_first_iteration, placement)
        o = run_distributed(placement, cluster, live, _on_curve(until, graph.name, placement.policy.name), stop, dashboard, safety_net,
                            restarts, checkpoint_every)
        graph.last_run = RunResult(graph.name, placement.policy.name, o.iterations, o.seconds, o.env_steps, o.fragment_seconds,
                                   o.curve, o.client_bytes, o.transfer_bytes, o.iteration_seconds, o.check_seconds, o.intervals, o.messages,
                                   o.stopped, o.staleness, o.dropped, o.unconsumed, o.queue_depth, placement.inference_batch, o.lost,
                                   o.checkpoint_every, o.checkpoint_seconds, o.checkpoint_bytes, o.lost_trajectories)
    return graph.last_run


class _Driver:
    """What the instrumented cell calls: fragment timers and the iteration hook."""

    def __init__(self, graph: FragmentGraph, live, until=None, stop: threading.Event | None = None):
        self.graph, self.live, self.until = graph, live, until
        self.stopped = ""
        self.interrupted = stop or threading.Event()  # Ctrl-C or the explorer's Stop: end after the current iteration
        self.envs = [graph.namespace[c] for c, role in graph.components.items() if role == "env"]
        self.seen = [len(e.episodes) for e in self.envs]
        self.steps0 = [e.env_steps for e in self.envs]
        self.seconds = {f.name: 0.0 for f in graph.fragments}
        self.intervals: list = []
        self.timers = {name: Timer(self.seconds, name, self.intervals) for name in self.seconds}
        self.curve: list[tuple[int, float, float]] = []  # (env steps, return, seconds) per episode
        self.iterations = 0
        self.progress: LiveProgress | None = None
        self.start = time.perf_counter()
        self.ticks = [self.start]

    def timer(self, name: str) -> Timer:
        return self.timers[name]

    def iterate(self, iterable):
        total = len(iterable) if hasattr(iterable, "__len__") else None
        self.progress = self.live(total, self.graph.name)
        for item in iterable:
            if self.graph.stopped(self.graph.namespace):  # `break` or a `while` condition: no further iteration
                self.stopped = "the loop's own condition (`break` or `while`)"
                break
            yield item
            self.iterations += 1
            self.ticks.append(time.perf_counter())
            points = self.points()
            self.progress.update(points, self.env_steps(), seconds=self.seconds)
            if self.interrupted.is_set():
                self.stopped = f"interrupted: stopped after iteration {self.iterations}, as asked"
                break
            if self.until is not None and self.until(points, self.iterations, self.env_steps()):
                self.stopped = f"the stop condition held after iteration {self.iterations}"
                break

    def env_steps(self) -> int:
        return sum(e.env_steps - s for e, s in zip(self.envs, self.steps0))

    def collect(self) -> list[tuple[int, float, float]]:
        """Add the episodes finished since the last call to the run's curve (kept in time order)."""
        new = []
        for k, (env, steps0) in enumerate(zip(self.envs, self.steps0)):
            episodes = env.episodes[self.seen[k] :]
            self.seen[k] += len(episodes)
            new += [(ep.time, ep.env_id, ep.step * env.num_envs - steps0, ep.ret) for ep in episodes]
        # in plain Python's order (step, then environment), so that every policy draws the same curve
        self.curve += [(steps, ret, t - self.start) for t, _, steps, ret in sorted(new, key=lambda e: (e[2], e[1]))]
        return self.curve

    def points(self) -> list[tuple[int, float]]:
        return [(s, r) for s, r, _ in self.collect()]

    def close(self) -> None:
        if self.progress is not None:
            self.progress.close(self.points())


@contextlib.contextmanager
def _interrupts_end_the_iteration(driver: _Driver):
    """While the loop runs, a first Ctrl-C (SIGINT) ends it after the current iteration, as a
    distributed run does; a second one interrupts at once. Signals reach only the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_sigint(signum, frame):
        if driver.interrupted.is_set():
            raise KeyboardInterrupt
        driver.interrupted.set()
        print("fragnb: stopping after the current iteration (interrupt again to abort)", file=sys.stderr)

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _on_curve(until, graph: str, policy: str):
    """``until`` (on a RunResult) as the runners call it: on (curve, iterations, env steps)."""
    if until is None:
        return None

    def holds(curve: list, iterations: int, env_steps: int) -> bool:
        return bool(until(RunResult(graph, policy, iterations, env_steps=env_steps, curve=[(s, r, 0.0) for s, r in curve])))

    return holds


def _run_in_process(graph: FragmentGraph, live, until=None, stop=None) -> RunResult:
    filename = f"<fragment {graph.name}>"
    # Tracebacks then show the user's cell lines.
    linecache.cache[filename] = (len(graph.source), None, graph.source.splitlines(True), filename)
    owner = {id(s.node): graph.fragment_of(s).name for s in graph.statements}
    module = ast.fix_missing_locations(ast.Module(instrument(graph.tree.body, owner, hook_loop=True), []))
    code = compile(module, filename, "exec")
    driver = _Driver(graph, live, _on_curve(until, graph.name, "single"), stop)
    ns = graph.namespace
    ns[DRIVER] = driver
    try:
        with _interrupts_end_the_iteration(driver):
            exec(code, ns)
    finally:
        ns.pop(DRIVER, None)
        for temp in graph.temps:  # capture's own names never reach the notebook
            ns.pop(temp, None)
        seconds = time.perf_counter() - driver.start
        driver.close()
    ticks = driver.ticks
    intervals = [("main", label, kind, a - driver.start, b - driver.start) for label, kind, a, b in driver.intervals]
    return RunResult(graph.name, "single", driver.iterations, seconds, driver.env_steps(), dict(driver.seconds), driver.collect(),
                     iteration_seconds=[b - a for a, b in zip(ticks, ticks[1:])], intervals=intervals, stopped=driver.stopped)
