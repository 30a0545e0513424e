"""Detached runs: a run whose control lives on the cluster, so that the notebook may close.

``fragnb.run(..., cluster="tcp://...", checkpoint_dir=..., detach=True)`` checks and plans the run in the
notebook as any run (the safety net, the refusals), then hands it to a *conductor*: one task on the
cluster, submitted with Dask's ``fire_and_forget``, that does what the notebook does for an attached run
(:class:`~fragnb.runtime.plane.OnDask`: place and start the replicas, watch them, restart them from the
last checkpoint when a worker is lost, write the checkpoints to ``checkpoint_dir``). It publishes the run's
state and progress in the scheduler's metadata (under ``fragnb-runs``, one record per run name), and at
the end writes what every replica ended with beside the checkpoints (``result.fragnb``). The kernel that
started it may then close, or be killed.

:func:`runs` lists a cluster's runs and cancels one (it stops after its current iteration, as the Stop
button does, and writes its result); :func:`attach`, from any later kernel, shows the run's progress from
where it is, waits for its end, and leaves in the notebook's namespace what plain Python would (the
components' state absorbed in place, the loop's variables set), as an attached run does. A conductor whose
own worker dies is started again by the scheduler and goes on from the run's last checkpoint.
"""

from __future__ import annotations

import copy
import pickle
import sys
import threading
import time
import uuid
from dataclasses import replace

import cloudpickle
import fsspec

from ..errors import FragmentError
from .store import FORMAT, _checkpoints, _version, cell_identity, identity, latest
from .worker import registry

__all__ = ["detachable", "detach", "runs", "attach", "Runs", "Detached", "RESULT"]

#: The scheduler's metadata key under which every detached run keeps its record.
ROOT = "fragnb-runs"
#: The file a conductor writes beside the checkpoints when its run ends.
RESULT = "result.fragnb"
ENDED = ("finished", "stopped", "failed", "cancelled")
HANDOVER_S = 60.0  # how long detach() waits for the conductor to start on a worker
POLL_S = 0.5  # how often a conductor reads its stop flag, and an attached kernel the run's progress


class Detached:
    """A run started with ``detach=True``: its name and cluster. :meth:`attach` waits for it here,
    :meth:`cancel` stops it; ``fragnb.runs(cluster)`` and ``fragnb.attach(...)`` reach it from any kernel."""

    def __init__(self, name: str, cluster: str, checkpoint_dir: str, live=None):
        self.name, self.cluster, self.checkpoint_dir = name, cluster, checkpoint_dir
        self.live = live  # the view the run would have shown here (run's progress= and plot=)

    def __repr__(self) -> str:
        return (
            f"detached run {self.name!r} on {self.cluster}, writing to {self.checkpoint_dir}: "
            f"fragnb.attach({self.name!r}, {self.cluster!r}, graph=...) from any kernel"
        )

    def attach(self, graph=None):
        """:func:`attach` to this run, shown as ``run`` would have shown it here."""
        return attach(self.name, self.cluster, graph=graph, live=self.live)

    def cancel(self) -> None:
        runs(self.cluster).cancel(self.name)


def detachable(cluster, options: dict) -> None:
    """A detached run needs a scheduler that outlives the kernel and a place to write its checkpoints and
    result; said before anything runs."""
    if cluster is None or cluster in ("local", "cuda"):
        raise FragmentError(
            f"detach= hands the run to a cluster that outlives this kernel, and cluster={cluster!r} is the kernel's "
            "own: give the address of a scheduler started on its own (cluster='tcp://host:port' from `dask "
            "scheduler`, or a Slurm job's)"
        )
    if options["checkpoint_dir"] is None:
        raise FragmentError(
            "detach= needs checkpoint_dir=: a place the cluster's workers write the run's checkpoints and result to, "
            "and a later kernel reads them from (a shared directory, or an fsspec URL such as s3://bucket/run)"
        )
    if options["resume"] is not None:
        raise FragmentError("detach= with resume= is not supported yet: resume attached, or start the run afresh")


def _client(cluster):
    """A client of ``cluster``, a scheduler that outlives this kernel (an address, or a Client of one)."""
    from .cluster.clusters import connect

    if cluster is None or cluster in ("local", "cuda"):
        raise FragmentError(
            f"cluster={cluster!r} ends with this kernel, and a detached run must outlive it: give the address of "
            "a scheduler started on its own ('tcp://host:port' from `dask scheduler`, or a Slurm job's)"
        )
    client, owned = connect(cluster)
    if owned:
        raise FragmentError("this cluster is the kernel's own, and a detached run must outlive the kernel")
    return client


