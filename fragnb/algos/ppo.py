"""PPO (clipped objective, GAE, minibatch epochs) as fragnb components.

The training loop itself is not here: it is the plain Python a user writes in a notebook cell
(see ``notebooks/01_first_fragment_graph.ipynb``), calling these components:

    action, logprob, value = actor.act(obs)
    next_obs, reward, terminated, truncated, info = env.step(action)
    buffer.add(obs, action, logprob, value, reward, terminated | truncated)
    ...
    batch = buffer.batch(actor.value(obs))
    stats = learner.update(batch)

Buffers store experience environment-first, shape ``(num_envs, num_steps, ...)``, so that
gathering the buffers of several actors is a concatenation along the first axis.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ..components import Actor, Buffer, Learner

__all__ = ["PPOConfig", "ActorCritic", "PPOActor", "RolloutBuffer", "PPOLearner"]


@dataclass
class PPOConfig:
    """PPO hyperparameters; the defaults solve CartPole-v1 within 150k environment steps."""

    # Rollout
    num_envs: int = 16
    """environments stepped together"""
    num_steps: int = 64
    """steps per environment in one rollout"""
    gamma: float = 0.99
    """discount factor"""
    gae_lambda: float = 0.95
    """lambda of generalised advantage estimation"""
    # Update
    learning_rate: float = 2.5e-3
    """Adam learning rate"""
    update_epochs: int = 4
    """passes over each batch"""
    num_minibatches: int = 4
    """minibatches per pass"""
    clip_coef: float = 0.2
    """surrogate clipping coefficient"""
    ent_coef: float = 0.0
    """entropy bonus coefficient"""
    vf_coef: float = 0.5
    """value loss coefficient"""
    max_grad_norm: float = 0.5
    """gradient clipping norm"""
    anneal_updates: int = 0
    """anneal the learning rate linearly to zero over this many updates (0: keep it constant)"""
    hidden: int = 64
    """width of the two hidden layers"""


def _layer(n_in: int, n_out: int, std: float = np.sqrt(2)) -> nn.Linear:
    layer = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, 0.0)
    return layer


class ActorCritic(nn.Module):
    """Separate tanh MLPs for the policy logits and the state value (CleanRL's ``Agent``)."""

    def __init__(self, obs_dim: int, num_actions: int, hidden: int = 64):
        super().__init__()
        self.critic = nn.Sequential(
            _layer(obs_dim, hidden), nn.Tanh(), _layer(hidden, hidden), nn.Tanh(), _layer(hidden, 1, std=1.0)
        )
        self.actor = nn.Sequential(
            _layer(obs_dim, hidden), nn.Tanh(), _layer(hidden, hidden), nn.Tanh(), _layer(hidden, num_actions, std=0.01)
        )

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    def logits(self, obs: torch.Tensor) -> torch.Tensor:
        return self.actor(obs)


class PPOActor(Actor):
    """Samples actions from an :class:`ActorCritic`; each environment draws from its own stream.

    Parameters
    ----------
    policy : ActorCritic
        The network; share it with the learner so that updates reach the actor.
    num_envs, seed
        See :class:`fragnb.components.Actor`.
    """

    def __init__(self, policy: ActorCritic, num_envs: int, seed: int = 0):
        super().__init__(num_envs, seed)
        self.policy = policy

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample one action per environment; return ``(action, logprob, value)``."""
        if len(obs) != self.num_envs:
            raise ValueError(f"actor serves {self.num_envs} environments but got {len(obs)} observations")
        logp = torch.log_softmax(self.policy.logits(obs), dim=-1)
        # Inverse-CDF sampling with this environment's own uniform draw.
        u = self.streams.uniform(1).to(logp.dtype)
        action = (logp.exp().cumsum(-1) < u).sum(-1).clamp_(max=logp.shape[-1] - 1)
        return action, logp.gather(-1, action.unsqueeze(-1)).squeeze(-1), self.policy.value(obs)

    @torch.no_grad()
    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """State values, for bootstrapping the end of a rollout."""
        return self.policy.value(obs)


class RolloutBuffer(Buffer):
    """One rollout of ``num_steps`` per environment, with GAE computed per environment.

    Parameters
    ----------
    num_envs, num_steps : int
        Shape of the rollout.
    obs_shape : tuple of int
        Shape of one observation.
    gamma, gae_lambda : float
        Discount and GAE lambda.
    """

    per_env = ("obs", "actions", "logprobs", "values", "rewards", "dones")
    shardwise = ("add", "batch")  # GAE runs per environment: actors can each hold a shard

    def __init__(self, num_envs: int, num_steps: int, obs_shape: tuple[int, ...], gamma: float = 0.99, gae_lambda: float = 0.95):
        self.num_envs, self.num_steps = num_envs, num_steps
        self.gamma, self.gae_lambda = gamma, gae_lambda
        self.obs = torch.zeros(num_envs, num_steps, *obs_shape)
        self.actions = torch.zeros(num_envs, num_steps, dtype=torch.int64)
        self.logprobs, self.values, self.rewards, self.dones = (torch.zeros(num_envs, num_steps) for _ in range(4))
        self.cursor = 0

    def add(self, obs, action, logprob, value, reward, done) -> None:
        """Store one step of every environment; ``done`` is whether the step ended its episode."""
        if self.cursor == self.num_steps:
            raise RuntimeError(f"buffer is full ({self.num_steps} steps); call batch() to empty it")
        t = self.cursor
        self.obs[:, t], self.actions[:, t], self.logprobs[:, t] = obs, action, logprob
        self.values[:, t], self.rewards[:, t], self.dones[:, t] = value, reward, done
        self.cursor += 1

    def batch(self, last_value: torch.Tensor) -> dict[str, torch.Tensor]:
        """Advantages and returns for the stored rollout (then empty the buffer).

        Returns a dict of ``(num_envs, num_steps, ...)`` tensors: obs, actions, logprobs,
        values, advantages, returns.
        """
        if self.cursor != self.num_steps:
            raise RuntimeError(f"buffer holds {self.cursor} of {self.num_steps} steps")
        advantages = torch.zeros_like(self.rewards)
        gae = torch.zeros(self.num_envs)
        next_value = last_value
        for t in reversed(range(self.num_steps)):
            nonterminal = 1.0 - self.dones[:, t]
            delta = self.rewards[:, t] + self.gamma * next_value * nonterminal - self.values[:, t]
            gae = delta + self.gamma * self.gae_lambda * nonterminal * gae
            advantages[:, t] = gae
            next_value = self.values[:, t]
        self.cursor = 0
        return {
            "obs": self.obs.clone(),
            "actions": self.actions.clone(),
            "logprobs": self.logprobs.clone(),
            "values": self.values.clone(),
            "advantages": advantages,
            "returns": advantages + self.values,
        }


class PPOLearner(Learner):
    """Clipped-objective PPO updates of an :class:`ActorCritic`.

    Parameters
    ----------
    policy : ActorCritic
        The network to train (the same object the actor samples with).
    config : PPOConfig
        Hyperparameters.
    seed : int
        Seed of the minibatch shuffling.
    """

    def __init__(self, policy: ActorCritic, config: PPOConfig | None = None, seed: int = 0):
        self.policy, self.config = policy, config or PPOConfig()
        self.optimizer = torch.optim.Adam(policy.parameters(), lr=self.config.learning_rate, eps=1e-5)
        self.generator = torch.Generator().manual_seed(seed)
        self.updates = 0

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """Several epochs of minibatch updates on one rollout; returns the last minibatch's losses."""
        c = self.config
        if c.anneal_updates:
            frac = max(0.0, 1.0 - self.updates / c.anneal_updates)
            self.optimizer.param_groups[0]["lr"] = frac * c.learning_rate
        b = {k: v.flatten(0, 1) for k, v in batch.items()}
        batch_size = len(b["actions"])
        mb_size = batch_size // c.num_minibatches
        for _ in range(c.update_epochs):
            order = torch.randperm(batch_size, generator=self.generator)
            for start in range(0, batch_size, mb_size):
                mb = {k: v[order[start : start + mb_size]] for k, v in b.items()}
                logp_all = torch.log_softmax(self.policy.logits(mb["obs"]), dim=-1)
                newlogprob = logp_all.gather(-1, mb["actions"].unsqueeze(-1)).squeeze(-1)
                entropy = -(logp_all.exp() * logp_all).sum(-1)
                ratio = (newlogprob - mb["logprobs"]).exp()

                mb_adv = mb["advantages"]
                mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
                pg_loss = torch.max(-mb_adv * ratio, -mb_adv * ratio.clamp(1 - c.clip_coef, 1 + c.clip_coef)).mean()
                v_loss = 0.5 * (self.policy.value(mb["obs"]) - mb["returns"]).square().mean()
                loss = pg_loss - c.ent_coef * entropy.mean() + c.vf_coef * v_loss

                self.optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(self.policy.parameters(), c.max_grad_norm)
                self.optimizer.step()
        self.updates += 1
        return {"policy_loss": pg_loss.item(), "value_loss": v_loss.item(), "entropy": entropy.mean().item()}

    def state_dict(self):
        return {**super().state_dict(), "updates": self.updates}

    def load_state_dict(self, state):
        state = dict(state)
        self.updates = state.pop("updates")
        super().load_state_dict(state)
