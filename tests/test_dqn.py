"""DQN components: replay buffer, epsilon-greedy actor, learner; a student's loop under every DP; CartPole solved."""

import copy
import time

import pytest
import torch

from conftest import kill_a_worker_when_shown
from corpus.compare import compare_namespaces, run_like_plain
from fragnb.algos.dqn import DQNConfig, DQNLearner, EpsilonGreedyActor, QNetwork, ReplayBuffer, linear_schedule
from fragnb.envs import CartPole
from fragnb.runtime import first_solved
from fragnb.runtime.cluster import clusters

#: The training loop as a student writes it in a notebook cell (CleanRL's shape: one update per
#: vector step after ``learning_starts``, a target sync every ``target_every`` steps).
CELL = """
obs = env.reset()
returns, losses = [], []
global_step = 0
for it in range(iterations):
    for step in range(steps_per_iteration):
        actor.epsilon = linear_schedule(config.start_e, config.end_e, config.exploration_steps, global_step)
        action = actor.act(obs)
        next_obs, reward, terminated, truncated, info = env.step(action)
        buffer.add(obs, action, reward, next_obs, terminated)
        obs = next_obs
        returns.extend(info["episode_returns"])
        global_step += 1
        if global_step > config.learning_starts:
            batch = buffer.sample(config.batch_size)
            stats = learner.update(batch)
            losses.append(stats["loss"])
            if config.prioritized:
                buffer.update_priorities(batch["indices"], stats["td_errors"])
        if global_step % config.target_every == 0:
            learner.sync_target()
    if len(returns) >= 20 and sum(returns[-20:]) / 20 >= 475:
        break
"""


def namespace(config: DQNConfig, iterations: int, steps_per_iteration: int, seed: int = 0) -> dict:
    """What the notebook's earlier cells build: the components, the config and the loop's budget."""
    torch.manual_seed(seed)
    q = QNetwork(4, 2, config.hidden)
    return {
        "config": config,
        "env": CartPole(config.num_envs, seed=seed),
        "actor": EpsilonGreedyActor(q, config.num_envs, seed=seed, epsilon=config.start_e),
        "buffer": ReplayBuffer(
            config.buffer_size, (4,), seed=seed, prioritized=config.prioritized, alpha=config.alpha, beta=config.beta
        ),
        "learner": DQNLearner(q, config),
        "linear_schedule": linear_schedule,
        "iterations": iterations,
        "steps_per_iteration": steps_per_iteration,
    }


def _fill(buffer: ReplayBuffer, steps: int, num_envs: int) -> list[torch.Tensor]:
    """Add ``steps`` steps whose obs encode (step, env); return the obs of each step."""
    added = []
    for t in range(steps):
        obs = (10 * t + torch.arange(num_envs, dtype=torch.float32)).unsqueeze(1).repeat(1, 4)
        buffer.add(
            obs, torch.full((num_envs,), t % 2), torch.ones(num_envs), obs + 1, torch.zeros(num_envs, dtype=torch.bool)
        )
        added.append(obs)
    return added


def test_linear_schedule_decays_then_holds():
    assert linear_schedule(1.0, 0.1, 10, 0) == 1.0
    assert linear_schedule(1.0, 0.1, 10, 5) == pytest.approx(0.55)
    assert linear_schedule(1.0, 0.1, 10, 10) == linear_schedule(1.0, 0.1, 10, 1000) == pytest.approx(0.1)


def test_buffer_ring_wraps_around_overwriting_the_oldest_transitions():
    buf = ReplayBuffer(5, (4,))
    _fill(buf, 3, num_envs=2)  # slots: step 0 -> 0, 1; step 1 -> 2, 3; step 2 -> 4, then 0
    assert len(buf) == 5 and buf.cursor == 1
    assert buf.obs[:, 0].tolist() == [21.0, 1.0, 10.0, 11.0, 20.0]
    assert torch.equal(buf.next_obs, buf.obs + 1)


def test_uniform_sampling_is_reproducible_by_seed_and_draws_only_stored_transitions():
    a, b, c = ReplayBuffer(100, (4,), seed=3), ReplayBuffer(100, (4,), seed=3), ReplayBuffer(100, (4,), seed=4)
    for buf in (a, b, c):
        _fill(buf, 5, num_envs=4)
    sa, sb, sc = a.sample(64), b.sample(64), c.sample(64)
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(sa["obs"], sc["obs"])
    stored = set(a.obs[:20, 0].tolist())
    assert set(sa["obs"][:, 0].tolist()) <= stored and len(set(sa["obs"][:, 0].tolist())) > 10
    assert set(sa) == {"obs", "actions", "rewards", "next_obs", "dones"}


def test_prioritised_sampling_prefers_high_priority_transitions_and_weights_them_down():
    buf = ReplayBuffer(16, (4,), seed=0, prioritized=True, alpha=1.0, beta=1.0)
    _fill(buf, 4, num_envs=4)
    s = buf.sample(8)
    assert set(s) == {"obs", "actions", "rewards", "next_obs", "dones", "weights", "indices"}
    assert torch.allclose(s["weights"], torch.ones(8))  # new transitions share the maximal priority
    td = torch.full((16,), 0.01)
    td[5] = 10.0
    buf.update_priorities(torch.arange(16), td)
    s = buf.sample(1000)
    share = (s["indices"] == 5).float().mean().item()
    assert share > 0.9, share  # p = 10 / (10 + 15 * 0.01) ~ 0.985
    assert s["weights"][s["indices"] == 5].max() < s["weights"][s["indices"] != 5].min()
    assert s["weights"].max() == 1.0
    _fill(buf, 1, num_envs=4)  # newcomers get the largest priority so far
    assert torch.allclose(buf.priorities[:4], torch.full((4,), 10.0 + 1e-6, dtype=torch.float64))


