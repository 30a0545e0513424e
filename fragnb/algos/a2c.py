"""A2C (synchronous advantage actor-critic) as a fragnb learner.

A2C shares everything but the update with :mod:`fragnb.algos.ppo`: the network
(:class:`~fragnb.algos.ppo.ActorCritic`), the actor (:class:`~fragnb.algos.ppo.PPOActor`) and the
buffer (:class:`~fragnb.algos.ppo.RolloutBuffer`). With ``gae_lambda=1.0`` the buffer's advantages
are n-step returns bootstrapped with the value of the last observation, minus the values: the
A2C advantage. The loop a student writes is therefore PPO's::

    action, logprob, value = actor.act(obs)
    next_obs, reward, terminated, truncated, info = env.step(action)
    buffer.add(obs, action, logprob, value, reward, terminated | truncated)
    ...
    batch = buffer.batch(actor.value(obs))
    stats = learner.update(batch)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..components import Learner
from .ppo import ActorCritic

__all__ = ["A2CConfig", "A2CLearner"]


@dataclass
class A2CConfig:
    """A2C hyperparameters; the defaults solve CartPole-v1 (torch-batched, 16 environments) on a CPU.

    Seeds 0-2 reach a mean return of 475 over 20 episodes within 100k-170k environment steps
    (seed 0: 164k, about 7 s on one CPU thread) and 200 within 95k.

    Each field is a keyword argument.

    Examples
    --------
    >>> from fragnb.algos.a2c import A2CConfig
    >>> config = A2CConfig()
    >>> config.num_envs * config.num_steps, config.gae_lambda  # one update per 128 steps; n-step returns
    (128, 1.0)
    >>> A2CConfig(optimizer="adam", normalize_advantages=True).optimizer
    'adam'
    """

    # Rollout
    num_envs: int = 16
    """environments stepped together"""
    num_steps: int = 8
    """steps per environment in one rollout (the n of the n-step returns)"""
    gamma: float = 0.99
    """discount factor"""
    gae_lambda: float = 1.0
    """1.0: plain n-step returns, as A2C; below 1, generalised advantage estimation"""
    # Update
    optimizer: str = "rmsprop"
    """``"rmsprop"`` (as the A2C paper and Stable-Baselines3) or ``"adam"``"""
    learning_rate: float = 1e-3
    """optimiser learning rate"""
    ent_coef: float = 0.01
    """entropy bonus coefficient"""
    vf_coef: float = 0.5
    """value loss coefficient"""
    max_grad_norm: float = 0.5
    """gradient clipping norm"""
    normalize_advantages: bool = False
    """standardise the advantages of each rollout"""
    hidden: int = 64
    """width of the two hidden layers"""


class A2CLearner(Learner):
    """One gradient step of the A2C loss per rollout on an :class:`~fragnb.algos.ppo.ActorCritic`.

    Parameters
    ----------
    policy : ActorCritic
        The network to train (the same object the actor samples with).
    config : A2CConfig
        Hyperparameters.

    Raises
    ------
    ValueError
        If ``config.optimizer`` is neither ``"rmsprop"`` nor ``"adam"``.

    Examples
    --------
    PPO's actor and buffer with ``gae_lambda=1.0``, one rollout of 8 steps in 4 environments, one update:

    >>> import torch
    >>> from fragnb.algos.a2c import A2CConfig, A2CLearner
    >>> from fragnb.algos.ppo import ActorCritic, PPOActor, RolloutBuffer
    >>> from fragnb.envs import CartPole
    >>> _ = torch.manual_seed(0)
    >>> config = A2CConfig(num_envs=4)
    >>> env = CartPole(num_envs=config.num_envs, seed=0)
    >>> policy = ActorCritic(obs_dim=4, num_actions=2)
    >>> actor = PPOActor(policy, num_envs=config.num_envs, seed=0)
    >>> buffer = RolloutBuffer(config.num_envs, config.num_steps, env.obs_shape, config.gamma, config.gae_lambda)
    >>> learner = A2CLearner(policy, config)
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

    def __init__(self, policy: ActorCritic, config: A2CConfig | None = None):
        self.policy, self.config = policy, config or A2CConfig()
        c = self.config
        if c.optimizer == "rmsprop":
            # RMSprop with the A2C paper's smoothing and an eps large enough for early, tiny gradients.
            self.optimizer = torch.optim.RMSprop(policy.parameters(), lr=c.learning_rate, alpha=0.99, eps=1e-5)
        elif c.optimizer == "adam":
            self.optimizer = torch.optim.Adam(policy.parameters(), lr=c.learning_rate, eps=1e-5)
        else:
            raise ValueError(f"optimizer must be 'rmsprop' or 'adam', got {c.optimizer!r}")
        self.updates = 0

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """One step on a rollout from :meth:`RolloutBuffer.batch`; returns its losses and entropy."""
        c = self.config
        dev = next(self.policy.parameters()).device
        b = {k: batch[k].flatten(0, 1).to(dev) for k in ("obs", "actions", "advantages", "returns")}
        logp, entropy = self.policy.log_prob_and_entropy(b["obs"], b["actions"])
        entropy = entropy.mean()
        adv = b["advantages"]
        if c.normalize_advantages:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        policy_loss = -(logp * adv).mean()
        # Regress on the returns recorded at collection time: the targets are fixed for this step.
        value_loss = 0.5 * (self.policy.value(b["obs"]) - b["returns"]).square().mean()
        loss = policy_loss + c.vf_coef * value_loss - c.ent_coef * entropy
        self.optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(self.policy.parameters(), c.max_grad_norm)
        self.optimizer.step()
        self.updates += 1
        return {"policy_loss": policy_loss.item(), "value_loss": value_loss.item(), "entropy": entropy.item()}
