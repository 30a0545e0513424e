"""A rollout of on-policy experience and its advantages: :class:`RolloutBuffer` and :func:`gae`.

What PPO, A2C (``gae_lambda=1.0``: discounted returns minus values) and MAPPO's buffer share, apart
from any one algorithm's networks and update (:mod:`fragnb.algos.ppo`, which re-exports both). The
buffer stores experience environment-first, shape ``(num_envs, num_steps, ...)``, so that gathering
the buffers of several actors is a concatenation along the first axis, and GAE runs per environment:
each actor can hold a shard of the buffer.
"""

from __future__ import annotations

import torch

from ..components import Buffer

__all__ = ["RolloutBuffer", "gae"]


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
    action_shape : tuple of int
        Shape of one action: ``()`` stores discrete (int64) actions, anything else float32
        actions of that shape (pass the environment's ``action_shape``).
    """

    per_env = ("obs", "actions", "logprobs", "values", "rewards", "dones")
    shardwise = ("add", "batch")  # GAE runs per environment: actors can each hold a shard

    def __init__(
        self,
        num_envs: int,
        num_steps: int,
        obs_shape: tuple[int, ...],
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
        action_shape: tuple[int, ...] = (),
    ):
        self.num_envs, self.num_steps = num_envs, num_steps
        self.gamma, self.gae_lambda = gamma, gae_lambda
        self.obs = torch.zeros(num_envs, num_steps, *obs_shape)
        action_dtype = torch.float32 if tuple(action_shape) else torch.int64
        self.actions = torch.zeros(num_envs, num_steps, *action_shape, dtype=action_dtype)
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
        advantages = gae(self.rewards, self.values, self.dones, last_value, self.gamma, self.gae_lambda)
        self.cursor = 0
        return {
            "rewards": self.rewards.clone(),  # with dones and last_value: what V-trace needs (PPOConfig.vtrace)
            "dones": self.dones.clone(),
            "last_value": last_value.to(self.rewards.device).clone(),
            "obs": self.obs.clone(),
            "actions": self.actions.clone(),
            "logprobs": self.logprobs.clone(),
            "values": self.values.clone(),
            "advantages": advantages,
            "returns": advantages + self.values,
        }


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    dones: torch.Tensor,
    last_value: torch.Tensor,
    gamma: float,
    gae_lambda: float,
) -> torch.Tensor:
    """Generalised advantage estimates of a rollout of ``(num_envs, num_steps, ...)`` rewards and values;
    ``dones`` is ``(num_envs, num_steps)``: further axes (a multi-agent rollout's agents) share their
    environment's end."""
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(values[:, 0])
    next_value = last_value.to(rewards.device)
    for t in reversed(range(rewards.shape[1])):
        nonterminal = (1.0 - dones[:, t]).reshape(-1, *[1] * (values.dim() - 2))
        delta = rewards[:, t] + gamma * next_value * nonterminal - values[:, t]
        running = delta + gamma * gae_lambda * nonterminal * running
        advantages[:, t] = running
        next_value = values[:, t]
    return advantages
