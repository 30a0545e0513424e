"""InThreads: every replica of a placement as a thread of this process, for the safety net.

The replicas walk the same Script through the same walker as on Dask; only the channels differ
(queues instead of sockets), so what the safety net compares is what a cluster would compute.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
import uuid

from ..plan.script import ReplicaId
from ..policies.transfers import averaged
from .job import Executor
from .merge import merge
from .net import collectives
from .net.channels import QueueChannels, root_cause
from .result import RunResult
from .worker import entry, registry
from .worker.generators import Own, own_random, seeded
from .worker.replica import Replica
from .worker.travel import refuse_unreturnable

__all__ = ["InThreads"]


class InThreads(Executor):
    """Runs a job's replicas as threads here and merges what they hold into ``job.namespace``.

    A replay of a failed run (:mod:`fragnb.runtime.replay`) starts each replica from its checkpoint
    (``resume``, by name), merges nothing (``keep`` False), and gives every replica the global generators
    it had on Dask (``own``: the Script's random start, swapped in around the segments that draw, as
    replicas sharing a worker's process have them). The safety net's replicas draw from this process's
    own, which it sets to plain Python's."""

    def __init__(self, resume: dict[str, bytes] | None = None, keep: bool = True, own: bool = False):
        self.resume, self.keep, self.own = resume or {}, keep, own

    def execute(self, job) -> RunResult:
        script, placement = job.script, job.placement
        run_id = uuid.uuid4().hex[:12]
        source = (script.filename, placement.graph.source)
        boxes = {name: queue.Queue() for name in script.replicas()}
        abort = threading.Event()
        held = script.components()
        finals: dict[str, dict] = {}
        errors: dict[str, BaseException] = {}

        # groups that average their gradients meet here: threads of this process, not a process group
        meetings = {g: collectives.Rendezvous(placement.groups[g][0]) for g in averaged(script.transfers)}

        def play(name: str, rep: Replica) -> None:
            try:
                with own_random() if self.own else contextlib.nullcontext():
                    finals[name] = entry.play(rep, script, QueueChannels(name, boxes, abort), held[rep.group])
            except BaseException as e:
                errors[name] = e
                for meeting in meetings.values():  # its peers' collectives end instead of waiting for it
                    meeting.abort()

        start = time.time()
        try:
            threads = []
            for g, (n, device) in placement.groups.items():
                payload = job.payloads[g]
                for i in range(n):
                    name = str(ReplicaId(g, i))
                    rep = entry.init_replica(
                        run_id,
                        g,
                        i,
                        n,
                        device,
                        payload,
                        source,
                        fused=script.mode.fuses(),
                        resume=self.resume.get(name),
                    )
                    if self.own:  # as on Dask (entry.run_program), from the run's random start
                        # (one resumed from a checkpoint takes the checkpoint's: Walker.set_state)
                        rep.own = Own(script.rng if g == script.rng_group else seeded(script.seed, name))
                    if g in meetings:
                        aside = rep.own.aside if rep.own is not None else contextlib.nullcontext
                        group = collectives.InProcess(i, meetings[g], aside)
                        rep.collective = entry.joined(rep, group, script.mode.whole_copies())
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
            merge(job.namespace, script, finals, job.logs)
        return RunResult.of_replicas(job, finals, start)
