"""Ape-X under `async` with ``samples_per_insert``: a learner that samples its replay buffer while the actors
insert, and waits when it runs ahead of insertion, the bound a DP option (Reverb's rate limiter), on Dask
workers for real."""

import pytest
from test_dqn import namespace

import fragnb
from fragnb import capture, run
from fragnb.algos.dqn import DQNConfig
from fragnb.envs import CartPole

#: DQN as distributed DQN papers write it, collect then train: the actors' chunk of steps, then the
#: learner's updates on the replay, and its target network synced every few iterations.
APEX = """
obs = env.reset()
returns, losses = [], []
global_step = 0
for it in range(iterations):
    actor.epsilon = linear_schedule(config.start_e, config.end_e, config.exploration_steps, global_step)
    for step in range(steps_per_iteration):
        action = actor.act(obs)
        next_obs, reward, terminated, truncated, info = env.step(action)
        buffer.add(obs, action, reward, next_obs, terminated)
        obs = next_obs
        returns.extend(info["episode_returns"])
        global_step += 1
    for update in range(updates_per_iteration):
        stats = learner.update(buffer.sample(config.batch_size))
        losses.append(stats["loss"])
    if it % target_every == 0:
        learner.sync_target()
"""


def _ns(iterations=40, step_cost=0.0, seed=0) -> dict:
    """test_dqn's notebook namespace, on environments that cost ``step_cost`` a step."""
    ns = namespace(DQNConfig(num_envs=16), iterations, steps_per_iteration=10, seed=seed)
    ns["env"] = CartPole(16, seed=seed, step_cost=step_cost)
    # 5 x 128 samples per 2 x 80 transitions inserted: the loop's own 4 samples per insert
    return {**ns, "updates_per_iteration": 5, "target_every": 10}


def test_the_learner_samples_ahead_of_slow_actors_within_the_bound_and_keeps_every_trajectory(one_thread):
    """Actors slowed by a costly environment: without the option the learner waits for a trajectory per actor
    every iteration (4 samples per insert, the loop's own ratio); with samples_per_insert=8 it runs some
    iterations on the replay alone, never past 8 samples per transition inserted, and drops nothing."""
    paced, ahead = _ns(step_cost=300e-6), _ns(step_cost=300e-6)
    plain = run(capture(APEX, paced, name="apex"), "async", actors=2, progress=False, plot=False)
    assert plain.ahead == 0 and paced["buffer"].sampled == 4 * paced["buffer"].inserted
    result = run(capture(APEX, ahead, name="apex"), "async", actors=2, samples_per_insert=8, progress=False, plot=False)
    buffer = ahead["buffer"]
    assert result.ahead > 0 and buffer.sampled <= 8 * buffer.inserted, (result.ahead, buffer.sampled, buffer.inserted)
    assert buffer.inserted < paced["buffer"].inserted  # the same updates on fewer transitions
    assert len(ahead["losses"]) == 40 * 5 and ahead["learner"].updates == 40 * 5  # every iteration's updates ran
    assert result.dropped == 0 and sum(not per for per in result.staleness) == result.ahead
    assert "ahead of insertion" in str(result)


def test_a_learner_whose_updates_read_what_only_a_trajectory_brings_is_refused_before_anything_runs():
    ns = _ns()
    cell = APEX.replace("if it % target_every == 0:", "if global_step % target_every == 0:")
    with pytest.raises(fragnb.FragmentError, match="`global_step`") as info:
        run(capture(cell, ns, name="apex"), "async", actors=2, samples_per_insert=8, progress=False, plot=False)
    assert "losses" not in ns  # nothing ran
    # the whole sentence: a helper's name rebound before it was formatted printed "line 17: {}this line reads"
    assert str(info.value).startswith(
        "line 17: under 'async' with samples_per_insert the learner may run an iteration's updates before a new "
        "trajectory arrives, sampling its replay buffer alone; this line reads `global_step`"
    ), str(info.value)


def test_samples_per_insert_needs_a_replay_the_learner_samples(canonical, ppo_ns):
    ns = ppo_ns(2)  # PPO: the learner trains on what the actors send, once
    with pytest.raises(fragnb.FragmentError, match="samples_per_insert"):
        run(
            capture(canonical.body, ns, name="ppo"), "async", actors=2, samples_per_insert=4, progress=False, plot=False
        )
    graph = capture(APEX, _ns(), name="apex")
    for bad in (0, -1.0, "8", True):
        with pytest.raises(ValueError, match="samples_per_insert"):
            graph.place("async", actors=2, samples_per_insert=bad)
    with pytest.raises(TypeError, match="samples_per_insert"):
        graph.place("coarse", actors=2, samples_per_insert=8)
