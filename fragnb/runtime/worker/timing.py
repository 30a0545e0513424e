"""Timing: fragment timers and the timeline of what each replica does."""

from __future__ import annotations

import time

__all__ = ["Timer", "note"]


class Timer:
    """Adds the wall-clock time of a ``with`` block to ``seconds[name]`` (what ``timer(name)`` returns),
    and the block to ``intervals`` (a timeline) when given."""

    __slots__ = ("seconds", "name", "start", "intervals")

    def __init__(self, seconds: dict[str, float], name: str, intervals: list | None = None):
        self.seconds, self.name, self.intervals = seconds, name, intervals

    def __enter__(self):
        self.start = time.perf_counter()

    def __exit__(self, *exc):
        end = time.perf_counter()
        self.seconds[self.name] = self.seconds.get(self.name, 0.0) + end - self.start
        if self.intervals is not None:
            note(self.intervals, self.name, "busy", self.start, end)


def note(intervals: list, label: str, kind: str, start: float, end: float) -> None:
    """Add ``(label, kind, start, end)`` to a timeline, extending the last interval instead when it
    is the same activity and ended less than a millisecond before (a rollout is one bar, not 128)."""
    if intervals:
        last = intervals[-1]
        if last[0] == label and last[1] == kind and start - last[3] < 1e-3:
            intervals[-1] = (label, kind, last[2], end)
            return
    intervals.append((label, kind, start, end))
