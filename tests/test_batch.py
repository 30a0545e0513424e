"""A notebook cell as a batch job (`python -m fragnb run NOTEBOOK --cell NAME ...`, fragnb/batch.py): notebook 01's
cell run by the command as a job is, killed mid-run as a preempted or cancelled job is, and started again with
`--resume`, ends with plain Python's weights, which the notebook loads; bad command lines and a failing setup
cell are refused by name before any worker starts."""

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
import torch

import fragnb
from conftest import ROOT
from fragnb.notebook import load_canonical

NOTEBOOK_01 = ROOT / "notebooks" / "01_first_fragment_graph.ipynb"
ITERATIONS = 12


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "fragnb", "run", *map(str, args)]


def _checkpoints(directory) -> list[int]:
    names = os.listdir(directory) if os.path.isdir(directory) else []
    return [int(n[11:20]) for n in names if n.startswith("checkpoint-") and n.endswith(".fragnb")]


def _session(sid: int) -> list[psutil.Process]:
    """The processes still running in session ``sid`` (a job's processes: the command, its Dask cluster)."""
    left = []
    for p in psutil.process_iter():
        try:
            if os.getsid(p.pid) == sid and p.status() != psutil.STATUS_ZOMBIE:
                left.append(p)
        except (ProcessLookupError, psutil.Error):
            pass
    return left


def test_a_batch_job_killed_mid_run_resumes_and_the_notebook_loads_plain_pythons_weights(tmp_path):
    ckpt, out, log = tmp_path / "ckpt", tmp_path / "out", tmp_path / "job.log"
    # the same command both times, as a requeued sbatch script runs it: --resume with no checkpoint yet starts afresh
    options = [
        "--policy",
        "coarse",
        "--actors",
        "2",
        "--checkpoint-dir",
        ckpt,
        "--checkpoint-every",
        "1",
        "--resume",
        ckpt,
    ]
    cell = [NOTEBOOK_01, "--cell", "ppo", "--set", f"iterations={ITERATIONS}", "--out", out]

    with open(log, "w") as stream:  # the job's log: a file, as sbatch --output writes
        job = subprocess.Popen(_command(*cell, *options), stdout=stream, stderr=stream, start_new_session=True)
        deadline = time.monotonic() + 180
        while not any(i >= 3 for i in _checkpoints(ckpt)) and job.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        assert job.poll() is None, f"the job ended before it was killed:\n{log.read_text()[-3000:]}"
        os.killpg(job.pid, signal.SIGKILL)  # scancel, a preemption: every process of the job at once
        job.wait()
    assert not out.exists()  # nothing saved by a job that did not end
    assert f"no checkpoint in {ckpt} yet: the run starts from the beginning" in log.read_text()
    kept = max(_checkpoints(ckpt))
    assert 3 <= kept < ITERATIONS

    again = subprocess.Popen(
        _command(*cell, *options),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    _, stderr = again.communicate(timeout=300)
    assert again.returncode == 0, stderr[-4000:]
    deadline = time.monotonic() + 30
    while (_session(job.pid) or _session(again.pid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _session(job.pid) and not _session(again.pid), "a job left processes behind"

    # the log holds lines: setup, the run's line, progress lines, where it saved; no bar redrawn in place
    lines = stderr.splitlines()
    assert "\r" not in stderr.replace("\rfragnb: started", "")  # the workers' start line aside
    assert any(line.startswith("fragnb: setup cell 1") for line in lines)
    assert any(f"iteration {ITERATIONS} of {ITERATIONS}" in line for line in lines), stderr[-2000:]

    # plain Python: notebook 01's setup and cell, the same iterations, in this process
    nb = load_canonical(NOTEBOOK_01)
    ns = nb.namespace()
    ns["iterations"] = ITERATIONS
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        exec(compile(nb.body, "<cell>", "exec"), ns)
    finally:
        torch.set_num_threads(threads)

    saved = fragnb.load_run(out)
    assert saved.manifest["iterations"] == ITERATIONS and saved.manifest["guarantee"] == "exact"
    assert saved.result.resumed_from and saved.manifest["not saved"] == {}
    for name, tensor in ns["policy"].state_dict().items():
        assert torch.equal(saved.values["learner"].policy.state_dict()[name], tensor), name
    assert saved.values["returns"] == ns["returns"] and saved.values["it"] == ns["it"] == ITERATIONS - 1
    assert saved.values["learner"].policy is saved.values["actor"].policy  # one network, as in the notebook
    mine: dict = {}
    saved.restore(mine)
    assert mine["returns"] == ns["returns"] and json.loads((out / "run.json").read_text())["cell"] == "ppo"


def test_the_batch_command_refuses_a_bad_command_line_or_setup_by_name_before_any_worker_starts(tmp_path, capsys):
    from fragnb.batch import main

    def refused(*args) -> str:  # the command line's checks, here: they run before the setup, in this process
        with pytest.raises(SystemExit) as exit:
            main(list(map(str, args)))
        assert exit.value.code == 2
        return capsys.readouterr().err

    assert "no `%%fragment dqn` cell; its %%fragment cells: ppo (cell 3)" in refused(NOTEBOOK_01, "--cell", "dqn")
    assert "--seeds makes no batch job: it runs a sweep" in refused(NOTEBOOK_01, "--cell", "ppo", "--seeds", "0-3")
    assert "--set takes NAME=VALUE" in refused(NOTEBOOK_01, "--cell", "ppo", "--set", "iterations")
    said = refused(NOTEBOOK_01, "--cell", "ppo", "--slurm-runner", "--cluster", "tcp://10.0.0.1:8786")
    assert "--slurm-runner is the cluster (the srun's tasks): give no --cluster" in said
    assert "no notebook at" in refused(tmp_path / "none.ipynb", "--cell", "ppo")

    def run(*args):
        return subprocess.run(_command(*args), capture_output=True, text=True, timeout=120)

    done = run(NOTEBOOK_01, "--cell", "ppo", "--set", "iteration=3", "--no-check")
    assert done.returncode == 2 and "the setup cells assign no `iteration`" in done.stderr

    broken = tmp_path / "broken.ipynb"
    cells = [["import torch\n", "config = {'lr': 1e-3}\n"], ["config['lr'] / 0\n"], ["%%fragment ppo\n", "pass\n"]]
    broken.write_text(
        json.dumps(
            {
                "cells": [{"cell_type": "code", "source": c, "metadata": {}, "outputs": []} for c in cells],
                "metadata": {},
                "nbformat": 4,
                "nbformat_minor": 5,
            }
        )
    )
    done = run(broken, "--cell", "ppo", "--policy", "coarse")
    assert done.returncode == 1 and "ZeroDivisionError" in done.stdout + done.stderr
    assert f"setup cell 2 of {broken} raised (above); the run did not start" in done.stderr
    assert "Dask" not in done.stderr  # no cluster started


@pytest.mark.parametrize("text", ["3", "'a'", "[1, 2]"])
def test_a_set_value_is_a_python_literal_assigned_after_the_setup(text):
    from fragnb.batch import _assign

    class Config:
        lr = 0.1

    ns = {"iterations": 1, "config": Config()}
    _assign(ns, f"iterations={text}")
    _assign(ns, f"config.lr={text}")
    assert ns["iterations"] == eval(text) == ns["config"].lr
    with pytest.raises(ValueError, match="is not a Python literal"):
        _assign(ns, "iterations=os.system('true')")
