"""A corpus of training loops as students write them, for checking fragnb's equivalence invariant.

Each :class:`CorpusLoop` is the plain Python of the notebook cells before the loop (``setup``:
imports, components built with a seed, helper functions) and the ``%%fragment`` cell itself
(``cell``). Every loop has 4 or 8 environments (divisible by 2 actors) and 2-3 iterations, and
runs in well under a second as plain Python. Each loop exercises one concern where possible; the
name says which.
"""

from __future__ import annotations

import linecache
from dataclasses import dataclass
from textwrap import dedent

__all__ = ["CorpusLoop", "LOOPS", "BY_NAME"]


@dataclass(frozen=True)
class CorpusLoop:
    """A notebook's setup cells and its training-loop cell."""

    name: str
    setup: str
    cell: str

    def namespace(self) -> dict:
        """A fresh namespace holding what ``setup`` builds; its source is in ``linecache``, as a notebook
        cell's is in a kernel, so that ``inspect`` reads the classes it defines (a method holding the loop)."""
        filename = f"<setup {self.name}>"
        linecache.cache[filename] = (len(self.setup), None, self.setup.splitlines(keepends=True), filename)
        ns: dict = {}
        exec(compile(self.setup, filename, "exec"), ns)
        return ns


def _loop(name: str, setup: str, cell: str) -> CorpusLoop:
    return CorpusLoop(name, dedent(setup).strip() + "\n", dedent(cell).strip() + "\n")


# -- shared setups ----------------------------------------------------------------------------

PPO_SETUP = """
    import torch

    import fragnb
    from fragnb.algos.ppo import ActorCritic, PPOActor, PPOConfig, PPOLearner, RolloutBuffer
    from fragnb.envs import CartPole

    seed = 0
    torch.manual_seed(seed)
    config = PPOConfig(num_envs=4, num_steps=16, hidden=32)

    env = CartPole(num_envs=config.num_envs, seed=seed)
    policy = ActorCritic(obs_dim=4, num_actions=2, hidden=config.hidden)
    actor = PPOActor(policy, num_envs=config.num_envs, seed=seed)
    buffer = RolloutBuffer(config.num_envs, config.num_steps, env.obs_shape, config.gamma, config.gae_lambda)
    learner = PPOLearner(policy, config, seed=seed)

    iterations = 2
"""

PG_SETUP = """
    import torch

    from fragnb.envs import CartPole
    from corpus.components import CategoricalActor, CategoricalPolicy, PGLearner

    torch.manual_seed(0)
    num_envs, num_steps, iterations, gamma = 4, 16, 3, 0.99

    env = CartPole(num_envs=num_envs, seed=0)
    policy = CategoricalPolicy(obs_dim=4, num_actions=2)
    actor = CategoricalActor(policy, num_envs=num_envs, seed=0)
    learner = PGLearner(policy, lr=1e-2, vf_coef={vf_coef})
"""

DQN_SETUP = """
    import torch

    from fragnb.envs import CartPole
    from corpus.components import DQNLearner, QActor, ReplayBuffer, mlp

    torch.manual_seed(0)
    num_envs, steps_per_iteration, iterations = 4, 8, 3
    batch_size, learning_starts = 16, 1

    env = CartPole(num_envs=num_envs, seed=0)
    q_net = mlp(4, 2)
    actor = QActor(q_net, num_envs=num_envs, seed=0, epsilon=1.0)
    buffer = ReplayBuffer(capacity=256, obs_shape=(4,), seed=0)
    learner = DQNLearner(q_net, lr=1e-3, gamma=0.99)
"""

GAUSSIAN_SETUP = """
    import torch

    {env_import}
    from corpus.components import GaussianActor, GaussianLearner, GaussianPolicy

    torch.manual_seed(0)
    num_envs, num_steps, iterations, gamma = 4, 16, 2, 0.9

    env = {env}
    policy = GaussianPolicy(obs_dim=3, act_dim=1)
    actor = GaussianActor(policy, num_envs=num_envs, seed=0)
    learner = GaussianLearner(policy, lr=1e-3)
"""

PPO_CELL = """
    obs = env.reset()
    returns = []
    for it in range(iterations):
        for step in range(config.num_steps):
            action, logprob, value = actor.act(obs)
            next_obs, reward, terminated, truncated, info = env.step(action)
            buffer.add(obs, action, logprob, value, reward, terminated | truncated)
            obs = next_obs
            returns.extend(info["episode_returns"])
        last_value = actor.value(obs)
        batch = buffer.batch(last_value)
        stats = learner.update(batch)
"""

