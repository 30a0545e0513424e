"""Ledger: a run's episodes and env steps, counted from where the run began.

Both ways of running the cell's own loop count alike: a ``single`` run in the notebook
(:class:`fragnb.runtime.local.InNotebook`) and a replica on a worker or a safety-net thread
(:class:`fragnb.runtime.worker.replica.ReplicaState`). fragnb's :class:`~fragnb.components.Env` components
keep their own episodes and steps, so the ledger only remembers where each stood when the run began
(and which episodes it has reported); a plain (Gymnasium) vector environment keeps neither, so the
instrumented cell tells the ledger each time it steps one (``stepped(n)``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...components import Env, Episode

__all__ = ["Ledger"]


@dataclass
class Ledger:
    """The episodes a run has reported and the env steps it has taken, per env component by name.

    Parameters
    ----------
    seen : dict[str, int]
        Episodes of each env component already reported (or finished before the run began).
    steps0 : dict[str, int]
        Env steps each env component had taken when the run began.
    scale : int
        Replicas stepping a batch as large as this one (a replica's count; 1 in the notebook): a
        reported episode ends at the env steps of all of them, the whole batch plain Python steps.
    plain_steps : int
        Env steps of plain vector environments since the run began (:meth:`stepped` counts them).
    """

    seen: dict[str, int] = field(default_factory=dict)
    steps0: dict[str, int] = field(default_factory=dict)
    scale: int = 1
    plain_steps: int = 0
    plain_vectors: int = 0  # steps of plain vector environments (each of plain_steps' batches) since the run began

    @classmethod
    def start(cls, envs: dict[str, Env], scale: int = 1) -> Ledger:
        """A ledger counting from now: the episodes ``envs`` hold are not reported, their steps not counted."""
        seen = {name: len(env.episodes) for name, env in envs.items()}
        return cls(seen, {name: env.env_steps for name, env in envs.items()}, scale)

    def stepped(self, n: int) -> None:
        """A plain vector environment took ``n`` env steps (the instrumented cell says so after its ``step``)."""
        self.plain_steps += n
        self.plain_vectors += 1

    def vector_steps(self, envs: dict[str, Env]) -> int:
        """Vector steps taken since the run began: each of ``envs``' and each plain one's ``step`` counts one,
        whatever the batch (a replica's shard steps as often as plain Python's whole batch)."""
        return (
            sum((env.env_steps - self.steps0[name]) // max(env.num_envs, 1) for name, env in envs.items())
            + self.plain_vectors
        )

    def episodes(self, envs: dict[str, Env]) -> list[tuple[Episode, int]]:
        """The episodes ``envs`` finished since the last call, each with the env steps of the whole
        batch (``scale`` replicas' environments) since the run began when it ended."""
        out = []
        for name, env in envs.items():
            # In vector steps: an episode knows the batch's vector step it ended at, not its env steps.
            # (With a scale of 1 this is ep.step * num_envs - steps0: env_steps is vector steps x num_envs.)
            batch, start = env.num_envs * self.scale, self.steps0[name] // env.num_envs
            out += [(ep, (ep.step - start) * batch) for ep in env.episodes[self.seen[name] :]]
            self.seen[name] = len(env.episodes)
        return out

    def env_steps(self, envs: dict[str, Env]) -> int:
        """Env steps taken since the run began: ``envs``' (this batch's, not ``scale``'s) and plain ones."""
        return sum(env.env_steps - self.steps0[name] for name, env in envs.items()) + self.plain_steps

    def get_state(self) -> dict:
        """Its counts, for a checkpoint: a run resumed from it goes on counting where it stopped. (Not
        its scale: that is the resumed replica's own.)"""
        return {
            "seen": dict(self.seen),
            "steps0": dict(self.steps0),
            "plain_steps": self.plain_steps,
            "plain_vectors": self.plain_vectors,
        }

    def set_state(self, state: dict) -> None:
        """Take a checkpoint's :meth:`get_state` as its counts."""
        self.seen, self.steps0, self.plain_steps = dict(state["seen"]), dict(state["steps0"]), state["plain_steps"]
        self.plain_vectors = state.get("plain_vectors", 0)
