"""PPO (clipped objective, GAE, minibatch epochs) as fragnb components, discrete or continuous.

The training loop itself is not here: it is the plain Python a user writes in a notebook cell
(see ``notebooks/01_first_fragment_graph.ipynb``), calling these components::

    action, logprob, value = actor.act(obs)
    next_obs, reward, terminated, truncated, info = env.step(action)
    buffer.add(obs, action, logprob, value, reward, terminated | truncated)
    ...
    batch = buffer.batch(actor.value(obs))
    stats = learner.update(batch)

Buffers store experience environment-first, shape ``(num_envs, num_steps, ...)``, so that
gathering the buffers of several actors is a concatenation along the first axis.

Discrete actions: :class:`ActorCritic` + :class:`PPOActor`. Continuous actions (e.g.
:class:`fragnb.envs.Pendulum`): :class:`GaussianActorCritic` + :class:`GaussianPPOActor`, a
``RolloutBuffer(..., action_shape=env.action_shape)`` and :meth:`PPOConfig.pendulum`. The same
:class:`PPOLearner` trains both: it asks the policy for ``log_prob_and_entropy(obs, actions)``.
The rollout buffer and GAE, which A2C and MAPPO share, are :mod:`fragnb.algos.rollout`'s, re-exported here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ..components import Actor, Learner, device_of
from .rollout import RolloutBuffer, gae, minibatches  # noqa: F401  gae: still fragnb.algos.ppo.gae, as before the split

__all__ = [
    "PPOConfig",
    "ActorCritic",
    "PPOActor",
    "GaussianActorCritic",
    "GaussianPPOActor",
    "RolloutBuffer",
    "PPOLearner",
    "PENDULUM_STEPS",
    "SMALL_LOOP",
    "small_setup",
]


@dataclass
class PPOConfig:
    """PPO hyperparameters; the defaults solve CartPole-v1 within 150k environment steps.

    They are tuned for time to solve on a CPU, which is what a student waits for: notebook 01's loop
    reaches a mean return of 475 over 20 episodes in tens of thousands of environment steps and about a
    second with one torch thread on a 2-core machine (notebook 01's rendered sweep prints its seeds' steps;
    ``benchmarks/ppo_cartpole.py``'s, with their median time, are on docs/start/first-cell.md). 32 environments
    make a vector step cheap per environment step; a short horizon (``gamma=0.98``, as in RL Zoo's
    CartPole settings) with a high learning rate annealed over the 150k-step budget learns fast and
    then settles, and three passes over each batch, not four, learn as much per step for less time
    (four passes at 4e-3: median 1.62 s).

    Each field is a keyword argument; :meth:`pendulum` gives the settings for Pendulum.

    Examples
    --------
    >>> from fragnb.algos.ppo import PPOConfig
    >>> config = PPOConfig()
    >>> config.num_envs * config.num_steps  # environment steps per iteration
    1024
    >>> small = PPOConfig(num_envs=4, num_steps=8, num_minibatches=2)
    >>> small.num_envs * small.num_steps // small.num_minibatches  # samples per minibatch
    16
    """

    # Rollout
    num_envs: int = 32
    """environments stepped together"""
    num_steps: int = 32
    """steps per environment in one rollout"""
    gamma: float = 0.98
    """discount factor"""
    gae_lambda: float = 0.85
    """lambda of generalised advantage estimation"""
    # Update
    learning_rate: float = 5e-3
    """Adam learning rate (the start of the annealing schedule)"""
    update_epochs: int = 3
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
    anneal_updates: int = 146
    """anneal the learning rate linearly to zero over this many updates (0: keep it constant);
    146 updates of 32 x 32 steps are notebook 01's 150k-step budget"""
    hidden: int = 64
    """width of the two hidden layers"""
    proximal: bool = False
    """clip the surrogate around the weights at the start of each update (the *proximal* policy) and
    weight each sample by the proximal over the behaviour policy's probability (decoupled PPO, Hilton et al. 2022). For trajectories an older policy produced (``async``, ``srl``): the usual clip is
    centred on that older policy, which the weights have already left, so the samples the last update
    already moved the right way get no gradient and only the others pull (Gaussian PPO on Pendulum
    with the actor one version behind: -608 after 100k steps, -229 proximal, -181 with fresh data).
    On fresh data it changes nothing but rounding, for one more forward pass per update"""
    vtrace: bool = False
    """recompute advantages and value targets with V-trace (IMPALA) under the weights being trained:
    corrects for trajectories an older policy produced (``async``, ``srl``); off-policy importance
    weights are clipped at 1, traces are also scaled by ``gae_lambda``"""

    @classmethod
    def pendulum(cls, **overrides) -> PPOConfig:
        """Gaussian PPO on :class:`fragnb.envs.Pendulum` (Pendulum-v1), ``overrides`` applied on top.

        The mean return of the last 20 episodes (random policy: about -1200) passes -300 within
        ``PENDULUM_STEPS`` = 150k environment steps (seeds 0 and 1: about 80k steps, 10-20 s on
        a 2-core CPU). Swinging up needs a short horizon (``gamma=0.9``, as in RL Zoo's Pendulum
        settings), and a rollout of 200 steps holds whole episodes.

        Examples
        --------
        >>> from fragnb.algos.ppo import PPOConfig
        >>> PPOConfig.pendulum().gamma, PPOConfig.pendulum(num_envs=4).num_envs
        (0.9, 4)
        """
        return cls(**{**PENDULUM_PRESET, **overrides})


#: What :meth:`PPOConfig.pendulum` changes from the defaults (16 envs x 200 steps, 16 minibatches of 200).
PENDULUM_PRESET = dict(
    num_envs=16,
    num_steps=200,
    gamma=0.9,
    gae_lambda=0.95,
    learning_rate=1e-3,
    update_epochs=10,
    num_minibatches=16,
    anneal_updates=0,
)
#: The environment-step budget within which :meth:`PPOConfig.pendulum` reaches a mean return of -300.
PENDULUM_STEPS = 150_000


def layer(n_in: int, n_out: int, std: float = np.sqrt(2)) -> nn.Linear:
    layer = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, 0.0)
    return layer


