"""Why a run ends before its loop does, said the same way under every policy, and the two-stage Ctrl-C.

A ``single`` run (the cell in the notebook) and every replica's walker end a run for the same three
reasons; :class:`Interrupts` is how a first Ctrl-C (or the explorer's Stop) asks for the end of the
current iteration and a second one aborts, in the notebook's own run and while it watches a cluster.
"""

from __future__ import annotations

import sys
import threading

__all__ = ["own_condition", "interrupted", "condition_held", "learner_ended", "Interrupts"]


def own_condition() -> str:
    return "the loop's own condition (`break` or `while`)"


def interrupted(iteration: int) -> str:
    return f"interrupted: stopped after iteration {iteration}, as asked"


def condition_held(iteration: int) -> str:
    return f"the stop condition held after iteration {iteration}"


def learner_ended() -> str:
    return "the learner's loop ended"


class Interrupts:
    """Ctrl-C during a run: the first sets ``stop`` (the run ends after the current iteration, leaving
    what plain Python leaves then), the second raises ``KeyboardInterrupt`` (the run is aborted)."""

    def __init__(self, stop: threading.Event | None = None):
        self.stop = stop if stop is not None else threading.Event()

    def interrupt(self) -> None:
        if self.stop.is_set():
            raise KeyboardInterrupt
        self.stop.set()
        print("fragnb: stopping after the current iteration (interrupt again to abort)", file=sys.stderr)
