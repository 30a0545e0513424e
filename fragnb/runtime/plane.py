"""OnDask: the control plane of a distributed run.

Dask places each replica on a worker, starts its long-lived program (:mod:`fragnb.runtime.worker.walker`),
watches it, and says when a worker is lost. Replicas exchange values over channels
(:mod:`fragnb.runtime.net.channels`), worker to worker; the notebook reads only small progress events
(finished episodes, step counts) until the run ends, then merges what the replicas hold back into
its namespace.
"""

from __future__ import annotations

import ast
import time

from ..plan.instrument import remember_source
from ..policies import Placement
from .attempt import Attempt, LostWorker
from .cluster.budget import limit
from .cluster.clusters import ClusterError, connect, local_workers
from .cluster.clusters import dashboard as dashboard_link
from .job import Executor
from .merge import merge
from .recovery import Recovery
from .result import RunResult
from .slots import tasks

__all__ = ["OnDask", "LostWorker"]


class OnDask(Executor):
    """Runs a job's replicas on ``cluster`` (see :func:`fragnb.run`); leaves the notebook namespace as
    plain execution would.

    A synchronous run keeps every replica's state after every ``script.checkpoint_every`` iterations
    in the notebook. What a failed attempt leads to (a restart from the last checkpoint, up to
    ``restarts`` times, or the error with what the notebook keeps) is :mod:`fragnb.runtime.recovery`'s.
    """

    def __init__(self, cluster=None, dashboard: bool = True, restarts: int = 0, store=None, resumed=None):
        self.cluster, self.dashboard, self.restarts = cluster, dashboard, restarts
        #: where checkpoints are also written (:class:`~fragnb.runtime.store.Store`), and the one the run resumes
        self.store, self.resumed = store, resumed
        # the attempt under way and the run's recovery (a detached run's conductor says them, for its successor)
        self.attempt = self.recovery = None
        #: a detached run's conductor: started again, it waits for workers as a restart does; its job's namespace is
        #: not the notebook's, so a run that cannot go on loads no checkpoint into it (Recovery.patient, .keeps)
        self.patient, self.keeps = False, True

    def execute(self, job) -> RunResult:
        finals, result = self.outcome(job)
        merge(job.namespace, job.script, finals, job.logs)
        return result

    def outcome(self, job) -> tuple[dict, RunResult]:
        """What every replica ended with and the run's result, the namespace untouched: :meth:`execute` merges
        them into the notebook's; a detached run's conductor (:mod:`fragnb.runtime.detached`) writes them down."""
        remember_source(job.script.filename, job.placement.graph.source)
        # what a failed attempt leads to (fragnb.runtime.recovery)
        recovery = self.recovery = Recovery(job, self.restarts, patient=self.patient, keeps=self.keeps)
        if self.resumed is not None:  # written by a run in another kernel: go on from it
            recovery.saved = (self.resumed.iteration, self.resumed.replicas)
            job.logs.through = self.resumed.iteration  # the kernel that wrote it logged those iterations
        try:
            return self._attempts(job, recovery, time.time())
        finally:
            if self.store is not None:
                self.store.close()  # the last writes, whole

    def _attempts(self, job, recovery: Recovery, entered: float) -> tuple[dict, RunResult]:
        """Attempt the run until one ends, or :meth:`Recovery.after` says it cannot go on (it raises)."""
        placement, script, graph = job.placement, job.script, job.placement.graph
        began = None
        while True:
            run = owned = None
            try:
                client, owned = connect(self.cluster, wanted(placement, self.cluster), self.dashboard)
                # asked before the replicas start: a remote dashboard's page took half a second on a busy
                # machine, while the replicas ran and the notebook did not yet show their progress
                link = dashboard_link(client)
                run = self.attempt = Attempt(
                    placement, script, job.namespace, client, job.payloads, recovery.saved, recovery.wait_s
                )
                run.on_saved = self.store.write if self.store is not None else None
                run.logs = job.logs  # the calls on the notebook's loggers, made as iterations end
                job.logs.begin()  # a failed attempt's unmade calls come again from this one
                run.start()
                began = began or run.start_wall
                view = job.live(_length(graph), f"{graph.name} ({placement.policy.name})")
                if link:
                    view.show_link(link)
                finals = run.watch(view, job.stop)
                break
            except BaseException as e:
                if recovery.after(run, owned, e):
                    continue
                raise _without_dask_frames(e) from None
        run.forget()
        return finals, RunResult.of_replicas(
            job,
            finals,
            began,
            client_bytes=run.client_bytes,
            inference_batch=placement.inference_batch,
            lost_workers=recovery.lost + run.lost,
            setup_seconds=began - entered,
            processes=len(set(run.slots.values())),
            checkpoint_every=script.checkpoint_every,
            checkpoint_bytes=sum(map(len, run.saved[1].values())) if run.saved else 0,
            resumed_from=f"{self.resumed.path} (after iteration {self.resumed.iteration})" if self.resumed else "",
            checkpoint_seconds=max(f.checkpoint_seconds for f in finals.values())
            + recovery.fetch_seconds
            + run.fetch_seconds,
        )


def wanted(placement: Placement, cluster=None) -> int:
    """Workers to ask fragnb's own cluster for: one per task, up to what it starts
    (:func:`~fragnb.runtime.cluster.clusters.local_workers`), beyond which replicas share processes; a process
    group's members each need one, and more of them than this kernel may start is refused before any
    starts (on a cluster fragnb does not own, its workers say)."""
    groups = {g: n for g, (n, _) in placement.groups.items()}
    count = len(tasks(groups, placement.colocated, bool(placement.averaged)))
    if not placement.averaged:
        return min(count, local_workers())
    if cluster is None or cluster == "local":
        budget = limit()
        if count > budget.workers:
            raise ClusterError(
                f"{placement.policy.name}'s {count} replicas each need a worker process of their own (one process "
                f"group, which never shares a process), and this kernel may start {budget.workers} ({budget.why}): "
                f"ask for at most {budget.workers} replicas, or raise the limit"
            )
    return count


def _length(graph) -> int | None:
    """Iterations of the cell's iteration loop, when its iterable says (for the progress bar)."""
    loop = next((n for n in graph.tree.body if isinstance(n, ast.For)), None)
    if loop is None:
        return None
    try:
        iterable = eval(compile(ast.Expression(loop.iter), "<fragnb>", "eval"), dict(graph.namespace))
    except Exception:
        return None
    return len(iterable) if hasattr(iterable, "__len__") else None


def _without_dask_frames(error: BaseException) -> BaseException:
    """An error from a worker, without the frames of Dask's machinery; its note (added on the
    worker) names the user's cell line and the replica."""
    return error.with_traceback(None) if getattr(error, "__notes__", None) else error
