"""A2C: one update per rollout with PPO's actor and buffer; its loop under every DP; CartPole learned."""

import copy
import time

import pytest
import torch

from corpus.compare import compare_namespaces, run_like_plain
from fragnb.algos.a2c import A2CConfig, A2CLearner
from fragnb.algos.ppo import ActorCritic, PPOActor, RolloutBuffer
from fragnb.envs import CartPole
from fragnb.runtime import first_solved

#: The loop of notebook 01, with A2C's learner, and a stop once the target is reached.
CELL = """
obs = env.reset()
returns = []
for it in range(iterations):
    for step in range(config.num_steps):
        action, logprob, value = actor.act(obs)
        next_obs, reward, terminated, truncated, info = env.step(action)
        buffer.add(obs, action, logprob, value, reward, terminated | truncated)
        obs = next_obs
        returns.extend(info["episode_returns"])
    batch = buffer.batch(actor.value(obs))
    stats = learner.update(batch)
    if len(returns) >= 20 and sum(returns[-20:]) / 20 >= 475:
        break
"""


def namespace(config: A2CConfig, iterations: int, seed: int = 0) -> dict:
    torch.manual_seed(seed)
    policy = ActorCritic(4, 2, config.hidden)
    return {
        "config": config,
        "env": CartPole(config.num_envs, seed=seed),
        "actor": PPOActor(policy, config.num_envs, seed=seed),
        "buffer": RolloutBuffer(config.num_envs, config.num_steps, (4,), config.gamma, config.gae_lambda),
        "learner": A2CLearner(policy, config),
        "iterations": iterations,
    }


def test_lambda_one_gives_n_step_returns_bootstrapped_with_the_last_value():
    buf = RolloutBuffer(1, 3, (1,), gamma=0.5, gae_lambda=1.0)
    for value, reward, done in ((1.0, 1.0, 0.0), (2.0, 1.0, 0.0), (3.0, 1.0, 0.0)):
        buf.add(
            torch.zeros(1, 1),
            torch.zeros(1, dtype=torch.int64),
            torch.zeros(1),
            torch.tensor([value]),
            torch.tensor([reward]),
            torch.tensor([done]),
        )
    b = buf.batch(torch.tensor([8.0]))
    # return_t = r_t + 0.5 r_{t+1} + ... + 0.5^(3-t) * 8
    assert b["returns"].tolist() == [[1 + 0.5 + 0.25 + 1.0, 1 + 0.5 + 2.0, 1 + 4.0]]


def test_update_is_one_step_and_state_dict_round_trip_repeats_it():
    torch.manual_seed(0)
    learner = A2CLearner(ActorCritic(4, 2, 16), A2CConfig())
    gen = torch.Generator().manual_seed(1)
    batch = {
        "obs": torch.randn(2, 8, 4, generator=gen),
        "actions": torch.randint(0, 2, (2, 8), generator=gen),
        "logprobs": torch.full((2, 8), -0.69),
        "values": torch.zeros(2, 8),
        "advantages": torch.randn(2, 8, generator=gen),
        "returns": torch.randn(2, 8, generator=gen),
    }
    state = copy.deepcopy(learner.state_dict())
    stats = learner.update(batch)
    assert set(stats) == {"policy_loss", "value_loss", "entropy"} and learner.updates == 1
    after = copy.deepcopy(learner.policy.state_dict())
    learner.load_state_dict(state)
    assert learner.updates == 0
    learner.update(batch)
    assert all(torch.equal(after[k], v) for k, v in learner.policy.state_dict().items())


def test_unknown_optimizer_is_refused():
    with pytest.raises(ValueError, match="rmsprop"):
        A2CLearner(ActorCritic(4, 2, 8), A2CConfig(optimizer="sgd"))


@pytest.mark.parametrize("policy", ["coarse", "fine"])
def test_a2c_loop_under_a_distributed_policy_leaves_what_plain_python_leaves(policy):
    config = A2CConfig(num_envs=4, num_steps=8, hidden=16)
    plain, ns = run_like_plain(CELL, lambda: namespace(config, iterations=2), policy, actors=2)
    assert plain["learner"].updates == ns["learner"].updates == 2
    compare_namespaces(plain, ns, CELL)


def test_a2c_loop_under_multi_learner_keeps_the_learners_in_step():
    config = A2CConfig(num_envs=4, num_steps=8, hidden=16)
    _, ns = run_like_plain(CELL, lambda: namespace(config, iterations=2), "multi_learner", learners=2)
    assert ns["learner"].updates == 2


@pytest.mark.slow
def test_a2c_solves_cartpole_seed_0(one_thread):
    config = A2CConfig()
    ns = namespace(config, iterations=2500)  # at most 320k environment steps
    start = time.perf_counter()
    exec(compile(CELL, "<cell>", "exec"), ns)
    seconds = time.perf_counter() - start
    steps = (ns["it"] + 1) * config.num_envs * config.num_steps
    print(f"A2C seed 0: solved={first_solved(ns['returns']) is not None} after {steps} env steps, {seconds:.1f} s")
    assert first_solved(ns["returns"]) is not None, (
        f"mean of the last 20 episodes never reached 475 in {steps} env steps"
    )
