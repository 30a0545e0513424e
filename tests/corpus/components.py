"""Small components used only by the loop corpus (``tests/corpus/loops.py``).

They follow the conventions of :mod:`fragnb.algos.ppo` and :mod:`fragnb.envs.cartpole`:

- randomness that belongs to an environment (reset noise, action sampling, exploration) comes
  from the per-environment streams ``self.streams``, so a shard of environments draws what those
  environments draw in the full batch;
- randomness of a learner or buffer comes from its own ``torch.Generator``;
- every tensor a component returns is a new tensor, never a view of state it mutates later.
"""

from __future__ import annotations

import copy
import math

import torch
from torch import nn

from fragnb.components import Actor, Buffer, Env, Learner

__all__ = [
    "mlp",
    "Pendulum",
    "GaussianPolicy",
    "GaussianActor",
    "GaussianLearner",
    "CategoricalPolicy",
    "CategoricalActor",
    "PGLearner",
    "QActor",
    "ReplayBuffer",
    "DQNLearner",
]


def mlp(n_in: int, n_out: int, hidden: int = 32) -> nn.Sequential:
    """A two-layer tanh MLP."""
    return nn.Sequential(
        nn.Linear(n_in, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, n_out)
    )


def _normal(u: torch.Tensor) -> torch.Tensor:
    """Standard normal draws from pairs of uniforms (Box-Muller): ``(n, 2k)`` uniforms -> ``(n, k)`` normals."""
    u1, u2 = u[:, 0::2], u[:, 1::2]
    return torch.sqrt(-2.0 * torch.log1p(-u1)) * torch.cos(2.0 * math.pi * u2)  # 1 - u1 in (0, 1]


# -- environment ------------------------------------------------------------------------------


class Pendulum(Env):
    """Gymnasium ``Pendulum-v1`` for ``num_envs`` environments at once (float64 state).

    Observation ``(cos theta, sin theta, theta_dot)`` (float32), action a torque of shape
    ``(num_envs, 1)`` clipped to [-2, 2], reward ``-(theta^2 + 0.1 theta_dot^2 + 0.001 u^2)``,
    never terminated, truncated after ``max_episode_steps``.
    """

    per_env = Env.per_env + ("state", "elapsed")
    obs_shape = (3,)
    num_actions = 0  # continuous
    max_speed, max_torque, dt, g, m, l = 8.0, 2.0, 0.05, 10.0, 1.0, 1.0  # noqa: E741 (the pole's length, as the physics writes it)

    def __init__(self, num_envs: int, seed: int = 0, max_episode_steps: int = 200):
        super().__init__(num_envs, seed)
        self.max_episode_steps = max_episode_steps
        self.state = torch.zeros(self.num_envs, 2, dtype=torch.float64)  # theta, theta_dot
        self.elapsed = torch.zeros(self.num_envs, dtype=torch.int64)

    @staticmethod
    def _obs(state: torch.Tensor) -> torch.Tensor:
        theta, theta_dot = state.unbind(1)
        return torch.stack((torch.cos(theta), torch.sin(theta), theta_dot), 1).to(torch.float32)

    def _reset(self, mask: torch.Tensor) -> torch.Tensor:
        u = self.streams.uniform(2, mask)
        self.state[mask] = torch.stack((u[:, 0] * 2 * math.pi - math.pi, u[:, 1] * 2 - 1), 1)
        self.elapsed[mask] = 0
        return self._obs(self.state[mask])

    def _step(self, actions: torch.Tensor):
        theta, theta_dot = self.state.unbind(1)
        u = actions.reshape(self.num_envs).to(torch.float64).clamp(-self.max_torque, self.max_torque)
        normalized = (theta + math.pi) % (2 * math.pi) - math.pi
        cost = normalized.square() + 0.1 * theta_dot.square() + 0.001 * u.square()
        new_dot = theta_dot + (3 * self.g / (2 * self.l) * torch.sin(theta) + 3.0 / (self.m * self.l**2) * u) * self.dt
        new_dot = new_dot.clamp(-self.max_speed, self.max_speed)
        self.state = torch.stack((theta + new_dot * self.dt, new_dot), 1)
        self.elapsed += 1
        terminated = torch.zeros(self.num_envs, dtype=torch.bool)
        truncated = self.elapsed >= self.max_episode_steps
        return self._obs(self.state), (-cost).to(torch.float32), terminated, truncated


# -- continuous policy gradient ---------------------------------------------------------------


class GaussianPolicy(nn.Module):
    """A diagonal Gaussian policy: MLP mean and a learned, state-independent log standard deviation."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: int = 32):
        super().__init__()
        self.mean = mlp(obs_dim, act_dim, hidden)
        self.log_std = nn.Parameter(torch.full((act_dim,), -0.5))

    def log_prob(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Log density of ``action`` (summed over action dimensions)."""
        std = self.log_std.exp()
        z = (action - self.mean(obs)) / std
        return (-0.5 * z.square() - self.log_std - 0.5 * math.log(2 * math.pi)).sum(-1)


