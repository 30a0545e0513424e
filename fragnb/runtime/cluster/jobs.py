"""Why a worker a batch system ran is gone: its job's end as the batch system tells it.

dask-jobqueue runs each group of workers as a job (Slurm's ``sbatch``); when one ends mid-run, "out of memory"
is one cause among several. The job's own state says which: cancelled (``scancel``, or preempted), past its
walltime, its node failed, or out of memory. Read with ``scontrol show job`` while Slurm still remembers it
(``MinJobAge``, five minutes by default); other batch systems, and clusters that are not dask-jobqueue's, say
nothing here.
"""

from __future__ import annotations

import re
import shutil
import subprocess

__all__ = ["job_ids", "job_ends"]

#: Slurm's job states, as a sentence about the worker's end.
_SLURM = {
    "CANCELLED": "its Slurm job {job} was cancelled (scancel, or preempted by a job of higher priority)",
    "PREEMPTED": "its Slurm job {job} was preempted",
    "TIMEOUT": "its Slurm job {job} reached its walltime",
    "DEADLINE": "its Slurm job {job} reached its deadline",
    "NODE_FAIL": "the node of its Slurm job {job} failed",
    "OUT_OF_MEMORY": "its Slurm job {job} ran out of memory",
    "FAILED": "its Slurm job {job} failed",
}


def job_ids(client, addresses: set[str]) -> dict[str, str]:
    """The batch job of each worker at ``addresses`` (address -> job id), where ``client``'s cluster is one of
    dask-jobqueue's; empty otherwise. Read while the workers live: a gone worker's name is gone with it."""
    cluster = getattr(client, "cluster", None)
    jobs = getattr(cluster, "workers", None)
    if not jobs or not hasattr(cluster, "job_cls"):
        return {}
    try:
        known = client.scheduler_info(n_workers=-1)["workers"]
    except Exception:  # a client that cannot tell: nothing to say
        return {}
    out = {}
    for address, info in known.items():
        name = str(info.get("name", ""))
        job = jobs.get(name) or jobs.get(name.rsplit("-", 1)[0])  # a job of several workers names them NAME-i
        if address in addresses and getattr(job, "job_id", None):
            out[address] = str(job.job_id)
    return out


def job_ends(jobs: dict[str, str]) -> dict[str, str]:
    """How each job of ``jobs`` (address -> job id) ended, as a sentence (address -> sentence), for those the
    batch system still remembers in a state that says more than "gone"."""
    if not jobs or shutil.which("scontrol") is None:
        return {}
    out = {}
    for address, job in jobs.items():
        try:
            shown = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            continue
        state = re.search(r"JobState=(\w+)", shown.stdout)
        if state and state[1] in _SLURM:
            out[address] = _SLURM[state[1]].format(job=job)
    return out
