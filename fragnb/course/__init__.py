"""The course around the notebooks: how a quiz answer is compared (:func:`same`) with values kept where the
question is about them (:func:`keep`, :func:`kept`), the students' handouts and
their autograder (:mod:`.handouts`), and the rendered copies in ``docs/course/`` (:mod:`.rendered`).

``python -m fragnb.course settle docs/course/*.ipynb`` and ``python -m fragnb.course handouts`` (``make course``
and ``make handouts`` run them).
"""

from __future__ import annotations

from .rendered import WIDGET_PICTURES, picture_widgets, settle_progress_bars

__all__ = ["same", "keep", "kept", "settle_progress_bars", "picture_widgets", "WIDGET_PICTURES"]

#: What :func:`keep` recorded: name -> the object the notebook's name was bound to when its cell ended.
KEPT: dict[str, object] = {}


def same(given, correct) -> bool:
    """Whether a quiz answer is the notebook's own: strings compare without case or surrounding spaces,
    anything else with ``==``. ``None`` (not answered) is never right."""
    if given is None:
        return False
    if isinstance(given, str) and isinstance(correct, str):
        return given.strip().lower() == correct.strip().lower()
    return given == correct


def keep(*names: str) -> None:
    """Record what ``names`` are bound to when the current cell ends, for a quiz's hidden tests (:func:`kept`).

    A hidden test runs after the whole notebook, exercises included: a student who reran a cell above the quiz
    with other settings has rebound ``result`` or ``it``, and a test reading the live name would mark the right
    answer about the lesson's run wrong. The cell a question is about calls ``keep`` (names only: nothing of the
    answer shows), and its tests read the objects as that cell left them. Outside IPython, the names are read
    from the caller's globals at once."""
    import sys

    try:
        from IPython import get_ipython

        shell = get_ipython()
    except ImportError:
        shell = None
    if shell is None:
        scope = sys._getframe(1).f_globals
        KEPT.update({name: scope[name] for name in names})
        return

    def record(result=None):
        KEPT.update({name: shell.user_ns[name] for name in names if name in shell.user_ns})
        shell.events.unregister("post_run_cell", record)

    shell.events.register("post_run_cell", record)


def kept(name: str):
    """What ``name`` was bound to when the cell that kept it ended (:func:`keep`)."""
    if name not in KEPT:
        raise LookupError(
            f"no value of `{name}` was kept: run the notebook from the top (the cell that keeps it comes before the quiz)"
        )
    return KEPT[name]
