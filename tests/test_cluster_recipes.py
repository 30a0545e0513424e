"""The recipes of docs/clusters.md, as far as loopback allows: dask-jobqueue's job machinery (what
``SLURMCluster`` submits with ``sbatch``, run here as local processes) starts workers that fragnb runs
on through a ``Client``, with the same weights as ``single``; the Slurm recipe's own arguments make
the job script the doc shows."""

import pytest
import torch

from fragnb import capture, run
from fragnb.runtime.cluster import clusters

dask_jobqueue = pytest.importorskip("dask_jobqueue")


def test_slurm_recipe_writes_a_job_script_of_single_threaded_workers():
    # SLURMCluster starts its scheduler where it is made, and submits nothing until `scale`.
    with dask_jobqueue.SLURMCluster(
        cores=8,
        processes=8,
        memory="32GiB",
        walltime="02:00:00",
        queue="cpu",
        worker_extra_args=["--nthreads", "1"],
        scheduler_options={"host": "127.0.0.1", "dashboard_address": None},
        interface="lo",
    ) as cluster:
        script = cluster.job_script()
    assert "#SBATCH -p cpu" in script and "#SBATCH -t 02:00:00" in script and "#SBATCH --cpus-per-task=8" in script
    assert "--nworkers 8" in script and script.rstrip().endswith("--nthreads 1 --interface lo")


def test_fragnb_runs_on_workers_a_job_queue_started(canonical, ppo_ns):
    from dask_jobqueue.local import (
        LocalCluster as JobCluster,
    )  # the job machinery of SLURMCluster, with local processes
    from distributed import Client

    single = ppo_ns(2)
    run(capture(canonical.body, single, name="ppo"), "single", progress=False, plot=False)
    with JobCluster(
        cores=1,
        processes=1,
        memory="2GiB",
        worker_extra_args=["--nthreads", "1"],
        interface="lo",
        scheduler_options={"host": "127.0.0.1", "dashboard_address": None},
    ) as cluster:
        cluster.scale(jobs=3)
        with Client(cluster) as client:
            client.wait_for_workers(3, timeout=120)
            try:
                ns = ppo_ns(2)
                result = run(
                    capture(canonical.body, ns, name="ppo"), "coarse", client, actors=2, progress=False, plot=False
                )
            finally:
                clusters.shutdown()
    assert result.iterations == 2 and result.processes == 3
    for key, value in single["learner"].policy.state_dict().items():
        torch.testing.assert_close(ns["learner"].policy.state_dict()[key], value, atol=1e-5, rtol=0)
