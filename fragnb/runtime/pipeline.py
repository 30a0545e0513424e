"""run(): the one way through a run — place once, plan once, check, execute, result.

``single`` runs the cell itself in the notebook (:class:`~fragnb.runtime.local.InNotebook`); every
other policy is planned once into a Script, which the safety net walks first with every replica a
thread here (:mod:`fragnb.runtime.check`), and then a Dask cluster's workers (:class:`~fragnb.runtime.plane.OnDask`).
"""

from __future__ import annotations

import inspect
import os
import sys
import threading
from collections.abc import Callable

import torch

from ..arguments import Accepts, boolean, either, event, function, instance, optional, whole
from ..arguments import check as check_arguments
from ..errors import FragmentError
from ..graph import FragmentGraph
from ..plan.recording import recorded, recording_of
from ..plan.script import CHECKPOINT_EVERY, CHECKPOINT_SHARE, Preflight, RandomStart, Script
from ..policies import Placement
from ..sinks import refuse_built_in_cell
from ..text import caveat
from .draws import Draws, announcement, find_draws, notebook_group, refuse_inexact, whole_copies
from .job import Job
from .local import InNotebook, deadline, torch_threads
from .result import RunResult
from .worker.generators import states
from .worker.travel import classes_kept

__all__ = ["run", "run_placement", "preflight", "ACCEPTS", "CHECKPOINT_EVERY", "CHECKPOINT_SHARE"]

#: What :func:`run` and :func:`run_placement` accept besides the graph, the policy and its parameters
#: (:func:`~fragnb.policies.place` checks those): refused before the loop's first statement runs.
ACCEPTS = {
    "cluster": optional(
        either(
            instance(str, "'local', 'cuda', a 'tcp://host:port' or 'tls://host:port' scheduler address"),
            Accepts(lambda v: callable(getattr(v, "scheduler_info", None)), "a distributed.Client"),
        )
    ),
    "progress": either(boolean, Accepts(lambda v: callable(getattr(v, "started", None)), "a LiveProgress")),
    "plot": boolean,
    "check": boolean,
    "until": optional(function("a function of the run so far that returns True to stop it (lambda r: ...)")),
    "stop": optional(event),
    "threads": optional(whole(1)),
    "dashboard": boolean,
    "restarts": whole(0),
    "checkpoint_every": optional(whole(0)),
    "exact": boolean,
    "record": optional(
        instance((str, list, tuple, dict), "a fragment's name, a list of them, or a dict of name -> iterations")
    ),
    "checkpoint_dir": optional(instance((str, os.PathLike), "a directory or an fsspec URL (memory://, s3://...)")),
    "resume": optional(instance((str, os.PathLike), "a checkpoint_dir a run wrote, or one checkpoint file in it")),
    "detach": either(boolean, instance(str, "a name for the detached run")),
    "time_limit": optional(
        Accepts(lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0, "seconds, more than 0")
    ),
}