class GaussianActor(Actor):
    """Samples continuous actions from a :class:`GaussianPolicy` with per-environment noise.

    ``act(obs) -> (action, logprob)``, ``action`` of shape ``(num_envs, act_dim)``.
    """

    def __init__(self, policy: GaussianPolicy, num_envs: int, seed: int = 0):
        super().__init__(num_envs, seed)
        self.policy = policy

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        act_dim = self.policy.log_std.numel()
        noise = _normal(self.streams.uniform(2 * act_dim)).to(obs.dtype)
        action = self.policy.mean(obs) + self.policy.log_std.exp() * noise
        return action, self.policy.log_prob(obs, action)


class GaussianLearner(Learner):
    """REINFORCE for a :class:`GaussianPolicy` with normalised returns as advantages."""

    def __init__(self, policy: GaussianPolicy, lr: float = 1e-3):
        self.policy = policy
        self.optimizer = torch.optim.Adam(policy.parameters(), lr=lr)

    def update(self, obs: torch.Tensor, actions: torch.Tensor, returns: torch.Tensor) -> float:
        """One gradient step on ``(T, num_envs, ...)`` tensors; returns the loss."""
        adv = (returns - returns.mean()) / (returns.std() + 1e-8)
        loss = -(self.policy.log_prob(obs, actions) * adv).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()


# -- discrete policy gradient -----------------------------------------------------------------


class CategoricalPolicy(nn.Module):
    """Separate MLPs for categorical action logits and the state value."""

    def __init__(self, obs_dim: int, num_actions: int, hidden: int = 32):
        super().__init__()
        self.pi, self.v = mlp(obs_dim, num_actions, hidden), mlp(obs_dim, 1, hidden)

    def logits(self, obs: torch.Tensor) -> torch.Tensor:
        return self.pi(obs)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.v(obs).squeeze(-1)


class CategoricalActor(Actor):
    """Samples from a :class:`CategoricalPolicy` by inverse CDF with per-environment uniforms.

    ``act(obs) -> (action, logprob)``; ``value(obs)`` for bootstrapping.
    """

    def __init__(self, policy: CategoricalPolicy, num_envs: int, seed: int = 0):
        super().__init__(num_envs, seed)
        self.policy = policy

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logp = torch.log_softmax(self.policy.logits(obs), dim=-1)
        u = self.streams.uniform(1).to(logp.dtype)
        action = (logp.exp().cumsum(-1) < u).sum(-1).clamp_(max=logp.shape[-1] - 1)
        return action, logp.gather(-1, action.unsqueeze(-1)).squeeze(-1)

    @torch.no_grad()
    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.policy.value(obs)


class PGLearner(Learner):
    """REINFORCE (``vf_coef=0``) or A2C (value baseline) on a :class:`CategoricalPolicy`.

    ``update(obs, actions, returns)`` takes step-first stacked tensors ``(T, num_envs, ...)``.
    """

    def __init__(self, policy: CategoricalPolicy, lr: float = 1e-2, vf_coef: float = 0.5, ent_coef: float = 0.01):
        self.policy, self.vf_coef, self.ent_coef = policy, vf_coef, ent_coef
        self.optimizer = torch.optim.Adam(policy.parameters(), lr=lr)

    def update(self, obs: torch.Tensor, actions: torch.Tensor, returns: torch.Tensor) -> dict[str, float]:
        obs, actions, returns = obs.flatten(0, 1), actions.flatten(0, 1), returns.flatten(0, 1)
        logp_all = torch.log_softmax(self.policy.logits(obs), dim=-1)
        logp = logp_all.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1).mean()
        values = self.policy.value(obs)
        advantages = returns - values.detach() if self.vf_coef else returns
        policy_loss = -(logp * advantages).mean()
        value_loss = 0.5 * (returns - values).square().mean()
        loss = policy_loss + self.vf_coef * value_loss - self.ent_coef * entropy
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return {"policy_loss": policy_loss.item(), "value_loss": value_loss.item(), "entropy": entropy.item()}


# -- DQN --------------------------------------------------------------------------------------


class QActor(Actor):
    """Epsilon-greedy over a Q network (shared with the learner); the loop may set ``epsilon``.

    ``act(obs) -> action`` (int64). Exploration draws come from the per-environment streams.
    """

    def __init__(self, q: nn.Module, num_envs: int, seed: int = 0, epsilon: float = 1.0):
        super().__init__(num_envs, seed)
        self.q, self.epsilon = q, epsilon

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> torch.Tensor:
        q_values = self.q(obs)
        u = self.streams.uniform(2)
        random_action = (u[:, 1] * q_values.shape[-1]).to(torch.int64)
        return torch.where(u[:, 0] < self.epsilon, random_action, q_values.argmax(-1))


