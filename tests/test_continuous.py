"""Gaussian PPO on the torch Pendulum: the components, the same answer under every policy, and learning."""

import copy
import math

import pytest
import torch

from conftest import NOTEBOOK_01_LOOP
from corpus.compare import compare_namespaces, run_like_plain
from fragnb.algos.ppo import GaussianActorCritic, GaussianPPOActor, PPOConfig, PPOLearner, RolloutBuffer
from fragnb.envs import Pendulum
from fragnb.rows import whole_rows

SETUP = """
import torch

from fragnb.algos.ppo import GaussianActorCritic, GaussianPPOActor, PPOConfig, PPOLearner, RolloutBuffer
from fragnb.envs import Pendulum

torch.manual_seed(0)
config = PPOConfig.pendulum(num_envs=4, num_steps=16, hidden=16, update_epochs=2, num_minibatches=2)
iterations = 2
env = Pendulum(num_envs=config.num_envs, seed=0)
policy = GaussianActorCritic(obs_dim=3, action_dim=1, hidden=config.hidden)
actor = GaussianPPOActor(policy, num_envs=config.num_envs, seed=0)
buffer = RolloutBuffer(config.num_envs, config.num_steps, env.obs_shape, config.gamma, config.gae_lambda, action_shape=env.action_shape)
learner = PPOLearner(policy, config, seed=0)
"""

# Notebook 01's loop, unchanged: Pendulum clips the unclipped Gaussian actions itself.
CELL = NOTEBOOK_01_LOOP


def _namespace() -> dict:
    ns: dict = {}
    exec(compile(SETUP, "<setup>", "exec"), ns)
    return ns


def _policy(seed=0):
    torch.manual_seed(seed)
    return GaussianActorCritic(3, 1, hidden=16, log_std=-0.3)


def test_log_prob_and_entropy_are_those_of_a_diagonal_normal():
    policy = _policy()
    obs, actions = torch.randn(10, 3), torch.randn(10, 1)
    normal = torch.distributions.Normal(policy.mean(obs), policy.log_std.exp())
    torch.testing.assert_close(policy.log_prob(obs, actions), normal.log_prob(actions).sum(-1))
    torch.testing.assert_close(policy.entropy(obs), normal.entropy().sum(-1))


def test_sharded_gaussian_actors_sample_the_actions_of_the_full_actor():
    policy = _policy()
    full = GaussianPPOActor(policy, num_envs=8, seed=1)
    parts = [GaussianPPOActor(policy, num_envs=8, seed=1).shard(i, 4) for i in range(4)]
    obs = torch.randn(8, 3)
    for _ in range(20):
        whole = full.act(obs)
        split = []
        for i, p in enumerate(parts):
            with whole_rows(2 * i, 2, 8):  # as a replica computes: its 2 rows among the 8 (fragnb.rows)
                split.append(p.act(obs[2 * i : 2 * i + 2]))
        for k in range(3):  # the same draws, and the same bits
            assert torch.equal(whole[k], torch.cat([s[k] for s in split])), k


def test_gaussian_actor_samples_follow_the_policy_and_report_their_log_density():
    policy = _policy()
    actor = GaussianPPOActor(policy, num_envs=4000, seed=0)
    obs = torch.zeros(4000, 3)
    action, logprob, value = actor.act(obs)
    assert action.shape == (4000, 1) and action.dtype == torch.float32
    mean, std = policy.mean(obs[:1]).item(), policy.log_std.exp().item()
    assert abs(action.mean().item() - mean) < 0.03 and abs(action.std().item() / std - 1) < 0.05
    z = (action - mean) / std
    torch.testing.assert_close(logprob, (-0.5 * z.square() - math.log(std) - 0.5 * math.log(2 * math.pi)).squeeze(-1))
    torch.testing.assert_close(value, policy.value(obs).detach())


