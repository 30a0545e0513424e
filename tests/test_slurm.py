"""A real Slurm: docs/clusters.md's ``SLURMCluster`` recipe on the one-node Slurm that ``make test`` starts
(``.ci/slurm``: Debian's slurmctld, slurmd and munge). Its workers are ``sbatch`` jobs Slurm runs; notebook 01's
loop runs on them through ``fragnb.run`` and through the magic's ``--cluster``, with ``single``'s weights where
the policy is exact. Skipped, naming why, where no Slurm answers (not root, no apt)."""

import shutil
import subprocess
import time

import pytest
import torch

from fragnb import capture, run
from fragnb.runtime.cluster import clusters

dask_jobqueue = pytest.importorskip("dask_jobqueue")

#: Worker jobs: four actors and the learner of `coarse` x4.
JOBS = 5


def _why_not() -> str | None:
    """Why no Slurm can take jobs here, or None."""
    if shutil.which("sinfo") is None:
        return "no Slurm here (`make test` installs and starts one where it runs as root: .ci/slurm)"
    done = subprocess.run(["sinfo", "-h", "-o", "%T %P"], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        return f"no Slurm controller answers: {done.stderr.strip()}"
    if not any(line.split()[0] in ("idle", "mixed") for line in done.stdout.splitlines() if line.strip()):
        return f"no Slurm node takes jobs: {done.stdout.strip()}"
    return None


_WHY_NOT = _why_not()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(_WHY_NOT is not None, reason=str(_WHY_NOT))]


def _jobs() -> list[str]:
    done = subprocess.run(["squeue", "-h", "-o", "%i %T"], capture_output=True, text=True, timeout=30, check=True)
    return [line for line in done.stdout.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """docs/clusters.md's recipe with this test node's values (one core and 900 MiB a job, its partition, loopback):
    the cluster, its client, and the seconds from ``scale()`` to every worker up."""
    from distributed import Client

    partition = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, check=True).stdout.split()[
        0
    ]
    with dask_jobqueue.SLURMCluster(
        cores=1,
        processes=1,
        memory="900MiB",
        worker_extra_args=["--nthreads", "1"],  # one thread each (fragnb's replicas)
        queue=partition.rstrip("*"),
        walltime="00:20:00",
        interface="lo",
        scheduler_options={"host": "127.0.0.1", "dashboard_address": "127.0.0.1:0"},  # Dask's dashboard, on loopback
        log_directory=str(tmp_path_factory.mktemp("slurm-logs")),  # the jobs' output, not the working directory
    ) as cluster:
        begin = time.monotonic()
        cluster.scale(jobs=JOBS)
        with Client(cluster) as client:
            client.wait_for_workers(JOBS, timeout=180)
            yield cluster, client, time.monotonic() - begin
            clusters.shutdown()
    deadline = time.monotonic() + 30
    while _jobs() and time.monotonic() < deadline:  # closing the cluster cancels its jobs
        time.sleep(1)
    assert not _jobs(), f"jobs left in Slurm's queue: {_jobs()}"


def test_a_notebook_cell_runs_as_an_sbatch_job_of_srun_tasks_and_its_saved_weights_load_in_the_notebook(
    canonical, ppo_ns, tmp_path
):
    """The batch command in an ``sbatch`` script, as docs/guide/batch.md writes it: ``srun`` starts five tasks of
    ``python -m fragnb run ... --slurm-runner`` (dask-jobqueue's SLURMRunner: the scheduler, the run, three
    workers); the job ends by itself, and what it saved loads here with plain Python's weights. First in this
    module: the node's CPUs are its own (the other tests' workers hold five)."""
    import sys

    import fragnb
    from conftest import NOTEBOOK_01

    out = tmp_path / "out"
    script = tmp_path / "ppo.sh"
    script.write_text(
        "#!/bin/bash\n"
        f"#SBATCH --ntasks=5 --cpus-per-task=1 --mem-per-cpu=900M --time=00:10:00 --output={tmp_path}/ppo-%j.log\n"
        f"srun {sys.executable} -m fragnb run {NOTEBOOK_01} --cell ppo --policy coarse --actors 2 "
        f"--set iterations=3 --slurm-runner --out {out}\n"
    )
    done = subprocess.run(["sbatch", "--wait", str(script)], capture_output=True, text=True, timeout=600)
    log = "".join(p.read_text() for p in tmp_path.glob("ppo-*.log"))
    assert done.returncode == 0, (done.stderr, log[-4000:])
    assert "fragnb: ppo (coarse): iteration 3 of 3" in log and f"fragnb: saved to {out}" in log, log[-4000:]
    # on the srun's own workers, never a cluster of fragnb's own started beside them
    assert "--cluster _fragnb_slurm_job" in log and "Dask workers" not in log, log[-4000:]
    assert log.count("distributed.scheduler - INFO - Register worker") == 3, log[-4000:]
    saved = fragnb.load_run(out)
    assert saved.manifest["guarantee"] == "exact" and saved.manifest["iterations"] == 3
    single = ppo_ns(3)
    run(capture(canonical.body, single, name="ppo"), "single", progress=False, plot=False)
    for key, value in single["learner"].policy.state_dict().items():
        assert torch.equal(saved.values["learner"].policy.state_dict()[key], value), key
    assert not _jobs()  # the job ended: its scheduler and workers with the run


