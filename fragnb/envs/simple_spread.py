"""Cooperative navigation (MPE ``simple_spread_v3``) as a batch of torch tensors: N agents, N landmarks."""

from __future__ import annotations

import torch

from ..components import Env

__all__ = ["SimpleSpread"]


class SimpleSpread(Env):
    """PettingZoo/MPE2 ``simple_spread_v3`` for ``num_envs`` environments at once.

    ``N`` agents (discs of radius 0.15) move on a plane with ``N`` landmarks and must cover every
    landmark without bumping into each other. The same world as MPE2's, step for step (tested
    against the ``mpe2`` package, ``tests/test_mappo.py``): positions of agents and landmarks
    uniform in ``[-1, 1]^2`` at reset, zero velocities; an action is a force (5 per unit
    direction), integrated with ``dt = 0.1`` and damping 0.25 after MPE's soft contact forces
    between agents; every episode is truncated after ``max_cycles`` steps and never terminated.

    Rewards, as MPE2 with ``local_ratio``: agent ``i`` gets ``(1 - local_ratio) * g + local_ratio *
    l_i``, where the global part ``g`` is minus the sum over landmarks of the distance to the
    nearest agent, and the local part ``l_i`` is minus the number of other agents it overlaps.

    - ``shared_reward=True`` (default): ``step`` returns the **team reward**, shape ``(num_envs,)``:
      the sum of the agents' rewards (MAPPO's ``share_reward`` on MPE), the same for every agent.
    - ``shared_reward=False``: each agent's own reward, shape ``(num_envs, N)``.

    Either way ``info["episode_returns"]`` lists the team return (summed over agents) of every
    episode that ended, and ``episode_return`` / :attr:`episodes` hold team returns.

    Observation of agent ``i`` (float32, ``obs_dim = 6 N``: 18 for ``N = 3``): own
    velocity (2), own position (2), each landmark's position relative to it (2 N), each other
    agent's position relative to it (2 (N - 1), in agent order), and their communication (2 per
    other agent: always zeros, agents in simple_spread are silent). ``reset`` and ``step`` return
    ``(num_envs, N, obs_dim)``.

    Actions: ``(num_envs, N)`` int64 in ``0..4`` (no-op, left, right, down, up), or with
    ``continuous_actions=True`` ``(num_envs, N, 5)`` floats clipped to ``[0, 1]``, moving by
    ``(a[2] - a[1], a[4] - a[3])``.

    Parameters
    ----------
    num_envs : int
        Environments stepped together. Sharding splits environments, never the agents of one.
    N : int
        Agents, and landmarks.
    seed : int
        Seed of every per-environment reset stream.
    local_ratio : float
        Weight of the local (collision) part of each agent's reward.
    max_cycles : int
        Steps per episode.
    continuous_actions : bool
        MPE's continuous action space instead of 5 discrete moves.
    shared_reward : bool
        Return the team reward (``True``) or each agent's reward.

    Examples
    --------
    >>> import torch
    >>> from fragnb.envs import SimpleSpread
    >>> env = SimpleSpread(num_envs=4, N=3, seed=0)
    >>> env.reset().shape
    torch.Size([4, 3, 18])
    >>> obs, reward, terminated, truncated, info = env.step(torch.zeros(4, 3, dtype=torch.int64))
    >>> reward.shape, bool((reward < 0).all()), terminated.tolist()
    (torch.Size([4]), True, [False, False, False, False])
    """

    per_env = Env.per_env + ("pos", "vel", "landmarks", "elapsed")

    # MPE's world and simple_spread's entities.
    dt, damping, contact_force, contact_margin = 0.1, 0.25, 1e2, 1e-3
    agent_size, sensitivity = 0.15, 5.0

    def __init__(
        self,
        num_envs: int,
        N: int = 3,
        seed: int = 0,
        local_ratio: float = 0.5,
        max_cycles: int = 25,
        continuous_actions: bool = False,
        shared_reward: bool = True,
    ):
        if N < 1:
            raise ValueError(f"N must be at least 1, got {N}")
        if not 0.0 <= local_ratio <= 1.0:
            raise ValueError(f"local_ratio is a proportion in [0, 1], got {local_ratio}")
        super().__init__(num_envs, seed)
        self.N, self.local_ratio, self.max_cycles = int(N), float(local_ratio), int(max_cycles)
        self.continuous_actions, self.shared_reward = bool(continuous_actions), bool(shared_reward)
        self.obs_dim = 2 + 2 + 2 * self.N + 2 * (self.N - 1) + 2 * (self.N - 1)  # 6 N
        self.obs_shape = (self.N, self.obs_dim)
        self.num_actions = 0 if self.continuous_actions else 5
        self.action_shape = (self.N, 5) if self.continuous_actions else (self.N,)
        # Physical state in float64, as MPE's numpy arrays.
        self.pos = torch.zeros(self.num_envs, self.N, 2, dtype=torch.float64)
        self.vel = torch.zeros(self.num_envs, self.N, 2, dtype=torch.float64)
        self.landmarks = torch.zeros(self.num_envs, self.N, 2, dtype=torch.float64)
        self.elapsed = torch.zeros(self.num_envs, dtype=torch.int64)

    @property
    def num_agents(self) -> int:
        return self.N

    # -- dynamics ---------------------------------------------------------------------------
    def _reset(self, mask: torch.Tensor) -> torch.Tensor:
        n = self.N
        u = self.streams.uniform(4 * n, mask).to(self.pos.device) * 2.0 - 1.0  # uniform(-1, 1)
        self.pos[mask] = u[:, : 2 * n].reshape(-1, n, 2)
        self.landmarks[mask] = u[:, 2 * n :].reshape(-1, n, 2)
        self.vel[mask] = 0.0
        self.elapsed.masked_fill_(mask, 0)
        return self._obs(self.pos[mask], self.vel[mask], self.landmarks[mask])

    def _obs(self, pos: torch.Tensor, vel: torch.Tensor, landmarks: torch.Tensor) -> torch.Tensor:
        n = self.N
        rel_landmarks = landmarks.unsqueeze(1) - pos.unsqueeze(2)  # [e, i, k] = landmark k - agent i
        rel_agents = pos.unsqueeze(1) - pos.unsqueeze(2)  # [e, i, j] = agent j - agent i
        others = self._others(pos.device)
        rel_others = rel_agents[:, torch.arange(n, device=pos.device).unsqueeze(1), others]  # j != i, in order
        comm = torch.zeros(len(pos), n, 2 * (n - 1), dtype=pos.dtype, device=pos.device)
        parts = (vel, pos, rel_landmarks.flatten(2), rel_others.flatten(2), comm)
        return torch.cat(parts, -1).to(torch.float32)

    def _others(self, device) -> torch.Tensor:
        """``others[i]``: the indices of every agent but ``i``, in order, shape ``(N, N - 1)``."""
        idx = torch.arange(self.N, device=device)
        return idx.expand(self.N, self.N)[idx.unsqueeze(1) != idx].reshape(self.N, self.N - 1)

    def _forces(self, actions: torch.Tensor) -> torch.Tensor:
        """Each agent's action force, shape ``(num_envs, N, 2)`` in float64."""
        if self.continuous_actions:
            a = actions.reshape(self.num_envs, self.N, 5).clamp(0.0, 1.0)
            u = torch.stack((a[..., 2] - a[..., 1], a[..., 4] - a[..., 3]), -1)  # in the actions' precision, as MPE
            return u.to(torch.float64) * self.sensitivity
        a = actions.reshape(self.num_envs, self.N).long()
        if bool(((a < 0) | (a > 4)).any()):
            raise ValueError(f"simple_spread's discrete actions are 0..4, got {a.min().item()}..{a.max().item()}")
        moves = torch.tensor(
            [[0.0, 0.0], [-1.0, 0.0], [1.0, 0.0], [0.0, -1.0], [0.0, 1.0]], dtype=torch.float64, device=self.pos.device
        )
        return moves[a.to(self.pos.device)] * self.sensitivity

    def _step(self, actions: torch.Tensor):
        n = self.N
        force = self._forces(actions)
        # Soft contact forces between every two agents (landmarks do not collide), added to agent i
        # in the order MPE adds them: other agents j = 0, 1, ..., N - 1.
        delta = self.pos.unsqueeze(2) - self.pos.unsqueeze(1)  # [e, i, j] = agent i - agent j
        dist = delta.square().sum(-1).sqrt()
        k, dist_min = self.contact_margin, 2 * self.agent_size
        penetration = torch.logaddexp(torch.zeros_like(dist), -(dist - dist_min) / k) * k
        contact = self.contact_force * delta / dist.unsqueeze(-1) * penetration.unsqueeze(-1)
        for j in range(n):
            pushed = torch.arange(n, device=self.pos.device) != j  # agent j does not push itself
            force[:, pushed] = force[:, pushed] + contact[:, pushed, j]
        # MPE's integration: position with the old velocity, then damping, then the force (mass 1).
        self.pos = self.pos + self.vel * self.dt
        self.vel = self.vel * (1 - self.damping) + force * self.dt
        rewards = self._agent_rewards()
        self.elapsed += 1
        terminated = torch.zeros(self.num_envs, dtype=torch.bool, device=self.pos.device)
        truncated = self.elapsed >= self.max_cycles
        obs = self._obs(self.pos, self.vel, self.landmarks)
        team = rewards[:, 0]
        for i in range(1, n):  # summed in agent order, as a loop over the agents' rewards would
            team = team + rewards[:, i]
        if not self.shared_reward:
            self._step_rewards = rewards.to(torch.float32)  # step() hands these out instead of the team's
        # The base class adds the reward to the episode return: the team's, in float64.
        return obs, team, terminated, truncated

    def _agent_rewards(self) -> torch.Tensor:
        """Each agent's MPE reward after the step, shape ``(num_envs, N)`` in float64."""
        n = self.N
        to_landmarks = (
            (self.pos.unsqueeze(2) - self.landmarks.unsqueeze(1)).square().sum(-1).sqrt()
        )  # [e, agent, landmark]
        nearest = to_landmarks.min(1).values
        covered = torch.zeros(self.num_envs, dtype=torch.float64, device=self.pos.device)
        for k in range(n):  # summed landmark by landmark, as MPE's loop does
            covered = covered + nearest[:, k]
        delta = self.pos.unsqueeze(2) - self.pos.unsqueeze(1)
        touching = delta.square().sum(-1).sqrt() < 2 * self.agent_size
        touching &= ~torch.eye(n, dtype=torch.bool, device=self.pos.device)
        local = -touching.sum(2).to(torch.float64)
        return -covered.unsqueeze(1) * (1 - self.local_ratio) + local * self.local_ratio

    def step(self, actions: torch.Tensor):
        """Step every environment (see :meth:`fragnb.components.Env.step`); with ``shared_reward=False``
        the reward is per agent, ``(num_envs, N)``, while episode returns stay the team's."""
        obs, reward, terminated, truncated, info = super().step(actions)
        if self.shared_reward:
            return obs, reward.to(torch.float32), terminated, truncated, info
        return obs, self.__dict__.pop("_step_rewards"), terminated, truncated, info

    def __repr__(self) -> str:
        return f"SimpleSpread(num_envs={self.num_envs}, N={self.N})"
