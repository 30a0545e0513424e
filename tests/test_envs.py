import gymnasium as gym
import numpy as np
import pytest
import torch

from fragnb.components import shard_slice
from fragnb.envs import CartPole, GymnasiumEnv


def _replay_against_gymnasium(max_steps: int, steps: int, seed: int, skill: float):
    """Step our CartPole and Gymnasium's with the same actions, syncing state at each reset."""
    ours = CartPole(num_envs=1, seed=seed, max_episode_steps=max_steps)
    theirs = gym.make("CartPole-v1", max_episode_steps=max_steps)
    obs = ours.reset()
    theirs.reset(seed=seed)
    theirs.unwrapped.state = ours.state[0].numpy().copy()
    rng = np.random.default_rng(seed)
    # `skill` is how often a balancing action is taken: high gives truncations, low terminations.
    seen = {"terminated": 0, "truncated": 0}
    for _ in range(steps):
        a = int(obs[0, 2] + 0.5 * obs[0, 3] > 0) if rng.random() < skill else int(rng.integers(2))
        obs, reward, terminated, truncated, info = ours.step(torch.tensor([a]))
        g_obs, g_reward, g_terminated, g_truncated, _ = theirs.step(a)
        assert (bool(terminated[0]), bool(truncated[0])) == (g_terminated, g_truncated)
        assert float(reward[0]) == g_reward
        if g_terminated or g_truncated:
            seen["terminated"] += g_terminated
            seen["truncated"] += g_truncated
            assert info["episode_returns"]
            theirs.reset()
            theirs.unwrapped.state = ours.state[0].numpy().copy()  # our auto-reset drew the new start
            g_obs = np.asarray(theirs.unwrapped.state, dtype=np.float32)
        np.testing.assert_allclose(obs[0].numpy(), g_obs, rtol=0, atol=1e-6)
    return seen


def test_cartpole_matches_gymnasium_cartpole_v1_step_for_step():
    seen = _replay_against_gymnasium(max_steps=500, steps=3000, seed=0, skill=0.5)
    assert seen["terminated"] > 0


def test_cartpole_truncates_like_gymnasium_time_limit():
    seen = _replay_against_gymnasium(max_steps=40, steps=400, seed=1, skill=0.95)
    assert seen["truncated"] > 0


def test_cartpole_reports_full_episode_returns_and_resets():
    env = CartPole(num_envs=4, seed=0, max_episode_steps=10)
    env.reset()
    for _ in range(10):
        obs, reward, terminated, truncated, info = env.step(torch.zeros(4, dtype=torch.int64))
    finished = [e for e in env.episodes]
    assert all(e.length == e.ret for e in finished)  # reward 1 per step
    assert env.env_steps == 40
    assert (env.episode_length < 10).all()


@pytest.mark.parametrize(
    "make", [lambda: CartPole(num_envs=8, seed=3), lambda: GymnasiumEnv("CartPole-v1", num_envs=8, seed=3)]
)
def test_shards_reproduce_the_full_batch(make):
    full, parts = make(), [make().shard(i, 2) for i in range(2)]
    obs = full.reset()
    assert torch.equal(obs, torch.cat([p.reset() for p in parts]))
    gen = torch.Generator().manual_seed(0)
    for _ in range(60):  # long enough for several auto-resets
        actions = torch.randint(0, 2, (8,), generator=gen)
        whole = full.step(actions)
        split = [p.step(actions[shard_slice(8, i, 2)]) for i, p in enumerate(parts)]
        for k in range(4):
            assert torch.equal(whole[k], torch.cat([s[k] for s in split]))
        assert whole[4]["episode_returns"] == [r for s in split for r in s[4]["episode_returns"]]
    without_time = lambda eps: sorted((e.step, e.env_id, e.ret, e.length) for e in eps)  # noqa: E731
    assert full.episodes and without_time(full.episodes) == without_time(e for p in parts for e in p.episodes)


def test_shard_rejects_counts_that_do_not_divide_the_environments():
    with pytest.raises(ValueError, match="num_envs=8 is not divisible by 3"):
        CartPole(num_envs=8).shard(0, 3)


def test_cartpole_state_dict_round_trip_resumes_identically():
    env = CartPole(num_envs=4, seed=0)
    env.reset()
    actions = torch.tensor([0, 1, 1, 0])
    for _ in range(30):
        env.step(actions)
    state = env.state_dict()
    after = [env.step(actions)[0] for _ in range(30)]
    env.load_state_dict(state)
    assert all(torch.equal(a, env.step(actions)[0]) for a in after)


def test_step_with_the_wrong_number_of_actions_names_both_counts():
    env = CartPole(num_envs=4)
    env.reset()
    with pytest.raises(ValueError, match="4 environments but got 3 actions"):
        env.step(torch.zeros(3, dtype=torch.int64))


def test_gymnasium_adapter_unknown_id_fails_at_construction():
    with pytest.raises(gym.error.Error):
        GymnasiumEnv("NoSuchEnv-v0", num_envs=2)


def test_gymnasium_env_speaks_gymnasium_where_a_vector_env_loop_needs_it():
    import numpy as np

    env = GymnasiumEnv("CartPole-v1", num_envs=4, seed=0)
    obs, info = env.reset(seed=3)  # as gym.vector envs answer
    assert obs.shape == (4, 4) and info == {}
    assert env.single_observation_space.shape == (4,) and env.single_action_space.n == 2
    assert env.spec.reward_threshold == 475.0 and env.seed == 3
    assert isinstance(env.reset(), torch.Tensor)  # fragnb's own call is unchanged
    ended = []
    for _ in range(40):
        obs, reward, terminated, truncated, info = env.step(np.zeros(4, dtype=np.int64))  # NumPy actions
        ended += [
            (int(i), float(info["episode"]["r"][i]), int(info["episode"]["l"][i]))
            for i in np.nonzero(info["_episode"])[0]
        ]
    assert ended and all(r == n for _, r, n in ended)  # CartPole pays 1 per step
    assert [r for _, r, _ in ended][: len(env.episodes)] == [e.ret for e in env.episodes][: len(ended)]


def test_reset_with_a_seed_reseeds_every_environment_independently_of_sharding():
    whole = GymnasiumEnv("CartPole-v1", num_envs=4, seed=0)
    half = GymnasiumEnv("CartPole-v1", num_envs=4, seed=0).shard(1, 2)
    assert torch.equal(whole.reset(seed=9)[0][2:], half.reset(seed=9)[0])
    assert not torch.equal(GymnasiumEnv("CartPole-v1", num_envs=4, seed=0).reset(seed=8)[0], whole.reset(seed=9)[0])


def test_a_step_cost_spends_cpu_time_and_changes_nothing_else():
    import time

    cheap, costly = CartPole(num_envs=4, seed=3), CartPole(num_envs=4, seed=3, step_cost=2e-3)
    a, b = cheap.reset(), costly.reset()
    start = time.process_time()
    for i in range(5):
        actions = torch.tensor([i % 2, 1, 0, 1])
        for x, y in zip(cheap.step(actions)[:4], costly.step(actions)[:4]):
            assert torch.equal(x, y)
    assert time.process_time() - start >= 5 * 4 * 2e-3 * 0.9  # CPU time, as a simulator's: not a sleep
    assert torch.equal(a, b)
