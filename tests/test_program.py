"""What each worker group executes, and how edge values are combined: pure, no cluster."""

import pytest
import torch

from corpus.field import FIELD_BY_NAME
from corpus.loops import LOOPS
from fragnb import capture
from fragnb.plan.program import DrivenLoop, plan
from fragnb.runtime.worker.edges import combine, gather, scatter


def test_coarse_rollout_is_split_per_group_not_driven_step_by_step(canonical, ppo_ns):
    program = plan(capture(canonical.body, ppo_ns()).place("coarse", actors=2))
    iteration = program.items[2]
    assert isinstance(iteration, DrivenLoop) and not any(isinstance(i, DrivenLoop) for i in iteration.body)
    # one task per group and iteration: the learner's replay joins its update
    actors, learner = iteration.body
    assert [s.group for s in iteration.body] == ["actors", "learner"]
    # the actors record what the bookkeeping line reads; the learner replays it step by step
    assert actors.records == {"record:6": ("info",)} and learner.replays == {"record:6": ("info",)}
    assert actors.exports == {"batch", "record:6"} and learner.reads >= {"batch", "learner"}


def test_a_split_rollouts_counter_is_each_groups_own_not_a_value_that_crosses():
    # CleanRL's step loop holds the storage writes (the actors') and `global_step += ...` (the learner's):
    # split, each group binds `step` in its own copy. Read as the learner's value, it made the actors wait
    # for the learner every iteration, and `async` refuse the loop (the learner "assigns `step`").
    loop = FIELD_BY_NAME["cleanrl_ppo"]
    graph = capture(loop.cell, loop.namespace(), name="ppo")
    for policy in ("coarse", "async"):
        (iteration,) = [i for i in plan(graph.place(policy, actors=2)).items if isinstance(i, DrivenLoop)]
        actors, learner = (
            [s for s in iteration.body if s.group == "actors"],
            [s for s in iteration.body if s.group == "learner"],
        )
        assert any("global_step" in s.writes for s in learner) and any("obs" in s.writes for s in actors)
        assert not any("step" in s.reads for s in actors)  # its own loop's counter
        assert not any("step" in s.exports for s in learner)


def test_a_segment_reads_no_value_it_binds_before_reading_it_and_only_that():
    # The learner rebinds `action`, `reward` and `value` at the end of an iteration; the rollout binds each
    # before it reads it. Read as the learner's, they crossed every iteration on no edge the placement draws.
    loop = next(loop for loop in LOOPS if loop.name == "shadowed_names")

    def rollout(cell):
        graph = capture(cell, loop.namespace(), name=loop.name)
        segments = plan(graph.place("coarse", actors=2)).segments
        return next(s for s in segments if s.group == "actors" and "batch" in s.writes), segments

    actors, segments = rollout(loop.cell)
    assert not {"action", "reward", "value"} & actors.reads
    assert not any({"action", "reward", "value"} & s.exports for s in segments)
    # bound only where an `if` holds, or in a loop that may run no time: still read from its last writer
    maybe = loop.cell.replace("    value = actor.value(obs)\n", "    if it >= 0:\n        value = actor.value(obs)\n")
    assert maybe != loop.cell and "value" in rollout(maybe)[0].reads
    looped = loop.cell.replace(
        "    value = actor.value(obs)\n", "    for _ in range(1):\n        value = actor.value(obs)\n"
    )
    assert looped != loop.cell and "value" in rollout(looped)[0].reads


def _records(cell: str) -> set[str]:
    import ast

    loop = FIELD_BY_NAME["cleanrl_ppo"]
    program = plan(capture(cell, loop.namespace(), name="ppo").place("coarse", actors=2))
    return {
        ast.unparse(n)
        for seg in program.segments
        for n in ast.walk(seg.module)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "record"
    }


def test_a_dict_the_learner_reads_only_by_constant_keys_is_recorded_cut_to_them():
    # CleanRL's episode log reads a vector env's `infos` by "episode" and "_episode" only: every step's
    # record carried every array of `infos` (HalfCheetah's reward terms, positions...), which the learner
    # unpickled and joined, a quarter of a second per iteration. Every record of the name carries the
    # keys of all its readers: their replays overwrite one another.
    cell = FIELD_BY_NAME["cleanrl_ppo"].cell
    cut = _records(cell)
    assert cut and all("('infos', ('_episode', 'episode'))" in r for r in cut)
    # one reader that reads it otherwise (len) keeps every record whole
    whole = _records(cell.replace('if "episode" in infos:', 'if "episode" in infos and len(infos):'))
    assert whole and not any("'_episode'" in r for r in whole)


def test_fine_drives_the_rollout_loop_step_by_step(canonical, ppo_ns):
    program = plan(capture(canonical.body, ppo_ns()).place("fine", actors=2))
    rollout = program.items[2].body[0]
    assert isinstance(rollout, DrivenLoop)
    assert [s.group for s in rollout.body] == [
        "learner",
        "envs",
        "learner",
        "envs",
    ]  # bookkeeping joins the learner's step
    assert rollout.body[0].exports == {"action"} and "obs" in rollout.body[3].exports