GAUSSIAN_CELL = """
    obs = env.reset()
    mean_rewards = []
    for it in range(iterations):
        obs_buf, act_buf, rew_buf = [], [], []
        for step in range(num_steps):
            action, logprob = actor.act(obs)
            next_obs, reward, terminated, truncated, info = env.step(action)
            obs_buf.append(obs)
            act_buf.append(action)
            rew_buf.append(reward)
            obs = next_obs
        rewards = torch.stack(rew_buf)
        returns = torch.zeros_like(rewards)
        running = torch.zeros_like(rewards[0])
        for t in reversed(range(num_steps)):
            running = rewards[t] + gamma * running
            returns[t] = running
        loss = learner.update(torch.stack(obs_buf), torch.stack(act_buf), returns)
        mean_rewards.append(rewards.mean().item())
"""


LOOPS: list[CorpusLoop] = [
    # Notebook 01's cell, verbatim, on a smaller configuration.
    _loop("ppo_notebook", PPO_SETUP, PPO_CELL),
    # The same loop with the bookkeeping students add: per-iteration appends, a dict of lists,
    # a tensor accumulator and an int counter.
    _loop(
        "ppo_bookkeeping",
        PPO_SETUP,
        """
        obs = env.reset()
        returns = []
        mean_returns = []
        log = {"loss": [], "value_loss": []}
        total_reward = 0.0
        episodes = 0
        for it in range(iterations):
            for step in range(config.num_steps):
                action, logprob, value = actor.act(obs)
                next_obs, reward, terminated, truncated, info = env.step(action)
                buffer.add(obs, action, logprob, value, reward, terminated | truncated)
                obs = next_obs
                returns.extend(info["episode_returns"])
                total_reward += reward.sum()
                episodes += int((terminated | truncated).sum())
            mean_returns.append(reward.mean())
            last_value = actor.value(obs)
            batch = buffer.batch(last_value)
            stats = learner.update(batch)
            log["loss"].append(stats["policy_loss"])
            log["value_loss"].append(stats["value_loss"])
        """,
    ),
    # The nested call of fragnb/algos/ppo.py's docstring: one statement, a buffer call around an actor call.
    _loop(
        "ppo_nested_call",
        PPO_SETUP,
        """
        obs = env.reset()
        for it in range(iterations):
            for step in range(config.num_steps):
                action, logprob, value = actor.act(obs)
                next_obs, reward, terminated, truncated, info = env.step(action)
                buffer.add(obs, action, logprob, value, reward, terminated | truncated)
                obs = next_obs
            batch = buffer.batch(actor.value(obs))
            stats = learner.update(batch)
        """,
    ),
    # REINFORCE: per-step Python lists of tensors, Monte-Carlo returns by a reversed loop in the cell.
    _loop(
        "reinforce_mc",
        PG_SETUP.replace("{vf_coef}", "0.0"),
        """
        obs = env.reset()
        episode_returns = []
        for it in range(iterations):
            obs_buf, act_buf, logp_buf, rew_buf, done_buf = [], [], [], [], []
            for t in range(num_steps):
                action, logprob = actor.act(obs)
                next_obs, reward, terminated, truncated, info = env.step(action)
                obs_buf.append(obs)
                act_buf.append(action)
                logp_buf.append(logprob)
                rew_buf.append(reward)
                done_buf.append((terminated | truncated).float())
                obs = next_obs
                episode_returns.extend(info["episode_returns"])
            returns = []
            ret = torch.zeros_like(rew_buf[0])
            for t in reversed(range(num_steps)):
                ret = rew_buf[t] + gamma * ret * (1.0 - done_buf[t])
                returns.insert(0, ret)
            returns = torch.stack(returns)
            stats = learner.update(torch.stack(obs_buf), torch.stack(act_buf), returns)
        """,
    ),
    # A2C: n-step returns computed in the cell from stacked rewards and a bootstrap value.
    _loop(
        "a2c_nstep",
        PG_SETUP.replace("{vf_coef}", "0.5"),
        """
        obs = env.reset()
        losses = []
        for it in range(iterations):
            observations, actions, rewards, dones = [], [], [], []
            for step in range(num_steps):
                action, _ = actor.act(obs)
                obs_next, reward, terminated, truncated, info = env.step(action)
                observations.append(obs)
                actions.append(action)
                rewards.append(reward)
                dones.append((terminated | truncated).float())
                obs = obs_next
            R = actor.value(obs)
            rewards_t = torch.stack(rewards)
            dones_t = torch.stack(dones)
            targets = torch.zeros_like(rewards_t)
            for t in reversed(range(num_steps)):
                R = rewards_t[t] + gamma * (1.0 - dones_t[t]) * R
                targets[t] = R
            stats = learner.update(torch.stack(observations), torch.stack(actions), targets)
            losses.append(stats["value_loss"])
        """,
    ),
    # DQN: a replay buffer sampled inside an `if`, target sync every other iteration, epsilon schedule.
    _loop(
        "dqn_replay",
        DQN_SETUP,
        """
        obs = env.reset()
        losses = []
        for it in range(iterations):
            actor.epsilon = max(0.05, 1.0 - it / 10)
            for step in range(steps_per_iteration):
                action = actor.act(obs)
                next_obs, reward, terminated, truncated, info = env.step(action)
                buffer.add(obs, action, reward, next_obs, terminated)
                obs = next_obs
            if it >= learning_starts:
                batch = buffer.sample(batch_size)
                loss = learner.update(batch)
                losses.append(loss)
            if it % 2 == 0:
                learner.sync_target()
        """,
    ),
    # DQN as CleanRL writes it: the learner updates inside the step loop, every step.
    _loop(
        "dqn_update_every_step",
        DQN_SETUP,
        """
        obs = env.reset()
        losses = []
        global_step = 0
        for it in range(iterations):
            for step in range(steps_per_iteration):
                actor.epsilon = max(0.05, 1.0 - global_step / 20)
                action = actor.act(obs)
                next_obs, reward, terminated, truncated, info = env.step(action)
                buffer.add(obs, action, reward, next_obs, terminated)
                obs = next_obs
                global_step += 1
                if global_step > 2:
                    batch = buffer.sample(batch_size)
                    losses.append(learner.update(batch))
            learner.sync_target()
        """,
    ),
    # Continuous actions on the torch-batched Pendulum.
    _loop(
        "pendulum_continuous",
        GAUSSIAN_SETUP.replace("{env_import}", "from corpus.components import Pendulum").replace(
            "{env}", "Pendulum(num_envs=num_envs, seed=0)"
        ),
        GAUSSIAN_CELL,
    ),
    # The same loop on Gymnasium's own Pendulum-v1 through fragnb's adapter.
    _loop(
        "gym_pendulum",
        GAUSSIAN_SETUP.replace("{env_import}", "import fragnb").replace(
            "{env}", 'fragnb.envs.GymnasiumEnv("Pendulum-v1", num_envs=num_envs, seed=0)'
        ),
        GAUSSIAN_CELL,
    ),
    # Two independent actor/learner pairs on two environments in one loop.
    _loop(
        "two_agents",
        """
        import torch

        from fragnb.envs import CartPole
        from corpus.components import CategoricalActor, CategoricalPolicy, PGLearner

        torch.manual_seed(0)
        num_envs, num_steps, iterations = 4, 16, 2

        env_a, env_b = CartPole(num_envs=num_envs, seed=0), CartPole(num_envs=num_envs, seed=1)
        policy_a, policy_b = CategoricalPolicy(4, 2), CategoricalPolicy(4, 2)
        actor_a = CategoricalActor(policy_a, num_envs=num_envs, seed=0)
        actor_b = CategoricalActor(policy_b, num_envs=num_envs, seed=1)
        learner_a, learner_b = PGLearner(policy_a, vf_coef=0.0), PGLearner(policy_b, vf_coef=0.0)
        """,
        """
        obs_a = env_a.reset()
        obs_b = env_b.reset()
        scores = {"a": [], "b": []}
        for it in range(iterations):
            traj_a = {"obs": [], "act": [], "rew": []}
            traj_b = {"obs": [], "act": [], "rew": []}
            for step in range(num_steps):
                action_a, _ = actor_a.act(obs_a)
                action_b, _ = actor_b.act(obs_b)
                next_a, reward_a, term_a, trunc_a, info_a = env_a.step(action_a)
                next_b, reward_b, term_b, trunc_b, info_b = env_b.step(action_b)
                traj_a["obs"].append(obs_a)
                traj_a["act"].append(action_a)
                traj_a["rew"].append(reward_a)
                traj_b["obs"].append(obs_b)
                traj_b["act"].append(action_b)
                traj_b["rew"].append(reward_b)
                obs_a, obs_b = next_a, next_b
            togo_a = torch.stack(traj_a["rew"]).flip(0).cumsum(0).flip(0)
            togo_b = torch.stack(traj_b["rew"]).flip(0).cumsum(0).flip(0)
            stats_a = learner_a.update(torch.stack(traj_a["obs"]), torch.stack(traj_a["act"]), togo_a)
            stats_b = learner_b.update(torch.stack(traj_b["obs"]), torch.stack(traj_b["act"]), togo_b)
            scores["a"].append(stats_a["policy_loss"])
            scores["b"].append(stats_b["policy_loss"])
        """,
    ),
    # Helper functions from an earlier cell; one of them steps an evaluation env it gets as an argument.
    _loop(
        "helper_functions",
        PG_SETUP.replace("{vf_coef}", "0.5")
        + """
    eval_env = CartPole(num_envs=4, seed=100)

    def compute_returns(rewards, dones, gamma):
        returns, running = [], torch.zeros_like(rewards[0])
        for r, d in zip(reversed(rewards), reversed(dones)):
            running = r + gamma * running * (1.0 - d)
            returns.append(running)
        return torch.stack(returns[::-1])

    @torch.no_grad()
    def evaluate(eval_env, policy, steps=20):
        obs = eval_env.reset()
        total = torch.zeros(eval_env.num_envs)
        for _ in range(steps):
            obs, reward, terminated, truncated, info = eval_env.step(policy.logits(obs).argmax(-1))
            total += reward
        return total.mean().item()
""",
        """
        obs = env.reset()
        evaluations = []
        for it in range(iterations):
            obs_buf, act_buf, rew_buf, done_buf = [], [], [], []
            for step in range(num_steps):
                action, logprob = actor.act(obs)
                next_obs, reward, terminated, truncated, info = env.step(action)
                obs_buf.append(obs)
                act_buf.append(action)
                rew_buf.append(reward)
                done_buf.append((terminated | truncated).float())
                obs = next_obs
            returns = compute_returns(rew_buf, done_buf, gamma)
            stats = learner.update(torch.stack(obs_buf), torch.stack(act_buf), returns)
            avg = evaluate(eval_env, policy)
            evaluations.append(avg)
        """,
    ),
    # Names reused with another meaning: `value` from actor.act, then the bootstrap value, then a
    # loop variable over the stats; `action` and `reward` become numbers at the end of the iteration.
    _loop(
        "shadowed_names",
        PPO_SETUP,
        """
        obs = env.reset()
        values_seen = []
        for it in range(iterations):
            for step in range(config.num_steps):
                action, logprob, value = actor.act(obs)
                obs2, reward, terminated, truncated, info = env.step(action)
                buffer.add(obs, action, logprob, value, reward, terminated | truncated)
                obs = obs2
            value = actor.value(obs)
            batch = buffer.batch(value)
            stats = learner.update(batch)
            for value in stats.values():
                values_seen.append(value)
            action = int(batch["actions"].sum())
            reward = float(batch["returns"].mean())
        """,
    ),
    # Comments and blank lines everywhere, docstring-like strings, and `del` of temporaries.
    _loop(
        "del_and_comments",
        PPO_SETUP,
        '''
        # PPO on CartPole, written out with lots of comments.

        obs = env.reset()  # first observations

        """Collect a rollout, then update the policy."""
        for it in range(iterations):
            """One training iteration."""

            # --- rollout -------------------------------------------------
            for step in range(config.num_steps):
                # sample an action per environment
                action, logprob, value = actor.act(obs)

                # step the environments (they reset themselves)
                next_obs, reward, terminated, truncated, info = env.step(action)
                done = terminated | truncated  # episode ended, either way
                buffer.add(obs, action, logprob, value, reward, done)

                obs = next_obs
                del done  # a temporary

            # --- update --------------------------------------------------
            last_value = actor.value(obs)
            batch = buffer.batch(last_value)
            del last_value

            stats = learner.update(batch)  # returns floats
            del batch  # free the rollout
        ''',
    ),
    # Bookkeeping only: dict of lists, list of floats, int counters, a running max, f-strings.
    _loop(
        "dict_list_scalar_bookkeeping",
        PPO_SETUP,
        """
        obs = env.reset()
        history = {"policy_loss": [], "entropy": [], "episode_return": []}
        iteration_rewards = []
        global_step = 0
        num_episodes = 0
        best_return = float("-inf")
        lines = []
        for it in range(iterations):
            iteration_reward = 0.0
            for step in range(config.num_steps):
                action, logprob, value = actor.act(obs)
                next_obs, reward, terminated, truncated, info = env.step(action)
                buffer.add(obs, action, logprob, value, reward, terminated | truncated)
                obs = next_obs
                global_step += config.num_envs
                iteration_reward += reward.sum().item()
                for r in info["episode_returns"]:
                    history["episode_return"].append(r)
                    best_return = max(best_return, r)
                    num_episodes += 1
            last_value = actor.value(obs)
            batch = buffer.batch(last_value)
            stats = learner.update(batch)
            history["policy_loss"].append(stats["policy_loss"])
            history["entropy"].append(round(stats["entropy"], 3))
            iteration_rewards.append(iteration_reward)
            lines.append(f"it={it} step={global_step} episodes={num_episodes} best={best_return:.1f}")
        """,
    ),
    # An if/else whose branches call the buffer and the learner, and a guarded print.
    _loop(
        "if_mixed_roles",
        DQN_SETUP,
        """
        obs = env.reset()
        losses = []
        syncs = 0
        for it in range(iterations):
            for step in range(steps_per_iteration):
                action = actor.act(obs)
                next_obs, reward, terminated, truncated, info = env.step(action)
                buffer.add(obs, action, reward, next_obs, terminated)
                obs = next_obs
            if it % 2 == 1:
                batch = buffer.sample(batch_size)
                loss = learner.update(batch)
                losses.append(loss)
            else:
                learner.sync_target()
                syncs += 1
            if it == iterations - 1:
                print(f"iteration {it}: {len(losses)} updates, {syncs} target syncs")
        """,
    ),
    # Reads of environment and buffer state in the cell: sizes that change when environments are sharded.
    _loop(
        "component_attribute_reads",
        DQN_SETUP,
        """
        obs = env.reset()
        sizes = []
        env_steps = []
        for it in range(iterations):
            for step in range(steps_per_iteration):
                action = actor.act(obs)
                next_obs, reward, terminated, truncated, info = env.step(action)
                buffer.add(obs, action, reward, next_obs, terminated)
                obs = next_obs
            sizes.append(len(buffer))
            env_steps.append(env.env_steps)
            finished = len(env.episodes)
            batch = buffer.sample(batch_size)
            loss = learner.update(batch)
        """,
    ),
    # CleanRL-style learning-rate annealing: the loop writes into the learner's optimizer.
    _loop(
        "lr_annealing",
        PPO_SETUP,
        """
        obs = env.reset()
        lrs = []
        for it in range(iterations):
            frac = 1.0 - it / iterations
            learner.optimizer.param_groups[0]["lr"] = frac * config.learning_rate
            lrs.append(learner.optimizer.param_groups[0]["lr"])
            for step in range(config.num_steps):
                action, logprob, value = actor.act(obs)
                next_obs, reward, terminated, truncated, info = env.step(action)
                buffer.add(obs, action, logprob, value, reward, terminated | truncated)
                obs = next_obs
            last_value = actor.value(obs)
            batch = buffer.batch(last_value)
            stats = learner.update(batch)
        """,
    ),
    # Per-step Python-number bookkeeping: .tolist(), star-unpacking, comprehensions, indexed counts.
    _loop(
        "per_step_python_values",
        PG_SETUP.replace("{vf_coef}", "0.5"),
        """
        obs = env.reset()
        action_counts = [0, 0]
        first_actions = []
        episode_lengths = []
        for it in range(iterations):
            obs_buf, act_buf, rew_buf = [], [], []
            for step in range(num_steps):
                action, logprob = actor.act(obs)
                for a in action.tolist():
                    action_counts[a] += 1
                first_actions.append(int(action[0]))
                next_obs, reward, *flags, info = env.step(action)
                obs_buf.append(obs)
                act_buf.append(action)
                rew_buf.append(reward)
                obs = next_obs
            episode_lengths = [e.length for e in env.episodes]
            togo = torch.stack(rew_buf).flip(0).cumsum(0).flip(0)
            stats = learner.update(torch.stack(obs_buf), torch.stack(act_buf), togo)
            mean_len = sum(episode_lengths) / max(1, len(episode_lengths))
        """,
    ),
    # The environments reset at the start of every iteration (episodes cut at the rollout length).
    _loop(
        "reset_every_iteration",
        PG_SETUP.replace("{vf_coef}", "0.0").replace(
            "num_envs, num_steps, iterations, gamma = 4, 16, 3", "num_envs, num_steps, iterations, gamma = 8, 8, 3"
        ),
        """
        totals = []
        for it in range(iterations):
            obs = env.reset()
            trajectory = []
            for step in range(num_steps):
                action, logprob = actor.act(obs)
                next_obs, reward, terminated, truncated, info = env.step(action)
                trajectory.append((obs, action, reward))
                obs = next_obs
            obs_t = torch.stack([o for o, _, _ in trajectory])
            act_t = torch.stack([a for _, a, _ in trajectory])
            rew_t = torch.stack([r for _, _, r in trajectory])
            stats = learner.update(obs_t, act_t, rew_t.flip(0).cumsum(0).flip(0))
            totals.append(rew_t.sum(0))
        """,
    ),
    # Control flow: a `while` over a step budget, `continue` in the rollout, an early-stop `break`.
    _loop(
        "while_budget_continue_break",
        PPO_SETUP.replace("iterations = 2", "total_steps = 4 * 16 * 4"),
        """
        obs = env.reset()
        global_step = 0
        returns, skipped, updates = [], 0, 0
        while global_step < total_steps:
            for step in range(config.num_steps):
                action, logprob, value = actor.act(obs)
                next_obs, reward, terminated, truncated, info = env.step(action)
                buffer.add(obs, action, logprob, value, reward, terminated | truncated)
                obs = next_obs
                global_step += config.num_envs
                if not info["episode_returns"]:
                    skipped += 1
                    continue
                returns.extend(info["episode_returns"])
            batch = buffer.batch(actor.value(obs))
            if updates >= 2 and max(returns, default=0.0) > 1e9:
                continue
            stats = learner.update(batch)
            updates += 1
            if updates == 3:
                print("three updates, stopping")
                break
            last_stats = stats
        """,
    ),
    # Field-style control flow: `with torch.no_grad()` around statements of several roles (entered in
    # each fragment), and a `target_kl`-style early stop of the learner's epoch loop (a `break` in an
    # inner loop that runs in one group).
    _loop(
        "no_grad_and_epoch_break",
        PG_SETUP.format(vf_coef=0.5),
        """
        obs = env.reset()
        epochs_run = []
        for it in range(iterations):
            obs_buf, act_buf, rew_buf = [], [], []
            for step in range(num_steps):
                with torch.no_grad():
                    action, logprob = actor.act(obs)
                    next_obs, reward, terminated, truncated, info = env.step(action)
                    obs_buf.append(obs)
                    act_buf.append(action)
                    rew_buf.append(reward)
                obs = next_obs
            with torch.no_grad():
                returns = torch.zeros(num_envs)
                ret_buf = []
                for r in reversed(rew_buf):
                    returns = r + gamma * returns
                    ret_buf.insert(0, returns)
            for epoch in range(4):
                stats = learner.update(torch.stack(obs_buf), torch.stack(act_buf), torch.stack(ret_buf))
                if stats["entropy"] < 0.693:
                    break
            epochs_run.append(epoch + 1)
        """,
    ),
    # Storage preallocated as CleanRL does, `(num_steps, num_envs)` with the environments second,
    # sized by the env's own `num_envs`: each replica allocates its shard's, joined along axis 1.
    _loop(
        "preallocated_storage",
        GAUSSIAN_SETUP.replace("{env_import}", "from corpus.components import Pendulum").replace(
            "{env}", "Pendulum(num_envs=num_envs, seed=0)"
        ),
        """
        obs = env.reset()
        for it in range(iterations):
            obs_buf = torch.zeros(num_steps, env.num_envs, 3)
            act_buf = torch.zeros(num_steps, env.num_envs, 1)
            rewards = torch.zeros(num_steps, env.num_envs)
            for step in range(num_steps):
                action, logprob = actor.act(obs)
                obs_buf[step] = obs
                act_buf[step] = action
                obs, reward, terminated, truncated, info = env.step(action)
                rewards[step] = reward
            returns = torch.zeros_like(rewards)
            running = torch.zeros(env.num_envs)
            for t in reversed(range(num_steps)):
                running = rewards[t] + gamma * running
                returns[t] = running
            loss = learner.update(obs_buf, act_buf, returns)
        """,
    ),
]

BY_NAME = {loop.name: loop for loop in LOOPS}
