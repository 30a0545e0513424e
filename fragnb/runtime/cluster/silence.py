"""Which workers have gone silent: a host whose network link is cut, or that froze, sends nothing.

A worker process that dies is dropped by the scheduler within milliseconds (its connection resets). A host
whose link goes down resets nothing: its connections stay open, and Dask notices only when a write times
out (``distributed.comm.timeouts.tcp``, measured at about 55 s here) or the scheduler's ``worker-ttl``
passes (5 minutes). Every worker sends the scheduler a heartbeat twice a second (clusters of up to ten
workers; one every ``n/200 + 1`` s for ``n`` above 200), which the scheduler stamps as ``last_seen``.
fragnb watches those stamps change, on the notebook's own clock (the scheduler's may differ), and counts a
worker whose stamp has not moved for :data:`SILENT_S` while another worker's has as lost: the run then
resumes from its checkpoint on the workers that answer, as for a worker that died.

The decision is :class:`Silence`, a pure function of what was observed when; :func:`forget` tells the
scheduler to drop such a worker, so that no later call waits on it (when its link comes back, its
heartbeat finds itself unknown and Dask's worker closes, and a nanny starts it again).
"""

from __future__ import annotations

import threading
import time

import dask
from dask.utils import parse_timedelta
from distributed.scheduler import heartbeat_interval

__all__ = ["SILENT_S", "Silence", "forget", "waiting"]

#: Seconds without a heartbeat after which a worker counts as lost: twenty heartbeats missed, far above
#: the few seconds an event loop busy with a large message or a loaded machine holds one back. Dask's
#: ``fragnb.silent-after`` (``DASK_FRAGNB__SILENT_AFTER=60s``) sets another, for workers that pause longer (a
#: large unpickle, a swap-bound host), where a wrongly counted loss would resume the run from its checkpoint.
SILENT_S = 10.0


class Silence:
    """The workers whose heartbeat stamp has not changed for longer than ``after`` seconds (default
    :data:`SILENT_S` or Dask's ``fragnb.silent-after``, or four heartbeat intervals where a large cluster's
    interval is longer)."""

    def __init__(self, after: float | None = None):
        self.after = after
        self.heard: dict[str, tuple[float, float]] = {}  # address -> (its last stamp, when it changed, our clock)

    def limit(self, workers: int) -> float:
        if self.after is not None:
            return self.after
        configured = parse_timedelta(dask.config.get("fragnb.silent-after", SILENT_S), default="seconds")
        return max(configured, 4 * heartbeat_interval(workers))

    def observe(self, now: float, stamps: dict[str, float]) -> dict[str, float]:
        """Record ``stamps`` (address -> the scheduler's ``last_seen``) seen at ``now`` (the notebook's
        monotonic clock); return the silent workers, address -> seconds silent. None is silent while no
        worker is heard (a scheduler too busy to read heartbeats would stamp none)."""
        for address in set(self.heard) - set(stamps):
            del self.heard[address]
        for address, stamp in stamps.items():
            if address not in self.heard or self.heard[address][0] != stamp:
                self.heard[address] = (stamp, now)
        limit = self.limit(len(stamps))
        quiet = {a: now - changed for a, (_, changed) in self.heard.items() if now - changed > limit}
        return quiet if len(quiet) < len(self.heard) else {}

    def lost(self, client, known: dict[str, dict], holding: set[str]) -> dict[str, str]:
        """Of the workers ``holding`` a run's replicas, those gone silent among ``known`` (the scheduler's
        identity of each worker), each with why (address -> sentence). Every silent worker is dropped at the
        scheduler."""
        quiet = self.observe(time.monotonic(), {w: info.get("last_seen", 0.0) for w, info in known.items()})
        if quiet:  # dropped at the scheduler first (a cut host's other workers too): no later call waits on them
            forget(client, sorted(quiet))
        quiet = {w: s for w, s in quiet.items() if w in holding}
        return {
            w: f"nothing heard from it for {s:.0f} s: its host's network link is down, or the host froze"
            for w, s in quiet.items()
        }


def forget(client, addresses: list[str]) -> None:
    """Tell ``client``'s scheduler to drop the workers at ``addresses`` now, rather than after its own
    timeouts: tasks and calls then no longer wait on them."""

    async def drop(dask_scheduler, addresses=addresses):
        for address in addresses:
            if address in dask_scheduler.workers:
                await dask_scheduler.remove_worker(address, stimulus_id="fragnb-silent-worker", close=False)

    try:
        client.run_on_scheduler(drop)
    except Exception:  # a scheduler that refuses or is going away: its own timeouts drop them later
        pass


def waiting(call, check, every: float):
    """``call()``'s result, calling ``check()`` every ``every`` seconds while it runs: a call to a worker whose
    host is cut off waits out a TCP timeout (about 30 s), and ``check`` ends the wait by raising once the
    worker is silent. The abandoned call ends in the background with its timeout."""
    box: dict = {}

    def run():
        try:
            box["value"] = call()
        except BaseException as e:  # handed to the caller's thread
            box["error"] = e

    thread = threading.Thread(target=run, daemon=True, name="fragnb-watched-call")
    thread.start()
    while thread.is_alive():
        thread.join(every)
        if thread.is_alive():
            check()
    if "error" in box:
        raise box["error"]
    return box["value"]
