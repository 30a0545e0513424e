"""The iteration loop's rulings, as a pure object: after each iteration one replica (``Script.leader``)
decides whether the run ends (the user asked: Ctrl-C, the explorer's Stop; the stop condition held) and
whether every replica keeps a checkpoint now.

Reports in, a decision out: the walker only carries every replica's news to the leader and the ruling back
(:meth:`~fragnb.runtime.worker.walker.Walker.decide`), so the rulings are tested as sequences of
iterations without a cluster (``tests/test_engine.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .report import ORDERS
from .stops import condition_held, interrupted

if TYPE_CHECKING:
    from ...plan.script import Script

__all__ = ["Ruling", "checkpoint_due"]


def checkpoint_due(
    iterations: int, kept: tuple[int, float, float], every: int, share: float | None, now: float
) -> bool:
    """Whether replicas keep a checkpoint after ``iterations``: ``every`` iterations have passed since
    the last one (``kept``: its iteration, when it ended, what it cost, in seconds), and, with a
    ``share``, enough time since then that keeping one costs at most that share of it."""
    last, when, cost = kept
    if not every or iterations - last < every:
        return False
    return share is None or (now - when) * share >= cost


@dataclass
class Ruling:
    """What the leader rules after each iteration, given what happened.

    ``until``: the run's stop condition (``fragnb.run(until=...)``), asked with every replica's episodes so
    far in the mode's ``order``; ``every`` and ``share``: when checkpoints are kept
    (:func:`checkpoint_due`); ``fetched``: whether a notebook fetches them (a replay keeps none).
    ``everyone`` and ``kept`` are what the rulings remember: every episode so far, in order, and the last
    checkpoint (its iteration, when it ended, what it cost)."""

    until: Callable[..., bool] | None
    order: Callable[[Any], Any]
    every: int
    share: float | None
    fetched: bool = True
    everyone: list[list] = field(default_factory=list)
    kept: tuple[int, float, float] = (0, 0.0, 0.0)

    @classmethod
    def of(cls, script: Script, fetched: bool) -> Ruling:
        order = ORDERS[script.mode.episode_order()]
        return cls(script.until, order, script.checkpoint_every, script.checkpoint_share, fetched)

    def starting(self, iterations: int, now: float) -> None:
        """The iteration loop starts (again, after a resume) at ``iterations``: the checkpoints count from here."""
        self.kept = (iterations, now, 0.0)

    def checkpointed(self, iterations: int, now: float, cost: float) -> None:
        """A checkpoint was kept after ``iterations``; keeping it took ``cost`` seconds."""
        self.kept = (iterations, now, cost)

    def due(self, iterations: int, now: float) -> bool:
        """Whether replicas keep a checkpoint after ``iterations`` (none without a notebook to fetch it)."""
        return self.fetched and checkpoint_due(iterations, self.kept, self.every, self.share, now)

    def ahead(self, leader: bool, asked: bool, iterations: int, now: float) -> tuple[bool, bool] | None:
        """(stop, keep a checkpoint) for the iteration that ends as ``iterations`` does, ruled before its last
        collective round carries it to every replica; ``leader``: whether this replica rules. None where the
        ruling needs every replica's episodes first (a stop condition)."""
        if self.until is not None:
            return None
        if not leader:
            return (False, False)
        return asked, not asked and self.due(iterations, now)

    def judge(self, asked: bool, reports: list[tuple[list, int]], iterations: int) -> str:
        """Why the run ends after ``iterations`` ("" where it goes on), given every replica's news (its new
        episodes, its env steps so far) and whether the user ``asked`` it to stop."""
        if asked:
            return interrupted(iterations)
        if self.until is not None:
            self.everyone += [e for new, _ in reports for e in new]
            self.everyone.sort(key=self.order)
            if self.until([(e[2], e[3]) for e in self.everyone], iterations, sum(s for _, s in reports)):
                return condition_held(iterations)
        return ""

    def rule(self, asked: bool, reports: list[tuple[list, int]], iterations: int, now: float) -> tuple[str, bool]:
        """(why the run ends, "" where it goes on; whether every replica keeps a checkpoint now)."""
        why = self.judge(asked, reports, iterations)
        return why, not why and self.due(iterations, now)