def test_actions_stay_unclipped_and_clip_only_bounds_what_the_env_receives():
    policy = _policy()
    with torch.no_grad():
        policy.log_std.fill_(1.5)  # std 4.5: many draws beyond Pendulum's [-2, 2]
    actor = GaussianPPOActor(policy, num_envs=100, seed=0, low=-2.0, high=2.0)
    action, _, _ = actor.act(torch.zeros(100, 3))
    assert action.abs().max() > 2.0
    clipped = actor.clip(action)
    assert clipped.abs().max() <= 2.0 and torch.equal(clipped, action.clamp(-2.0, 2.0))
    unbounded = GaussianPPOActor(policy, num_envs=100)
    assert torch.equal(unbounded.clip(action), action) and unbounded.clip(action) is not action


def test_rollout_buffer_stores_continuous_actions_and_shards():
    full = RolloutBuffer(4, 3, (3,), action_shape=(1,))
    parts = [RolloutBuffer(4, 3, (3,), action_shape=(1,)).shard(i, 2) for i in range(2)]
    assert full.actions.shape == (4, 3, 1) and full.actions.dtype == torch.float32
    assert RolloutBuffer(4, 3, (3,)).actions.dtype == torch.int64  # discrete by default
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        step = [
            torch.randn(4, 3, generator=gen),
            torch.randn(4, 1, generator=gen),
            torch.randn(4, generator=gen),
            torch.randn(4, generator=gen),
            torch.randn(4, generator=gen),
            torch.rand(4, generator=gen) < 0.3,
        ]
        full.add(*step)
        for i, p in enumerate(parts):
            p.add(*(x[2 * i : 2 * i + 2] for x in step))
    last = torch.randn(4, generator=gen)
    whole, split = full.batch(last), [p.batch(last[2 * i : 2 * i + 2]) for i, p in enumerate(parts)]
    assert torch.equal(whole["actions"][:, 2], step[1])
    for key, value in whole.items():
        assert torch.equal(value, torch.cat([s[key] for s in split])), key


def test_learner_updates_a_gaussian_policy():
    policy = _policy()
    learner = PPOLearner(policy, PPOConfig.pendulum(update_epochs=1, num_minibatches=2), seed=0)
    gen = torch.Generator().manual_seed(1)
    batch = {
        "obs": torch.randn(2, 8, 3, generator=gen),
        "actions": torch.randn(2, 8, 1, generator=gen),
        "logprobs": torch.full((2, 8), -1.0),
        "values": torch.zeros(2, 8),
        "advantages": torch.randn(2, 8, generator=gen),
        "returns": torch.randn(2, 8, generator=gen),
    }
    before = [p.detach().clone() for p in policy.parameters()]
    stats = learner.update(batch)
    assert all(not torch.equal(b, p) for b, p in zip(before, policy.parameters()))
    assert set(stats) == {"policy_loss", "value_loss", "entropy"} and all(math.isfinite(v) for v in stats.values())


@pytest.mark.parametrize("policy", ["coarse", "fine"])
def test_ppo_pendulum_loop_leaves_the_plain_namespace(policy):
    plain, ns = run_like_plain(CELL, _namespace, policy, actors=2)
    compare_namespaces(plain, ns, CELL)


def test_ppo_pendulum_loop_under_multi_learner_keeps_the_learners_in_step():
    _, ns = run_like_plain(CELL, _namespace, "multi_learner", learners=2)
    assert ns["learner"].updates == 2


def _stale_batch(policy, shift: float) -> dict:
    """A batch of actions an older policy took: the better half (positive advantages) are now e^shift times
    likelier than then, the worse half e^shift times less likely."""
    gen = torch.Generator().manual_seed(2)
    obs, actions = torch.randn(2, 8, 3, generator=gen), torch.randn(2, 8, 1, generator=gen)
    advantages = torch.tensor([1.0, -1.0]).repeat(8).view(2, 8)
    with torch.no_grad():
        logprobs = policy.log_prob(obs, actions) - shift * advantages
    return {
        "obs": obs,
        "actions": actions,
        "logprobs": logprobs,
        "values": torch.zeros(2, 8),
        "advantages": advantages,
        "returns": torch.zeros(2, 8),
    }


