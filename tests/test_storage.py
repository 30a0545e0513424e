"""Runs that outlive the notebook (:mod:`fragnb.runtime.store`): checkpoints written to a directory or an fsspec
URL, atomically and the newest two kept, and a run resumed from them in a new process after its kernel was
killed (SIGKILL) mid-run, ending with the uninterrupted run's weights and episodes."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import fragnb
from conftest import NOTEBOOK_01
from fragnb.algos.ppo import SMALL_LOOP, small_setup
from fragnb.errors import FragmentError
from fragnb.notebook import load_canonical
from fragnb.runtime import store
from fragnb.runtime.net import shm
from fragnb.runtime.store import KEEP, Store, latest, resumable

ROOT = Path(__file__).resolve().parents[1]
KILLED = Path(__file__).with_name("killed_run.py")


@pytest.fixture
def graph():
    return fragnb.capture(SMALL_LOOP, small_setup(seed=0), name="ppo")


def _write(where, placement, iterations) -> Store:
    kept = Store(where, placement)
    for i in iterations:
        kept.write(i, {"actors[0]": f"state {i}".encode(), "learner[0]": b"weights"})
    kept.close()
    return kept


@pytest.mark.parametrize("where", ["local", "memory"])
def test_checkpoints_are_written_whole_and_the_newest_kept(tmp_path, graph, where):
    url = str(tmp_path / "ck") if where == "local" else f"memory://fragnb-test/{tmp_path.name}"
    placement = graph.place("coarse", actors=2)
    kept = _write(url, placement, [2, 4, 6, 8])
    assert len(kept.written) == 4 and kept.seconds > 0
    names = sorted(p.rsplit("/", 1)[-1] for p in store._checkpoints(kept.fs, kept.root))
    assert names == [f"checkpoint-{i:09d}.fragnb" for i in (6, 8)][-KEEP:]
    found = resumable(url, placement)
    assert found.iteration == 8 and found.replicas["actors[0]"] == b"state 8"


def test_a_checkpoint_cut_off_while_written_leaves_the_previous_one(tmp_path, graph):
    placement = graph.place("coarse", actors=2)
    _write(tmp_path, placement, [3])
    (tmp_path / "checkpoint-000000004.fragnb.1a2b3c4d.partial").write_bytes(b"\x80\x05half a pick")
    assert latest(str(tmp_path)).iteration == 3


def test_a_checkpoint_of_another_run_is_refused_naming_the_difference(tmp_path, graph):
    _write(tmp_path, graph.place("coarse", actors=2), [2])
    with pytest.raises(
        FragmentError,
        match=r"its policy's parameters were \{'actors': 2, 'device': 'auto'\}, and these are \{'actors': 4",
    ):
        resumable(str(tmp_path), graph.place("coarse", actors=4))
    with pytest.raises(FragmentError, match="written under policy 'coarse', and this run is under 'fine'"):
        resumable(str(tmp_path), graph.place("fine", actors=2))
    other = fragnb.capture(SMALL_LOOP.replace("range(2)", "range(3)"), small_setup(seed=0), name="ppo")
    with pytest.raises(FragmentError, match="the cell's source differs from the one that wrote it"):
        resumable(str(tmp_path), other.place("coarse", actors=2))
    path = next(tmp_path.glob("*.fragnb"))
    data = pickle.loads(path.read_bytes())
    path.write_bytes(pickle.dumps({**data, "version": "0.0.1"}))
    with pytest.raises(FragmentError, match=r"written by fragnb 0\.0\.1, and this is"):
        resumable(str(tmp_path), graph.place("coarse", actors=2))
    path.write_bytes(pickle.dumps({**data, "format": 99}))
    with pytest.raises(FragmentError, match="written by another version of fragnb"):
        latest(str(tmp_path))
    with pytest.raises(FragmentError, match="holds no checkpoint"):
        latest(str(tmp_path / "empty"))


def test_what_cannot_keep_or_resume_checkpoints_is_refused_before_anything_runs(tmp_path, graph):
    before = dict(graph.namespace)
    blocked = tmp_path / "a file"
    blocked.write_text("")
    cases = [
        (dict(policy="coarse", actors=2, checkpoint_dir=str(blocked / "ck")), "cannot be written"),
        (dict(policy="single", checkpoint_dir=str(tmp_path)), "'single' policy runs the cell in this kernel"),
        (dict(policy="async", actors=2, checkpoint_dir=str(tmp_path)), "async keeps none"),
        (dict(policy="coarse", actors=2, checkpoint_every=0, checkpoint_dir=str(tmp_path)), "checkpoint_every=0"),
        (dict(policy="async", actors=2, resume=str(tmp_path)), "a async run keeps no checkpoints"),
        (dict(policy="coarse", actors=2, resume=str(tmp_path / "none")), "holds no checkpoint"),
        (dict(policy="coarse", actors=2, checkpoint_dir=3), r"run\(\): checkpoint_dir=3 is not accepted"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message):
            fragnb.run(graph, progress=False, plot=False, check=False, **kwargs)
    assert graph.namespace.keys() == before.keys()


@pytest.mark.parametrize("policy", ["coarse", "data_parallel"])
def test_a_run_whose_kernel_was_killed_goes_on_in_a_new_one_as_if_never_stopped(tmp_path, policy):
    directory, resumed, whole = tmp_path / "ck", tmp_path / "resumed.pt", tmp_path / "whole.pt"

    def run(step: str, out: Path) -> subprocess.CompletedProcess:
        command = [sys.executable, str(KILLED), step, policy, str(directory), str(out), str(ROOT)]
        return subprocess.run(command, capture_output=True, text=True, timeout=300)

    killed = run("kill", tmp_path / "never.pt")
    assert killed.returncode == -9, killed.stdout + killed.stderr  # SIGKILL mid-run, after a checkpoint on disk
    assert latest(str(directory)).iteration >= 3
    again = run("resume", resumed)
    assert again.returncode == 0 and "fragnb: resumes from" in again.stderr, again.stderr
    got = torch.load(resumed)
    assert got["resumed_from"].startswith(f"{directory}/checkpoint-") and "(after iteration " in got["resumed_from"]
    if policy == "coarse":  # exact: plain Python's
        nb = load_canonical(NOTEBOOK_01)
        ns = nb.namespace()
        ns["iterations"] = got["iterations"]
        exec(nb.body, ns)
        want = {"weights": ns["policy"].state_dict(), "returns": list(ns["returns"]), "it": ns["it"]}
    else:  # another run of the same replicas, never stopped
        assert run("whole", whole).returncode == 0
        want = torch.load(whole)
    assert got["it"] == want["it"] and got["returns"] == want["returns"]
    if policy == "data_parallel" and shm.available():  # the killed run's /dev/shm file: the next group swept it
        assert not list(shm._DIR.glob("fragnb-*")), "a run killed with its kernel left its /dev/shm file"
    assert all(torch.equal(value, want["weights"][name]) for name, value in got["weights"].items())
