"""Gaussian PPO on MuJoCo's HalfCheetah-v5 through the Gymnasium adapter (the `mujoco` extra), under
the policies that can reproduce plain Python on it, and the safety net's word on the one that cannot."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import NOTEBOOK_01_LOOP
from corpus.field import FIELD_BY_NAME
from fragnb import capture, run
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


@pytest.mark.parametrize("policy", ["fine", "coarse"])
def test_fine_and_coarse_reproduce_plain_python_on_halfcheetah_to_the_bit(policy):
    """Each coarse actor runs the network on half the environments; torch rounded a batch of 2 rows
    differently from a batch of 4 in the last bit (4e-8 in `action` after one step), the cheetah's dynamics
    amplified it, and the safety net refused the run. Each replica now computes its rows on the whole
    batch's shape (fragnb.rows): the same bits as plain Python."""
    plain = cheetah()
    run(capture(CELL, plain, name="cheetah"), "single", progress=False, plot=False)
    ns = cheetah()
    result = run(capture(CELL, ns, name="cheetah"), policy, actors=2, progress=False, plot=False)
    assert result.iterations == 2 and result.guarantee == "exact"
    for key, value in plain["learner"].policy.state_dict().items():
        assert torch.equal(ns["learner"].policy.state_dict()[key], value), key


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


def _field(seed_steps: int = 256) -> tuple[dict, str]:
    loop = FIELD_BY_NAME["cleanrl_ppo_continuous"]
    ns: dict = {}
    exec(compile(loop.setup, "<setup>", "exec"), ns)
    return ns, loop.cell


def _same_simulators(a, b) -> None:
    """Both vector envs step on from the same simulator states: the same observations and rewards."""
    action = np.linspace(-1, 1, a.num_envs * 6, dtype=np.float32).reshape(a.num_envs, 6)
    for _ in range(3):
        (oa, ra, *_), (ob, rb, *_) = a.step(action), b.step(action)
        np.testing.assert_array_equal(oa, ob)
        np.testing.assert_array_equal(ra, rb)


def test_a_cleanrl_style_mujoco_loop_runs_under_fine_as_plain_python_does(one_thread):
    """CleanRL's continuous PPO as the field writes it: a SyncVectorEnv of HalfCheetahs, each wrapped
    with running normalisation, reset in the setup. fine's env replicas step copies of them, which must
    carry each simulator's state: gymnasium pickles a MuJoCo env as its constructor's arguments, and the
    run differed from plain Python from its first iteration (value loss 3.97 against 4.10) while it
    said exact, since the safety net's copies lost the state alike."""
    plain, cell = _field()
    exec(compile(cell, "<cell>", "exec"), plain)
    ns, _ = _field()
    result = run(capture(cell, ns, name="cheetah"), "fine", actors=2, progress=False, plot=False)
    assert result.guarantee == "exact" and result.iterations == 2
    assert ns["writer"] == plain["writer"]
    for a, b in zip(plain["agent"].parameters(), ns["agent"].parameters()):
        assert torch.equal(a, b)
    _same_simulators(plain["envs"], ns["envs"])  # the environments came back where plain Python left them


@pytest.mark.parametrize("policy", ["coarse", "async"])
def test_the_magic_runs_the_cleanrl_style_mujoco_loop_announced_statistical(shell, capsys, policy):
    """Each actor draws its actions from its own generator: announced, and the run trains. Under
    ``async`` the actors run CleanRL's step loop over their storage and the learner its own copy for
    `global_step`; they act on weights at most one version old (max_staleness)."""
    ns, cell = _field()
    shell.user_ns.update(ns)
    before = [p.detach().clone() for p in ns["agent"].parameters()]
    shell.run_cell_magic(
        "fragment", f"cheetah --policy {policy} --actors 2 --run --no-progress --no-plot --no-dashboard", cell
    )
    result = shell.user_ns["cheetah"].last_run
    assert result.guarantee == "statistical" and result.iterations == 2
    assert "statistical run" in capsys.readouterr().err
    assert all(0 <= age <= 1 for per in result.staleness for age in per)
    assert all(not torch.equal(a, b) for a, b in zip(before, shell.user_ns["agent"].parameters()))
