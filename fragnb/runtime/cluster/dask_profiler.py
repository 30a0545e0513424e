"""Dask's statistical profiler, paused on a worker while replicas run there.

Every 10 ms a Dask worker's event loop walks the stacks of the threads running tasks
(``distributed.worker.profile``, for the dashboard's Profile page). A replica's program is one task
that runs for the whole run and calls many small torch operations, each of which releases and
takes back the GIL: the sampler then made notebook 01's loop 1.2-1.45x slower in a worker than in
the notebook (``gpu_only`` with one replica against ``single``, ``benchmarks/scale.py``'s first
row). fragnb's timelines (``RunResult.timeline()``) say where a replica's time goes instead.
"""

from __future__ import annotations

import contextlib
import threading

__all__ = ["paused"]

_lock = threading.Lock()
_holders: dict[int, int] = {}  # id(worker) -> replica programs running there now


@contextlib.contextmanager
def paused(worker):
    """Stop ``worker``'s profile sampler while the block runs (and while any other replica program
    of the same worker does); start it again after the last."""
    sampler = getattr(worker, "periodic_callbacks", {}).get("profile")
    if sampler is None:  # profiling disabled in the worker's configuration
        yield
        return
    with _lock:
        _holders[id(worker)] = running = _holders.get(id(worker), 0) + 1
    if running == 1:
        worker.loop.add_callback(sampler.stop)  # a tornado PeriodicCallback belongs to its loop's thread
    try:
        yield
    finally:
        with _lock:
            running = _holders.pop(id(worker)) - 1
            if running:
                _holders[id(worker)] = running
        if not running:
            worker.loop.add_callback(sampler.start)
