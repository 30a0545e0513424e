"""Gaussian PPO on MuJoCo's HalfCheetah-v5 through the Gymnasium adapter (the `mujoco` extra), under
the policies that can reproduce plain Python on it, and the safety net's word on the one that cannot."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import NOTEBOOK_01_LOOP
from fragnb import FragmentError, capture, run
from fragnb.algos.ppo import GaussianActorCritic, GaussianPPOActor, PPOConfig, PPOLearner, RolloutBuffer
from fragnb.envs import GymnasiumEnv

pytest.importorskip("mujoco")

CELL = NOTEBOOK_01_LOOP  # unchanged: GymnasiumEnv clips the Gaussian actions to the Box


def cheetah(iterations: int = 2, seed: int = 0) -> dict:
    config = PPOConfig.pendulum(num_envs=4, num_steps=16, gamma=0.99, num_minibatches=2)
    torch.manual_seed(seed)
    env = GymnasiumEnv("HalfCheetah-v5", num_envs=config.num_envs, seed=seed)
    policy = GaussianActorCritic(obs_dim=env.obs_shape[0], action_dim=env.action_shape[0], hidden=config.hidden)
    return {
        "config": config,
        "env": env,
        "iterations": iterations,
        "actor": GaussianPPOActor(policy, num_envs=config.num_envs, seed=seed),
        "buffer": RolloutBuffer(
            config.num_envs,
            config.num_steps,
            env.obs_shape,
            config.gamma,
            config.gae_lambda,
            action_shape=env.action_shape,
        ),
        "learner": PPOLearner(policy, config, seed=seed),
    }


def test_a_box_action_space_takes_actions_of_its_shape_clipped_to_its_bounds():
    env = GymnasiumEnv("HalfCheetah-v5", num_envs=2, seed=0)
    assert env.action_shape == (6,) and env.num_actions == 0
    twin = GymnasiumEnv("HalfCheetah-v5", num_envs=2, seed=0)
    env.reset(), twin.reset()
    big = torch.full((2, 6), 5.0)
    a, b = env.step(big), twin.step(big.clamp(-1, 1))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])  # the control cost too: MuJoCo saw the clipped action
    assert np.isfinite(a[1].numpy()).all()


def test_fine_reproduces_plain_python_on_halfcheetah():
    plain = cheetah()
    run(capture(CELL, plain, name="cheetah"), "single", progress=False, plot=False)
    ns = cheetah()
    result = run(capture(CELL, ns, name="cheetah"), "fine", actors=2, progress=False, plot=False)
    assert result.iterations == 2
    for key, value in plain["learner"].policy.state_dict().items():
        torch.testing.assert_close(ns["learner"].policy.state_dict()[key], value, atol=1e-5, rtol=0)


def test_coarse_is_refused_with_the_reason_and_runs_when_asked():
    """Each coarse actor runs the network on half the environments; torch rounds a batch of 2 rows
    differently from a batch of 4 in the last bit, and the cheetah's dynamics amplify it."""
    ns = cheetah()
    with pytest.raises(FragmentError, match=r"largest difference .*floating-point rounding.*MuJoCo"):
        run(capture(CELL, ns, name="cheetah"), "coarse", actors=2, progress=False, plot=False)
    result = run(capture(CELL, ns, name="cheetah"), "coarse", actors=2, progress=False, plot=False, check=False)
    assert result.iterations == 2 and all(torch.isfinite(p).all() for p in ns["learner"].policy.parameters())


@pytest.mark.parametrize(
    "policy,params",
    [("async", {"actors": 2}), ("srl", {"actors": 2, "policy_workers": 1, "ring": 2})],
    ids=["async", "srl"],
)
def test_decoupled_policies_train_on_halfcheetah(policy, params):
    """Actors a version behind, the learner clipping around the proximal policy: every learner iteration
    takes one trajectory per actor slot within the staleness bound, and the weights change."""
    ns = cheetah(iterations=3)
    ns["config"].proximal = True
    before = [p.detach().clone() for p in ns["learner"].policy.parameters()]
    result = run(capture(CELL, ns, name="cheetah"), policy, progress=False, plot=False, **params)
    assert result.iterations == 3 and all(0 <= age <= 1 for per in result.staleness for age in per)
    assert all(not torch.equal(b, p) for b, p in zip(before, ns["learner"].policy.parameters()))
