"""The course around the notebooks: how a quiz answer is compared (:func:`same`), the students' handouts and
their autograder (:mod:`.handouts`), and the rendered copies in ``docs/course/`` (:mod:`.rendered`).

``python -m fragnb.course settle docs/course/*.ipynb`` and ``python -m fragnb.course handouts`` (``make course``
and ``make handouts`` run them).
"""

from __future__ import annotations

from .rendered import WIDGET_PICTURES, picture_widgets, settle_progress_bars

__all__ = ["same", "settle_progress_bars", "picture_widgets", "WIDGET_PICTURES"]


def same(given, correct) -> bool:
    """Whether a quiz answer is the notebook's own: strings compare without case or surrounding spaces,
    anything else with ``==``. ``None`` (not answered) is never right."""
    if given is None:
        return False
    if isinstance(given, str) and isinstance(correct, str):
        return given.strip().lower() == correct.strip().lower()
    return given == correct