@pytest.mark.parametrize("proximal", [False, True])
def test_proximal_ppo_keeps_the_gradient_of_samples_an_older_policy_produced(proximal):
    """The weights have already moved past the clip from the older policy that took these actions, the
    way every sample would have it: PPO's ratio to the behaviour policy is clipped for all of them and
    the policy gets no gradient. Clipped around the proximal policy (the weights now), each sample
    still counts, weighted by its importance to the behaviour policy."""
    policy = _policy()
    config = PPOConfig.pendulum(update_epochs=1, num_minibatches=1, vf_coef=0.0, proximal=proximal)
    before = [p.detach().clone() for p in policy.actor_mean.parameters()]
    PPOLearner(policy, config).update(_stale_batch(policy, shift=0.5))
    moved = any(not torch.equal(b, p) for b, p in zip(before, policy.actor_mean.parameters()))
    assert moved == proximal


def test_proximal_ppo_on_fresh_data_is_ppo():
    """With the behaviour policy's own log-probabilities, the proximal policy is the behaviour policy."""
    updated = []
    for proximal in (False, True):
        policy = _policy()
        PPOLearner(policy, PPOConfig.pendulum(update_epochs=2, num_minibatches=2, proximal=proximal)).update(
            _stale_batch(policy, 0.0)
        )
        updated.append(torch.cat([p.detach().flatten() for p in policy.parameters()]))
    torch.testing.assert_close(updated[0], updated[1], atol=1e-6, rtol=0)


@pytest.mark.slow
@pytest.mark.parametrize(
    "seed,stale", [(0, False), (1, False), (0, True)], ids=["seed0", "seed1", "seed0-one-version-stale"]
)
def test_gaussian_ppo_swings_up_the_pendulum(seed, stale):
    """Mean return of the last 20 episodes above -300 within PENDULUM_STEPS steps (random: about -1200).

    ``stale``: the actor samples with the weights from before the learner's last update, as an `async`
    actor one version behind does, and the learner clips around the proximal policy (without that, this
    run reaches about -600 at 100k steps)."""
    from fragnb.algos.ppo import PENDULUM_STEPS

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small networks: threads only add overhead on a 2-core machine
    try:
        torch.manual_seed(seed)
        config = PPOConfig.pendulum(proximal=stale)
        env = Pendulum(num_envs=config.num_envs, seed=seed)
        policy = GaussianActorCritic(obs_dim=3, action_dim=1, hidden=config.hidden)
        behaviour = copy.deepcopy(policy) if stale else policy
        actor = GaussianPPOActor(behaviour, num_envs=config.num_envs, seed=seed)
        buffer = RolloutBuffer(
            config.num_envs,
            config.num_steps,
            env.obs_shape,
            config.gamma,
            config.gae_lambda,
            action_shape=env.action_shape,
        )
        learner = PPOLearner(policy, config, seed=seed)
        obs, returns, best = env.reset(), [], -math.inf
        while env.env_steps < PENDULUM_STEPS and best <= -300:
            for _ in range(config.num_steps):
                action, logprob, value = actor.act(obs)
                next_obs, reward, terminated, truncated, info = env.step(action)
                buffer.add(obs, action, logprob, value, reward, terminated | truncated)
                obs = next_obs
                returns.extend(info["episode_returns"])
                if len(returns) >= 20:
                    best = max(best, sum(returns[-20:]) / 20)
            before = copy.deepcopy(policy.state_dict())
            learner.update(buffer.batch(actor.value(obs)))
            if stale:
                behaviour.load_state_dict(before)
    finally:
        torch.set_num_threads(threads)
    assert best > -300, f"mean return of the last 20 episodes peaked at {best:.1f} in {env.env_steps} steps"
