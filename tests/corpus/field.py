"""Training loops as the field writes them: Gymnasium envs, ``nn.Module`` agents, ``torch.optim``.

Written here in the style of public projects (CleanRL's single-file PPO, the PyTorch DQN and
REINFORCE tutorials, A2C as courses write it), not copied from them: the setup cell builds the
environments, networks and optimisers, seeded; the ``%%fragment`` cell is the training loop with
the constructs those projects use (``with torch.no_grad()``, preallocated ``(num_steps, num_envs)``
storage, a ``target_kl`` early stop, episode loops that ``break`` when done, ``deque`` replay,
``random.random()`` epsilon-greedy, an inline soft update, dropout). Sizes are tiny: each runs in
about a second as plain Python.
"""

from __future__ import annotations

from corpus.loops import CorpusLoop, _loop

__all__ = ["FIELD", "FIELD_BY_NAME", "MUJOCO"]

# -- CleanRL-style PPO on a Gymnasium vector env (discrete actions) -------------------------------
CLEANRL_PPO_SETUP = """
    import random
    import time
    from dataclasses import dataclass

    import gymnasium as gym
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.optim as optim
    from torch.distributions.categorical import Categorical


    @dataclass
    class Args:
        seed: int = 1
        env_id: str = "CartPole-v1"
        total_timesteps: int = 192
        learning_rate: float = 2.5e-4
        num_envs: int = 4
        num_steps: int = 16
        anneal_lr: bool = True
        gamma: float = 0.99
        gae_lambda: float = 0.95
        num_minibatches: int = 4
        update_epochs: int = 4
        norm_adv: bool = True
        clip_coef: float = 0.2
        clip_vloss: bool = True
        ent_coef: float = 0.01
        vf_coef: float = 0.5
        max_grad_norm: float = 0.5
        target_kl: float = 0.01
        batch_size: int = 0
        minibatch_size: int = 0
        num_iterations: int = 0


    def make_env(env_id):
        def thunk():
            return gym.wrappers.RecordEpisodeStatistics(gym.make(env_id))
        return thunk


    def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
        torch.nn.init.orthogonal_(layer.weight, std)
        torch.nn.init.constant_(layer.bias, bias_const)
        return layer


    class Agent(nn.Module):
        def __init__(self, envs):
            super().__init__()
            obs_dim = np.array(envs.single_observation_space.shape).prod()
            self.critic = nn.Sequential(layer_init(nn.Linear(obs_dim, 64)), nn.Tanh(), layer_init(nn.Linear(64, 1), std=1.0))
            self.actor = nn.Sequential(layer_init(nn.Linear(obs_dim, 64)), nn.Tanh(),
                                       layer_init(nn.Linear(64, envs.single_action_space.n), std=0.01))

        def get_value(self, x):
            return self.critic(x)

        def get_action_and_value(self, x, action=None):
            logits = self.actor(x)
            probs = Categorical(logits=logits)
            if action is None:
                action = probs.sample()
            return action, probs.log_prob(action), probs.entropy(), self.critic(x)


    args = Args()
    args.batch_size = args.num_envs * args.num_steps
    args.minibatch_size = args.batch_size // args.num_minibatches
    args.num_iterations = args.total_timesteps // args.batch_size
    writer = []  # stands in for TensorBoard's SummaryWriter: (tag, value, step)

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.device("cpu")
    envs = gym.vector.SyncVectorEnv([make_env(args.env_id) for _ in range(args.num_envs)])
    agent = Agent(envs).to(device)
    optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    obs = torch.zeros((args.num_steps, args.num_envs) + envs.single_observation_space.shape).to(device)
    actions = torch.zeros((args.num_steps, args.num_envs) + envs.single_action_space.shape).to(device)
    logprobs = torch.zeros((args.num_steps, args.num_envs)).to(device)
    rewards = torch.zeros((args.num_steps, args.num_envs)).to(device)
    dones = torch.zeros((args.num_steps, args.num_envs)).to(device)
    values = torch.zeros((args.num_steps, args.num_envs)).to(device)
    global_step = 0
    next_obs, _ = envs.reset(seed=args.seed)
    next_obs = torch.Tensor(next_obs).to(device)
    next_done = torch.zeros(args.num_envs).to(device)
"""