def run(
    graph: FragmentGraph,
    policy="single",
    cluster=None,
    *,
    progress=True,
    plot: bool = True,
    check: bool = True,
    until: Callable[[RunResult], bool] | None = None,
    stop: threading.Event | None = None,
    threads: int | None = 1,
    dashboard: bool = True,
    restarts: int = 2,
    checkpoint_every: int | None = None,
    exact: bool = False,
    record=None,
    checkpoint_dir=None,
    resume=None,
    detach: bool | str = False,
    time_limit: float | None = None,
    **params,
) -> RunResult:
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
        ``distributed.Client``. ``single`` takes none. Each replica holds a worker thread for the
        whole run; where the cluster has fewer threads than replicas (fragnb's own starts at most 4
        worker processes per core), a group's replicas share tasks as threads, each drawing its own
        random numbers (``RunResult.processes`` says how many processes the run used).
    progress, plot : bool
        Show a progress bar, and a live dashboard in a notebook (learning curve, env steps/s over
        time, each fragment's share of the time). ``progress`` may instead be a
        :class:`~fragnb.ui.live.LiveProgress` that shows them elsewhere (the explorer's widgets).
    check : bool
        Distributed policies whose replicas must reproduce plain Python (all but data-parallel ones
        such as ``multi_learner``) first run the cell's first two iterations (one under ``async`` and ``srl``) both
        ways on copies, in this process, and refuse to run if any variable or component differs (:mod:`fragnb.runtime.check`).
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
        ``checkpoint_every`` iterations (0: never; ``RunResult.checkpoint_seconds`` is what it cost); by
        default (None) every 10 at the most, and no more often than keeps them under 5 % of the run's
        time (one replica times them and tells the others, so that all keep the same iteration). A
        run that loses a worker (killed, out of memory) starts again on fresh workers from the last
        checkpoint, up to ``restarts`` times; every random draw is counter-based, so the result is the
        uninterrupted run's, weight for weight, and ``RunResult.lost_workers`` says what was lost. When
        it cannot go on (no restarts left, no workers to replace the lost one), the error says so and
        the namespace holds the last checkpoint: plain Python's state after that many iterations.
        ``async`` goes on without an actor whose worker died, losing the trajectory it was producing
        (``RunResult.lost_trajectories``); losing its learner, or any worker under ``srl``, stops
        the run with the error, the namespace untouched.
    exact : bool
        Refuse, before anything starts, a run that could only be *statistical*. A distributed run is
        *exact* (the namespace ends as plain Python's) when every random draw comes from
        per-environment streams, or from a global generator in one group of one replica (a
        learner's minibatch shuffle: it starts from the notebook's generator states). Global draws in
        replicated statements (``Categorical(logits).sample()`` in each actor) make it statistical:
        each replica draws from its own generators, seeded from ``torch.initial_seed()`` and its
        name; the run says so once, naming the line of each draw (``RunResult.guarantee``, ``.draws``),
        and the safety net checks only the structure of the values those draws reach. With
        ``check=False`` the draws are looked for only if ``exact`` (``RunResult.guarantee`` is then
        ``"unchecked"``), and the driver's group starts from the notebook's generator states.
        Exact means the same bits at any replica count: each replica computes its rows on the whole
        batch's shape (:mod:`fragnb.rows`), and the safety net compares its values bit for bit. Where a
        statement still rounds otherwise on a share, the run says so before it starts, naming the line,
        and its guarantee is ``"rounding"`` (plain Python's values within float rounding; a long run
        drifts as another seed's would); ``exact`` refuses it.
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
    checkpoint_dir : str or path, optional
        Where a synchronous run also writes each checkpoint it keeps (a directory, or an fsspec URL such as
        ``memory://ppo`` or ``s3://bucket/ppo``): every replica's state, the iteration and what the run is
        (:mod:`fragnb.runtime.store`), on a thread of its own, renamed into place once whole, the newest two
        kept. A place that cannot be written is refused before anything starts.
    resume : str or path, optional
        A ``checkpoint_dir`` (or one checkpoint file) to go on from: in a new kernel, after the setup cells
        ran again, the run starts from the newest checkpoint there and ends as the uninterrupted run would
        have. One of another cell, policy, parameters or components is refused, naming the difference.
    detach : bool or str
        On a scheduler that outlives this kernel (``cluster="tcp://..."``), with a ``checkpoint_dir`` the
        cluster's workers can write: check and plan the run here, then hand its control to the cluster and
        return at once a :class:`~fragnb.runtime.detached.Detached` (the notebook may close). The run is
        named after the cell, or ``detach="NAME"``; :func:`fragnb.runs` lists and cancels a cluster's runs,
        :func:`fragnb.attach` follows one from any kernel and, at its end, leaves the namespace as this call
        would have (:mod:`fragnb.runtime.detached`).
    time_limit : float, optional
        Seconds after which the run ends after its current iteration, as ``stop`` does (a detached run
        counts them on the cluster: one nobody attaches to still ends).
    record : list or dict, optional
        Fragments to record, by the names the drawing shows (``["actor@step"]``), or with the iterations
        to record each at, counted from 0 (``{"actor@step": [3, 4]}``; all by default): every replica keeps
        what each of their statements read before it ran and left after it, within
        :data:`~fragnb.plan.recording.RECORD_BYTES` for the run, and :meth:`RunResult.replay` runs them again
        here. Distributed policies only.

    Returns
    -------
    RunResult
        Timing, throughput and the learning curve. The loop's variables and the components'
        trained state are in the graph's namespace, as after running the cell as plain Python.

    Examples
    --------
    Notebook 01's PPO loop, small, captured from this namespace (``globals()``, as a notebook's), and
    run under the default ``single``, in this process:

    >>> import torch, fragnb
    >>> from fragnb.algos.ppo import SMALL_LOOP, small_setup
    >>> globals().update(small_setup(seed=0))  # notebook 01's components: 4 envs, 8 steps
    >>> graph = fragnb.capture(SMALL_LOOP, globals(), name="ppo")
    >>> result = fragnb.run(graph, progress=False, plot=False)
    >>> result.iterations, result.env_steps, result.guarantee
    (2, 64, 'exact')
    >>> graph.last_run is result
    True

    The loop's variables are in the namespace, as after the cell ran as plain Python:

    >>> it, sorted(stats)
    (1, ['entropy', 'policy_loss', 'value_loss'])

    A distributed policy's parameters are checked before any worker starts:

    >>> fragnb.run(graph, "coarse", actors=3)
    Traceback (most recent call last):
        ...
    fragnb.errors.FragmentError: line 2: `env` has num_envs=4, which 3 replicas of 'env@cell' under 'coarse'
    cannot split evenly: ...
    """
    options = {name: value for name, value in locals().items() if name in OPTIONS}
    placement = graph.place(policy, **params)  # every parameter checked before a worker starts
    result = run_placement(placement, cluster, **options)
    if isinstance(result, RunResult):  # a detached run's is fragnb.attach's to keep
        graph.last_run = result  # the user's record of the latest run
    return result


#: :func:`run`'s keyword options and their defaults, from its signature (stated once, there).
OPTIONS = {
    name: p.default for name, p in inspect.signature(run).parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY
}


def run_placement(placement: Placement, cluster=None, **options) -> RunResult:
    """:func:`run` for a graph already placed (the magic places it to draw it first), with :func:`run`'s
    keyword options; the caller keeps the result (``graph.last_run``)."""
    if unknown := sorted(set(options) - set(OPTIONS)):
        raise TypeError(f"run() takes the options {sorted(OPTIONS)}, not {unknown}")
    check_arguments("run", ACCEPTS, cluster=cluster, **options)
    o = {**OPTIONS, **options}
    graph, policy, stop = placement.graph, placement.policy, o["stop"]
    on_curve = _on_curve(o["until"], graph.name, policy.name)
    recording = recording_of(graph, o["record"])  # a fragment it does not have is refused before anything starts
    if recording.fragments and not policy.mode.on_workers():
        raise ValueError(
            "record= keeps what replicas computed on workers; a 'single' run computes in this kernel, where the "
            "cell's variables and %debug show it: choose a distributed policy to record its fragments"
        )
    live, views = _remembered(_live(o["progress"], o["plot"]))
    if o["detach"] and not policy.mode.on_workers():
        raise ValueError(
            "the 'single' policy runs in this kernel, and cannot go on without it: choose a distributed policy"
        )
    stop = stop or threading.Event()
    with torch_threads(o["threads"]), deadline(stop, None if o["detach"] else o["time_limit"]):
        if not policy.mode.on_workers():
            if cluster is not None:
                raise ValueError(
                    "the 'single' policy runs in this process and takes no cluster; choose a distributed policy"
                )
            if o["checkpoint_dir"] is not None or o["resume"] is not None:
                raise ValueError(
                    "the 'single' policy runs the cell in this kernel and keeps no checkpoints (checkpoint_dir=, "
                    "resume=): choose a synchronous distributed policy (coarse, fine, multi_learner, data_parallel)"
                )
            result = InNotebook().execute(Job(placement, None, graph.namespace, live, on_curve, stop))
        else:
            result = _distributed(placement, cluster, live, on_curve, stop, recording, o)
    if views:  # the last view that showed the run (a restarted run shows each attempt in one) ends on its result
        views[-1].finished(result)
    return result


def _distributed(placement: Placement, cluster, live, until, stop, recording, options: dict) -> RunResult:
    from .plane import OnDask  # Dask is imported only when a distributed policy runs

    check, exact, checkpoint_every = options["check"], options["exact"], options["checkpoint_every"]
    mode = placement.policy.mode
    refuse_built_in_cell(placement.graph, placement.policy.name)  # its logs are the notebook's to write
    if options["detach"]:  # refused before the safety net runs anything
        from .detached import detachable

        detachable(cluster, options)
    for note in mode.announced(placement.notes):
        caveat(f"{placement.policy.name}: {note}")
    cluster = mode.cluster(cluster, [device for _, device in placement.groups.values()])
    before = preflight(placement, check, exact)
    script = Script.of(
        placement, until=until, checkpoint_every=checkpoint_every, preflight=before, record=recording
    )  # the run's one plan
    if script.recording.fragments:
        print(f"fragnb: {recorded(script.recording)}", file=sys.stderr)
    store, resumed = _storage(placement, script, options)
    job = Job(placement, script, placement.graph.namespace, live, until, stop, before)
    job.payloads  # noqa: B018 -- what cannot travel fails here, before any worker
    if options["detach"]:
        from .detached import detach

        name = options["detach"] if isinstance(options["detach"], str) else placement.graph.name
        return detach(job, cluster, options["restarts"], store, name, options["time_limit"], live)
    with classes_kept(job.namespace):  # what comes back is unpickled here
        return OnDask(cluster, options["dashboard"], options["restarts"], store, resumed).execute(job)


def _storage(placement: Placement, script: Script, options: dict):
    """The run's checkpoint directory (:class:`~fragnb.runtime.store.Store`) and the checkpoint it resumes,
    each None where not asked for; what cannot be is refused here, before any worker starts."""
    where, resume = options["checkpoint_dir"], options["resume"]
    if where is None and resume is None:
        return None, None
    name = placement.policy.name
    if where is not None and not script.checkpoint_every:
        why = "checkpoint_every=0 asks for none" if placement.policy.mode.checkpoint_every(1) else f"{name} keeps none"
        raise FragmentError(f"checkpoint_dir={str(where)!r} would stay empty: {why} (a synchronous policy keeps them)")
    if resume is not None and not placement.policy.mode.checkpoint_every(1):
        raise FragmentError(f"resume={str(resume)!r}: a {name} run keeps no checkpoints, and cannot go on from one")
    from .store import Store, resumable

    resumed = None if resume is None else resumable(resume, placement)
    store = None if where is None else Store(where, placement)
    if resumed is not None:
        print(f"fragnb: resumes from {resumed.path}: the state after iteration {resumed.iteration}", file=sys.stderr)
    if store is not None:
        print(f"fragnb: writes its checkpoints to {store.url}", file=sys.stderr)
    return store, resumed


def preflight(placement: Placement, check: bool, exact: bool) -> Preflight:
    """What a distributed run learns before it is planned, and says before it starts: the safety net's
    findings where the mode compares values (:meth:`~fragnb.policies.modes.Mode.checked`), the draws alone
    with ``check=False, exact=True``, else nothing; where the generators start; the guarantee."""
    mode = placement.policy.mode
    stale = mode.stale(placement.params)
    if stale and exact:  # refused from the placement alone, before the safety net runs anything
        raise FragmentError(
            f"the exact guarantee was asked for, but under {placement.policy.name!r} {stale}. Leave out --exact "
            "(exact=False) for a statistical run, or keep the bound at 0"
        )
    seconds, draws, shapes, rounding = 0.0, None, {}, ""  # draws None: not looked for (--no-check)
    if mode.checked(placement.exact):
        if check:
            from .check import check as safety_net

            seconds, draws, shapes, rounding = safety_net(placement, exact=exact)
        elif exact:
            draws = find_draws(placement.graph)
            refuse_inexact(placement, draws, exact)
    if draws is not None and (note := announcement(placement, draws)) is not None:
        caveat(note)
    if mode.whole_copies() and not placement.exact:
        caveat(whole_copies(placement))
    elif draws is None:
        caveat(_unchecked(placement, check))
    if draws is None:
        guarantee, lines = mode.unchecked(placement.exact), ()
    else:
        guarantee, lines = ("exact", ()) if draws.exact(placement) else ("statistical", tuple(draws.lines(placement)))
    if rounding and guarantee == "exact":  # the same algorithm and numbers, other last bits
        if exact:
            raise FragmentError(
                f"the exact guarantee was asked for, but {rounding.split(': it reproduces')[0]}: this placement "
                "reproduces plain Python only within float rounding. 'single' runs the loop bit for bit; leave out "
                "--exact (exact=False) to run it labelled 'rounding'"
            )
        caveat(f"within rounding: {rounding}")
        guarantee, lines = "rounding", (rounding,)
    if stale:  # older weights: statistical, whatever the run draws
        caveat(f"statistical run: {stale}")
        guarantee, lines = "statistical", (*lines, stale)
    return Preflight(_random_start(placement, draws), shapes, seconds, guarantee, lines)


def _unchecked(placement: Placement, check: bool) -> str:
    """What a run that the safety net did not compare with plain Python says before it starts."""
    if not check:
        return (
            f"the safety net is off (check=False, --no-check): nothing compares this {placement.policy.name!r} run with "
            "plain Python before it starts, and what would differ shows only in its results"
        )
    return (
        f"{placement.policy.name!r} averages gradients over its replicas, so its weights equal plain Python's only "
        "statistically: the safety net does not run for it, and nothing compares this run's values with plain "
        "Python's (the guarantee is 'data-parallel')"
    )


def _random_start(placement: Placement, draws: Draws | None) -> RandomStart:
    """Where each replica's global generators start: the one drawing group of one replica from the
    notebook's states (it draws what plain Python draws), every other replica from its own seed
    (:func:`~fragnb.runtime.draws.notebook_group` decides which). ``draws`` None: not looked for."""
    counts = {g: n for g, (n, _) in placement.groups.items()}
    group = notebook_group(counts, None if draws is None else draws.groups(placement), placement.home)
    return RandomStart(
        seed=torch.initial_seed(),
        group=group,
        states=None if group is None else states(),
        drawn=None if draws is None else frozenset(draws.statements),
        statistical=draws is not None and not draws.exact(placement),
    )


def _live(progress, plot: bool) -> Callable:
    """How the run shows its progress, given its iterations and title: ``progress`` itself when it is
    a LiveProgress (the explorer's widgets), else a bar and dashboard in the notebook."""
    from ..ui.live import LiveProgress  # the default view (ui) of a run

    if isinstance(progress, LiveProgress):
        return progress.started
    return lambda total, title: LiveProgress(total, title, progress, plot)


def _remembered(live: Callable) -> tuple[Callable, list]:
    """``live`` (a run's view, given its iterations and title), and the views it made: the run's end
    redraws the last one from the result (:meth:`~fragnb.ui.live.LiveProgress.finished`), so that its
    last frame shows what the result's summary prints."""
    views: list = []

    def view(total, title):
        views.append(live(total, title))
        return views[-1]

    return view, views


def _on_curve(until, graph: str, policy: str):
    """``until`` (on a RunResult) as the runners call it: on (curve, iterations, env steps)."""
    if until is None:
        return None

    def holds(curve: list, iterations: int, env_steps: int) -> bool:
        return bool(
            until(RunResult(graph, policy, iterations, env_steps=env_steps, curve=[(s, r, 0.0) for s, r in curve]))
        )

    return holds
