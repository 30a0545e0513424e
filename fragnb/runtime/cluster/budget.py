"""Budget: how many worker processes fragnb's own cluster may start in this kernel.

A class shares one machine: thirty kernels on one JupyterHub node, each in a container that the hub
limits (cgroups), or mybinder.org's one core and 2 GB. What the machine has (``os.cpu_count()``,
psutil's free memory) is then not what the kernel may use, and a worker process costs memory before
it runs anything (about 90 MB here, forked from a process that holds torch). So the limit follows the
container's own cores and memory, and a teacher sets it in one place for the whole class: the
``FRAGNB_WORKERS`` environment variable (a hub's spawner environment), or ``fragnb: {workers: N}`` in
Dask's configuration (``/etc/dask/fragnb.yaml``, which every user's Dask reads; ``DASK_FRAGNB__WORKERS``
sets the same key). The environment variable wins.

Pure functions of the values read (tested without a cluster or a container); :func:`limit` reads them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

__all__ = ["WORKERS_PER_CORE", "WORKER_MEMORY", "Budget", "limit", "cores", "memory", "allowed", "threads", "small"]

#: fragnb's own cluster starts at most this many worker processes per core; a run with more replicas
#: runs several of a group's replicas as threads of one process (a worker process costs about a
#: second to start; a replica in a shared one, a few MB).
WORKERS_PER_CORE = 4
#: Free memory a worker process is counted at: an idle worker takes about 90 MB, one that trains a
#: course network a few hundred.
WORKER_MEMORY = 2**30


class Budget(NamedTuple):
    """What a kernel may use: ``cores`` (fractional under a CPU quota), ``memory`` (bytes free to it),
    ``workers`` (processes its own cluster may start) and ``why`` (where the worker limit came from)."""

    cores: float
    memory: int
    workers: int
    why: str


def cores(affinity: int, quota: int | None, period: int | None) -> float:
    """The cores this process may run on: its CPU affinity, within a CFS quota (``quota`` microseconds
    every ``period``; ``None`` or a negative quota: none)."""
    if quota is not None and period and quota > 0:
        return max(0.01, min(float(affinity), quota / period))
    return float(affinity)


def memory(available: int, limit: int | None, usage: int | None) -> int:
    """Bytes free to this process: the machine's available memory, within a container's limit less what
    the container already uses (a limit at or above the machine's memory is no limit: cgroup v1 says
    9223372036854771712 for none)."""
    if limit is None or usage is None or limit >= 2**60:
        return available
    return max(0, min(available, limit - usage))


def allowed(cores: float, memory: int, setting: str | int | None, setting_name: str) -> tuple[int, str]:
    """The worker processes fragnb's own cluster may start, and why: the class's setting if there is one
    (a positive integer), otherwise :data:`WORKERS_PER_CORE` per core, no more than the free memory
    holds at :data:`WORKER_MEMORY` each, and at least 2 (a learner's and the actors')."""
    if setting not in (None, ""):
        try:
            n = int(setting)
        except (TypeError, ValueError):
            n = 0
        if n < 1:
            raise ValueError(f"{setting_name}={setting!r}: the worker processes a kernel may start, a positive integer")
        return n, f"{setting_name}={n}"
    by_cores = int(WORKERS_PER_CORE * max(1.0, cores))
    by_memory = memory // WORKER_MEMORY
    n = max(2, min(by_cores, by_memory))
    return n, f"{WORKERS_PER_CORE} per core on {cores:g} cores, within {memory / 2**30:.1f} GiB free"


def threads(workers: int, cores: float) -> int:
    """Threads in each of fragnb's worker processes: one (a replica program per process, side by side on
    the cores), or, where the kernel may start a single process (``FRAGNB_WORKERS=1``), :data:`WORKERS_PER_CORE`
    per core, so that a run's groups (a learner's and the actors') share it as threads."""
    return 1 if workers > 1 else int(WORKERS_PER_CORE * max(1.0, cores))


#: What the course is written for: its notebooks' lessons (two actors beside a learner) need two cores
#: to show distribution paying, and their peak memory, kernel and workers, is 1.0-1.3 GiB here.
COURSE_CORES, COURSE_MEMORY = 2, 3 * 2**30


def small(budget: Budget) -> str | None:
    """What a kernel below the course's floor is told as the extension loads (mybinder.org: about one
    core and 2 GB); ``None`` where the course fits."""
    if budget.cores >= COURSE_CORES and budget.memory >= COURSE_MEMORY:
        return None
    return (
        f"fragnb: this kernel may use {budget.cores:g} core{'s' if budget.cores != 1 else ''} and "
        f"{budget.memory / 2**30:.1f} GiB of free memory; the course is written for {COURSE_CORES} cores and "
        f"{COURSE_MEMORY / 2**30:.0f} GiB. Every notebook runs here, its distributed runs with at most "
        f"{budget.workers} worker process{'es' if budget.workers != 1 else ''} ({budget.why}); on fewer than "
        f"{COURSE_CORES} cores they will not run faster than single, and the notebooks print what they measured."
    )


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().split()
    except OSError:
        return None
    if not text or text[0] == "max":
        return None
    try:
        return int(text[0])
    except ValueError:
        return None


def _own(root: Path, controller: str | None) -> Path:
    """The folder of this process's own cgroup under ``root`` (``/proc/self/cgroup`` names it: a hub's
    container may see the whole hierarchy), or ``root`` where that folder is not mounted."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return root
    for line in lines:
        _, names, path = line.split(":", 2)
        if (controller is None and names == "") or (controller is not None and controller in names.split(",")):
            own = root / path.lstrip("/")
            return own if own.is_dir() else root
    return root


def _cgroup(root: Path = Path("/sys/fs/cgroup")) -> tuple[int | None, int | None, int | None, int | None]:
    """This process's container limits: CPU quota and period (microseconds), memory limit and usage
    (bytes); cgroup v2's files, else v1's, else ``None``."""
    if (root / "cgroup.controllers").exists():  # v2: one hierarchy
        own = _own(root, None)
        quota = period = None
        try:
            parts = (own / "cpu.max").read_text().split()
            quota = None if parts[0] == "max" else int(parts[0])
            period = int(parts[1])
        except (OSError, IndexError, ValueError):
            pass
        return quota, period, _read_int(own / "memory.max"), _read_int(own / "memory.current")
    cpu, mem = _own(root / "cpu", "cpu"), _own(root / "memory", "memory")
    return (
        _read_int(cpu / "cpu.cfs_quota_us"),
        _read_int(cpu / "cpu.cfs_period_us"),
        _read_int(mem / "memory.limit_in_bytes"),
        _read_int(mem / "memory.usage_in_bytes"),
    )


def limit() -> Budget:
    """This kernel's budget, read now: its affinity and container limits, free memory, and the class's
    setting (``FRAGNB_WORKERS``, else Dask's ``fragnb.workers``)."""
    import dask
    import psutil

    quota, period, mem_limit, usage = _cgroup()
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    have = cores(affinity, quota, period)
    free = memory(psutil.virtual_memory().available, mem_limit, usage)
    if os.environ.get("FRAGNB_WORKERS", "") != "":
        workers, why = allowed(have, free, os.environ["FRAGNB_WORKERS"], "FRAGNB_WORKERS")
    else:
        workers, why = allowed(have, free, dask.config.get("fragnb.workers", None), "Dask's fragnb.workers")
    return Budget(have, free, workers, why)
