"""Loops as object-oriented tutorials write them: the parts of the loop held by an agent object.

Written here in the style of public projects (rainbow-is-all-you-need's agent classes, whose ``train``
method holds the loop; the Gymnasium documentation's REINFORCE tutorial, which builds its agent, and the
agent its optimiser, inside the seed loop; an older gym-style environment whose ``reset`` takes no seed),
not copied from them. Sizes are tiny: each runs in about a second as plain Python.
"""

from __future__ import annotations

from corpus.loops import CorpusLoop, _loop

__all__ = ["OBJECTS", "OBJECTS_BY_NAME"]

# -- the loop in the agent's method: `scores, losses = agent.train(n)` ----------------------------
AGENT_METHOD_SETUP = """
    import random
    from collections import deque

    import gymnasium as gym
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F


    class Network(nn.Module):
        def __init__(self, in_dim, out_dim):
            super().__init__()
            self.layers = nn.Sequential(nn.Linear(in_dim, 32), nn.ReLU(), nn.Linear(32, out_dim))

        def forward(self, x):
            return self.layers(x)


    class DQNAgent:
        def __init__(self, env, memory_size, batch_size, target_update, epsilon_decay, seed, gamma=0.99):
            self.env = env
            self.memory = deque(maxlen=memory_size)
            self.batch_size, self.target_update, self.gamma = batch_size, target_update, gamma
            self.epsilon, self.epsilon_decay, self.seed = 1.0, epsilon_decay, seed
            self.dqn, self.dqn_target = Network(4, 2), Network(4, 2)
            self.dqn_target.load_state_dict(self.dqn.state_dict())
            self.optimizer = torch.optim.Adam(self.dqn.parameters(), lr=1e-3)

        def select_action(self, state):
            if self.epsilon > random.random():
                return self.env.action_space.sample()
            with torch.no_grad():
                return self.dqn(torch.as_tensor(state, dtype=torch.float32)).argmax().item()

        def update_model(self):
            batch = random.sample(self.memory, self.batch_size)
            state, action, reward, next_state, done = (torch.as_tensor(np.array(x), dtype=torch.float32) for x in zip(*batch))
            q = self.dqn(state).gather(1, action.long().unsqueeze(1)).squeeze(1)
            with torch.no_grad():
                target = reward + self.gamma * self.dqn_target(next_state).max(1).values * (1 - done)
            loss = F.smooth_l1_loss(q, target)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            return loss.item()

        def train(self, num_frames):
            state, _ = self.env.reset(seed=self.seed)
            update_cnt, losses, scores, score = 0, [], [], 0.0
            for frame_idx in range(1, num_frames + 1):
                action = self.select_action(state)
                next_state, reward, terminated, truncated, _ = self.env.step(action)
                self.memory.append((state, action, reward, next_state, float(terminated)))
                state, score = next_state, score + reward
                if terminated or truncated:
                    state, _ = self.env.reset()
                    scores.append(score)
                    score = 0.0
                if len(self.memory) >= self.batch_size:
                    losses.append(self.update_model())
                    update_cnt += 1
                    self.epsilon = max(0.05, self.epsilon - self.epsilon_decay)
                    if update_cnt % self.target_update == 0:
                        self.dqn_target.load_state_dict(self.dqn.state_dict())
            return scores, losses


    random.seed(0)
    torch.manual_seed(0)
    env = gym.make("CartPole-v1")
    env.action_space.seed(0)
    agent = DQNAgent(env, memory_size=500, batch_size=8, target_update=10, epsilon_decay=0.02, seed=0)
"""

AGENT_METHOD_CELL = """
    scores, losses = agent.train(40)
"""

