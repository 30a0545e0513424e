"""The course around the notebooks: how a quiz answer is compared (:func:`same`) with values kept where the
question is about them (:func:`keep`, :func:`kept`), the students' handouts and
their autograder (:mod:`.handouts`), and the rendered copies in ``docs/course/`` (:mod:`.rendered`).

``python -m fragnb.course settle docs/course/*.ipynb`` and ``python -m fragnb.course handouts`` (``make course``
and ``make handouts`` run them).
"""

from __future__ import annotations

from .rendered import WIDGET_PICTURES, picture_widgets, settle_progress_bars

__all__ = [
    "same",
    "keep",
    "kept",
    "predict",
    "compare",
    "predicted",
    "unanswered",
    "settle_progress_bars",
    "picture_widgets",
    "WIDGET_PICTURES",
]

#: What :func:`keep` recorded: name -> the object the notebook's name was bound to when its cell ended.
KEPT: dict[str, object] = {}
#: What :func:`predict` recorded: name -> the answer written before the run (``None``: not written yet).
PREDICTED: dict[str, object] = {}


def same(given, correct, tol: float | None = None) -> bool:
    """Whether a quiz answer is the notebook's own: strings compare without case or surrounding spaces (a
    multiple-choice letter as well as a name), numbers within ``tol`` of the correct one, relative to it, where
    ``tol`` is given (a number written as text counts as the number), anything else with ``==``. ``None`` (not
    answered) is never right.

    Examples
    --------
    >>> same(" B", "b"), same(0.52, 0.5, tol=0.05), same("0.52", 0.5, tol=0.05), same(0.6, 0.5, tol=0.05)
    (True, True, True, False)
    """
    if given is None:
        return False
    if tol is not None and isinstance(correct, (int, float)) and not isinstance(correct, bool):
        try:
            return abs(float(given) - correct) <= tol * abs(correct)
        except (TypeError, ValueError):
            return False
    if isinstance(given, str) and isinstance(correct, str):
        return given.strip().lower() == correct.strip().lower()
    return given == correct


def predict(name: str, answer) -> None:
    """Write down what you expect before running the cell that measures it: :func:`compare` prints it beside
    what the run did, and the quiz's autograder checks it (:func:`predicted`). ``answer`` is ``None`` until the
    student writes one; calling again replaces it.

    Examples
    --------
    >>> predict("weights", "a")
    >>> compare("weights", "a")
    you predicted 'a'; the run gives 'a': right
    """
    PREDICTED[name] = answer
    if answer is None:
        print(f"prediction {name!r}: replace None with your answer before you run the next cells")


def compare(name: str, actual, tol: float | None = None) -> None:
    """Print the prediction written as ``name`` beside ``actual``, what the run gave (:func:`same` compares them)."""
    given = PREDICTED.get(name)
    if given is None:
        print(f"no prediction {name!r} was written; the run gives {actual!r}")
        return
    verdict = "right" if same(given, actual, tol) else "not what happened: the text below says why"
    print(f"you predicted {given!r}; the run gives {actual!r}: {verdict}")


def predicted(name: str):
    """The prediction written as ``name`` (:func:`predict`), ``None`` where none was."""
    return PREDICTED.get(name)


def unanswered() -> list[str]:
    """The predictions still ``None``, for a quiz's public check."""
    return [name for name, answer in PREDICTED.items() if answer is None]


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
