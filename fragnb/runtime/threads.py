"""InThreads: every replica of a placement as a thread of this process, for the safety net.

The replicas walk the same Script through the same walker as on Dask; only the channels differ
(queues instead of sockets), so what the safety net compares is what a cluster would compute.
"""

from __future__ import annotations

import queue
import threading
import time
import uuid

from ..plan.script import ReplicaId
from .merge import merge
from .net.channels import QueueChannels, root_cause
from .result import RunResult
from .worker import entry, registry
from .worker.replica import Replica
from .worker.travel import refuse_unreturnable

__all__ = ["InThreads"]


class InThreads:
    """Runs a job's replicas as threads here and merges what they hold into ``job.namespace``; or
    (``resume``: each replica's checkpoint, by name) from where a checkpoint left them, and (``keep``
    False) without merging anything (a replay to debug a failed run: :mod:`fragnb.runtime.replay`)."""

    def __init__(self, resume: dict[str, bytes] | None = None, keep: bool = True):
        self.resume, self.keep = resume or {}, keep

    def execute(self, job) -> RunResult:
        script, placement = job.script, job.placement
        run_id = uuid.uuid4().hex[:12]
        source = (script.filename, placement.graph.source)
        boxes = {name: queue.Queue() for name in script.replicas()}
        abort = threading.Event()
        held = script.components()
        finals: dict[str, dict] = {}
        errors: dict[str, BaseException] = {}

        def play(name: str, rep: Replica) -> None:
            try:
                finals[name] = entry.play(rep, script, QueueChannels(name, boxes, abort), held[rep.group])
            except BaseException as e:
                errors[name] = e

        start = time.time()
        try:
            threads = []
            for g, (n, device) in placement.groups.items():
                payload = job.payloads[g]
                for i in range(n):
                    name = str(ReplicaId(g, i))
                    rep = entry.init_replica(
                        run_id, g, i, n, device, payload, source, fused=script.mode.fused, resume=self.resume.get(name)
                    )
                    threads.append(threading.Thread(target=play, args=(name, rep), daemon=True))
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            registry.drop_run(run_id)
        if errors:
            raise root_cause(list(errors.values()))
        refuse_unreturnable(finals, script.program.origin)
        if self.keep:
            merge(job.namespace, script, finals)
        return RunResult.of_replicas(job, finals, start)