def test_the_recipe_runs_coarse_x4_on_workers_slurm_started_with_singles_weights(slurm, canonical, ppo_ns):
    cluster, client, seconds = slurm
    print(f"{JOBS} sbatch jobs up {seconds:.1f} s after scale()")
    running = [line for line in _jobs() if line.endswith("RUNNING")]
    assert len(running) == JOBS, _jobs()  # the workers are Slurm's jobs, not local processes
    assert "#SBATCH" in cluster.job_script() and "--nthreads 1" in cluster.job_script()
    single = ppo_ns(3)
    run(capture(canonical.body, single, name="ppo"), "single", progress=False, plot=False)
    ns = ppo_ns(3)
    result = run(capture(canonical.body, ns, name="ppo"), "coarse", client, actors=4, progress=False, plot=False)
    assert result.iterations == 3 and result.guarantee == "exact"
    for key, value in single["learner"].policy.state_dict().items():
        assert torch.equal(ns["learner"].policy.state_dict()[key], value), key  # to the last bit


def test_the_slurm_runs_dashboard_opens_through_the_jupyter_server_as_on_one_machine(
    slurm, canonical, ppo_ns, tmp_path
):
    """The recipe's scheduler lives in the notebook's process and serves Dask's dashboard on loopback. With Dask's
    link written for jupyter-server-proxy (docs/jupyterhub.md), a run on the Slurm workers shows that link (it
    once showed none: the link was opened here as a URL), and a Jupyter server serves the dashboard there."""
    pytest.importorskip("jupyter_server_proxy")
    import secrets
    import socket
    import sys
    import urllib.request

    import dask

    from fragnb.ui.live import LiveProgress

    _, client, _ = slurm
    links: list[str] = []

    class Shown(LiveProgress):  # the run's view, shown nowhere: the dashboard link it is given
        def show_link(self, link):
            links.append(link)

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = secrets.token_hex(16)
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter_server", "--no-browser", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.port={port}", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={tmp_path}", "--allow-root"],
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "server.log", "w"),  # noqa: SIM115 - the server keeps it
    )  # fmt: skip
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with dask.config.set({"distributed.dashboard.link": "/proxy/{port}/status"}):
            ns = ppo_ns(1)
            view = Shown(progress=False, plot=False)
            run(capture(canonical.body, ns, name="ppo"), "coarse", client, actors=2, progress=view, plot=False)
        dashboard = client.scheduler_info()["services"]["dashboard"]
        assert links == [f"/proxy/{dashboard}/status"], links
        deadline = time.monotonic() + 60
        while True:
            try:
                page = direct.open(f"http://127.0.0.1:{port}{links[0]}?token={token}", timeout=10)
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise AssertionError((tmp_path / "server.log").read_text()[-3000:]) from None
                time.sleep(0.5)
        with page:
            assert page.status == 200 and b"Dask" in page.read()  # Dask's own page, through the Jupyter server
    finally:
        server.terminate()
        server.wait(30)


def test_the_magic_runs_data_parallel_x2_on_the_same_slurm_workers(slurm, canonical, shell, capsys):
    _, client, _ = slurm
    shell.run_cell(canonical.setup, store_history=False).raise_error()
    shell.user_ns.update(iterations=3, client=client)
    shell.run_cell_magic(
        "fragment",
        "ppo --policy data_parallel --replicas 2 --cluster client --run --no-progress --no-plot --no-dashboard",
        canonical.body,
    )
    result = shell.user_ns["ppo"].last_run
    assert result.guarantee == "data-parallel" and result.iterations == 3
    assert set(result.replica_values) == {"replicas[0]", "replicas[1]"}
    assert "data-parallel run: each of the 2 replicas" in capsys.readouterr().err


