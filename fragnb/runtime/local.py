"""Running the cell in this process: a ``single`` run in the notebook's namespace, and dry runs on copies.

A ``single`` run executes the cell's own code, instrumented only by per-fragment timers and a
progress hook on the iteration loop, so the namespace ends exactly as plain execution of the cell
would leave it. A dry run (the safety net's plain side, :mod:`fragnb.runtime.measure`) runs the
first iterations on deep copies of the objects the cell reads, so the notebook's are untouched.
"""

from __future__ import annotations

import contextlib
import copy
import io
import itertools
import signal
import threading
import time
import types

import torch

from .. import sinks
from ..components import Env
from ..errors import FragmentError
from ..plan.instrument import DRIVER, Driver, compile_cell, instrument, plain_env_steps
from ..shards import faithful_copies
from ..streams import reached
from .job import Executor
from .result import RunResult
from .worker.generators import generators
from .worker.ledger import Ledger
from .worker.stops import Interrupts, condition_held, interrupted, own_condition
from .worker.timing import Timer
from .worker.travel import blocker, bound_to, described

__all__ = ["InNotebook", "exec_cell", "copies", "aside", "run_plain", "Dry"]


@contextlib.contextmanager
def deadline(stop: threading.Event, seconds: float | None):
    """Set ``stop`` once ``seconds`` have passed (None: never) while the run lasts: it ends after the iteration
    under way. A detached run counts its time limit on the cluster instead."""
    if not seconds:
        yield
        return
    timer = threading.Timer(seconds, stop.set)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


@contextlib.contextmanager
def torch_threads(count: int | None):
    """torch's intra-op threads set to ``count`` while the block runs (``None``: left as they are), then put back.
    Runs take one thread (``fragnb.run``'s ``threads``), as workers do, and so do the measurements that predict
    them: a loop timed on all of a busy machine's cores is timed slower than it runs."""
    before = torch.get_num_threads()
    if count is not None:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def exec_cell(graph, ns: dict, driver, trace: bool = False, count_steps: bool = False) -> None:
    """Execute the cell in ``ns`` with ``driver`` as the instrumentation calls it (timers, the
    iteration hook; with ``trace``, ``driver.done(statement index)`` after every statement; with
    ``count_steps``, ``driver.stepped(n)`` after a plain vector environment's ``step``)."""
    index = {id(s.node): s.index for s in graph.statements} if trace else None
    steps = plain_env_steps(graph, graph.statements) if count_steps else None
    code = compile_cell(
        graph.filename,
        graph.source,
        instrument(graph.tree.body, graph.owners(), hook_loop=True, trace=index, steps=steps),
    )
    ns[DRIVER] = driver
    try:
        exec(code, ns)
    finally:
        for name in (DRIVER, *graph.temps):  # capture's own names never reach the notebook
            ns.pop(name, None)


def copies(graph) -> dict:
    """Deep copies (sharing preserved) of the namespace values the cell reads; modules and classes are
    shared as they are. A function the notebook defined reads and writes the notebook's globals: its copy
    reads the copies instead, as plain Python's would read the namespace the cell runs in (the REINFORCE
    tutorial's ``finish_episode()`` reads ``policy.rewards``, which the cell appends to), and the values
    it reads are copied with the rest. What cannot be copied (a lock, an open file) is refused by name,
    with the part of it that blocks and the line that first uses it."""
    keep = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType)
    names = set(graph.inputs) | _read_by_functions(graph.inputs, graph.namespace)
    values = {n: graph.namespace[n] for n in sorted(names) if n in graph.namespace}  # what the cell takes
    # a logger, TensorBoard's writer, a W&B run: a rehearsal holds one that does nothing (fragnb.sinks)
    quiet = {n: sinks.stand_in(v, n, rehearsal=True) for n, v in values.items() if sinks.kind_of(v)}
    values = {n: v for n, v in values.items() if n not in quiet}
    memo = {id(v): v for v in values.values() if isinstance(v, keep)}
    for t in _tensors_with_graphs(values):  # deepcopy refuses them; the copy needs their values, not their history
        memo[id(t)] = t.detach().clone()
    kept = dict(memo)  # a failed deepcopy leaves its half-made copies in the memo it was given
    faithful_copies()
    try:
        ns = {"__builtins__": graph.namespace.get("__builtins__", __builtins__), **copy.deepcopy(values, memo), **quiet}
    except Exception as e:
        raise _cannot_copy(graph, values, kept) or e from None
    for name, value in ns.items():
        if isinstance(value, types.FunctionType) and value.__globals__ is graph.namespace:
            ns[name] = bound_to(value, ns)
    return ns


def _read_by_functions(names, namespace: dict) -> set[str]:
    """The globals that the notebook's functions among ``names`` read, and those their callees read."""
    found: set[str] = set()
    todo = [namespace[n] for n in names if isinstance(namespace.get(n), types.FunctionType)]
    while todo:
        fn = todo.pop()
        if fn.__globals__ is not namespace:
            continue  # a library's function reads its own module
        codes = [fn.__code__]
        while codes:
            code = codes.pop()
            codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
            for n in code.co_names:
                if n in namespace and n not in found:
                    found.add(n)
                    if isinstance(namespace[n], types.FunctionType):
                        todo.append(namespace[n])
    return found