class ReplayBuffer(Buffer):
    """A fixed-capacity ring of transitions, stored transition-first (not environment-first).

    ``add`` appends one batch step of all environments (in environment order); ``sample`` draws
    uniformly with the buffer's own generator, so which transitions it returns depends on the
    insertion order of everything stored so far.
    """

    def __init__(self, capacity: int, obs_shape: tuple[int, ...], seed: int = 0, action_dtype=torch.int64):
        self.capacity, self.cursor, self.size = capacity, 0, 0
        self.obs = torch.zeros(capacity, *obs_shape)
        self.next_obs = torch.zeros(capacity, *obs_shape)
        self.actions = torch.zeros(capacity, dtype=action_dtype)
        self.rewards = torch.zeros(capacity)
        self.dones = torch.zeros(capacity)
        self.generator = torch.Generator().manual_seed(seed)

    def __len__(self) -> int:
        return self.size

    def add(self, obs, action, reward, next_obs, done) -> None:
        """Store the transitions of one step of every environment."""
        idx = (self.cursor + torch.arange(len(obs))) % self.capacity
        self.obs[idx], self.actions[idx], self.rewards[idx] = obs, action, reward.to(torch.float32)
        self.next_obs[idx], self.dones[idx] = next_obs, done.to(torch.float32)
        self.cursor = (self.cursor + len(obs)) % self.capacity
        self.size = min(self.size + len(obs), self.capacity)

    def sample(self, batch_size: int) -> dict[str, torch.Tensor]:
        """``batch_size`` transitions drawn uniformly with replacement (new tensors)."""
        if self.size == 0:
            raise RuntimeError("cannot sample an empty replay buffer")
        idx = torch.randint(self.size, (batch_size,), generator=self.generator)
        return {
            "obs": self.obs[idx],
            "actions": self.actions[idx],
            "rewards": self.rewards[idx],
            "next_obs": self.next_obs[idx],
            "dones": self.dones[idx],
        }


class DQNLearner(Learner):
    """One-step Q-learning with a target network (``self.q``, ``self.target``) and Adam."""

    def __init__(self, q: nn.Module, lr: float = 1e-3, gamma: float = 0.99):
        self.q, self.gamma = q, gamma
        self.target = copy.deepcopy(q)
        self.optimizer = torch.optim.Adam(q.parameters(), lr=lr)

    def update(self, batch: dict[str, torch.Tensor]) -> float:
        """One gradient step of the Huber TD loss; returns the loss."""
        with torch.no_grad():
            next_q = self.target(batch["next_obs"]).max(-1).values
            target = batch["rewards"] + self.gamma * (1.0 - batch["dones"]) * next_q
        q = self.q(batch["obs"]).gather(-1, batch["actions"].unsqueeze(-1)).squeeze(-1)
        loss = nn.functional.smooth_l1_loss(q, target)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def sync_target(self) -> None:
        """Copy the online network's weights into the target network."""
        self.target.load_state_dict(self.q.state_dict())


# -- REINFORCE as usually written: the actor's log-probabilities keep their autograd graph ------


class GraphActor(CategoricalActor):
    """Samples as :class:`CategoricalActor` does, but returns the log-probability *with* its graph."""

    def act(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logp = torch.log_softmax(self.policy.logits(obs), dim=-1)
        u = self.streams.uniform(1).to(logp.dtype)
        action = (logp.exp().cumsum(-1) < u).sum(-1).clamp_(max=logp.shape[-1] - 1)
        return action, logp.gather(-1, action.unsqueeze(-1)).squeeze(-1)


class LogProbLearner(Learner):
    """Back-propagates ``-(logp * return)`` through the log-probabilities the actor kept."""

    def __init__(self, policy: CategoricalPolicy, lr: float = 1e-2):
        self.policy = policy
        self.optimizer = torch.optim.Adam(policy.parameters(), lr=lr)

    def update(self, logps: list, rewards: list) -> float:
        loss = -(torch.stack(logps) * torch.stack(rewards)).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()


# -- sampling as the field writes it: torch's global generator ------------------------------------


class GlobalSamplingActor(CategoricalActor):
    """Samples with ``Categorical(logits).sample()``: torch's global generator, not the streams."""

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        dist = torch.distributions.Categorical(logits=self.policy.logits(obs))
        action = dist.sample()
        return action, dist.log_prob(action)


class ShufflingLearner(PGLearner):
    """:class:`PGLearner` in two minibatches drawn with ``torch.randperm`` (the global generator)."""

    def update(self, obs: torch.Tensor, actions: torch.Tensor, returns: torch.Tensor) -> dict[str, float]:
        order = torch.randperm(obs.shape[0])
        out = {}
        for half in order.chunk(2):
            out = super().update(obs[half], actions[half], returns[half])
        return out