CLEANRL_PPO_CELL = """
    for iteration in range(1, args.num_iterations + 1):
        # Annealing the rate if instructed to do so.
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / args.num_iterations
            lrnow = frac * args.learning_rate
            optimizer.param_groups[0]["lr"] = lrnow

        for step in range(0, args.num_steps):
            global_step += args.num_envs
            obs[step] = next_obs
            dones[step] = next_done

            # ALGO LOGIC: action logic
            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
                values[step] = value.flatten()
            actions[step] = action
            logprobs[step] = logprob

            # TRY NOT TO MODIFY: execute the game and log data.
            next_obs, reward, terminations, truncations, infos = envs.step(action.cpu().numpy())
            next_done = np.logical_or(terminations, truncations)
            rewards[step] = torch.tensor(reward).to(device).view(-1)
            next_obs, next_done = torch.Tensor(next_obs).to(device), torch.Tensor(next_done).to(device)

            if "episode" in infos:
                for i in np.nonzero(infos["_episode"])[0]:
                    writer.append(("charts/episodic_return", float(infos["episode"]["r"][i]), global_step))

        # bootstrap value if not done
        with torch.no_grad():
            next_value = agent.get_value(next_obs).reshape(1, -1)
            advantages = torch.zeros_like(rewards).to(device)
            lastgaelam = 0
            for t in reversed(range(args.num_steps)):
                if t == args.num_steps - 1:
                    nextnonterminal = 1.0 - next_done
                    nextvalues = next_value
                else:
                    nextnonterminal = 1.0 - dones[t + 1]
                    nextvalues = values[t + 1]
                delta = rewards[t] + args.gamma * nextvalues * nextnonterminal - values[t]
                advantages[t] = lastgaelam = delta + args.gamma * args.gae_lambda * nextnonterminal * lastgaelam
            returns = advantages + values

        # flatten the batch
        b_obs = obs.reshape((-1,) + envs.single_observation_space.shape)
        b_logprobs = logprobs.reshape(-1)
        b_actions = actions.reshape((-1,) + envs.single_action_space.shape)
        b_advantages = advantages.reshape(-1)
        b_returns = returns.reshape(-1)
        b_values = values.reshape(-1)

        # Optimizing the policy and value network
        b_inds = np.arange(args.batch_size)
        clipfracs = []
        for epoch in range(args.update_epochs):
            np.random.shuffle(b_inds)
            for start in range(0, args.batch_size, args.minibatch_size):
                end = start + args.minibatch_size
                mb_inds = b_inds[start:end]

                _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[mb_inds], b_actions.long()[mb_inds])
                logratio = newlogprob - b_logprobs[mb_inds]
                ratio = logratio.exp()

                with torch.no_grad():
                    old_approx_kl = (-logratio).mean()
                    approx_kl = ((ratio - 1) - logratio).mean()
                    clipfracs += [((ratio - 1.0).abs() > args.clip_coef).float().mean().item()]

                mb_advantages = b_advantages[mb_inds]
                if args.norm_adv:
                    mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)

                pg_loss1 = -mb_advantages * ratio
                pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
                pg_loss = torch.max(pg_loss1, pg_loss2).mean()

                newvalue = newvalue.view(-1)
                if args.clip_vloss:
                    v_loss_unclipped = (newvalue - b_returns[mb_inds]) ** 2
                    v_clipped = b_values[mb_inds] + torch.clamp(newvalue - b_values[mb_inds], -args.clip_coef, args.clip_coef)
                    v_loss_clipped = (v_clipped - b_returns[mb_inds]) ** 2
                    v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
                else:
                    v_loss = 0.5 * ((newvalue - b_returns[mb_inds]) ** 2).mean()

                entropy_loss = entropy.mean()
                loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef

                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()

            if args.target_kl is not None and approx_kl > args.target_kl:
                break

        y_pred, y_true = b_values.cpu().numpy(), b_returns.cpu().numpy()
        var_y = np.var(y_true)
        explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y
        writer.append(("losses/value_loss", v_loss.item(), global_step))
        writer.append(("losses/approx_kl", approx_kl.item(), global_step))
        writer.append(("losses/explained_variance", float(explained_var), global_step))
"""

# -- CleanRL-style PPO, continuous actions (Normal policy) ----------------------------------------
PPO_CONTINUOUS_SETUP = """
    import gymnasium as gym
    import numpy as np
    import torch
    import torch.nn as nn
    from torch.distributions.normal import Normal

    torch.manual_seed(3)
    num_envs, num_steps, gamma = 2, 8, 0.99
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("Pendulum-v1") for _ in range(num_envs)])


    class Agent(nn.Module):
        def __init__(self):
            super().__init__()
            self.critic = nn.Sequential(nn.Linear(3, 32), nn.Tanh(), nn.Linear(32, 1))
            self.actor_mean = nn.Sequential(nn.Linear(3, 32), nn.Tanh(), nn.Linear(32, 1))
            self.actor_logstd = nn.Parameter(torch.zeros(1, 1))

        def get_action_and_value(self, x, action=None):
            mean = self.actor_mean(x)
            probs = Normal(mean, self.actor_logstd.expand_as(mean).exp())
            if action is None:
                action = probs.sample()
            return action, probs.log_prob(action).sum(1), probs.entropy().sum(1), self.critic(x)


    agent = Agent()
    optimizer = torch.optim.Adam(agent.parameters(), lr=3e-4)
    obs = torch.zeros((num_steps, num_envs, 3))
    actions = torch.zeros((num_steps, num_envs, 1))
    logprobs = torch.zeros((num_steps, num_envs))
    rewards = torch.zeros((num_steps, num_envs))
    next_obs = torch.Tensor(envs.reset(seed=7)[0])
    losses = []
"""

PPO_CONTINUOUS_CELL = """
    for update in range(3):
        for step in range(num_steps):
            obs[step] = next_obs
            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
            actions[step] = action
            logprobs[step] = logprob
            next_obs, reward, terminated, truncated, info = envs.step(action.numpy())
            rewards[step] = torch.as_tensor(reward, dtype=torch.float32)
            next_obs = torch.Tensor(next_obs)
        returns = torch.zeros_like(rewards)
        running = torch.zeros(num_envs)
        for t in reversed(range(num_steps)):
            running = rewards[t] + gamma * running
            returns[t] = running
        _, newlogprob, entropy, newvalue = agent.get_action_and_value(obs.reshape(-1, 3), actions.reshape(-1, 1))
        advantages = returns.reshape(-1) - newvalue.view(-1).detach()
        loss = -(newlogprob * advantages).mean() + 0.5 * ((newvalue.view(-1) - returns.reshape(-1)) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
"""

