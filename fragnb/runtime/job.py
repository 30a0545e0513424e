"""Job: one run as an executor takes it, and :class:`Executor`, the interface of the three ways of running.

``InNotebook`` (:mod:`~fragnb.runtime.local`: ``single``, the cell itself), ``InThreads``
(:mod:`~fragnb.runtime.threads`: every replica a thread here, for the safety net) and ``OnDask``
(:mod:`~fragnb.runtime.plane`: replicas on a cluster's workers) each declare :class:`Executor`:
``execute(job) -> RunResult``, leaving in ``job.namespace`` what plain Python would.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Protocol

from ..plan.script import Preflight

if TYPE_CHECKING:
    from ..plan.script import Script
    from ..policies import Placement
    from ..sinks import Logs
    from .result import RunResult
    from .worker.payload import Payload

__all__ = ["Job", "Executor", "Silent"]


class Executor(Protocol):
    """A way of running a :class:`Job`: it runs the job's placement on its objects, shows its progress in
    ``job.live``'s view, stops when ``job.until`` holds or ``job.stop`` is set, leaves in ``job.namespace``
    what plain Python would after as many iterations, and returns the run's RunResult."""

    def execute(self, job: Job) -> RunResult: ...


@dataclass
class Job:
    """What to run (a placement, planned once as ``script``; ``None`` under ``single``), on which
    objects (``namespace``), shown where (``live(total, title)`` gives the view), until when
    (``until(curve, iterations, env_steps)``, or ``stop`` being set), and what was learnt before it was
    planned (``preflight``: the executor's RunResult carries its guarantee and the net's seconds)."""

    placement: Placement
    script: Script | None
    namespace: dict
    live: Callable = field(repr=False)
    until: Callable[[list, int, int], bool] | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    preflight: Preflight = field(default_factory=Preflight, repr=False)

    @cached_property
    def payloads(self) -> dict[str, Payload]:
        """What each group's replicas receive; objects that cannot travel raise here, before any worker starts."""
        from .worker.payload import pack

        return {g: pack(self.placement.graph, self.namespace, self.script, g) for g in self.script.groups}

    @cached_property
    def logs(self) -> Logs:
        """The run's sinks on the notebook's side: the calls its replicas make on a logger or a writer,
        made on the notebook's object as they come and at the end (:mod:`fragnb.sinks`)."""
        from ..plan.program import DrivenLoop
        from ..sinks import Logs

        items = self.script.program.items
        loop = next((i for i, item in enumerate(items) if isinstance(item, DrivenLoop)), None)
        return Logs(self.namespace, self.script.per_env, loop)

    def walking(self, script: Script) -> Job:
        """This job with ``script``, the same plan with the shapes the safety net's plain side showed
        (the net walks its own short Script with them), in place of its own.

        What it has packed already is kept: a payload depends only on the segments, the groups, the
        environments and the seed, which both Scripts share. The net packs before its plain side runs,
        which moves on what shared classes' globals hold (an EnvStreams a network's method samples
        from); packing again would pack that as the plain side left it.
        """
        job = replace(self, script=script)
        if "payloads" in vars(self):  # cached_property keeps what it computed in the instance's dict
            job.payloads = self.payloads
        return job


class Silent:
    """A live view that shows nothing, for a run measured out of sight (:func:`fragnb.profile`): what
    ``Job.live`` returns needs only ``update`` and ``close`` (and ``show_link``, on a cluster), and the
    run's own view lives in :mod:`fragnb.ui`, a later layer that the runtime must not need to run."""

    def __init__(self, total: int | None = None, title: str = ""):
        self.total, self.title = total, title

    def update(self, curve, env_steps: int, *args, **kwargs) -> None:
        pass

    def show_link(self, link: str) -> None:
        pass

    def close(self, curve=()) -> None:
        pass
