"""CartPole as a batch of torch tensors, with Gymnasium CartPole-v1's dynamics and limits."""

from __future__ import annotations

import math
import time

import torch

from ..components import Env

__all__ = ["CartPole"]


class CartPole(Env):
    """Gymnasium ``CartPole-v1`` for ``num_envs`` environments at once.

    Same physics (Euler integration, in float64), same termination (pole beyond 12 degrees or cart
    beyond 2.4), truncation after ``max_episode_steps`` and a reward of 1 per step, including the
    terminating one. Observations are float32, as Gymnasium returns them.

    ``step_cost``: seconds of CPU work each environment adds to every step (0 by default), as a costly
    simulator would: a knob for measuring how a policy's speed depends on the environment's cost (the
    physics and results are the same whatever it is).

    Parameters
    ----------
    num_envs : int
        Environments stepped together.
    seed : int
        Seed of every per-environment reset stream.
    max_episode_steps : int
        Steps after which an episode is truncated (500, as ``CartPole-v1``).
    step_cost : float
        Seconds of CPU work each environment adds to every step.

    Examples
    --------
    >>> import torch
    >>> from fragnb.envs import CartPole
    >>> env = CartPole(num_envs=4, seed=0)
    >>> env.reset().shape
    torch.Size([4, 4])
    >>> obs, reward, terminated, truncated, info = env.step(torch.ones(4, dtype=torch.int64))
    >>> reward.tolist()
    [1.0, 1.0, 1.0, 1.0]

    Episodes that end are reset within ``step``; their returns come back in ``info``:

    >>> for _ in range(60):
    ...     obs, reward, terminated, truncated, info = env.step(torch.ones(4, dtype=torch.int64))
    ...     if info["episode_returns"]:
    ...         break
    >>> info["episode_returns"][0] == env.episodes[0].length, env.episodes[0].length < 60
    (True, True)
    """

    per_env = Env.per_env + ("state", "elapsed")
    obs_shape = (4,)
    num_actions = 2

    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    total_mass = masspole + masscart
    polemass_length = masspole * length
    theta_threshold_radians = 12 * 2 * math.pi / 360
    x_threshold = 2.4

    def __init__(self, num_envs: int, seed: int = 0, max_episode_steps: int = 500, step_cost: float = 0.0):
        super().__init__(num_envs, seed)
        self.max_episode_steps = max_episode_steps
        self.step_cost = step_cost
        self.state = torch.zeros(self.num_envs, 4, dtype=torch.float64)
        self.elapsed = torch.zeros(self.num_envs, dtype=torch.int64)

    def _reset(self, mask: torch.Tensor) -> torch.Tensor:
        start = self.streams.uniform(4, mask).to(self.state.device) * 0.1 - 0.05
        self.state[mask] = start
        self.elapsed.masked_fill_(mask, 0)
        return start.to(torch.float32)

    def _step(self, actions: torch.Tensor):
        _busy(self.step_cost * self.num_envs)
        x, x_dot, theta, theta_dot = self.state.unbind(1)
        force = torch.where(actions.reshape(-1) == 1, self.force_mag, -self.force_mag).to(torch.float64)
        costheta, sintheta = torch.cos(theta), torch.sin(theta)
        temp = (force + self.polemass_length * theta_dot.square() * sintheta) / self.total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * costheta.square() / self.total_mass)
        )
        xacc = temp - self.polemass_length * thetaacc * costheta / self.total_mass
        # Euler step of all four coordinates at once (the same products and sums as one by one).
        self.state = self.state + self.tau * torch.stack((x_dot, xacc, theta_dot, thetaacc), 1)
        x, theta = self.state[:, 0], self.state[:, 2]
        terminated = (x.abs() > self.x_threshold) | (theta.abs() > self.theta_threshold_radians)
        self.elapsed += 1
        truncated = self.elapsed >= self.max_episode_steps  # as TimeLimit: may coincide with terminated
        reward = torch.ones(self.num_envs, dtype=torch.float32, device=self.state.device)
        return self.state.to(torch.float32), reward, terminated, truncated


def _busy(seconds: float) -> None:
    """Spend ``seconds`` of this thread's CPU time (a simulator's work holds a core, unlike a sleep, and
    takes longer on a busy machine)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass
