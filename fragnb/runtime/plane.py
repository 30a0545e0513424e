"""OnDask: the control plane of a distributed run.

Dask places each replica on a worker, starts its long-lived program (:mod:`fragnb.runtime.worker.walker`),
watches it, and says when a worker is lost. Replicas exchange values over channels
(:mod:`fragnb.runtime.net.channels`), worker to worker; the notebook reads only small progress events
(finished episodes, step counts) until the run ends, then merges what the replicas hold back into
its namespace.
"""

from __future__ import annotations

import ast
import sys
import time

from ..plan.instrument import remember_source
from ..policies import Placement
from . import replay
from .attempt import Attempt, LostWorker
from .cluster.budget import limit
from .cluster.clusters import ClusterError, connect, local_workers, shutdown
from .cluster.clusters import dashboard as dashboard_link
from .merge import checkpoint_finals, merge
from .result import RunResult
from .slots import tasks

__all__ = ["OnDask", "LostWorker"]


class OnDask:
    """Runs a job's replicas on ``cluster`` (see :func:`fragnb.run`); leaves the notebook namespace as
    plain execution would.

    A synchronous run keeps every replica's state after every ``script.checkpoint_every`` iterations
    in the notebook. One that loses a worker starts again on fresh workers from the last checkpoint
    (or its beginning), up to ``restarts`` times; every random draw is counter-based, so it ends with
    the weights an uninterrupted run would have. When it cannot go on, the notebook takes the last checkpoint.
    """

    def __init__(self, cluster=None, dashboard: bool = True, restarts: int = 0):
        self.cluster, self.dashboard, self.restarts = cluster, dashboard, restarts

    def execute(self, job) -> RunResult:
        placement, script, restarts = job.placement, job.script, self.restarts
        graph = placement.graph
        remember_source(script.filename, graph.source)
        lost: list[str] = []
        saved: tuple[int, dict[str, bytes]] | None = None  # the last checkpoint: (iteration, state of each replica)
        entered, began, fetch_seconds = time.time(), None, 0.0
        while True:
            run = owned = None
            try:
                client, owned = connect(self.cluster, wanted(placement, self.cluster), self.dashboard)
                # asked before the replicas start: a remote dashboard's page took half a second on a busy
                # machine, while the replicas ran and the notebook did not yet show their progress
                link = dashboard_link(client)
                run = Attempt(
                    placement, script, job.namespace, client, job.payloads, saved, wait_s=30.0 if lost else 0.0
                )
                run.start()
                began = began or run.start_wall
                view = job.live(_length(graph), f"{graph.name} ({placement.policy.name})")
                if link:
                    view.show_link(link)
                finals = run.watch(view, job.stop)
                break
            except BaseException as e:
                if run is not None:
                    saved, fetch_seconds = run.saved, fetch_seconds + run.fetch_seconds
                    run.abort(f"the run stopped: {type(e).__name__}")
                    if owned:
                        shutdown()  # a replica may be stuck in a collective or the user's own code: end its process
                    else:
                        run.forget()
                if isinstance(e, LostWorker) and script.mode.restarts(len(lost), restarts):
                    where = f"the checkpoint after iteration {saved[0]}" if saved else "its beginning"
                    lost.append(f"{e}; resumed from {where}")
                    print(
                        f"fragnb: {e}. The run starts again from {where} on fresh workers "
                        f"(restart {len(lost)} of at most {restarts}); the notebook is as it was before the run",
                        file=sys.stderr,
                    )
                    continue
                if isinstance(e, LostWorker):  # what happened, then what the run does next
                    e.add_note(f"The run stops: {script.mode.why_it_stops(restarts)}")
                if saved and isinstance(e, ClusterError):  # it cannot go on: keep what it had done
                    try:
                        merge(job.namespace, script, checkpoint_finals(script, saved[1]))
                        e.add_note(
                            f"The notebook now holds the state after iteration {saved[0]} (the last checkpoint), "
                            f"as plain Python would after {saved[0]} iterations."
                        )
                    except Exception as failed:  # e.g. GPU tensors in a notebook without a GPU
                        e.add_note(
                            f"The last checkpoint (after iteration {saved[0]}) could not be loaded here "
                            f"({type(failed).__name__}: {failed}); the notebook is as it was before the run."
                        )
                if (
                    isinstance(e, Exception)
                    and not isinstance(e, (LostWorker, ClusterError))
                    and getattr(e, "__notes__", None)
                ):
                    replay.keep(job, saved, e)  # the cell's code raised on a replica: fragnb.debug() replays it
                raise _without_dask_frames(e) from None
        run.forget()
        merge(job.namespace, script, finals)
        kept = sum(map(len, run.saved[1].values())) if run.saved else 0
        return RunResult.of_replicas(
            job,
            finals,
            began,
            client_bytes=run.client_bytes,
            inference_batch=placement.inference_batch,
            lost_workers=lost + run.lost,
            setup_seconds=began - entered,
            processes=len(set(run.slots.values())),
            checkpoint_every=script.checkpoint_every,
            checkpoint_bytes=kept,
            checkpoint_seconds=max(f.checkpoint_seconds for f in finals.values()) + fetch_seconds + run.fetch_seconds,
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