# -- CleanRL-style continuous PPO on MuJoCo: wrappers per environment, a state-independent log std ---
# Its single-file script's shape: `make_env` thunks that wrap each environment (observation and reward
# normalisation with running statistics, clipping), `SyncVectorEnv`, the `Agent` with three-layer
# heads, the loop of the discrete PPO above with `Normal` actions. Sizes: 4 environments so that
# replicas can share them (the script's default is 1); MuJoCo's extra must be installed.
CLEANRL_PPO_CONTINUOUS_SETUP = """
    import random
    from dataclasses import dataclass

    import gymnasium as gym
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.optim as optim
    from torch.distributions.normal import Normal


    @dataclass
    class Args:
        seed: int = 1
        env_id: str = "HalfCheetah-v5"
        total_timesteps: int = 256
        learning_rate: float = 3e-4
        num_envs: int = 4
        num_steps: int = 32
        anneal_lr: bool = True
        gamma: float = 0.99
        gae_lambda: float = 0.95
        num_minibatches: int = 4
        update_epochs: int = 2
        norm_adv: bool = True
        clip_coef: float = 0.2
        clip_vloss: bool = True
        ent_coef: float = 0.0
        vf_coef: float = 0.5
        max_grad_norm: float = 0.5
        target_kl: float = None
        batch_size: int = 0
        minibatch_size: int = 0
        num_iterations: int = 0


    def make_env(env_id, gamma):
        def thunk():
            env = gym.make(env_id)
            env = gym.wrappers.FlattenObservation(env)
            env = gym.wrappers.RecordEpisodeStatistics(env)
            env = gym.wrappers.ClipAction(env)
            env = gym.wrappers.NormalizeObservation(env)
            env = gym.wrappers.TransformObservation(env, lambda obs: np.clip(obs, -10, 10), env.observation_space)
            env = gym.wrappers.NormalizeReward(env, gamma=gamma)
            env = gym.wrappers.TransformReward(env, lambda reward: np.clip(reward, -10, 10))
            return env
        return thunk


    def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
        torch.nn.init.orthogonal_(layer.weight, std)
        torch.nn.init.constant_(layer.bias, bias_const)
        return layer


    class Agent(nn.Module):
        def __init__(self, envs):
            super().__init__()
            obs_dim = np.array(envs.single_observation_space.shape).prod()
            act_dim = np.prod(envs.single_action_space.shape)
            self.critic = nn.Sequential(
                layer_init(nn.Linear(obs_dim, 64)), nn.Tanh(),
                layer_init(nn.Linear(64, 64)), nn.Tanh(),
                layer_init(nn.Linear(64, 1), std=1.0),
            )
            self.actor_mean = nn.Sequential(
                layer_init(nn.Linear(obs_dim, 64)), nn.Tanh(),
                layer_init(nn.Linear(64, 64)), nn.Tanh(),
                layer_init(nn.Linear(64, act_dim), std=0.01),
            )
            self.actor_logstd = nn.Parameter(torch.zeros(1, act_dim))

        def get_value(self, x):
            return self.critic(x)

        def get_action_and_value(self, x, action=None):
            action_mean = self.actor_mean(x)
            action_std = torch.exp(self.actor_logstd.expand_as(action_mean))
            probs = Normal(action_mean, action_std)
            if action is None:
                action = probs.sample()
            return action, probs.log_prob(action).sum(1), probs.entropy().sum(1), self.critic(x)


    args = Args()
    args.batch_size = args.num_envs * args.num_steps
    args.minibatch_size = args.batch_size // args.num_minibatches
    args.num_iterations = args.total_timesteps // args.batch_size
    writer = []  # stands in for TensorBoard's SummaryWriter: (tag, value, step)

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.device("cpu")
    envs = gym.vector.SyncVectorEnv([make_env(args.env_id, args.gamma) for _ in range(args.num_envs)])
    agent = Agent(envs).to(device)
    optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    obs = torch.zeros((args.num_steps, args.num_envs) + envs.single_observation_space.shape).to(device)
    actions = torch.zeros((args.num_steps, args.num_envs) + envs.single_action_space.shape).to(device)
    logprobs = torch.zeros((args.num_steps, args.num_envs)).to(device)
    rewards = torch.zeros((args.num_steps, args.num_envs)).to(device)
    dones = torch.zeros((args.num_steps, args.num_envs)).to(device)
    values = torch.zeros((args.num_steps, args.num_envs)).to(device)
    global_step = 0
    next_obs, _ = envs.reset(seed=args.seed)
    next_obs = torch.Tensor(next_obs).to(device)
    next_done = torch.zeros(args.num_envs).to(device)
"""

# The discrete loop's cell with what the continuous script changes: float actions, and the minibatch
# takes them as they are (no `.long()`).
CLEANRL_PPO_CONTINUOUS_CELL = CLEANRL_PPO_CELL.replace("b_actions.long()[mb_inds]", "b_actions[mb_inds]")

