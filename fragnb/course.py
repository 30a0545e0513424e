"""The course's quizzes: answers checked against what the notebook's own objects say, not against a key."""

from __future__ import annotations

__all__ = ["quiz"]


def quiz(answers: dict, truth: dict) -> int:
    """Print, question by question, whether each answer in ``answers`` equals ``truth``'s (which a
    notebook computes from its runs and placements); ``None`` is a question not answered yet.
    Strings compare without case or surrounding spaces. Returns how many answers are right."""
    right = 0
    for q, correct in truth.items():
        given = answers.get(q)
        if given is None:
            print(f"{q}. not answered yet")
        elif _same(given, correct):
            right += 1
            print(f"{q}. right")
        else:
            print(f"{q}. not {given!r}: look again at the section above")
    print(f"{right} of {len(truth)} right")
    return right


def _same(given, correct) -> bool:
    if isinstance(given, str) and isinstance(correct, str):
        return given.strip().lower() == correct.strip().lower()
    return given == correct
