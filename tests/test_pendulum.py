"""The torch-batched Pendulum: Gymnasium Pendulum-v1 step for step, and shards that reproduce the batch."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from fragnb.envs import CartPole, Pendulum


def test_pendulum_matches_gymnasium_pendulum_v1_step_for_step():
    """Same start states, same random torques (some beyond the [-2, 2] limit) for 300 steps,
    through one truncation at step 200 and our auto-reset."""
    num_envs = 3
    ours = Pendulum(num_envs=num_envs, seed=0)
    theirs = [gym.make("Pendulum-v1") for _ in range(num_envs)]
    obs = ours.reset()
    for i, env in enumerate(theirs):
        env.reset(seed=i)
        env.unwrapped.state = ours.state[i].numpy().copy()
    rng = np.random.default_rng(0)
    truncations = 0
    for _ in range(300):
        actions = rng.uniform(-3.0, 3.0, size=(num_envs, 1)).astype(np.float32)
        obs, reward, terminated, truncated, info = ours.step(torch.from_numpy(actions))
        assert obs.dtype == torch.float32 and obs.shape == (num_envs, 3)
        for i, env in enumerate(theirs):
            g_obs, g_reward, g_terminated, g_truncated, _ = env.step(actions[i])
            assert (bool(terminated[i]), bool(truncated[i])) == (g_terminated, g_truncated)
            assert float(reward[i]) == pytest.approx(float(g_reward), abs=1e-5)
            if g_truncated:
                truncations += 1
                env.reset()
                env.unwrapped.state = ours.state[i].numpy().copy()  # our auto-reset drew the new start
                g_obs = env.unwrapped._get_obs()
            np.testing.assert_allclose(obs[i].numpy(), g_obs, rtol=0, atol=1e-5)
        assert len(info["episode_returns"]) == int(truncated.sum())
    assert truncations == num_envs


def test_pendulum_reset_noise_has_gymnasium_bounds():
    env = Pendulum(num_envs=1000, seed=3)
    env.reset()
    theta, theta_dot = env.state.unbind(1)
    assert theta.abs().max() <= np.pi and theta_dot.abs().max() <= 1.0
    assert theta.abs().max() > 3.0 and theta_dot.abs().max() > 0.99  # the whole range, not a corner


def test_pendulum_shards_reproduce_the_whole_batch():
    whole = Pendulum(num_envs=8, seed=1, max_episode_steps=30)
    shards = [Pendulum(num_envs=8, seed=1, max_episode_steps=30).shard(i, 2) for i in range(2)]
    obs = whole.reset()
    assert torch.equal(obs, torch.cat([s.reset() for s in shards]))
    gen = torch.Generator().manual_seed(0)
    for _ in range(100):  # three auto-resets
        actions = torch.rand(8, 1, generator=gen) * 6 - 3
        out = whole.step(actions)
        parts = [s.step(actions[4 * i : 4 * i + 4]) for i, s in enumerate(shards)]
        for k in range(4):
            assert torch.equal(out[k], torch.cat([p[k] for p in parts]))
        assert out[4]["episode_returns"] == [r for p in parts for r in p[4]["episode_returns"]]
    merged = Pendulum.merge(shards)
    assert torch.equal(merged.state, whole.state)
    assert [e._replace(time=0.0) for e in merged.episodes] == [e._replace(time=0.0) for e in whole.episodes]


def test_action_shape_tells_continuous_from_discrete():
    assert (Pendulum.action_shape, Pendulum.num_actions, Pendulum.obs_shape) == ((1,), 0, (3,))
    assert CartPole.action_shape == ()