# -- DQN as the PyTorch tutorial writes it: deque replay, epsilon-greedy, soft target update -------
DQN_SETUP = """
    import math
    import random
    from collections import deque, namedtuple
    from itertools import count

    import gymnasium as gym
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import torch.optim as optim

    random.seed(0)
    torch.manual_seed(0)
    env = gym.make("CartPole-v1")
    Transition = namedtuple("Transition", ("state", "action", "next_state", "reward"))


    class ReplayMemory:
        def __init__(self, capacity):
            self.memory = deque([], maxlen=capacity)

        def push(self, *args):
            self.memory.append(Transition(*args))

        def sample(self, batch_size):
            return random.sample(self.memory, batch_size)

        def __len__(self):
            return len(self.memory)


    class DQN(nn.Module):
        def __init__(self, n_observations, n_actions):
            super().__init__()
            self.layer1 = nn.Linear(n_observations, 32)
            self.layer2 = nn.Linear(32, n_actions)

        def forward(self, x):
            return self.layer2(F.relu(self.layer1(x)))


    BATCH_SIZE, GAMMA, EPS_START, EPS_END, EPS_DECAY, TAU, LR = 16, 0.99, 0.9, 0.05, 200, 0.005, 1e-3
    n_actions = env.action_space.n
    state, info = env.reset(seed=0)
    env.action_space.seed(0)
    policy_net = DQN(len(state), n_actions)
    target_net = DQN(len(state), n_actions)
    target_net.load_state_dict(policy_net.state_dict())
    optimizer = optim.AdamW(policy_net.parameters(), lr=LR, amsgrad=True)
    memory = ReplayMemory(1000)
    steps_done = 0
    episode_durations = []


    def select_action(state):
        global steps_done
        sample = random.random()
        eps_threshold = EPS_END + (EPS_START - EPS_END) * math.exp(-1.0 * steps_done / EPS_DECAY)
        steps_done += 1
        if sample > eps_threshold:
            with torch.no_grad():
                return policy_net(state).max(1).indices.view(1, 1)
        return torch.tensor([[env.action_space.sample()]], dtype=torch.long)


    def optimize_model():
        if len(memory) < BATCH_SIZE:
            return
        batch = Transition(*zip(*memory.sample(BATCH_SIZE)))
        non_final_mask = torch.tensor(tuple(map(lambda s: s is not None, batch.next_state)), dtype=torch.bool)
        non_final_next_states = torch.cat([s for s in batch.next_state if s is not None])
        state_batch, action_batch, reward_batch = torch.cat(batch.state), torch.cat(batch.action), torch.cat(batch.reward)
        state_action_values = policy_net(state_batch).gather(1, action_batch)
        next_state_values = torch.zeros(BATCH_SIZE)
        with torch.no_grad():
            next_state_values[non_final_mask] = target_net(non_final_next_states).max(1).values
        expected = (next_state_values * GAMMA) + reward_batch
        loss = nn.SmoothL1Loss()(state_action_values, expected.unsqueeze(1))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_value_(policy_net.parameters(), 100)
        optimizer.step()
"""

DQN_CELL = """
    for i_episode in range(4):
        state, info = env.reset()
        state = torch.tensor(state, dtype=torch.float32).unsqueeze(0)
        for t in count():
            action = select_action(state)
            observation, reward, terminated, truncated, _ = env.step(action.item())
            reward = torch.tensor([reward])
            done = terminated or truncated
            if terminated:
                next_state = None
            else:
                next_state = torch.tensor(observation, dtype=torch.float32).unsqueeze(0)
            memory.push(state, action, next_state, reward)
            state = next_state
            optimize_model()

            # Soft update of the target network's weights
            target_net_state_dict = target_net.state_dict()
            policy_net_state_dict = policy_net.state_dict()
            for key in policy_net_state_dict:
                target_net_state_dict[key] = policy_net_state_dict[key] * TAU + target_net_state_dict[key] * (1 - TAU)
            target_net.load_state_dict(target_net_state_dict)

            if done:
                episode_durations.append(t + 1)
                break
"""

# -- DQN as CleanRL's dqn.py writes it: a vector env, one training step per env step ----------------
CLEANRL_DQN_SETUP = """
    import random
    from collections import deque
    from dataclasses import dataclass

    import gymnasium as gym
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import torch.optim as optim


    @dataclass
    class Args:
        seed: int = 1
        num_envs: int = 4
        total_timesteps: int = 40
        learning_rate: float = 2.5e-4
        buffer_size: int = 64
        gamma: float = 0.99
        tau: float = 1.0
        target_network_frequency: int = 8
        batch_size: int = 4
        start_e: float = 1.0
        end_e: float = 0.05
        exploration_fraction: float = 0.5
        learning_starts: int = 8
        train_frequency: int = 2


    def linear_schedule(start_e, end_e, duration, t):
        slope = (end_e - start_e) / duration
        return max(slope * t + start_e, end_e)


    class QNetwork(nn.Module):
        def __init__(self, envs):
            super().__init__()
            self.network = nn.Sequential(nn.Linear(np.array(envs.single_observation_space.shape).prod(), 32), nn.ReLU(),
                                         nn.Linear(32, envs.single_action_space.n))

        def forward(self, x):
            return self.network(x)


    args = Args()
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    envs = gym.vector.SyncVectorEnv([lambda: gym.wrappers.RecordEpisodeStatistics(gym.make("CartPole-v1")) for _ in range(args.num_envs)])
    q_network = QNetwork(envs)
    optimizer = optim.Adam(q_network.parameters(), lr=args.learning_rate)
    target_network = QNetwork(envs)
    target_network.load_state_dict(q_network.state_dict())
    rb = deque(maxlen=args.buffer_size)
    writer = []
    obs, _ = envs.reset(seed=args.seed)
"""