def _address(cluster) -> str:
    return cluster if isinstance(cluster, str) else cluster.scheduler.address


def detach(job, cluster, restarts: int, store, name: str, time_limit: float | None, live=None) -> Detached:
    """Hand ``job`` (checked and planned here) to a conductor on ``cluster`` and return at once."""
    from distributed import fire_and_forget

    client = _client(cluster)
    held = client.get_metadata([ROOT, name], None)
    if held is not None and held.get("state") not in ENDED:
        raise FragmentError(
            f"a run named {name!r} is {held.get('state')} on {_address(cluster)}: attach to it "
            f"(fragnb.attach({name!r}, ...)), cancel it (fragnb.runs(...).cancel({name!r})), or give this one "
            "another name (detach='NAME')"
        )
    graph, placement = job.placement.graph, job.placement
    store.close()  # the conductor writes; this kernel only checked that the place can be written
    total = _total(graph)
    thin = copy.copy(graph)  # the conductor needs the components (a checkpoint's identity), not the notebook
    thin.namespace = {c: graph.namespace[c] for c in graph.components if c in graph.namespace}
    shipped = replace(job, placement=replace(placement, graph=thin), namespace=thin.namespace, live=None, stop=None)
    shipped.payloads = job.payloads
    record = {
        "name": name,
        "cell": graph.name,
        "policy": placement.policy.name,
        "params": identity(placement)["params"],
        "state": "starting",
        "checkpoint_dir": store.url,
        "total": total,
        "started": time.time(),
        "deadline": time.time() + time_limit if time_limit else None,
        "stop": "",
        "error": "",
        "conductors": 0,
        "before": _checkpoints(store.fs, store.root),  # an older run's checkpoints there are not this run's
        "progress": {"iterations": 0, "env_steps": 0, "curve": [], "checkpoint": None},
    }
    client.set_metadata([ROOT, name], record)
    blob = cloudpickle.dumps((shipped, _address(cluster), restarts, store.url))
    fire_and_forget(client.submit(conduct, name, blob, key=f"fragnb-conductor-{name}-{uuid.uuid4().hex[:8]}"))
    # The submission travels on the client's batched stream: a kernel killed right after returning lost it
    # (2026-12-06). The run is handed over once its conductor has started on a worker.
    deadline = time.monotonic() + HANDOVER_S
    while not client.get_metadata([ROOT, name, "conductors"], 0):
        if time.monotonic() > deadline:
            raise FragmentError(
                f"run {name!r} was handed to {_address(cluster)}, and no worker started it within {HANDOVER_S:.0f} s: "
                f"are they all busy? It starts when one is free (fragnb.runs shows it); keep this kernel until then"
            )
        time.sleep(0.05)
    print(
        f"fragnb: run {name!r} goes on on {_address(cluster)} without this kernel; its checkpoints and result go to "
        f"{store.url}. Watch it from any kernel with fragnb.attach({name!r}, {_address(cluster)!r}, graph={graph.name}), "
        f"list or cancel it with fragnb.runs({_address(cluster)!r})",
        file=sys.stderr,
    )
    return Detached(name, _address(cluster), store.url, live)


def _total(graph) -> int | None:
    from .plane import _length

    return _length(graph)


class _Board:
    """A run's record in the scheduler's metadata, as its conductor writes it."""

    def __init__(self, client, name: str):
        self.client, self.name = client, name

    def get(self, key: str, default=None):
        return self.client.get_metadata([ROOT, self.name, key], default)

    def set(self, key: str, value) -> None:
        self.client.set_metadata([ROOT, self.name, key], value)


class _Published:
    """The live view of a detached run: each iteration's progress written to its record, where
    :func:`attach` reads it. The progress of a run that goes on from a checkpoint starts there."""

    def __init__(self, board: _Board):
        self.board, self.iterations = board, 0  # a restarted attempt's view catches up from 0 at once

    def update(self, curve, env_steps: int, *args, **kwargs) -> None:
        self.iterations += 1
        progress = self.board.get("progress", {}) or {}
        progress.update(
            iterations=self.iterations, env_steps=int(env_steps), curve=[[int(s), float(r)] for s, r in curve]
        )
        self.board.set("progress", progress)

    def show_link(self, link: str) -> None:
        self.board.set("dashboard", link)

    def close(self, curve=()) -> None:
        pass