def test_a_worker_job_scancelled_mid_run_resumes_from_its_checkpoint_with_the_uninterrupted_weights(
    slurm, canonical, ppo_ns, monkeypatch, capsys
):
    """As a preempted or cancelled job ends a worker: `scancel` of the newest worker's job once the notebook shows
    iteration 3 (each of coarse x4's five replicas has a job of its own); the run says so (Slurm's own word for the job's end, not "out of memory"), resumes from its
    checkpoint on the workers left and ends with plain Python's weights. Last in this module: the cluster has a
    job fewer after it."""
    from fragnb.ui import live

    _, client, _ = slurm
    single = ppo_ns(6)
    run(capture(canonical.body, single, name="ppo"), "single", progress=False, plot=False)
    cancelled, shown, update = [], [], live.LiveProgress.update

    def cancel(self, *args, **kwargs):
        shown.append(1)
        if len(shown) == 3 and not cancelled:
            newest = max(int(line.split()[0]) for line in _jobs())
            subprocess.run(["scancel", str(newest)], check=True, timeout=30)
            cancelled.append(newest)
        update(self, *args, **kwargs)

    monkeypatch.setattr(live.LiveProgress, "update", cancel)
    ns = ppo_ns(6)
    result = run(capture(canonical.body, ns, name="ppo"), "coarse", client, actors=4, checkpoint_every=1, plot=False)
    assert cancelled and result.iterations == 6, (cancelled, result.iterations)
    said = capsys.readouterr().err
    assert f"its Slurm job {cancelled[0]} was cancelled" in said and "out of memory" not in said, said[-2000:]
    assert str(cancelled[0]) not in " ".join(_jobs())  # Slurm ended that job
    for key, value in single["learner"].policy.state_dict().items():
        assert torch.equal(ns["learner"].policy.state_dict()[key], value), key


def test_a_worker_job_that_reaches_its_walltime_mid_run_reads_as_one_and_resumes_with_the_uninterrupted_weights(
    slurm, canonical, ppo_ns, monkeypatch, tmp_path
):
    """A job past its walltime, for real: once the notebook holds the checkpoint after iteration 2, an actor's job
    has its limit lowered to the time it has used (``scontrol update TimeLimit=0``, as an administrator may), and
    Slurm ends it at its next check (within 30 s) as it ends any job past its walltime: state TIMEOUT. The run
    says so, and resumes from its checkpoint with plain Python's weights. Until the run starts again, the loop
    sleeps half a second an iteration (no value changes), so that it outlasts Slurm's check; run after the
    scancel test, on the four workers it left."""
    from fragnb.runtime.attempt import Attempt

    _, client, _ = slurm
    iterations = 120
    resumed = tmp_path / "resumed"  # written when the run starts again: the loop stops sleeping
    single = ppo_ns(iterations)
    run(capture(canonical.body, single, name="ppo"), "single", progress=False, plot=False)
    limited, poll, start = [], Attempt.poll, Attempt.start

    def watch(self, *args, **kwargs):
        if not limited and self.saved and self.saved[0] >= 2 and self.slots.get("actors[1]") in self.jobs:
            job = self.jobs[self.slots["actors[1]"]]
            subprocess.run(["scontrol", "update", f"JobId={job}", "TimeLimit=0"], check=True, timeout=30)
            limited.append(job)
        return poll(self, *args, **kwargs)

    def again(self, *args, **kwargs):
        if limited:
            resumed.touch()
        return start(self, *args, **kwargs)

    monkeypatch.setattr(Attempt, "poll", watch)
    monkeypatch.setattr(Attempt, "start", again)
    slow = canonical.body.replace("for it in range(iterations):\n", "for it in range(iterations):\n    pause()\n")
    ns = ppo_ns(iterations)
    ns["pause"] = lambda: None if resumed.exists() else time.sleep(0.5)  # the workers share this machine's files
    result = run(
        capture(slow, ns, name="ppo"), "coarse", client, actors=2, checkpoint_every=1, progress=False, plot=False
    )
    assert limited and result.iterations == iterations, (limited, result.iterations)
    assert len(result.lost_workers) == 1, result.lost_workers
    assert f"its Slurm job {limited[0]} reached its walltime" in result.lost_workers[0], result.lost_workers
    assert "resumed from the checkpoint after iteration" in str(result)
    for key, value in single["learner"].policy.state_dict().items():
        assert torch.equal(ns["learner"].policy.state_dict()[key], value), key