CLEANRL_DQN_CELL = """
    for global_step in range(args.total_timesteps):
        epsilon = linear_schedule(args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps, global_step)
        with torch.no_grad():
            q_values = q_network(torch.Tensor(obs))
        greedy = torch.argmax(q_values, dim=1).cpu().numpy()
        explore = np.random.random(args.num_envs) < epsilon
        actions = np.where(explore, np.random.randint(0, 2, args.num_envs), greedy)
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)

        if "episode" in infos:
            for i in np.nonzero(infos["_episode"])[0]:
                writer.append(("charts/episodic_return", float(infos["episode"]["r"][i]), global_step))

        rb.append((obs, next_obs.copy(), actions, rewards, terminations))
        obs = next_obs

        if global_step > args.learning_starts:
            if global_step % args.train_frequency == 0:
                batch = random.sample(list(rb), args.batch_size)
                b_obs = torch.Tensor(np.concatenate([b[0] for b in batch]))
                b_next = torch.Tensor(np.concatenate([b[1] for b in batch]))
                b_actions = torch.as_tensor(np.concatenate([b[2] for b in batch]))
                b_rewards = torch.Tensor(np.concatenate([b[3] for b in batch]))
                b_dones = torch.Tensor(np.concatenate([b[4] for b in batch]))
                with torch.no_grad():
                    target_max, _ = target_network(b_next).max(dim=1)
                    td_target = b_rewards + args.gamma * target_max * (1 - b_dones)
                old_val = q_network(b_obs).gather(1, b_actions.unsqueeze(1)).squeeze()
                loss = F.mse_loss(td_target, old_val)
                writer.append(("losses/td_loss", loss.item(), global_step))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()

            if global_step % args.target_network_frequency == 0:
                target_network.load_state_dict({k: args.tau * v + (1.0 - args.tau) * target_network.state_dict()[k]
                                                for k, v in q_network.state_dict().items()})
"""

# -- Q(lambda) as CleanRL's pqn.py writes it: epsilon-greedy on torch's generator, storage indexed per env --
QLAMBDA_SETUP = """
    import random
    from dataclasses import dataclass

    import gymnasium as gym
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F


    @dataclass
    class Args:
        seed: int = 1
        num_envs: int = 4
        num_steps: int = 8
        iterations: int = 3
        learning_rate: float = 1e-3
        gamma: float = 0.99
        q_lambda: float = 0.65
        epsilon: float = 0.5
        minibatches: int = 2
        epochs: int = 2


    args = Args()
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    envs = gym.vector.SyncVectorEnv([lambda: gym.wrappers.RecordEpisodeStatistics(gym.make("CartPole-v1")) for _ in range(args.num_envs)])
    q_net = nn.Sequential(nn.Linear(4, 32), nn.LayerNorm(32), nn.ReLU(), nn.Linear(32, 2))
    optimizer = torch.optim.RAdam(q_net.parameters(), lr=args.learning_rate)
    obs = torch.zeros((args.num_steps, args.num_envs, 4))
    actions = torch.zeros((args.num_steps, args.num_envs))
    rewards = torch.zeros((args.num_steps, args.num_envs))
    dones = torch.zeros((args.num_steps, args.num_envs))
    values = torch.zeros((args.num_steps, args.num_envs))
    next_obs = torch.Tensor(envs.reset(seed=args.seed)[0])
    next_done = torch.zeros(args.num_envs)
    batch_size = args.num_steps * args.num_envs
"""

QLAMBDA_CELL = """
    for iteration in range(args.iterations):
        for step in range(args.num_steps):
            obs[step] = next_obs
            dones[step] = next_done
            random_actions = torch.randint(0, 2, (args.num_envs,))
            with torch.no_grad():
                q_values = q_net(next_obs)
                greedy = torch.argmax(q_values, dim=1)
                values[step] = q_values[torch.arange(args.num_envs), greedy]
            explore = torch.rand((args.num_envs,)) < args.epsilon
            action = torch.where(explore, random_actions, greedy)
            actions[step] = action
            next_obs, reward, term, trunc, infos = envs.step(action.numpy())
            rewards[step] = torch.tensor(reward).view(-1)
            next_obs, next_done = torch.Tensor(next_obs), torch.Tensor(np.logical_or(term, trunc))

        with torch.no_grad():
            returns = torch.zeros_like(rewards)
            for t in reversed(range(args.num_steps)):
                if t == args.num_steps - 1:
                    returns[t] = rewards[t] + args.gamma * q_net(next_obs).max(dim=-1)[0] * (1.0 - next_done)
                else:
                    mixed = args.q_lambda * returns[t + 1] + (1 - args.q_lambda) * values[t + 1]
                    returns[t] = rewards[t] + args.gamma * mixed * (1.0 - dones[t + 1])

        b_obs, b_actions, b_returns = obs.reshape(-1, 4), actions.reshape(-1), returns.reshape(-1)
        b_inds = np.arange(batch_size)
        for epoch in range(args.epochs):
            np.random.shuffle(b_inds)
            for start in range(0, batch_size, batch_size // args.minibatches):
                mb_inds = b_inds[start : start + batch_size // args.minibatches]
                old_val = q_net(b_obs[mb_inds]).gather(1, b_actions[mb_inds].unsqueeze(-1).long()).squeeze()
                loss = F.mse_loss(b_returns[mb_inds], old_val)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
"""