# -- the agent, and its optimiser, built inside the seed loop (the Gymnasium REINFORCE tutorial's shape) --
AGENT_IN_CELL_SETUP = """
    import gymnasium as gym
    import numpy as np
    import torch
    import torch.nn as nn


    class PolicyNetwork(nn.Module):
        def __init__(self, obs_dims, action_dims):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(obs_dims, 16), nn.Tanh(), nn.Linear(16, action_dims))

        def forward(self, x):
            return self.net(x)


    class REINFORCE:
        def __init__(self, obs_dims, action_dims):
            self.probs, self.rewards = [], []
            self.net = PolicyNetwork(obs_dims, action_dims)
            self.optimizer = torch.optim.AdamW(self.net.parameters(), lr=1e-3)

        def sample_action(self, state):
            dist = torch.distributions.Categorical(logits=self.net(torch.tensor(np.array([state]), dtype=torch.float32)))
            action = dist.sample()
            self.probs.append(dist.log_prob(action))
            return action.item()

        def update(self):
            running, returns = 0.0, []
            for r in self.rewards[::-1]:
                running = r + 0.99 * running
                returns.insert(0, running)
            loss = -(torch.stack(self.probs).squeeze() * torch.tensor(returns)).sum()
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            self.probs, self.rewards = [], []


    wrapped_env = gym.wrappers.RecordEpisodeStatistics(gym.make("CartPole-v1"), 50)
"""

AGENT_IN_CELL_CELL = """
    rewards_over_seeds = []
    for seed in [1, 2]:
        torch.manual_seed(seed)
        agent = REINFORCE(4, 2)
        reward_over_episodes = []
        for episode in range(3):
            obs, info = wrapped_env.reset(seed=seed)
            done = False
            while not done:
                action = agent.sample_action(obs)
                obs, reward, terminated, truncated, info = wrapped_env.step(action)
                agent.rewards.append(reward)
                done = terminated or truncated
            reward_over_episodes.append(float(wrapped_env.return_queue[-1]))
            agent.update()
        rewards_over_seeds.append(reward_over_episodes)
"""

# -- one environment of the older gym style (`reset()` takes no seed), stepped episode by episode ----------
OLD_RESET_SETUP = """
    import gymnasium as gym
    import numpy as np
    import torch
    import torch.nn as nn


    class OldCartPole(gym.Env):
        \"\"\"An environment written against gym's older API: reset() takes nothing, its generator is its own.\"\"\"

        observation_space = gym.spaces.Box(-4.0, 4.0, (4,), np.float32)
        action_space = gym.spaces.Discrete(2)

        def reset(self):
            self.state = self.np_random.uniform(-0.05, 0.05, 4).astype(np.float32)
            self.t = 0
            return self.state, {}

        def step(self, action):
            self.t += 1
            self.state = self.state + np.float32(0.02) * (np.float32(2 * action - 1) + self.np_random.normal(0, 0.1, 4).astype(np.float32))
            done = bool(abs(self.state[2]) > 0.2 or self.t >= 50)
            return self.state, 1.0, done, False, {}


    torch.manual_seed(4)
    env = OldCartPole()
    env._np_random, _ = gym.utils.seeding.np_random(4)
    policy = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 2))
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)
    episode_returns = []
"""

OLD_RESET_CELL = """
    for episode in range(4):
        obs, _ = env.reset()
        log_probs, rewards, done = [], [], False
        while not done:
            dist = torch.distributions.Categorical(logits=policy(torch.as_tensor(obs)))
            action = dist.sample()
            obs, reward, terminated, truncated, _ = env.step(action.item())
            log_probs.append(dist.log_prob(action))
            rewards.append(reward)
            done = terminated or truncated
        loss = -torch.stack(log_probs).sum() * sum(rewards) / 50
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        episode_returns.append(sum(rewards))
"""

OBJECTS: list[CorpusLoop] = [
    _loop("agent_method", AGENT_METHOD_SETUP, AGENT_METHOD_CELL),
    _loop("agent_in_cell", AGENT_IN_CELL_SETUP, AGENT_IN_CELL_CELL),
    _loop("old_reset", OLD_RESET_SETUP, OLD_RESET_CELL),
]
OBJECTS_BY_NAME = {loop.name: loop for loop in OBJECTS}
