"""What each worker group executes, and how edge values are combined: pure, no cluster."""

import torch

from fragnb import capture
from fragnb.program import DrivenLoop, plan, segments_of
from fragnb.replica import combine, gather, scatter


def test_coarse_rollout_is_one_segment_per_iteration_on_the_actors(canonical, ppo_ns):
    items = plan(capture(canonical.body, ppo_ns()).place("coarse", actors=2))
    assert isinstance(items[1], DrivenLoop) and [s.group for s in items[1].body] == ["actors", "learner"]
    rollout, update = items[1].body
    assert rollout.exports == {"batch"} and update.reads >= {"batch", "learner"}


def test_fine_drives_the_rollout_loop_step_by_step(canonical, ppo_ns):
    items = plan(capture(canonical.body, ppo_ns()).place("fine", actors=2))
    rollout = items[1].body[0]
    assert isinstance(rollout, DrivenLoop)
    assert [s.group for s in rollout.body] == ["learner", "envs", "learner", "envs"]
    assert rollout.body[0].exports == {"action"} and "obs" in rollout.body[3].exports


def test_multi_learner_runs_each_iteration_as_one_segment(canonical, ppo_ns):
    items = plan(capture(canonical.body, ppo_ns()).place("multi_learner", learners=2))
    assert [s.group for s in segments_of(items)] == ["replicas", "replicas"]
    assert not any(s.exports for s in segments_of(items))


def test_gather_concatenates_along_the_environment_axis():
    parts = [{"obs": torch.zeros(2, 3), "n": [1]}, {"obs": torch.ones(2, 3), "n": [2, 3]}]
    whole = gather(parts)
    assert whole["obs"].shape == (4, 3) and whole["n"] == [1, 2, 3]
    assert gather([(torch.zeros(1), 5), (torch.ones(1), 5)])[1] == 5


def test_scatter_splits_only_values_that_have_the_environment_axis():
    actions = torch.arange(8)
    assert scatter(actions, 1, 2, num_envs=8).tolist() == [4, 5, 6, 7]
    assert scatter(torch.arange(3), 1, 2, num_envs=8).tolist() == [0, 1, 2]  # not per-environment: whole
    part = scatter({"a": actions, "k": 3}, 3, 4, num_envs=8)
    assert part["a"].tolist() == [6, 7] and part["k"] == 3
    assert combine([torch.arange(4), torch.arange(4, 8)], 0, 1, 8).tolist() == list(range(8))