# -- REINFORCE over a vector env: Monte-Carlo returns per environment, dropout, log-probs recomputed -----
VECTOR_REINFORCE_SETUP = """
    import gymnasium as gym
    import numpy as np
    import torch
    import torch.nn as nn

    torch.manual_seed(2)
    num_envs, num_steps, gamma = 4, 12, 0.99
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(num_envs)])
    policy = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Dropout(p=0.1), nn.Linear(32, 2))
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)
    obs = torch.Tensor(envs.reset(seed=3)[0])
    history = []
"""

VECTOR_REINFORCE_CELL = """
    for update in range(4):
        states, actions, rewards, dones = [], [], [], []
        for step in range(num_steps):
            with torch.no_grad():
                action = torch.distributions.Categorical(logits=policy(obs)).sample()
            next_obs, reward, terminated, truncated, _ = envs.step(action.numpy())
            states.append(obs)
            actions.append(action)
            rewards.append(torch.as_tensor(reward, dtype=torch.float32))
            dones.append(torch.as_tensor(terminated | truncated, dtype=torch.float32))
            obs = torch.Tensor(next_obs)
        returns, running = [], torch.zeros(num_envs)
        for t in reversed(range(num_steps)):
            running = rewards[t] + gamma * running * (1.0 - dones[t])
            returns.insert(0, running)
        returns = torch.stack(returns)
        returns = (returns - returns.mean()) / (returns.std() + 1e-8)
        logp = torch.distributions.Categorical(logits=policy(torch.stack(states))).log_prob(torch.stack(actions))
        loss = -(logp * returns).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        history.append(loss.item())
"""

# -- REINFORCE as the PyTorch example writes it: an episode loop, log-probabilities kept -----------
REINFORCE_SETUP = """
    from itertools import count

    import gymnasium as gym
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import torch.optim as optim
    from torch.distributions import Categorical

    torch.manual_seed(543)
    env = gym.make("CartPole-v1")
    gamma = 0.99
    eps = np.finfo(np.float32).eps.item()


    class Policy(nn.Module):
        def __init__(self):
            super().__init__()
            self.affine1 = nn.Linear(4, 32)
            self.dropout = nn.Dropout(p=0.6)
            self.affine2 = nn.Linear(32, 2)
            self.saved_log_probs = []
            self.rewards = []

        def forward(self, x):
            return F.softmax(self.affine2(F.relu(self.dropout(self.affine1(x)))), dim=1)


    policy = Policy()
    optimizer = optim.Adam(policy.parameters(), lr=1e-2)
    running_reward = 10
"""

REINFORCE_CELL = """
    for i_episode in count(1):
        state, _ = env.reset(seed=543 + i_episode)
        ep_reward = 0
        for t in range(1, 10000):
            probs = policy(torch.from_numpy(state).float().unsqueeze(0))
            m = Categorical(probs)
            action = m.sample()
            policy.saved_log_probs.append(m.log_prob(action))
            state, reward, terminated, truncated, _ = env.step(action.item())
            policy.rewards.append(reward)
            ep_reward += reward
            if terminated or truncated:
                break
        running_reward = 0.05 * ep_reward + (1 - 0.05) * running_reward
        R, policy_loss, returns = 0, [], []
        for r in policy.rewards[::-1]:
            R = r + gamma * R
            returns.insert(0, R)
        returns = torch.tensor(returns)
        returns = (returns - returns.mean()) / (returns.std() + eps)
        for log_prob, R in zip(policy.saved_log_probs, returns):
            policy_loss.append(-log_prob * R)
        optimizer.zero_grad()
        policy_loss = torch.cat(policy_loss).sum()
        policy_loss.backward()
        optimizer.step()
        del policy.rewards[:]
        del policy.saved_log_probs[:]
        if i_episode >= 3:
            print(f"Episode {i_episode}\\tLast reward: {ep_reward:.2f}\\tAverage reward: {running_reward:.2f}")
            break
"""

# -- REINFORCE as the PyTorch tutorial structures it: the cell calls notebook functions that read globals --
# select_action() appends to policy.saved_log_probs and finish_episode() reads policy.rewards, which the
# cell appends to: the functions and the cell must see one `policy`, in every copy a run makes.
REINFORCE_FUNCTIONS_SETUP = (
    REINFORCE_SETUP
    + """

    def select_action(state):
        probs = policy(torch.from_numpy(state).float().unsqueeze(0))
        m = Categorical(probs)
        action = m.sample()
        policy.saved_log_probs.append(m.log_prob(action))
        return action.item()


    def finish_episode():
        R, policy_loss, returns = 0, [], []
        for r in policy.rewards[::-1]:
            R = r + gamma * R
            returns.insert(0, R)
        returns = torch.tensor(returns)
        returns = (returns - returns.mean()) / (returns.std() + eps)
        for log_prob, R in zip(policy.saved_log_probs, returns):
            policy_loss.append(-log_prob * R)
        optimizer.zero_grad()
        torch.cat(policy_loss).sum().backward()
        optimizer.step()
        del policy.rewards[:]
        del policy.saved_log_probs[:]
"""
)

