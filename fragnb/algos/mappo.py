"""MAPPO (multi-agent PPO with a centralised critic) as fragnb components, for batched multi-agent envs.

MAPPO (Yu et al., *The Surprising Effectiveness of PPO in Cooperative Multi-Agent Games*, 2022) is PPO
with two changes for ``N`` cooperating agents:

- **one shared actor** (parameter sharing): every agent samples from the same network, fed its own
  observation with its agent id appended as a one-hot, so agents may still act differently;
- **a centralised critic**: the value of agent ``i`` is computed from the concatenation of *all*
  agents' observations (the global state, with ``i``'s one-hot: an agent-specific global state).
  The critic is only used in training; acting needs nothing but an agent's own observation.

Advantages are computed per agent (GAE on each agent's reward and value), and the actor is trained
with PPO's clipped objective over every (step, agent) pair.

The training loop is not here: it is the plain Python of a notebook cell, and it is notebook 01's PPO
loop unchanged; only the shapes of what flows through it gain an agent axis::

    action, logprob, value = actor.act(obs)         # obs (num_envs, N, obs_dim) -> (num_envs, N) each
    next_obs, reward, terminated, truncated, info = env.step(action)
    buffer.add(obs, action, logprob, value, reward, terminated | truncated)
    ...
    batch = buffer.batch(actor.value(obs))
    stats = learner.update(batch)

Components: :class:`MultiAgentActorCritic` (the networks), :class:`MAPPOActor`,
:class:`MultiAgentRolloutBuffer`, :class:`MAPPOLearner`, :class:`MAPPOConfig`; environment:
:class:`fragnb.envs.SimpleSpread`. Discrete actions only. Every environment's agents stay together on
one replica (sharding splits environments), which is what lets the critic see them all.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..components import Actor, Buffer, Learner, device_of
from .ppo import adam, around_proximal, clipped_loss, layer
from .rollout import gae, minibatches

__all__ = ["MAPPOConfig", "MultiAgentActorCritic", "MAPPOActor", "MultiAgentRolloutBuffer", "MAPPOLearner"]


@dataclass
class MAPPOConfig:
    """MAPPO hyperparameters for :class:`fragnb.envs.SimpleSpread` (3 agents, 25-step episodes).

    One rollout of ``num_steps = 25`` is exactly one episode of every environment (simple_spread never
    terminates and truncates all environments together). The defaults are tuned for a CPU: in 150
    iterations (120k environment steps, about 10 s on one CPU thread) they lift the mean team return
    of the last 100 episodes to between -63 and -61 (seeds 0-2), where a uniformly random policy
    scores between -82 and -79 (``tests/test_mappo.py``). A hand-written policy that sends agent
    ``i`` to landmark ``i`` scores about -32: there is more to learn, in millions of steps, as in
    the MAPPO paper.

    Each field is a keyword argument.

    Examples
    --------
    >>> from fragnb.algos.mappo import MAPPOConfig
    >>> config = MAPPOConfig()
    >>> config.num_envs * config.num_steps  # environment steps per iteration: one episode of each environment
    800
    >>> MAPPOConfig(num_envs=8, update_epochs=2).num_envs
    8
    """

    # Rollout
    num_envs: int = 32
    """environments stepped together"""
    num_steps: int = 25
    """steps per environment in one rollout (25: one whole episode of simple_spread)"""
    gamma: float = 0.99
    """discount factor"""
    gae_lambda: float = 0.95
    """lambda of generalised advantage estimation"""
    # Update
    actor_lr: float = 1e-3
    """Adam learning rate of the shared actor (the start of the annealing schedule)"""
    critic_lr: float = 1e-3
    """Adam learning rate of the centralised critic"""
    update_epochs: int = 5
    """passes over each batch"""
    num_minibatches: int = 2
    """minibatches per pass (of environment steps: a step's agents stay in one minibatch)"""
    clip_coef: float = 0.2
    """surrogate clipping coefficient"""
    ent_coef: float = 0.01
    """entropy bonus coefficient"""
    vf_coef: float = 1.0
    """value loss coefficient (actor and critic share no weights: it only scales the critic's step)"""
    max_grad_norm: float = 10.0
    """gradient clipping norm, applied to the actor's and to the critic's gradients separately"""
    anneal_updates: int = 0
    """anneal both learning rates linearly to zero over this many updates (0: keep them constant)"""
    hidden: int = 64
    """width of the two hidden layers of the actor and of the critic"""
    proximal: bool = False
    """clip around the weights at the start of each update, for trajectories an older policy produced
    (``async``, ``srl``): see :attr:`fragnb.algos.ppo.PPOConfig.proximal`"""


class MultiAgentActorCritic(nn.Module):
    """A shared actor over agents' own observations and a centralised critic over all of them.

    Inputs have an agent axis before the features: ``obs`` of shape ``(..., num_agents, obs_dim)``.

    - ``logits(obs)`` -> ``(..., num_agents, num_actions)``: the actor MLP applied to each agent's own
      observation concatenated with the agent's one-hot id (input ``obs_dim + num_agents``).
    - ``value(obs)`` -> ``(..., num_agents)``: the critic MLP applied, for each agent, to the
      concatenation of every agent's observation and that agent's one-hot id (input
      ``num_agents * obs_dim + num_agents``).

    Parameters
    ----------
    obs_dim : int
        Size of one agent's observation.
    num_agents : int
        Agents per environment.
    num_actions : int
        Discrete actions per agent.
    hidden : int
        Width of the two hidden layers of each MLP.

    Examples
    --------
    >>> import torch
    >>> from fragnb.algos.mappo import MultiAgentActorCritic
    >>> net = MultiAgentActorCritic(obs_dim=18, num_agents=3, num_actions=5)
    >>> obs = torch.zeros(4, 3, 18)
    >>> net.logits(obs).shape, net.value(obs).shape
    (torch.Size([4, 3, 5]), torch.Size([4, 3]))
    """

    def __init__(self, obs_dim: int, num_agents: int, num_actions: int, hidden: int = 64):
        super().__init__()
        self.obs_dim, self.num_agents, self.num_actions = obs_dim, num_agents, num_actions
        self.actor = nn.Sequential(
            layer(obs_dim + num_agents, hidden),
            nn.Tanh(),
            layer(hidden, hidden),
            nn.Tanh(),
            layer(hidden, num_actions, std=0.01),
        )
        self.critic = nn.Sequential(
            layer(num_agents * obs_dim + num_agents, hidden),
            nn.Tanh(),
            layer(hidden, hidden),
            nn.Tanh(),
            layer(hidden, 1, std=1.0),
        )

    def _with_ids(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` of shape ``(..., num_agents, F)`` with each agent's one-hot id appended."""
        ids = torch.eye(self.num_agents, dtype=x.dtype, device=x.device).expand(*x.shape[:-1], self.num_agents)
        return torch.cat([x, ids], -1)

    def _check(self, obs: torch.Tensor) -> None:
        if obs.shape[-2:] != (self.num_agents, self.obs_dim):
            raise ValueError(f"expected observations (..., {self.num_agents}, {self.obs_dim}), got {tuple(obs.shape)}")

    def logits(self, obs: torch.Tensor) -> torch.Tensor:
        self._check(obs)
        return self.actor(self._with_ids(obs))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        self._check(obs)
        state = obs.flatten(-2).unsqueeze(-2).expand(*obs.shape[:-1], self.num_agents * self.obs_dim)
        return self.critic(self._with_ids(state)).squeeze(-1)

    def log_prob_and_entropy(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probability of each agent's int64 action (``actions``: ``(..., num_agents)``) and the
        entropy of its action distribution, both ``(..., num_agents)``."""
        logp = torch.log_softmax(self.logits(obs), dim=-1)
        return logp.gather(-1, actions.unsqueeze(-1)).squeeze(-1), -(logp.exp() * logp).sum(-1)

    def actor_parameters(self) -> list[nn.Parameter]:
        return list(self.actor.parameters())

    def critic_parameters(self) -> list[nn.Parameter]:
        return list(self.critic.parameters())


class MAPPOActor(Actor):
    """Samples every agent's action from the shared actor; each environment draws from its own stream.

    One call serves all ``num_agents`` agents of ``num_envs`` environments: a single forward pass over
    ``num_envs x num_agents`` observations. It also returns the centralised critic's values, which the
    buffer needs for GAE, so the critic's weights travel to wherever the actor runs.

    Parameters
    ----------
    policy : MultiAgentActorCritic
        The networks; share them with the learner so that updates reach the actor.
    num_envs, seed
        See :class:`fragnb.components.Actor`.

    Examples
    --------
    >>> import torch
    >>> from fragnb.algos.mappo import MAPPOActor, MultiAgentActorCritic
    >>> actor = MAPPOActor(MultiAgentActorCritic(18, 3, 5), num_envs=4, seed=0)
    >>> action, logprob, value = actor.act(torch.zeros(4, 3, 18))
    >>> action.shape, action.dtype, logprob.shape, value.shape
    (torch.Size([4, 3]), torch.int64, torch.Size([4, 3]), torch.Size([4, 3]))
    """

    def __init__(self, policy: MultiAgentActorCritic, num_envs: int, seed: int = 0):
        super().__init__(num_envs, seed)
        self.policy = policy

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One action per agent and environment; return ``(action, logprob, value)``, each ``(num_envs, num_agents)``."""
        if len(obs) != self.num_envs:
            raise ValueError(f"actor serves {self.num_envs} environments but got {len(obs)} observations")
        x = obs.to(device_of(self.policy))
        logp = torch.log_softmax(self.policy.logits(x), dim=-1)
        # Inverse-CDF sampling, one uniform per agent from this environment's own stream.
        u = self.streams.uniform(self.policy.num_agents).to(logp).unsqueeze(-1)
        action = (logp.exp().cumsum(-1) < u).sum(-1).clamp_(max=logp.shape[-1] - 1)
        out = action, logp.gather(-1, action.unsqueeze(-1)).squeeze(-1), self.policy.value(x)
        return tuple(t.to(obs.device) for t in out)

    @torch.no_grad()
    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """Each agent's centralised value, ``(num_envs, num_agents)``, for bootstrapping a rollout's end."""
        return self.policy.value(obs.to(device_of(self.policy))).to(obs.device)


class MultiAgentRolloutBuffer(Buffer):
    """One rollout of ``num_steps`` per environment and agent, with GAE per environment and agent.

    Stored environment-first, ``(num_envs, num_steps, num_agents, ...)``, so that the buffers of
    several actors gather by concatenation along the first axis.

    Parameters
    ----------
    num_envs, num_steps : int
        Shape of the rollout.
    obs_shape : tuple of int
        ``(num_agents, obs_dim)``: the environment's ``obs_shape``.
    gamma, gae_lambda : float
        Discount and GAE lambda.

    Examples
    --------
    One rollout of 3 steps in 2 environments of 3 agents:

    >>> import torch
    >>> from fragnb.algos.mappo import MAPPOActor, MultiAgentActorCritic, MultiAgentRolloutBuffer
    >>> from fragnb.envs import SimpleSpread
    >>> _ = torch.manual_seed(0)
    >>> env = SimpleSpread(num_envs=2, N=3, seed=0)
    >>> actor = MAPPOActor(MultiAgentActorCritic(obs_dim=18, num_agents=3, num_actions=5), num_envs=2, seed=0)
    >>> buffer = MultiAgentRolloutBuffer(num_envs=2, num_steps=3, obs_shape=env.obs_shape)
    >>> obs = env.reset()
    >>> for step in range(3):
    ...     action, logprob, value = actor.act(obs)
    ...     next_obs, reward, terminated, truncated, info = env.step(action)
    ...     buffer.add(obs, action, logprob, value, reward, terminated | truncated)  # the team reward
    ...     obs = next_obs
    >>> batch = buffer.batch(actor.value(obs))
    >>> batch["obs"].shape, batch["advantages"].shape, batch["dones"].shape
    (torch.Size([2, 3, 3, 18]), torch.Size([2, 3, 3]), torch.Size([2, 3]))
    """

    per_env = ("obs", "actions", "logprobs", "values", "rewards", "dones")
    shardwise = ("add", "batch")  # GAE runs per environment: actors can each hold a shard

    def __init__(
        self, num_envs: int, num_steps: int, obs_shape: tuple[int, int], gamma: float = 0.99, gae_lambda: float = 0.95
    ):
        self.num_envs, self.num_steps = num_envs, num_steps
        self.num_agents = int(obs_shape[0])
        self.gamma, self.gae_lambda = gamma, gae_lambda
        n = self.num_agents
        self.obs = torch.zeros(num_envs, num_steps, *obs_shape)
        self.actions = torch.zeros(num_envs, num_steps, n, dtype=torch.int64)
        self.logprobs, self.values, self.rewards = (torch.zeros(num_envs, num_steps, n) for _ in range(3))
        self.dones = torch.zeros(num_envs, num_steps)
        self.cursor = 0

    def add(self, obs, action, logprob, value, reward, done) -> None:
        """Store one step of every environment. ``reward`` is the team's ``(num_envs,)`` (given to
        every agent) or each agent's ``(num_envs, num_agents)``; ``done`` ends the environment's episode."""
        if self.cursor == self.num_steps:
            raise RuntimeError(f"buffer is full ({self.num_steps} steps); call batch() to empty it")
        t = self.cursor
        self.obs[:, t], self.actions[:, t], self.logprobs[:, t], self.values[:, t] = obs, action, logprob, value
        self.rewards[:, t] = reward.unsqueeze(-1) if reward.dim() == 1 else reward
        self.dones[:, t] = done
        self.cursor += 1

    def batch(self, last_value: torch.Tensor) -> dict[str, torch.Tensor]:
        """Per-agent advantages and returns of the stored rollout (then empty the buffer).

        Returns a dict of ``(num_envs, num_steps, num_agents, ...)`` tensors: obs, actions, logprobs,
        values, rewards, advantages, returns; and ``dones``, ``(num_envs, num_steps)``.
        """
        if self.cursor != self.num_steps:
            raise RuntimeError(f"buffer holds {self.cursor} of {self.num_steps} steps")
        advantages = gae(
            self.rewards, self.values, self.dones, last_value, self.gamma, self.gae_lambda
        )  # agents end together
        self.cursor = 0
        return {
            "obs": self.obs.clone(),
            "actions": self.actions.clone(),
            "logprobs": self.logprobs.clone(),
            "values": self.values.clone(),
            "rewards": self.rewards.clone(),
            "dones": self.dones.clone(),
            "advantages": advantages,
            "returns": advantages + self.values,
        }


class MAPPOLearner(Learner):
    """PPO's clipped objective for the shared actor and a regression of the centralised critic.

    Minibatches are drawn over environment steps (all agents of a step together); every (step, agent)
    pair is one sample of the policy loss, with advantages standardised per minibatch across agents.
    Actor and critic share no weights; they are trained from one loss and one backward pass (which is
    what ``multi_learner``'s gradient all-reduce hooks on), with their gradients clipped separately and
    their own learning rates.

    Parameters
    ----------
    policy : MultiAgentActorCritic
        The networks to train (the same object the actor samples with).
    config : MAPPOConfig
        Hyperparameters.
    seed : int
        Seed of the minibatch shuffling.

    Examples
    --------
    Notebook 01's loop with an agent axis, one iteration of 5 steps in 2 environments, then one update:

    >>> import torch
    >>> from fragnb.algos.mappo import (
    ...     MAPPOActor,
    ...     MAPPOConfig,
    ...     MAPPOLearner,
    ...     MultiAgentActorCritic,
    ...     MultiAgentRolloutBuffer,
    ... )
    >>> from fragnb.envs import SimpleSpread
    >>> _ = torch.manual_seed(0)
    >>> config = MAPPOConfig(num_envs=2, num_steps=5, update_epochs=1)
    >>> env = SimpleSpread(num_envs=config.num_envs, N=3, seed=0)
    >>> policy = MultiAgentActorCritic(obs_dim=18, num_agents=3, num_actions=5)
    >>> actor = MAPPOActor(policy, num_envs=config.num_envs, seed=0)
    >>> buffer = MultiAgentRolloutBuffer(config.num_envs, config.num_steps, env.obs_shape, config.gamma)
    >>> learner = MAPPOLearner(policy, config, seed=0)
    >>> obs = env.reset()
    >>> for step in range(config.num_steps):
    ...     action, logprob, value = actor.act(obs)
    ...     next_obs, reward, terminated, truncated, info = env.step(action)
    ...     buffer.add(obs, action, logprob, value, reward, terminated | truncated)
    ...     obs = next_obs
    >>> stats = learner.update(buffer.batch(actor.value(obs)))
    >>> sorted(stats), learner.updates
    (['entropy', 'policy_loss', 'value_loss'], 1)
    """

    def __init__(self, policy: MultiAgentActorCritic, config: MAPPOConfig | None = None, seed: int = 0):
        self.policy, self.config = policy, config or MAPPOConfig()
        c = self.config
        self.optimizer = adam(
            [
                {"params": policy.actor_parameters(), "lr": c.actor_lr},
                {"params": policy.critic_parameters(), "lr": c.critic_lr},
            ],
            c.actor_lr,
        )
        self.generator = torch.Generator().manual_seed(seed)
        self.updates = 0

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """Several epochs of minibatch updates on one rollout; returns the last minibatch's losses."""
        c = self.config
        if c.anneal_updates:
            frac = max(0.0, 1.0 - self.updates / c.anneal_updates)
            for group, lr in zip(self.optimizer.param_groups, (c.actor_lr, c.critic_lr)):
                group["lr"] = frac * lr
        dev = device_of(self.policy)
        b = {k: batch[k].flatten(0, 1).to(dev) for k in ("obs", "actions", "logprobs", "advantages", "returns")}
        if c.proximal:
            b = around_proximal(self.policy, b)
        batch_size = len(b["actions"])
        for _ in range(c.update_epochs):
            order = torch.randperm(batch_size, generator=self.generator).to(dev)
            for start, stop in minibatches(batch_size, c.num_minibatches):
                mb = {k: v[order[start:stop]] for k, v in b.items()}
                loss, pg_loss, v_loss, entropy = clipped_loss(self.policy, mb, c)
                self.optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(self.policy.actor_parameters(), c.max_grad_norm)
                nn.utils.clip_grad_norm_(self.policy.critic_parameters(), c.max_grad_norm)
                self.optimizer.step()
        self.updates += 1
        return {"policy_loss": pg_loss.item(), "value_loss": v_loss.item(), "entropy": entropy.item()}
