"""Pendulum as a batch of torch tensors, with Gymnasium Pendulum-v1's dynamics, reward and limits."""

from __future__ import annotations

import math

import torch

from ..components import Env

__all__ = ["Pendulum"]


class Pendulum(Env):
    """Gymnasium ``Pendulum-v1`` for ``num_envs`` environments at once: swing a pendulum up with a torque.

    Same dynamics (semi-implicit Euler with ``dt = 0.05``, speed clipped to 8, state in float64),
    same reward ``-(angle_normalize(theta)^2 + 0.1 theta_dot^2 + 0.001 u^2)`` with the torque ``u``
    clipped to [-2, 2] (so an actor may hand over unclipped actions), never terminated, truncated
    after ``max_episode_steps``. Observations ``(cos theta, sin theta, theta_dot)`` are float32, as
    Gymnasium returns them; actions have shape ``(num_envs, 1)`` (``(num_envs,)`` is accepted too).

    Parameters
    ----------
    num_envs : int
        Environments stepped together.
    seed : int
        Seed of every per-environment reset stream.
    max_episode_steps : int
        Steps after which an episode is truncated (200, as ``Pendulum-v1``).

    Examples
    --------
    >>> import torch
    >>> from fragnb.envs import Pendulum
    >>> env = Pendulum(num_envs=4, seed=0)
    >>> env.reset().shape
    torch.Size([4, 3])
    >>> obs, reward, terminated, truncated, info = env.step(torch.zeros(4, 1))
    >>> bool((reward <= 0).all()), terminated.tolist()
    (True, [False, False, False, False])
    """

    per_env = Env.per_env + ("state", "elapsed")
    obs_shape = (3,)
    num_actions = 0  # continuous: see action_shape
    action_shape = (1,)

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
        u = self.streams.uniform(2, mask).to(self.state.device)
        self.state[mask] = torch.stack((u[:, 0] * 2 * math.pi - math.pi, u[:, 1] * 2 - 1), 1)
        self.elapsed[mask] = 0
        return self._obs(self.state[mask])

    def _step(self, actions: torch.Tensor):
        theta, theta_dot = self.state.unbind(1)
        # Gymnasium keeps the float32 torque in float32 for its own terms (u^2, 3u / (m l^2)) and
        # adds them to the float64 state; doing the same keeps the two step for step within 1e-6.
        u = actions.reshape(self.num_envs).to(torch.float32).clamp(-self.max_torque, self.max_torque)
        normalized = (theta + math.pi) % (2 * math.pi) - math.pi
        cost = normalized.square() + 0.1 * theta_dot.square() + 0.001 * u.square()
        new_dot = theta_dot + (3 * self.g / (2 * self.l) * torch.sin(theta) + 3.0 / (self.m * self.l**2) * u) * self.dt
        new_dot = new_dot.clamp(-self.max_speed, self.max_speed)
        self.state = torch.stack((theta + new_dot * self.dt, new_dot), 1)
        self.elapsed += 1
        terminated = torch.zeros(self.num_envs, dtype=torch.bool, device=self.state.device)
        truncated = self.elapsed >= self.max_episode_steps
        return self._obs(self.state), (-cost).to(torch.float32), terminated, truncated