REINFORCE_FUNCTIONS_CELL = """
    for i_episode in range(1, 4):
        state, _ = env.reset(seed=543 + i_episode)
        ep_reward = 0
        for t in range(1, 10000):
            action = select_action(state)
            state, reward, terminated, truncated, _ = env.step(action)
            policy.rewards.append(reward)
            ep_reward += reward
            if terminated or truncated:
                break
        running_reward = 0.05 * ep_reward + (1 - 0.05) * running_reward
        finish_episode()
"""

# -- Shapes a replica that runs the whole cell takes as plain Python does (data_parallel) -----------------
# minimalRL's PPO: the network holds its optimiser and its own rollout list, one environment, an episode
# `while` with a horizon `for` inside it.
EPISODES_WHILE_SETUP = """
    import gymnasium as gym
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import torch.optim as optim
    from torch.distributions import Categorical

    torch.manual_seed(3)
    T_horizon = 8


    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.data = []
            self.fc1 = nn.Linear(4, 32)
            self.fc_pi = nn.Linear(32, 2)
            self.fc_v = nn.Linear(32, 1)
            self.optimizer = optim.Adam(self.parameters(), lr=5e-4)

        def pi(self, x, softmax_dim=0):
            return F.softmax(self.fc_pi(F.relu(self.fc1(x))), dim=softmax_dim)

        def v(self, x):
            return self.fc_v(F.relu(self.fc1(x)))

        def train_net(self):
            s, a, r, s_prime, done = (torch.tensor(np.array(x), dtype=torch.float32) for x in zip(*self.data))
            self.data = []
            target = r.unsqueeze(1) + 0.98 * self.v(s_prime) * (1 - done).unsqueeze(1)
            advantage = (target - self.v(s)).detach()
            pi_a = self.pi(s, softmax_dim=1).gather(1, a.long().unsqueeze(1))
            loss = -torch.log(pi_a) * advantage + F.smooth_l1_loss(self.v(s), target.detach())
            self.optimizer.zero_grad()
            loss.mean().backward()
            self.optimizer.step()


    env = gym.make("CartPole-v1")
    model = Model()
    score = 0.0
"""

EPISODES_WHILE_CELL = """
    for n_epi in range(3):
        s, _ = env.reset(seed=n_epi)
        done = False
        while not done:
            for t in range(T_horizon):
                prob = model.pi(torch.from_numpy(s).float())
                a = Categorical(prob).sample().item()
                s_prime, r, terminated, truncated, info = env.step(a)
                model.data.append((s, a, r / 100.0, s_prime, float(terminated)))
                s = s_prime
                score += r
                if terminated or truncated:
                    done = True
                    break
            model.train_net()
"""

# LeanRL's PPO: the rollout stacked as a TensorDict, minibatch epochs that stop on a KL bound with
# `for ... else: continue` / `break`.
TENSORDICT_SETUP = """
    import gymnasium as gym
    import numpy as np
    import torch
    import torch.nn as nn
    from tensordict import TensorDict
    from torch.distributions import Categorical

    torch.manual_seed(5)
    num_envs, num_steps, target_kl = 4, 8, 0.02
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(num_envs)])
    agent = nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 3))  # two logits and a value
    optimizer = torch.optim.Adam(agent.parameters(), lr=3e-3)
    next_obs = torch.tensor(envs.reset(seed=5)[0], dtype=torch.float32)
    kls = []
"""

TENSORDICT_CELL = """
    for iteration in range(3):
        ts = []
        for step in range(num_steps):
            with torch.no_grad():
                out = agent(next_obs)
                dist = Categorical(logits=out[:, :2])
                action = dist.sample()
            obs_np, reward, term, trunc, _ = envs.step(action.numpy())
            ts.append(TensorDict(obs=next_obs, actions=action, logprobs=dist.log_prob(action), vals=out[:, 2],
                                 rewards=torch.as_tensor(reward, dtype=torch.float32), batch_size=(num_envs,)))
            next_obs = torch.tensor(obs_np, dtype=torch.float32)
        container = torch.stack(ts, 0)
        container["returns"] = container["rewards"].flip(0).cumsum(0).flip(0)
        flat = container.view(-1)
        for epoch in range(4):
            for b in torch.randperm(flat.shape[0]).split(8):
                mb = flat[b]
                out = agent(mb["obs"])
                logratio = Categorical(logits=out[:, :2]).log_prob(mb["actions"]) - mb["logprobs"]
                advantage = mb["returns"] - mb["vals"]
                loss = -(logratio.exp() * advantage).mean() + 0.5 * (out[:, 2] - mb["returns"]).pow(2).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                approx_kl = ((logratio.exp() - 1) - logratio).mean().item()
                if approx_kl > target_kl:
                    break
            else:
                continue
            break
        kls.append(approx_kl)
"""

