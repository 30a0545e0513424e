"""DQN (replay buffer, target network, optional double DQN and prioritised replay) as fragnb components.

The training loop itself is not here: it is the plain Python a student writes in a notebook cell,
calling these components, for example::

    for global_step in range(total_steps):
        actor.epsilon = linear_schedule(1.0, 0.05, 10_000, global_step)
        action = actor.act(obs)
        next_obs, reward, terminated, truncated, info = env.step(action)
        buffer.add(obs, action, reward, next_obs, terminated)
        obs = next_obs
        if global_step > config.learning_starts:
            stats = learner.update(buffer.sample(config.batch_size))
        if global_step % config.target_every == 0:
            learner.sync_target()

Unlike :class:`fragnb.algos.ppo.RolloutBuffer`, the replay buffer stores transitions
transition-first and samples across all environments, so it is not environment by environment:
fragnb keeps it with the learner (see :class:`ReplayBuffer`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import nn

from ..components import Actor, Buffer, Learner, device_of

__all__ = ["DQNConfig", "QNetwork", "EpsilonGreedyActor", "ReplayBuffer", "DQNLearner", "linear_schedule"]


@dataclass
class DQNConfig:
    """DQN hyperparameters; the defaults solve CartPole-v1 (torch-batched, 16 environments) on a CPU.

    Steps are *vector* steps: one call of ``env.step`` for all ``num_envs`` environments. With one
    update per vector step, seeds 0-4 reach a mean return of 475 over 20 episodes within 11k-19k
    vector steps (176k-300k environment steps; seed 0: 265,600, about 32 s on one CPU thread of the 2-core
    development machine, as ``tests/test_dqn.py::test_dqn_solves_cartpole_seed_0`` printed on 2026-12-05).

    Each field is a keyword argument.

    Examples
    --------
    >>> from fragnb.algos.dqn import DQNConfig, linear_schedule
    >>> config = DQNConfig(prioritized=True)
    >>> config.num_envs * config.learning_starts  # environment steps collected before the first update
    1600
    >>> config.alpha, config.beta
    (0.6, 0.4)
    >>> linear_schedule(config.start_e, config.end_e, config.exploration_steps, 500)  # epsilon halfway
    0.505
    """

    num_envs: int = 16
    """environments stepped together"""
    buffer_size: int = 50_000
    """transitions the replay buffer holds"""
    gamma: float = 0.99
    """discount factor"""
    learning_rate: float = 1e-3
    """Adam learning rate"""
    batch_size: int = 128
    """transitions per gradient step"""
    learning_starts: int = 100
    """vector steps of pure collection before the first update"""
    train_every: int = 1
    """vector steps between gradient steps"""
    target_every: int = 100
    """vector steps between copies of the online network into the target network"""
    start_e: float = 1.0
    """initial exploration rate"""
    end_e: float = 0.01
    """final exploration rate"""
    exploration_steps: int = 1_000
    """vector steps over which epsilon decays linearly from ``start_e`` to ``end_e``"""
    double_dqn: bool = True
    """pick the next action with the online network, value it with the target network"""
    max_grad_norm: float = 10.0
    """gradient clipping norm"""
    hidden: int = 128
    """width of the two hidden layers"""
    prioritized: bool = False
    """proportional prioritised replay"""
    alpha: float = 0.6
    """priority exponent of prioritised replay (0: uniform)"""
    beta: float = 0.4
    """importance-sampling exponent of prioritised replay (1: full correction)"""


def linear_schedule(start: float, end: float, duration: int, t: int) -> float:
    """``start`` at ``t = 0``, linearly to ``end`` at ``t = duration``, ``end`` afterwards.

    Parameters
    ----------
    start, end : float
        Values at ``t = 0`` and from ``t = duration`` on.
    duration : int
        Steps of the linear part (0 or less: ``end`` throughout).
    t : int
        The step.

    Returns
    -------
    float

    Examples
    --------
    >>> from fragnb.algos.dqn import linear_schedule
    >>> linear_schedule(1.0, 0.0, 10, 5), linear_schedule(1.0, 0.0, 10, 50)
    (0.5, 0.0)
    """
    if duration <= 0:
        return end
    return start + min(t / duration, 1.0) * (end - start)


class QNetwork(nn.Module):
    """An MLP from observations to one Q value per action (ReLU, two hidden layers).

    Parameters
    ----------
    obs_dim : int
        Size of an observation.
    num_actions : int
        Discrete actions.
    hidden : int
        Width of the two hidden layers.

    Examples
    --------
    >>> import torch
    >>> from fragnb.algos.dqn import QNetwork
    >>> q = QNetwork(obs_dim=4, num_actions=2)
    >>> q(torch.zeros(5, 4)).shape  # one value per action
    torch.Size([5, 2])
    """

    def __init__(self, obs_dim: int, num_actions: int, hidden: int = 128):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(obs_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, num_actions)
        )

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)


class EpsilonGreedyActor(Actor):
    """Greedy on a Q network shared with the learner, random with probability ``epsilon``.

    Both exploration draws (explore or not, which random action) come from this environment's
    own stream, so a shard of environments acts exactly as those environments act in the full
    batch. The loop sets ``epsilon`` (``actor.epsilon = linear_schedule(...)``).

    Parameters
    ----------
    q : nn.Module
        Maps observations to Q values; the same object the learner trains.
    num_envs, seed
        See :class:`fragnb.components.Actor`.
    epsilon : float
        Initial exploration rate.

    Examples
    --------
    >>> import torch
    >>> from fragnb.algos.dqn import EpsilonGreedyActor, QNetwork
    >>> from fragnb.envs import CartPole
    >>> _ = torch.manual_seed(0)
    >>> env, q = CartPole(num_envs=8, seed=0), QNetwork(obs_dim=4, num_actions=2)
    >>> actor = EpsilonGreedyActor(q, num_envs=8, seed=0)
    >>> obs = env.reset()
    >>> action = actor.act(obs)  # epsilon 1: every action random
    >>> action.shape, action.dtype
    (torch.Size([8]), torch.int64)
    >>> actor.epsilon = 0.0  # greedy
    >>> bool((actor.act(obs) == q(obs).argmax(-1)).all())
    True
    """

    def __init__(self, q: nn.Module, num_envs: int, seed: int = 0, epsilon: float = 1.0):
        super().__init__(num_envs, seed)
        self.q, self.epsilon = q, float(epsilon)

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> torch.Tensor:
        """One int64 action per environment, on the device of ``obs``."""
        if len(obs) != self.num_envs:
            raise ValueError(f"actor serves {self.num_envs} environments but got {len(obs)} observations")
        q_values = self.q(obs.to(device_of(self.q))).to(obs.device)
        # Every environment draws both numbers every step, explored or not, so its stream
        # advances the same way whatever epsilon and the other environments do.
        u = self.streams.uniform(2).to(obs.device)
        random_action = (u[:, 1] * q_values.shape[-1]).to(torch.int64).clamp_(max=q_values.shape[-1] - 1)
        return torch.where(u[:, 0] < self.epsilon, random_action, q_values.argmax(-1))


class ReplayBuffer(Buffer):
    """A fixed-capacity ring of transitions, uniform or proportionally prioritised.

    Transitions are stored transition-first, in the order they were added (one step: every
    environment in order). ``sample`` draws from all of them with the buffer's own generator, so
    it is not environment by environment: ``shardwise`` stays empty, and fragnb never replicates
    this buffer. Under ``coarse`` it is placed with the learner, its ``add`` fed from the actors'
    records, which keeps the insertion order, and thus every sample, what one process gives.

    Prioritised replay (Schaul et al., 2016) samples transition ``i`` with probability
    ``p_i^alpha / sum p^alpha`` (``p_i = |td error| + eps``; new transitions get the largest
    priority so far) and returns importance weights ``(N P(i))^-beta``, normalised by their
    maximum. Sampling is ``O(capacity)`` (no sum tree): fine for the capacities a CPU run uses.

    Parameters
    ----------
    capacity : int
        Transitions held; the oldest are overwritten first.
    obs_shape : tuple of int
        Shape of one observation.
    seed : int
        Seed of the sampling generator.
    prioritized : bool
        Prioritised instead of uniform sampling.
    alpha, beta : float
        Priority and importance-sampling exponents; the loop may anneal ``buffer.beta``.
    eps : float
        Added to ``|td error|`` so that no transition has priority zero.

    Examples
    --------
    Two vector steps of 4 CartPole environments, then a sample:

    >>> import torch
    >>> from fragnb.algos.dqn import ReplayBuffer
    >>> from fragnb.envs import CartPole
    >>> env = CartPole(num_envs=4, seed=0)
    >>> buffer = ReplayBuffer(capacity=100, obs_shape=env.obs_shape, seed=0)
    >>> obs = env.reset()
    >>> for _ in range(2):
    ...     action = torch.ones(4, dtype=torch.int64)
    ...     next_obs, reward, terminated, truncated, info = env.step(action)
    ...     buffer.add(obs, action, reward, next_obs, terminated)
    ...     obs = next_obs
    >>> len(buffer)
    8
    >>> batch = buffer.sample(16)
    >>> sorted(batch), batch["obs"].shape
    (['actions', 'dones', 'next_obs', 'obs', 'rewards'], torch.Size([16, 4]))

    Prioritised, a sample also carries importance weights and the indices to update priorities at:

    >>> buffer = ReplayBuffer(capacity=100, obs_shape=env.obs_shape, prioritized=True)
    >>> buffer.add(obs, action, reward, next_obs, terminated)
    >>> batch = buffer.sample(16)
    >>> sorted(batch)
    ['actions', 'dones', 'indices', 'next_obs', 'obs', 'rewards', 'weights']
    >>> buffer.update_priorities(batch["indices"], torch.full((16,), 2.0))
    >>> buffer.max_priority
    2.000001
    """

    counters = ("cursor", "size", "max_priority")

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        seed: int = 0,
        prioritized: bool = False,
        alpha: float = 0.6,
        beta: float = 0.4,
        eps: float = 1e-6,
    ):
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity, self.cursor, self.size = int(capacity), 0, 0
        self.obs = torch.zeros(capacity, *obs_shape)
        self.next_obs = torch.zeros(capacity, *obs_shape)
        self.actions = torch.zeros(capacity, dtype=torch.int64)
        self.rewards = torch.zeros(capacity)
        self.dones = torch.zeros(capacity)
        self.generator = torch.Generator().manual_seed(seed)
        self.prioritized, self.alpha, self.beta, self.eps = prioritized, alpha, beta, eps
        # Stored already raised to alpha: sampling then needs no power over the whole buffer.
        self.priorities = torch.zeros(capacity, dtype=torch.float64)
        self.max_priority = 1.0
        # Transitions ever added and drawn: their ratio is the samples per insert that Reverb's rate
        # limiter bounds, and that `async`'s samples_per_insert holds a learner sampling ahead to.
        self.inserted, self.sampled = 0, 0

    def __len__(self) -> int:
        return self.size

    def add(self, obs, action, reward, next_obs, done) -> None:
        """Store one step of every environment; ``done`` is whether the step *terminated* its episode.

        Pass ``terminated``, not ``terminated | truncated``: a truncated episode's next state still
        has a value to bootstrap from.
        """
        n = len(obs)
        idx = (self.cursor + torch.arange(n)) % self.capacity
        self.obs[idx] = obs.to(self.obs)
        self.actions[idx] = action.to(self.actions)
        self.rewards[idx] = reward.to(self.rewards)
        self.next_obs[idx] = next_obs.to(self.next_obs)
        self.dones[idx] = done.to(self.dones)
        self.priorities[idx] = self.max_priority**self.alpha
        self.cursor = (self.cursor + n) % self.capacity
        self.size = min(self.size + n, self.capacity)
        self.inserted += n

    def sample(self, batch_size: int) -> dict[str, torch.Tensor]:
        """``batch_size`` transitions drawn with replacement (new tensors).

        Returns a dict with obs, actions, rewards, next_obs, dones; prioritised buffers add
        ``weights`` (importance weights) and ``indices`` (for :meth:`update_priorities`).
        """
        if self.size == 0:
            raise RuntimeError("cannot sample an empty replay buffer")
        if self.prioritized:
            probs = self.priorities[: self.size]
            idx = torch.multinomial(probs, batch_size, replacement=True, generator=self.generator)
            p = probs[idx] / probs.sum()
            weights = (self.size * p) ** -self.beta
            weights = (weights / weights.max()).to(torch.float32)
        else:
            idx = torch.randint(self.size, (batch_size,), generator=self.generator)
        self.sampled += batch_size
        batch = {
            "obs": self.obs[idx],
            "actions": self.actions[idx],
            "rewards": self.rewards[idx],
            "next_obs": self.next_obs[idx],
            "dones": self.dones[idx],
        }
        if self.prioritized:
            batch.update(weights=weights, indices=idx)
        return batch

    def update_priorities(self, indices: torch.Tensor, td_errors: torch.Tensor) -> None:
        """Set the priorities of sampled transitions from their new TD errors."""
        p = td_errors.detach().abs().to(self.priorities) + self.eps
        self.max_priority = max(self.max_priority, float(p.max()))
        self.priorities[indices.to(self.priorities.device)] = p**self.alpha


class DQNLearner(Learner):
    """One-step Q-learning with a target network, Adam and the Huber (smooth L1) TD loss.

    Parameters
    ----------
    q : nn.Module
        The online network (the same object the actor acts with).
    config : DQNConfig
        Hyperparameters (``learning_rate``, ``gamma``, ``double_dqn``, ``max_grad_norm``).

    Examples
    --------
    A few steps of the loop in :mod:`fragnb.algos.dqn`'s description, then one update on a sampled batch:

    >>> import torch
    >>> from fragnb.algos.dqn import DQNConfig, DQNLearner, EpsilonGreedyActor, QNetwork, ReplayBuffer
    >>> from fragnb.envs import CartPole
    >>> _ = torch.manual_seed(0)
    >>> config = DQNConfig(num_envs=4, batch_size=16)
    >>> env = CartPole(num_envs=config.num_envs, seed=0)
    >>> q = QNetwork(obs_dim=4, num_actions=2, hidden=config.hidden)
    >>> actor = EpsilonGreedyActor(q, num_envs=config.num_envs, seed=0)
    >>> buffer = ReplayBuffer(config.buffer_size, env.obs_shape, seed=0)
    >>> learner = DQNLearner(q, config)
    >>> obs = env.reset()
    >>> for _ in range(5):
    ...     action = actor.act(obs)
    ...     next_obs, reward, terminated, truncated, info = env.step(action)
    ...     buffer.add(obs, action, reward, next_obs, terminated)
    ...     obs = next_obs
    >>> stats = learner.update(buffer.sample(config.batch_size))
    >>> sorted(stats), learner.updates
    (['loss', 'q'], 1)
    >>> learner.sync_target()  # the target network catches up (every config.target_every steps in a loop)
    >>> bool(torch.equal(learner.target.net[0].weight, q.net[0].weight))
    True
    """

    def __init__(self, q: nn.Module, config: DQNConfig | None = None):
        self.q, self.config = q, config or DQNConfig()
        self.target = copy.deepcopy(q)
        self.target.requires_grad_(False)
        self.optimizer = torch.optim.Adam(q.parameters(), lr=self.config.learning_rate)
        self.updates = 0

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """One gradient step on a sampled batch.

        Returns ``loss`` and ``q`` (mean Q of the taken actions). If the batch carries importance
        ``weights`` (prioritised replay), the loss is weighted and the result also holds
        ``td_errors``, a tensor to pass to ``buffer.update_priorities(batch["indices"], ...)``.
        """
        c, dev = self.config, device_of(self.q)
        b = {k: v.to(dev) for k, v in batch.items()}
        with torch.no_grad():
            next_q = self.target(b["next_obs"])
            if c.double_dqn:
                # Decoupling selection (online) from evaluation (target) curbs the max's overestimation.
                next_v = next_q.gather(-1, self.q(b["next_obs"]).argmax(-1, keepdim=True)).squeeze(-1)
            else:
                next_v = next_q.max(-1).values
            target = b["rewards"] + c.gamma * (1.0 - b["dones"]) * next_v
        q = self.q(b["obs"]).gather(-1, b["actions"].unsqueeze(-1)).squeeze(-1)
        if "weights" in b:
            loss = (b["weights"] * nn.functional.smooth_l1_loss(q, target, reduction="none")).mean()
        else:
            loss = nn.functional.smooth_l1_loss(q, target)
        self.optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(self.q.parameters(), c.max_grad_norm)
        self.optimizer.step()
        self.updates += 1
        stats = {"loss": loss.item(), "q": q.mean().item()}
        if "weights" in b:
            stats["td_errors"] = (target - q).detach().cpu()
        return stats

    def sync_target(self) -> None:
        """Copy the online network's weights into the target network."""
        self.target.load_state_dict(self.q.state_dict())
