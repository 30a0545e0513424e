"""Modes own their run's decisions (:mod:`fragnb.policies.modes`): every stage asks the policy's mode, so a
kind of policy defined here, in a test file, runs under the threads executor with no other module edited.
The built-in modes' answers as a table, pure."""

from __future__ import annotations

import threading

import pytest
import torch

import fragnb
from fragnb.algos.ppo import SMALL_LOOP, small_setup
from fragnb.plan.script import Script
from fragnb.policies import DistributionPolicy, resolve
from fragnb.policies.modes import Lockstep
from fragnb.runtime.check import check
from fragnb.runtime.job import Job, Silent
from fragnb.runtime.threads import InThreads


class Patient(Lockstep):
    """A kind no module knows: coarse's layout, but its safety net runs three iterations, it keeps no
    checkpoints, and it says where every run goes before it starts (a note per run)."""

    name = "patient"
    _net_iterations = (3, 1)
    _checkpoints = False
    asked: list[str] = []

    def announced(self, notes: list[str]) -> list[str]:
        Patient.asked.append("announced")
        return ["a patient run: three iterations checked, no checkpoints", *notes]

    def episode_order(self) -> str:
        Patient.asked.append("episode_order")
        return super().episode_order()


PATIENT = DistributionPolicy(
    "patient",
    "a test's own kind of policy",
    "actors x N; learner x 1",
    groups={"env": "actors", "actor": "actors", "buffer": "actors", "learner": "learner", "driver": "learner"},
    replicas={"actors": "actors", "learner": 1},
    required_roles=("actor", "learner"),
    mode=Patient(),
)


def _weights(ns: dict) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in ns["policy"].state_dict().items()}


def test_a_mode_defined_in_a_test_file_runs_under_the_threads_executor():
    Patient.asked.clear()
    graph = fragnb.capture(SMALL_LOOP, small_setup(seed=0), name="ppo")
    placement = graph.place(PATIENT, actors=2)
    seconds, draws, shapes, rounding = check(placement)  # its own safety net: three iterations both ways
    assert seconds > 0 and not rounding
    script = Script.of(placement, checkpoint_every=5)
    assert script.checkpoint_every == 0  # it keeps none, whatever the run asks
    InThreads().execute(Job(placement, script, graph.namespace, Silent, stop=threading.Event()))
    plain = small_setup(seed=0)
    exec(SMALL_LOOP, plain)
    assert graph.namespace["it"] == plain["it"]
    for name, value in _weights(plain).items():
        assert torch.equal(_weights(graph.namespace)[name], value), name
    assert "episode_order" in Patient.asked  # the run asked this mode, not a flag of its class
    assert Patient().announced([]) == ["a patient run: three iterations checked, no checkpoints"]


def test_a_mode_that_keeps_no_checkpoints_is_not_restarted():
    assert not Patient().restarts(0, 2)
    assert Patient().why_it_stops(2).startswith("a decoupled policy's learner")


@pytest.mark.parametrize(
    "policy, on_workers, whole, order, checkpoints, restarts",
    [
        ("single", False, False, "plain", 0, False),
        ("coarse", True, False, "plain", 10, True),
        ("fine", True, False, "plain", 10, True),
        ("multi_learner", True, False, "plain", 10, True),
        ("gpu_only", True, False, "plain", 10, True),
        ("data_parallel", True, True, "plain", 10, True),
        ("async", True, False, "arrival", 0, False),
        ("srl", True, False, "arrival", 0, False),
    ],
)
def test_what_each_built_in_mode_answers(policy, on_workers, whole, order, checkpoints, restarts):
    mode = resolve(policy).mode
    assert mode.on_workers() is on_workers
    assert mode.whole_copies() is whole and mode.shares(4) == (1 if whole else 4)
    assert mode.episode_order() == order and mode.in_step is (order == "plain")
    assert mode.checkpoint_every(10) == checkpoints
    assert mode.restarts(0, 2) is restarts and not mode.restarts(2, 2)
    assert mode.cluster(None, ["cuda"]) == ("cuda" if policy == "gpu_only" else None)
    assert mode.cluster("tcp://h:1", ["cuda"]) == "tcp://h:1"
    assert mode.announced(["a note"]) == (["a note"] if policy == "gpu_only" else [])