# TorchRL's multi-agent tutorial keeps one optimiser per agent group in a dict.
OPTIMISER_DICT_SETUP = """
    import gymnasium as gym
    import torch
    import torch.nn as nn
    from torch.distributions import Categorical

    torch.manual_seed(7)
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(4)])
    actor = nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 2))
    critic = nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 1))
    optimizers = {"actor": torch.optim.Adam(actor.parameters(), lr=1e-3), "critic": torch.optim.Adam(critic.parameters(), lr=1e-3)}
    obs = torch.tensor(envs.reset(seed=7)[0], dtype=torch.float32)
    history = {"actor": [], "critic": []}
"""

OPTIMISER_DICT_CELL = """
    for it in range(4):
        dist = Categorical(logits=actor(obs))
        action = dist.sample()
        next_obs, reward, term, trunc, _ = envs.step(action.numpy())
        next_obs = torch.tensor(next_obs, dtype=torch.float32)
        with torch.no_grad():
            target = torch.as_tensor(reward, dtype=torch.float32) + 0.99 * critic(next_obs).squeeze(1) * torch.as_tensor(1 - term, dtype=torch.float32)
        value = critic(obs).squeeze(1)
        losses = {"actor": -(dist.log_prob(action) * (target - value).detach()).mean(), "critic": (target - value).pow(2).mean()}
        for group, opt in optimizers.items():
            opt.zero_grad()
            losses[group].backward()
            opt.step()
            history[group].append(losses[group].item())
        obs = next_obs
"""

# -- A2C on a vector env, n-step returns, one network with two heads ------------------------------
A2C_SETUP = """
    import gymnasium as gym
    import torch
    import torch.nn as nn

    torch.manual_seed(5)
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(4)])


    class ActorCritic(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(4, 32), nn.ReLU())
            self.pi, self.v = nn.Linear(32, 2), nn.Linear(32, 1)

        def forward(self, x):
            h = self.body(x)
            return torch.distributions.Categorical(logits=self.pi(h)), self.v(h).squeeze(-1)


    net = ActorCritic()
    opt = torch.optim.RMSprop(net.parameters(), lr=7e-4)
    scheduler = torch.optim.lr_scheduler.LinearLR(opt, 1.0, 0.1, total_iters=5)
    obs = torch.as_tensor(envs.reset(seed=11)[0], dtype=torch.float32)
    history = []
"""

A2C_CELL = """
    for update in range(5):
        log_probs, values, rewards, masks, entropies = [], [], [], [], []
        for _ in range(5):
            dist, value = net(obs)
            action = dist.sample()
            next_obs, reward, term, trunc, _ = envs.step(action.numpy())
            log_probs.append(dist.log_prob(action))
            entropies.append(dist.entropy())
            values.append(value)
            rewards.append(torch.as_tensor(reward, dtype=torch.float32))
            masks.append(1.0 - torch.as_tensor(term | trunc, dtype=torch.float32))
            obs = torch.as_tensor(next_obs, dtype=torch.float32)
        with torch.no_grad():
            R = net(obs)[1]
        returns = []
        for step in reversed(range(len(rewards))):
            R = rewards[step] + 0.99 * R * masks[step]
            returns.insert(0, R)
        advantage = torch.stack(returns) - torch.stack(values)
        loss = -(torch.stack(log_probs) * advantage.detach()).mean() + 0.5 * advantage.pow(2).mean() - 0.01 * torch.stack(entropies).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        scheduler.step()
        history.append(loss.item())
"""

FIELD: list[CorpusLoop] = [
    _loop("cleanrl_ppo", CLEANRL_PPO_SETUP, CLEANRL_PPO_CELL),
    _loop("ppo_continuous", PPO_CONTINUOUS_SETUP, PPO_CONTINUOUS_CELL),
    _loop("dqn_tutorial", DQN_SETUP, DQN_CELL),
    _loop("reinforce", REINFORCE_SETUP, REINFORCE_CELL),
    _loop("a2c", A2C_SETUP, A2C_CELL),
    _loop("cleanrl_dqn", CLEANRL_DQN_SETUP, CLEANRL_DQN_CELL),
    _loop("vector_reinforce", VECTOR_REINFORCE_SETUP, VECTOR_REINFORCE_CELL),
    _loop("q_lambda", QLAMBDA_SETUP, QLAMBDA_CELL),
    _loop("reinforce_functions", REINFORCE_FUNCTIONS_SETUP, REINFORCE_FUNCTIONS_CELL),
    _loop("episodes_while", EPISODES_WHILE_SETUP, EPISODES_WHILE_CELL),
    _loop("tensordict_for_else", TENSORDICT_SETUP, TENSORDICT_CELL),
    _loop("optimiser_dict", OPTIMISER_DICT_SETUP, OPTIMISER_DICT_CELL),
]
#: Loops that need MuJoCo (the `mujoco` extra): kept out of FIELD, which every corpus test runs.
MUJOCO: list[CorpusLoop] = [_loop("cleanrl_ppo_continuous", CLEANRL_PPO_CONTINUOUS_SETUP, CLEANRL_PPO_CONTINUOUS_CELL)]
FIELD_BY_NAME = {loop.name: loop for loop in FIELD + MUJOCO}