def test_target_network_changes_only_on_sync():
    torch.manual_seed(0)
    learner = DQNLearner(QNetwork(4, 2, 16), DQNConfig(learning_rate=1e-2))
    buf = ReplayBuffer(64, (4,))
    _fill(buf, 4, num_envs=4)
    before = copy.deepcopy(learner.target.state_dict())
    stats = learner.update(buf.sample(16))
    assert set(stats) == {"loss", "q"} and all(isinstance(v, float) for v in stats.values())
    assert all(torch.equal(before[k], v) for k, v in learner.target.state_dict().items())
    assert not all(torch.equal(before[k], v) for k, v in learner.q.state_dict().items())
    learner.sync_target()
    assert all(torch.equal(learner.q.state_dict()[k], v) for k, v in learner.target.state_dict().items())


def test_learner_state_dict_round_trip_makes_updates_repeat_exactly():
    torch.manual_seed(0)
    learner = DQNLearner(QNetwork(4, 2, 16))
    buf = ReplayBuffer(64, (4,), prioritized=True)
    _fill(buf, 4, num_envs=4)
    batch = buf.sample(16)
    state = copy.deepcopy(learner.state_dict())
    first = learner.update(batch)
    assert first["td_errors"].shape == (16,)  # weighted batch: TD errors come back for the priorities
    after = copy.deepcopy(learner.q.state_dict())
    learner.load_state_dict(state)
    assert learner.update(batch)["loss"] == first["loss"]
    assert all(torch.equal(after[k], v) for k, v in learner.q.state_dict().items())


def test_sharded_actors_explore_as_the_full_actor_does():
    torch.manual_seed(0)
    q = QNetwork(4, 2, 16)
    full = EpsilonGreedyActor(q, num_envs=8, seed=1, epsilon=0.5)
    parts = [EpsilonGreedyActor(q, num_envs=8, seed=1, epsilon=0.5).shard(i, 2) for i in range(2)]
    greedy = 0
    for _ in range(30):
        obs = torch.randn(8, 4)
        action = full.act(obs)
        assert action.dtype == torch.int64
        assert torch.equal(action, torch.cat([p.act(obs[4 * i : 4 * i + 4]) for i, p in enumerate(parts)]))
        greedy += (action == q(obs).argmax(-1)).sum().item()
    assert 0.6 < greedy / 240 < 0.9  # epsilon 0.5 over 2 actions: 75% greedy


@pytest.mark.parametrize("policy,prioritized", [("coarse", False), ("fine", False), ("coarse", True)])
def test_dqn_loop_under_a_distributed_policy_leaves_what_plain_python_leaves(policy, prioritized):
    config = DQNConfig(
        num_envs=4,
        buffer_size=64,
        batch_size=8,
        learning_starts=2,
        target_every=3,
        exploration_steps=8,
        hidden=16,
        prioritized=prioritized,
    )
    plain, ns = run_like_plain(CELL, lambda: namespace(config, iterations=3, steps_per_iteration=4), policy, actors=2)
    assert plain["learner"].updates == ns["learner"].updates == 10
    compare_namespaces(plain, ns, CELL)


def test_dqn_loop_resumed_from_a_checkpoint_after_a_lost_worker_leaves_what_plain_python_leaves(monkeypatch, capsys):
    """A replay buffer with priorities, a step counter and a list of losses outlive iterations: the
    checkpoint must carry them all."""
    config = DQNConfig(
        num_envs=4,
        buffer_size=64,
        batch_size=8,
        learning_starts=2,
        target_every=3,
        exploration_steps=8,
        hidden=16,
        prioritized=True,
    )
    clusters.shutdown()  # a fresh cluster has exactly the workers the run uses: the one killed holds a replica
    killed = kill_a_worker_when_shown(monkeypatch, 5)
    plain, ns = run_like_plain(
        CELL, lambda: namespace(config, iterations=7, steps_per_iteration=4), "coarse", actors=2, checkpoint_every=2
    )
    assert killed and "The run starts again from the checkpoint after iteration 4" in capsys.readouterr().err
    assert plain["learner"].updates == ns["learner"].updates == 26 and ns["global_step"] == 28
    compare_namespaces(plain, ns, CELL)


def test_dqn_loop_under_multi_learner_keeps_the_learners_in_step():
    config = DQNConfig(
        num_envs=4, buffer_size=64, batch_size=8, learning_starts=2, target_every=3, exploration_steps=8, hidden=16
    )
    _, ns = run_like_plain(
        CELL, lambda: namespace(config, iterations=3, steps_per_iteration=4), "multi_learner", learners=2
    )
    assert ns["learner"].updates == 10  # each replica trains on its own shard's replay, on the mean gradient


@pytest.mark.slow
def test_dqn_solves_cartpole_seed_0(one_thread):
    config = DQNConfig()
    ns = namespace(config, iterations=300, steps_per_iteration=100)  # at most 30k vector steps, 480k env steps
    start = time.perf_counter()
    exec(compile(CELL, "<cell>", "exec"), ns)
    seconds = time.perf_counter() - start
    solved = first_solved(ns["returns"])
    steps = ns["global_step"] * config.num_envs
    print(
        f"DQN seed 0: solved={solved is not None} after {steps} env steps, {len(ns['returns'])} episodes, {seconds:.1f} s"
    )
    assert solved is not None, f"mean of the last 20 episodes never reached 475 in {steps} env steps"