def conduct(name: str, blob: bytes) -> None:
    """The conductor, a task on the cluster: the run as :class:`~fragnb.runtime.plane.OnDask` runs it for an
    attached notebook, its progress and end written to the run's record and its result beside its checkpoints."""
    from distributed import get_client, secede

    from .plane import OnDask
    from .store import Store, resumable

    secede()  # not one of the worker's task threads: a replica placed on this worker gets one of its own
    job, address, restarts, url = cloudpickle.loads(blob)
    client = get_client()
    board = _Board(client, name)
    board.set("conductors", (board.get("conductors") or 0) + 1)
    earlier = list(board.get("lost") or [])  # what the conductors before this one lost
    if previous := board.get("attempt"):  # a conductor before this one died with its worker: end its replicas
        client.run(registry.abort_run, previous, "the run's conductor was lost", on_error="ignore")
        client.run(registry.drop_run, previous, on_error="ignore")
    store = Store(url, job.placement)
    mine = [p for p in _checkpoints(store.fs, store.root) if p not in set(board.get("before") or ())]
    resumed = resumable(mine[-1], job.placement) if mine else None  # that conductor's run goes on from there
    job.live = lambda total, title: _Published(board)
    job.stop = threading.Event()
    executor = OnDask(address, False, restarts, store, resumed)
    executor.patient, executor.keeps = board.get("conductors") > 1, False  # its workers may be coming back
    ended = threading.Event()
    watcher = threading.Thread(
        target=_watch, args=(board, executor, earlier, job.stop, ended), daemon=True, name="fragnb conductor"
    )
    watcher.start()
    board.set("state", "running")
    try:
        finals, result = executor.outcome(job)
        if (board.get("conductors") or 1) > 1:  # what the conductors before this one lost, and a conductor
            where = f"the checkpoint after iteration {resumed.iteration}" if resumed else "its beginning"
            result.lost_workers[:0] = [*earlier, f"lost the run's conductor; a new one went on from {where}"]
        _write(store, job, finals, result)
        why = board.get("stop") or ""
        board.set("state", "cancelled" if why.startswith("cancelled") else "stopped" if why else "finished")
    except BaseException as e:  # the run's own error, or a cluster that cannot go on: said in its record
        notes = "".join(f"\n{n}" for n in getattr(e, "__notes__", ()))
        board.set("error", f"{type(e).__name__}: {e}{notes}")
        board.set("state", "failed")
    finally:
        ended.set()


def _watch(board: _Board, executor, earlier: list[str], stop: threading.Event, ended: threading.Event) -> None:
    """Say which attempt is under way (a successor ends its replicas), and set ``stop`` (the run ends after
    its current iteration) once the run is cancelled or its time is up."""
    said = None
    while not ended.wait(POLL_S):
        try:
            attempt = executor.attempt.run_id if executor.attempt is not None else None
            lost = [*executor.recovery.lost, *executor.attempt.lost] if executor.attempt is not None else []
            if (attempt, lost) != said:
                board.set("lost", [*earlier, *lost])  # a successor's result names them too: said first
                board.set("attempt", attempt)
                said = attempt, lost
            deadline = board.get("deadline")
            if deadline and time.time() > deadline and not board.get("stop"):
                board.set("stop", "its time limit passed")
            if board.get("stop"):
                stop.set()
        except Exception:  # the scheduler is going away: the run ends with it
            return


def _write(store, job, finals: dict, result) -> None:
    """The run's end, beside its checkpoints: what every replica ended with, the plan that merges them,
    and the result, renamed into place once whole."""
    blob = cloudpickle.dumps(
        {
            "format": FORMAT,
            "version": _version(),
            "identity": store.identity,
            "script": job.script,
            "finals": finals,
            "result": result,
        }
    )
    final = f"{store.root}/{RESULT}"
    partial = f"{final}.{uuid.uuid4().hex[:8]}.partial"
    with store.fs.open(partial, "wb") as f:
        f.write(blob)
    store.fs.mv(partial, final)


class Runs(list):
    """The detached runs a cluster's scheduler knows, newest first: one dict each (name, cell, policy,
    state, iterations, checkpoint_dir...). :meth:`cancel` stops one after its current iteration."""

    def __init__(self, client, records: list[dict]):
        super().__init__(records)
        self.client = client

    def cancel(self, name: str) -> None:
        record = self.client.get_metadata([ROOT, name], None)
        if record is None:
            raise FragmentError(f"no detached run is named {name!r} here: {_names(self)}")
        if record["state"] in ENDED:
            raise FragmentError(f"run {name!r} has already ended ({record['state']}): there is nothing to cancel")
        self.client.set_metadata([ROOT, name, "stop"], "cancelled with fragnb.runs(...).cancel()")

    def __repr__(self) -> str:
        if not self:
            return "no detached runs"
        lines = [f"{'name':<16} {'cell':<10} {'policy':<14} {'state':<10} {'iterations':>10}  checkpoint_dir"]
        for r in self:
            done = r["progress"]["iterations"]
            of = f"{done}/{r['total']}" if r.get("total") else str(done)
            lines.append(
                f"{r['name']:<16} {r['cell']:<10} {r['policy']:<14} {r['state']:<10} {of:>10}  {r['checkpoint_dir']}"
            )
        return "\n".join(lines)


