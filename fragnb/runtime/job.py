"""Job: one run as an executor takes it, the small interface of the three ways of running.

``InNotebook`` (:mod:`~fragnb.runtime.local`: ``single``, the cell itself), ``InThreads``
(:mod:`~fragnb.runtime.threads`: every replica a thread here, for the safety net) and ``OnDask``
(:mod:`~fragnb.runtime.plane`: replicas on a cluster's workers) each have ``execute(job) -> RunResult``,
and leave in ``job.namespace`` what plain Python would.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..plan.script import Script
    from ..policies import Placement
    from .worker.payload import Payload

__all__ = ["Job"]


@dataclass
class Job:
    """What to run (a placement, planned once as ``script``; ``None`` under ``single``), on which
    objects (``namespace``), shown where (``live(total, title)`` gives the view), and until when
    (``until(curve, iterations, env_steps)``, or ``stop`` being set)."""

    placement: Placement
    script: Script | None
    namespace: dict
    live: Callable = field(repr=False)
    until: Callable[[list, int, int], bool] | None = None
    stop: threading.Event = field(default_factory=threading.Event)

    @cached_property
    def payloads(self) -> dict[str, Payload]:
        """What each group's replicas receive; objects that cannot travel raise here, before any worker starts."""
        from .worker.payload import pack

        return {g: pack(self.placement.graph, self.namespace, self.script, g) for g in self.script.groups}