class ActorCritic(nn.Module):
    """Separate tanh MLPs for the policy logits and the state value (CleanRL's ``Agent``).

    Parameters
    ----------
    obs_dim : int
        Size of an observation.
    num_actions : int
        Discrete actions.
    hidden : int
        Width of the two hidden layers of each MLP.

    Examples
    --------
    >>> import torch
    >>> from fragnb.algos.ppo import ActorCritic
    >>> _ = torch.manual_seed(0)
    >>> policy = ActorCritic(obs_dim=4, num_actions=2)
    >>> obs = torch.zeros(5, 4)
    >>> policy.logits(obs).shape, policy.value(obs).shape
    (torch.Size([5, 2]), torch.Size([5]))
    >>> logprob, entropy = policy.log_prob_and_entropy(obs, torch.zeros(5, dtype=torch.int64))
    >>> logprob.shape, round(entropy[0].item(), 3)  # the last layer starts small: nearly uniform, ln 2
    (torch.Size([5]), 0.693)
    """

    def __init__(self, obs_dim: int, num_actions: int, hidden: int = 64):
        super().__init__()
        self.critic = nn.Sequential(
            layer(obs_dim, hidden), nn.Tanh(), layer(hidden, hidden), nn.Tanh(), layer(hidden, 1, std=1.0)
        )
        self.actor = nn.Sequential(
            layer(obs_dim, hidden), nn.Tanh(), layer(hidden, hidden), nn.Tanh(), layer(hidden, num_actions, std=0.01)
        )

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    def logits(self, obs: torch.Tensor) -> torch.Tensor:
        return self.actor(obs)

    def log_prob_and_entropy(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probability of the int64 ``actions`` in states ``obs``, and the entropy of each state's
        action distribution, from one forward pass (one graph through the logits: the gradients do
        not depend on whether the entropy is used)."""
        logp = torch.log_softmax(self.logits(obs), dim=-1)
        return logp.gather(-1, actions.unsqueeze(-1)).squeeze(-1), -(logp.exp() * logp).sum(-1)

    def log_prob(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return self.log_prob_and_entropy(obs, actions)[0]

    def entropy(self, obs: torch.Tensor) -> torch.Tensor:
        logp = torch.log_softmax(self.logits(obs), dim=-1)
        return -(logp.exp() * logp).sum(-1)


_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


class GaussianActorCritic(nn.Module):
    """A diagonal Gaussian policy and a separate state-value MLP, for continuous actions (CleanRL's
    continuous ``Agent``).

    The mean is a tanh MLP of the observation; the standard deviation ``exp(log_std)`` is a learned
    parameter that does not depend on the state. Log-densities are written out rather than taken
    from ``torch.distributions``, so the actor and the learner compute exactly the same numbers.

    Parameters
    ----------
    obs_dim, action_dim : int
        Sizes of an observation and an action.
    hidden : int
        Width of the two hidden layers of each MLP.
    log_std : float
        Initial log standard deviation of every action dimension.

    Examples
    --------
    >>> import torch
    >>> from fragnb.algos.ppo import GaussianActorCritic
    >>> policy = GaussianActorCritic(obs_dim=3, action_dim=1)
    >>> obs, actions = torch.zeros(5, 3), torch.zeros(5, 1)
    >>> policy.log_prob(obs, actions).shape, policy.value(obs).shape
    (torch.Size([5]), torch.Size([5]))
    """

    def __init__(self, obs_dim: int, action_dim: int, hidden: int = 64, log_std: float = 0.0):
        super().__init__()
        self.critic = nn.Sequential(
            layer(obs_dim, hidden), nn.Tanh(), layer(hidden, hidden), nn.Tanh(), layer(hidden, 1, std=1.0)
        )
        self.actor_mean = nn.Sequential(
            layer(obs_dim, hidden), nn.Tanh(), layer(hidden, hidden), nn.Tanh(), layer(hidden, action_dim, std=0.01)
        )
        self.log_std = nn.Parameter(torch.full((action_dim,), float(log_std)))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    def mean(self, obs: torch.Tensor) -> torch.Tensor:
        return self.actor_mean(obs)

    def log_prob(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Log-density of ``actions`` (shape ``(..., action_dim)``), summed over action dimensions."""
        z = (actions - self.mean(obs)) * torch.exp(-self.log_std)
        return (-0.5 * z.square() - self.log_std - _LOG_SQRT_2PI).sum(-1)

    def entropy(self, obs: torch.Tensor) -> torch.Tensor:
        """Entropy in each state (the same everywhere: the standard deviation ignores the state)."""
        return (0.5 + _LOG_SQRT_2PI + self.log_std).sum().expand(obs.shape[:-1])

    def log_prob_and_entropy(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.log_prob(obs, actions), self.entropy(obs)


class _PolicyActor(Actor):
    """An actor sampling from an actor-critic ``policy``. It computes on the network's device and
    answers on its observations' (a replica may put the network on a GPU, the environments stay on
    the CPU)."""

    def __init__(self, policy: nn.Module, num_envs: int, seed: int = 0):
        super().__init__(num_envs, seed)
        self.policy = policy

    @torch.no_grad()
    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """State values, for bootstrapping the end of a rollout."""
        return self.policy.value(obs.to(device_of(self.policy))).to(obs.device)


class PPOActor(_PolicyActor):
    """Samples actions from an :class:`ActorCritic`; each environment draws from its own stream.

    Parameters
    ----------
    policy : ActorCritic
        The network; share it with the learner so that updates reach the actor.
    num_envs, seed
        See :class:`fragnb.components.Actor`.

    Examples
    --------
    >>> import torch
    >>> from fragnb.algos.ppo import ActorCritic, PPOActor
    >>> from fragnb.envs import CartPole
    >>> _ = torch.manual_seed(0)
    >>> env = CartPole(num_envs=4, seed=0)
    >>> actor = PPOActor(ActorCritic(obs_dim=4, num_actions=2), num_envs=4, seed=0)
    >>> obs = env.reset()
    >>> action, logprob, value = actor.act(obs)
    >>> action.dtype, action.shape, logprob.shape, value.shape
    (torch.int64, torch.Size([4]), torch.Size([4]), torch.Size([4]))
    >>> next_obs, reward, terminated, truncated, info = env.step(action)
    >>> actor.value(next_obs).shape  # what bootstraps the end of a rollout
    torch.Size([4])
    """

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample one action per environment; return ``(action, logprob, value)``."""
        if len(obs) != self.num_envs:
            raise ValueError(f"actor serves {self.num_envs} environments but got {len(obs)} observations")
        x = obs.to(device_of(self.policy))  # the network may sit on a GPU, the environments on the CPU
        logp = torch.log_softmax(self.policy.logits(x), dim=-1)
        # Inverse-CDF sampling with this environment's own uniform draw (the streams count on the CPU).
        u = self.streams.uniform(1).to(logp)
        action = (logp.exp().cumsum(-1) < u).sum(-1).clamp_(max=logp.shape[-1] - 1)
        out = action, logp.gather(-1, action.unsqueeze(-1)).squeeze(-1), self.policy.value(x)
        return tuple(t.to(obs.device) for t in out)  # answered where the observations came from


class GaussianPPOActor(_PolicyActor):
    """Samples continuous actions from a :class:`GaussianActorCritic`; each environment draws from its own stream.

    The Gaussian noise comes from two uniforms per action dimension of the environment's stream
    (Box-Muller), so a shard samples what its environments sample in the full batch. Actions are
    returned **unclipped**: the buffer and the learner need the action the density was evaluated
    at. Clip only what the environment receives: :class:`fragnb.envs.Pendulum` clips the torque
    itself; for other environments give ``low``/``high`` and step with ``env.step(actor.clip(action))``.

    Parameters
    ----------
    policy : GaussianActorCritic
        The network; share it with the learner so that updates reach the actor.
    num_envs, seed
        See :class:`fragnb.components.Actor`.
    low, high : float or tensor, optional
        Action bounds for :meth:`clip` (``None``: no bound).

    Examples
    --------
    >>> import torch
    >>> from fragnb.algos.ppo import GaussianActorCritic, GaussianPPOActor
    >>> actor = GaussianPPOActor(GaussianActorCritic(obs_dim=3, action_dim=1), num_envs=4, seed=0)
    >>> action, logprob, value = actor.act(torch.zeros(4, 3))
    >>> action.shape, logprob.shape, value.shape
    (torch.Size([4, 1]), torch.Size([4]), torch.Size([4]))
    """

    def __init__(self, policy: GaussianActorCritic, num_envs: int, seed: int = 0, low=None, high=None):
        super().__init__(policy, num_envs, seed)
        self.low, self.high = low, high

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample one action per environment; return ``(action, logprob, value)``, action unclipped."""
        if len(obs) != self.num_envs:
            raise ValueError(f"actor serves {self.num_envs} environments but got {len(obs)} observations")
        x = obs.to(device_of(self.policy))
        mean = self.policy.mean(x)
        u = self.streams.uniform(2 * mean.shape[-1])
        # Box-Muller; 1 - u is in (0, 1], so the logarithm is finite.
        noise = torch.sqrt(-2.0 * torch.log1p(-u[:, 0::2])) * torch.cos(2.0 * math.pi * u[:, 1::2])
        action = mean + self.policy.log_std.exp() * noise.to(mean)
        out = action, self.policy.log_prob(x, action), self.policy.value(x)
        return tuple(t.to(obs.device) for t in out)

    def clip(self, action: torch.Tensor) -> torch.Tensor:
        """``action`` clipped to the bounds given at construction (a new tensor)."""
        return action.clamp(self.low, self.high) if self.low is not None or self.high is not None else action.clone()


def clipped_loss(policy: nn.Module, mb: dict[str, torch.Tensor], c) -> tuple[torch.Tensor, ...]:
    """PPO's loss on one minibatch: the clipped surrogate (advantages normalised per minibatch), the
    value loss and the entropy bonus, weighted by ``c``'s coefficients. Returns the loss and its parts."""
    newlogprob, entropy = policy.log_prob_and_entropy(mb["obs"], mb["actions"])
    ratio = (newlogprob - mb["logprobs"]).exp()
    adv = mb["advantages"]
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    surrogate = torch.max(-adv * ratio, -adv * ratio.clamp(1 - c.clip_coef, 1 + c.clip_coef))
    if "weights" in mb:  # PPOConfig.proximal: the ratio is to the proximal policy, reweighted to the behaviour's
        surrogate = surrogate * mb["weights"]
    pg_loss = surrogate.mean()
    v_loss = 0.5 * (policy.value(mb["obs"]) - mb["returns"]).square().mean()
    entropy = entropy.mean()
    loss = pg_loss + c.vf_coef * v_loss
    if c.ent_coef:  # with a zero coefficient the entropy term would still cost a backward pass
        loss = loss - c.ent_coef * entropy
    return loss, pg_loss, v_loss, entropy


@torch.no_grad()
def around_proximal(policy: nn.Module, b: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``PPOConfig.proximal``: a flat batch whose ``logprobs`` are its actions' under the weights now (the
    proximal policy), which the loss clips around, and whose ``weights`` are the proximal over the
    behaviour policy's probabilities, which it scales each sample's surrogate by."""
    proximal = policy.log_prob_and_entropy(b["obs"], b["actions"])[0]
    return {**b, "logprobs": proximal, "weights": (proximal - b["logprobs"]).exp()}


def adam(params: list[nn.Parameter], lr: float) -> torch.optim.Adam:
    """Adam, fused where torch can: one kernel per step instead of a dozen small ops per parameter,
    about a fifth of a CPU minibatch step for networks this small. Fused CPU kernels arrived in
    torch 2.4; older versions refuse ``fused=True`` at construction."""
    try:
        return torch.optim.Adam(params, lr=lr, eps=1e-5, fused=True)
    except RuntimeError:
        return torch.optim.Adam(params, lr=lr, eps=1e-5)


class PPOLearner(Learner):
    """Clipped-objective PPO updates of an :class:`ActorCritic` or a :class:`GaussianActorCritic`.

    Parameters
    ----------
    policy : ActorCritic or GaussianActorCritic
        The network to train (the same object the actor samples with): any module with
        ``log_prob_and_entropy(obs, actions)`` and ``value(obs)``.
    config : PPOConfig
        Hyperparameters.
    seed : int
        Seed of the minibatch shuffling.

    Examples
    --------
    Notebook 01's loop, one iteration of 8 steps in 4 environments, then one update:

    >>> import torch
    >>> from fragnb.algos.ppo import ActorCritic, PPOActor, PPOConfig, PPOLearner, RolloutBuffer
    >>> from fragnb.envs import CartPole
    >>> _ = torch.manual_seed(0)
    >>> config = PPOConfig(num_envs=4, num_steps=8, num_minibatches=2)
    >>> env = CartPole(num_envs=config.num_envs, seed=0)
    >>> policy = ActorCritic(obs_dim=4, num_actions=2)
    >>> actor = PPOActor(policy, num_envs=config.num_envs, seed=0)
    >>> buffer = RolloutBuffer(config.num_envs, config.num_steps, env.obs_shape, config.gamma, config.gae_lambda)
    >>> learner = PPOLearner(policy, config, seed=0)
    >>> obs = env.reset()
    >>> for step in range(config.num_steps):
    ...     action, logprob, value = actor.act(obs)
    ...     next_obs, reward, terminated, truncated, info = env.step(action)
    ...     buffer.add(obs, action, logprob, value, reward, terminated | truncated)
    ...     obs = next_obs
    >>> batch = buffer.batch(actor.value(obs))
    >>> stats = learner.update(batch)
    >>> sorted(stats), learner.updates
    (['entropy', 'policy_loss', 'value_loss'], 1)
    """

    def __init__(self, policy: ActorCritic, config: PPOConfig | None = None, seed: int = 0):
        self.policy, self.config = policy, config or PPOConfig()
        self.optimizer = adam(list(policy.parameters()), self.config.learning_rate)
        self.generator = torch.Generator().manual_seed(seed)
        self.updates = 0

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """Several epochs of minibatch updates on one rollout; returns the last minibatch's losses."""
        c = self.config
        if c.anneal_updates:
            frac = max(0.0, 1.0 - self.updates / c.anneal_updates)
            self.optimizer.param_groups[0]["lr"] = frac * c.learning_rate
        if c.vtrace:
            batch = {**batch, **self.vtrace(batch, weighted=not c.proximal)}
        # Only what the losses read: every key is one more gather per pass.
        b = {k: batch[k].flatten(0, 1) for k in ("obs", "actions", "logprobs", "advantages", "returns")}
        if c.proximal:
            b = around_proximal(self.policy, b)
        batch_size = len(b["actions"])
        params = self.optimizer.param_groups[0]["params"]  # policy.parameters() walks the modules each call
        for _ in range(c.update_epochs):
            order = torch.randperm(batch_size, generator=self.generator)
            shuffled = {k: v[order] for k, v in b.items()}  # one gather per pass; minibatches are views
            for start, stop in minibatches(batch_size, c.num_minibatches):
                mb = {k: v[start:stop] for k, v in shuffled.items()}
                loss, pg_loss, v_loss, entropy = clipped_loss(self.policy, mb, c)
                self.optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(params, c.max_grad_norm)
                self.optimizer.step()
        self.updates += 1
        return {"policy_loss": pg_loss.item(), "value_loss": v_loss.item(), "entropy": entropy.item()}

    @torch.no_grad()
    def vtrace(self, batch: dict[str, torch.Tensor], weighted: bool = True) -> dict[str, torch.Tensor]:
        """V-trace advantages and value targets (Espeholt et al. 2018) of a batch of ``(num_envs,
        num_steps)`` rollouts under the current weights. The bootstrap after the last step is the
        behaviour policy's ``last_value``: the batch does not carry the last observation.
        ``weighted``: the advantages carry IMPALA's clipped importance weights; without, they are for
        a loss that weighs each sample itself (``PPOConfig.proximal``), which would otherwise count
        the behaviour policy's lag twice."""
        c = self.config
        num_envs, num_steps = batch["rewards"].shape
        flat = batch["obs"].flatten(0, 1)
        logprobs = self.policy.log_prob(flat, batch["actions"].flatten(0, 1)).view(num_envs, num_steps)
        values = self.policy.value(flat).view(num_envs, num_steps)
        rho = (logprobs - batch["logprobs"]).exp().clamp(max=1.0)
        nonterminal = 1.0 - batch["dones"]
        last = batch["last_value"].view(num_envs, 1).to(values.device)
        deltas = rho * (batch["rewards"] + c.gamma * torch.cat([values[:, 1:], last], 1) * nonterminal - values)
        correction = torch.zeros_like(values)
        acc = torch.zeros(num_envs, device=values.device)
        for t in reversed(range(num_steps)):
            acc = deltas[:, t] + c.gamma * c.gae_lambda * rho[:, t] * nonterminal[:, t] * acc
            correction[:, t] = acc
        targets = values + correction
        advantages = batch["rewards"] + c.gamma * torch.cat([targets[:, 1:], last], 1) * nonterminal - values
        return {"advantages": rho * advantages if weighted else advantages, "returns": targets}


#: Notebook 01's training loop at a size that runs in a fraction of a second (2 iterations of 8 steps): the
#: cell the reference's examples capture, over the components :func:`small_setup` builds.
SMALL_LOOP = """
obs = env.reset()
for it in range(2):
    for step in range(8):
        action, logprob, value = actor.act(obs)
        next_obs, reward, terminated, truncated, info = env.step(action)
        buffer.add(obs, action, logprob, value, reward, terminated | truncated)
        obs = next_obs
    last_value = actor.value(obs)
    batch = buffer.batch(last_value)
    stats = learner.update(batch)
"""


def small_setup(seed: int = 0) -> dict:
    """Notebook 01's components, small (4 CartPole environments, 8 steps a rollout, one epoch of one
    minibatch), built from ``seed`` as its setup cell builds them: the namespace :data:`SMALL_LOOP` runs in.

    Examples
    --------
    >>> import fragnb
    >>> from fragnb.algos.ppo import SMALL_LOOP, small_setup
    >>> ns = small_setup(seed=0)
    >>> sorted(k for k in ns if not k.startswith("_"))
    ['actor', 'buffer', 'config', 'env', 'learner', 'policy']
    >>> result = fragnb.run(fragnb.capture(SMALL_LOOP, ns, name="ppo"), progress=False, plot=False)
    >>> result.env_steps, ns["learner"].updates
    (64, 2)
    """
    from ..envs import CartPole

    torch.manual_seed(seed)
    config = PPOConfig(num_envs=4, num_steps=8, update_epochs=1, num_minibatches=1)
    env = CartPole(num_envs=4, seed=seed)
    policy = ActorCritic(obs_dim=4, num_actions=2)
    actor, learner = PPOActor(policy, num_envs=4, seed=seed), PPOLearner(policy, config, seed=seed)
    buffer = RolloutBuffer(4, 8, env.obs_shape, config.gamma, config.gae_lambda)
    return {"config": config, "env": env, "policy": policy, "actor": actor, "learner": learner, "buffer": buffer}