def _names(found) -> str:
    return f"its runs are {', '.join(repr(r['name']) for r in found)}" if found else "it has none"


def runs(cluster) -> Runs:
    """The detached runs on ``cluster`` (a scheduler's address or a Client), newest first."""
    client = _client(cluster)
    records = client.get_metadata([ROOT], {}) or {}
    return Runs(client, sorted(records.values(), key=lambda r: r.get("started", 0), reverse=True))


def attach(name: str, cluster, *, graph=None, live=None):
    """Follow the detached run ``name`` on ``cluster`` from its progress so far until it ends; then, given
    the cell's ``graph`` (captured again in this kernel, after the setup cells ran), leave in its namespace
    what plain Python would, and return the run's :class:`~fragnb.runtime.result.RunResult`.

    ``live(total, title)`` gives the view that shows it (a :class:`~fragnb.runtime.job.Silent` one by
    default; :func:`fragnb.attach` gives the notebook's progress bar and dashboard). A Ctrl-C leaves the run
    going on; a run that failed raises, saying so and where its last checkpoint is (``resume=``)."""
    from .job import Silent

    client = _client(cluster)
    record = client.get_metadata([ROOT, name], None)
    if record is None:
        raise FragmentError(f"no detached run is named {name!r} on {_address(cluster)}: {_names(runs(cluster))}")
    if graph is not None and graph.name != record["cell"]:
        raise FragmentError(f"run {name!r} runs the cell {record['cell']!r}; graph= is {graph.name!r}")
    view = (live or Silent)(record["total"], f"{record['cell']} ({record['policy']}, detached)")
    shown = 0
    try:
        while True:
            record = client.get_metadata([ROOT, name])
            now = record["progress"]
            for _ in range(now["iterations"] - shown):  # the history so far at once, then as it comes
                view.update([tuple(p) for p in now["curve"]], now["env_steps"])
            shown = max(shown, now["iterations"])
            if record["state"] in ENDED:
                break
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        view.close([tuple(p) for p in record["progress"]["curve"]])
        print(
            f"fragnb: run {name!r} goes on on the cluster; fragnb.attach({name!r}, ...) follows it again",
            file=sys.stderr,
        )
        return None
    view.close([tuple(p) for p in record["progress"]["curve"]])
    if record["state"] in ("failed",):
        raise FragmentError(f"run {name!r} failed on the cluster: {record['error'].rstrip('.')}.{_last(record)}")
    ended = _read(record["checkpoint_dir"])
    result = ended["result"]
    if record["state"] == "cancelled":
        print(f"fragnb: run {name!r} was cancelled after iteration {result.iterations}", file=sys.stderr)
    if graph is not None:
        _merge(graph, ended)
        graph.last_run = result
    if hasattr(view, "finished"):
        view.finished(result)
    return result


def _last(record: dict) -> str:
    """Where a run that ended without its result goes on from, if it wrote a checkpoint."""
    try:
        found = latest(record["checkpoint_dir"])
    except FragmentError:
        return ""
    return f" Its last checkpoint (after iteration {found.iteration}) is in {record['checkpoint_dir']}: resume= it"


def _read(url: str) -> dict:
    fs, root = fsspec.core.url_to_fs(url)
    path = f"{root}/{RESULT}"
    if not fs.exists(path):
        raise FragmentError(f"the run ended, and {url} holds no {RESULT}: was it written elsewhere, or removed?")
    with fs.open(path, "rb") as f:
        data = pickle.load(f)
    if data.get("format") != FORMAT or data.get("version") != _version():
        raise FragmentError(f"{path} was written by fragnb {data.get('version')}, and this is {_version()}")
    return data


def _merge(graph, ended: dict) -> None:
    """The run's end into ``graph``'s namespace, as an attached run leaves it; refused for another cell."""
    from .merge import merge
    from .worker.travel import classes_kept

    ours = cell_identity(graph)
    for key in ("cell", "components"):
        if ours[key] != ended["identity"][key]:
            raise FragmentError(
                f"graph= is not the cell this run runs: its {key} differ ({ended['identity'][key]} there, {ours[key]} "
                "here); capture the same cell after the same setup cells"
            )
    with classes_kept(graph.namespace):
        merge(graph.namespace, ended["script"], ended["finals"])