@contextlib.contextmanager
def aside(graph=None):
    """Around a dry run on copies: the notebook's global generators (torch's, NumPy's, Python's) are left
    as they were, and the cell prints nothing. The copies hold the objects, not the generators: a dry run
    that draws moves the notebook's, and a run after it would draw other numbers than plain Python.
    With ``graph``, so are the random streams that the notebook's classes and functions the cell uses draw
    from by name (CleanRL's ``Agent.get_action_and_value`` sampling from a global ``streams``): classes are
    shared with the copies, not copied, so their methods move the notebook's streams."""
    ns = {} if graph is None else graph.namespace
    shared = reached([ns[n] for n in graph.inputs if n in ns], ns) if ns else {}
    kept = {name: s.counters.clone() for name, s in shared.items()}
    try:
        with generators(), contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        for name, counters in kept.items():
            shared[name].counters = counters


def _cannot_copy(graph, values: dict, memo: dict) -> FragmentError | None:
    """The error for a value the dry runs cannot copy: which one, the part that blocks, the line."""
    for name, value in values.items():
        found = blocker(value, lambda v: copy.deepcopy(v, dict(memo)), name)
        if found:
            return FragmentError.in_source(
                f"`{name}` ({type(value).__name__}) cannot be copied: {described(found)}. A distributed policy first runs "
                "the cell's first iteration on copies of its objects, to size the edges and check the run before any "
                "worker starts; keep locks, open files, sockets and threads out of its attributes (create them lazily, "
                "or drop them in __getstate__), or run it under 'single'",
                graph.first_use(name),
                graph.source,
            )
    return None


def _tensors_with_graphs(values: dict) -> list:
    found, todo, seen = [], list(values.values()), 0
    while todo and seen < 100_000:  # lists of per-step tensors; not a whole replay buffer's worth
        v, seen = todo.pop(), seen + 1
        if isinstance(v, torch.Tensor):
            if v.grad_fn is not None:
                found.append(v)
        elif isinstance(v, (list, tuple)):
            todo += v
        elif isinstance(v, dict):
            todo += v.values()
    return found


class Dry(Driver):
    """Driver of a dry run: no timing, the first ``iterations`` iterations only."""

    def __init__(self, graph, ns: dict, iterations: int = 1):
        self.graph, self.ns, self.iterations = graph, ns, iterations

    def iterate(self, iterable):
        for item in itertools.islice(iterable, self.iterations):
            if self.graph.stopped(self.ns):
                return
            yield item


def run_plain(graph, ns: dict, iterations: int) -> None:
    """Run the cell's first ``iterations`` iterations as plain Python in ``ns``."""
    exec_cell(graph, ns, Dry(graph, ns, iterations))


class _Driver(Driver):
    """What the instrumented cell calls in a ``single`` run: fragment timers and the iteration hook."""

    def __init__(self, graph, ns: dict, live, until=None, stop: threading.Event | None = None):
        self.graph, self.ns, self.live, self.until = graph, ns, live, until
        self.stopped = ""
        self.interrupted = stop or threading.Event()  # Ctrl-C or the explorer's Stop: end after the current iteration
        self.envs = {c: ns[c] for c, role in graph.components.items() if role == "env" and isinstance(ns[c], Env)}
        self.ledger = Ledger.start(self.envs)  # the notebook's one batch: the whole batch plain Python steps
        self.seconds = {f.name: 0.0 for f in graph.fragments}
        self.intervals: list = []
        self.timers = {name: Timer(self.seconds, name, self.intervals) for name in self.seconds}
        self.curve: list[tuple[int, float, float]] = []  # (env steps, return, seconds) per episode
        self.iterations = 0
        self.progress = None
        self.start = time.perf_counter()
        self.ticks = [self.start]

    def timer(self, name: str) -> Timer:
        return self.timers[name]

    def iterate(self, iterable):
        total = len(iterable) if hasattr(iterable, "__len__") else None
        self.progress = self.live(total, self.graph.name)
        for item in iterable:
            if self.graph.stopped(self.ns):  # `break` or a `while` condition: no further iteration
                self.stopped = own_condition()
                break
            yield item
            self.iterations += 1
            self.ticks.append(time.perf_counter())
            points = self.points()
            self.progress.update(points, self.env_steps(), seconds=self.seconds)
            if self.interrupted.is_set():
                self.stopped = interrupted(self.iterations)
                break
            if self.until is not None and self.until(points, self.iterations, self.env_steps()):
                self.stopped = condition_held(self.iterations)
                break

    def stepped(self, n: int) -> None:
        self.ledger.stepped(n)

    def env_steps(self) -> int:
        return self.ledger.env_steps(self.envs)

    def collect(self) -> list[tuple[int, float, float]]:
        """Add the episodes finished since the last call to the run's curve (kept in time order)."""
        new = [(ep.time, ep.env_id, steps, ep.ret) for ep, steps in self.ledger.episodes(self.envs)]
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

    interrupts = Interrupts(driver.interrupted)

    def on_sigint(signum, frame):
        interrupts.interrupt()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class InNotebook(Executor):
    """Runs a ``single`` placement: the cell itself, in the job's namespace (see the module's docstring)."""

    def execute(self, job) -> RunResult:
        graph = job.placement.graph
        driver = _Driver(graph, job.namespace, job.live, job.until, job.stop)
        try:
            with _interrupts_end_the_iteration(driver):
                exec_cell(graph, job.namespace, driver, count_steps=True)
        finally:
            seconds = time.perf_counter() - driver.start
            driver.close()
        ticks = driver.ticks
        intervals = [
            ("main", label, kind, a - driver.start, b - driver.start) for label, kind, a, b in driver.intervals
        ]
        return RunResult(
            graph.name,
            "single",
            driver.iterations,
            seconds,
            driver.env_steps(),
            dict(driver.seconds),
            driver.collect(),
            iteration_seconds=[b - a for a, b in zip(ticks, ticks[1:])],
            intervals=intervals,
            stopped=driver.stopped,
        )