def test_multi_learner_runs_each_iteration_as_one_segment(canonical, ppo_ns):
    program = plan(capture(canonical.body, ppo_ns()).place("multi_learner", learners=2))
    assert [s.group for s in program.segments] == ["replicas", "replicas"]
    assert not any(s.exports for s in program.segments)


def test_variables_are_sharded_when_computed_from_components_else_replicated(canonical, ppo_ns):
    kinds = plan(capture(canonical.body + "\n    lr = 0.1 * it", ppo_ns()).place("coarse", actors=2)).kinds
    assert kinds["obs"] == kinds["info"] == kinds["returns"] == "sharded" and kinds["lr"] == "replicated"


def test_gather_concatenates_along_the_environment_axis():
    parts = [{"obs": torch.zeros(2, 3), "n": [1]}, {"obs": torch.ones(2, 3), "n": [2, 3]}]
    whole = gather(parts)
    assert whole["obs"].shape == (4, 3) and whole["n"] == [1, 2, 3]
    assert gather([(torch.zeros(1), 5), (torch.ones(1), 5)])[1] == 5
    # per-step tensors: each step's environments joined, not the lists end to end
    assert [t.tolist() for t in gather([[torch.zeros(1), torch.zeros(1)], [torch.ones(1), torch.ones(1)]])] == [
        [0, 1],
        [0, 1],
    ]


def test_values_replicas_cannot_combine_are_an_error_naming_the_variable():
    from fragnb import FragmentError

    with pytest.raises(FragmentError, match=r"`mean` \(line 4: mean = r.mean\(\)\) is computed on each of 2 replicas"):
        combine("mean", [torch.tensor(1.0), torch.tensor(2.0)], kind="sharded", origin="line 4: mean = r.mean()")
    assert combine("lr", [0.5, 0.5], kind="replicated") == 0.5
    assert combine("stats", [{"loss": 1.0}, {"loss": 2.0}], strict=False) == {"loss": 1.0}  # data parallel: replica 0


def test_scatter_splits_only_values_that_have_the_environment_axis():
    actions = torch.arange(8)
    assert scatter(actions, 1, 2, num_envs=8).tolist() == [4, 5, 6, 7]
    assert scatter(torch.arange(3), 1, 2, num_envs=8).tolist() == [0, 1, 2]  # not per-environment: whole
    part = scatter({"a": actions, "k": 3}, 3, 4, num_envs=8)
    assert part["a"].tolist() == [6, 7] and part["k"] == 3
    assert combine("a", [torch.arange(4), torch.arange(4, 8)], num_envs=8).tolist() == list(range(8))


def test_a_script_is_complete_when_built_and_cannot_be_changed_afterwards(canonical, ppo_ns):
    import dataclasses

    from fragnb.plan.script import Preflight, RandomStart, Script

    placement = capture(canonical.body, ppo_ns()).place("coarse", actors=2)
    script = Script.of(placement)  # what the safety net walks: nothing known yet of shapes and draws
    assert (script.seed, script.rng_group, script.rng, script.drawing, script.shapes) == (0, None, None, None, {})
    assert script.strict
    with pytest.raises(dataclasses.FrozenInstanceError):
        script.shapes = {}
    sampled = min(i for seg in script.program.segments if seg.group == "actors" for i in seg.statements)
    start = RandomStart(seed=7, group="learner", states={"torch": "x"}, drawn=frozenset({sampled}), statistical=True)
    run = Script.of(placement, until=None, checkpoint_every=10, preflight=Preflight(start, {"obs": (8, 4)}))
    assert (run.seed, run.rng_group, run.rng, run.checkpoint_every) == (7, "learner", {"torch": "x"}, 10)
    assert run.shapes == {"obs": (8, 4)}
    assert not run.strict  # replicated draws: replica 0's value is taken where replicas differ
    assert run.drawing == frozenset(seg.index for seg in run.program.segments if sampled in seg.statements)


def test_planning_twice_gives_the_same_segments_so_a_job_keeps_what_it_packed(canonical, ppo_ns):
    import ast

    from fragnb.plan.script import Preflight, Script
    from fragnb.runtime.job import Job

    placement = capture(canonical.body, ppo_ns()).place("fine", actors=2)
    first, second = Script.of(placement), Script.of(placement, preflight=Preflight(shapes={"obs": (8, 4)}))

    def shape(s):
        return [(seg.index, seg.group, seg.statements, ast.dump(seg.module)) for seg in s.program.segments]

    assert shape(first) == shape(second)
    job = Job(placement, first, placement.graph.namespace, live=None)
    packed = job.payloads
    later = job.walking(second)
    assert later.script is second and job.script is first and later.payloads is packed
    assert "payloads" not in vars(Job(placement, first, {}, live=None).walking(second))  # none packed, none kept
