"""What an entry point accepts: each parameter's type and range, checked before anything runs.

Each entry point (``run``, ``place``, ``predict``, ``profile``, ``sweep``, ...) declares its parameters
once, next to itself, as a mapping of name to :class:`Accepts`, and calls :func:`check` first: a value
of the wrong type or out of range is refused there with an :class:`~fragnb.errors.ArgumentError` that
names the entry point, the argument and what it accepts, instead of a ``TypeError`` from deep inside
the loop after iteration 0 changed the notebook.

>>> from fragnb.arguments import check, whole, boolean
>>> check("run", {"restarts": whole(0), "check": boolean}, restarts=2, check=True)
>>> check("run", {"restarts": whole(0)}, restarts=-1)
Traceback (most recent call last):
    ...
fragnb.errors.ArgumentError: run(): restarts=-1 is not accepted: give a whole number, 0 or more
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import ArgumentError

__all__ = ["Accepts", "check", "boolean", "whole", "number", "function", "event", "either", "instance", "optional"]


@dataclass(frozen=True)
class Accepts:
    """What one parameter takes: ``test`` says whether a value is accepted; ``says`` is what the
    error asks for instead (``"a whole number, 0 or more"``)."""

    test: Callable[[Any], bool]
    says: str


def check(entry: str, accepts: Mapping[str, Accepts], **values) -> None:
    """Refuse the first of ``values`` its :class:`Accepts` in ``accepts`` does not take; ``entry`` names
    the function in the error (``"run"``). A name ``accepts`` does not hold is a mistake of fragnb's own."""
    for name, value in values.items():
        rule = accepts[name]
        if not rule.test(value):
            shown = repr(value)
            shown = shown if len(shown) <= 60 else f"{shown[:57]}..."
            raise ArgumentError(f"{entry}(): {name}={shown} is not accepted: give {rule.says}")


def _integral(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


#: True or False (not 0, 1 or a string: ``check="no"`` would read as True).
boolean = Accepts(lambda v: isinstance(v, bool), "True or False")


def whole(least: int = 0) -> Accepts:
    """A whole number, ``least`` or more."""
    more = {0: "0 or more", 1: "1 or more"}.get(least, f"{least} or more")
    return Accepts(lambda v: _integral(v) and v >= least, f"a whole number, {more}")


def number(above: float | None = None, least: float | None = None, most: float | None = None) -> Accepts:
    """A finite real number, greater than ``above``, at least ``least`` and at most ``most`` (each where given)."""
    bounds = [
        f"greater than {above:g}" if above is not None else "",
        f"at least {least:g}" if least is not None else "",
    ]
    bounds.append(f"at most {most:g}" if most is not None else "")
    said = ", ".join(b for b in bounds if b)

    def test(v) -> bool:
        if not isinstance(v, numbers.Real) or isinstance(v, bool) or not math.isfinite(v):
            return False
        return (above is None or v > above) and (least is None or v >= least) and (most is None or v <= most)

    return Accepts(test, "a number" + (f" {said}" if said else ""))


def function(what: str) -> Accepts:
    """Something to call, as ``what`` describes it."""
    return Accepts(callable, what)


#: A ``threading.Event`` (or anything with ``is_set()`` and ``set()``), which another thread sets to stop.
event = Accepts(
    lambda v: callable(getattr(v, "is_set", None)) and callable(getattr(v, "set", None)),
    "a threading.Event that another thread sets to stop the run",
)


def instance(kinds: type | tuple[type, ...], says: str) -> Accepts:
    """An instance of ``kinds``."""
    return Accepts(lambda v: isinstance(v, kinds), says)


def either(*rules: Accepts) -> Accepts:
    """A value any of ``rules`` takes."""
    return Accepts(lambda v: any(r.test(v) for r in rules), " or ".join(r.says for r in rules))


def optional(rule: Accepts) -> Accepts:
    """``rule``'s values, or None."""
    return Accepts(lambda v: v is None or rule.test(v), f"{rule.says}, or None")
