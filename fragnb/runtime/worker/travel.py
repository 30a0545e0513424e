"""What keeps a value from travelling to another worker: the innermost part of it that does not pickle.

"cannot pickle '_thread.lock' object" names neither the variable nor where the lock hides in it;
:func:`blocker` walks the value (containers, attributes, a function's globals and closure) down to
the part that fails on its own, so an error can say ``learner.log.lock`` or
``GaussianActor.act.__globals__['math']``.
"""

from __future__ import annotations

import contextlib
import io
import pickle
import types
from collections.abc import Callable
from typing import Any

import cloudpickle

from ...errors import FragmentError
from ...plan.keys import RecordKey
from ...shards import faithful_copies
from ...sinks import kind_of
from .report import Finals

__all__ = ["pickled", "bound_to", "blocker", "described", "unsendable", "refuse_unreturnable"]

_DEPTH = 8


class _Pickler(cloudpickle.Pickler):
    """cloudpickle, without its search of every loaded module for a function whose ``__module__`` is
    None: one defined by ``exec`` in a namespace without ``__name__`` (a script's ``exec(setup, ns)``,
    where a notebook has ``__main__``) belongs to no module, so it travels by value, as cloudpickle
    decides after the search. With torch and Dask loaded that search reads ~200 modules' attributes per
    function: 0.4 s per payload of CleanRL's PPO setup, paid by the safety net and the run each."""

    def _function_reduce(self, obj):
        if getattr(obj, "__module__", "") is None:
            return self._dynamic_function_reduce(obj)
        return super()._function_reduce(obj)


def pickled(value: Any) -> bytes:
    """``value`` as cloudpickle pickles it (see :class:`_Pickler`)."""
    faithful_copies()
    out = io.BytesIO()
    _Pickler(out, protocol=pickle.DEFAULT_PROTOCOL).dump(value)
    return out.getvalue()


def bound_to(fn: types.FunctionType, ns: dict) -> types.FunctionType:
    """``fn`` with ``ns`` as its globals: a notebook function that travelled, or was copied, reading the
    namespace its copy runs in (cloudpickle gives one a dict of its own; a dry run's copies, the notebook's)."""
    bound = types.FunctionType(fn.__code__, ns, fn.__name__, fn.__defaults__, fn.__closure__)
    bound.__kwdefaults__, bound.__qualname__, bound.__module__ = fn.__kwdefaults__, fn.__qualname__, fn.__module__
    bound.__dict__.update(fn.__dict__)
    return bound


def blocker(value: Any, dumps: Callable[[Any], Any], path: str) -> tuple[str, Any, Exception] | None:
    """(path, object, error) of the innermost part of ``value`` that ``dumps`` refuses, or ``None``
    if ``value`` serialises."""
    try:
        dumps(value)
        return None
    except Exception as e:
        error = e
    return _innermost(value, dumps, path, error, 0, set())


def described(found: tuple[str, Any, Exception]) -> str:
    """```path``` (a TYPE: ERROR), for a message; a logger or writer held inside another object, with the way out."""
    path, obj, error = found
    if kind := kind_of(obj):
        return (
            f"`{path}` (a {type(obj).__qualname__}: a {kind} logger held inside another object; fragnb makes a "
            f"logger's calls from the notebook when the cell holds it in a variable of its own: `writer = {path}` "
            "in a setup cell, and `writer.add_scalar(...)` in the cell)"
        )
    return f"`{path}` (a {type(obj).__qualname__}: {type(error).__name__}: {error})"


def _innermost(value, dumps, path, error, depth, seen) -> tuple[str, Any, Exception]:
    if depth < _DEPTH and id(value) not in seen and not (depth and kind_of(value)):  # a sink is the blocker itself
        seen.add(id(value))
        for sub_path, sub in _parts(value, path):
            try:
                dumps(sub)
            except Exception as e:
                return _innermost(sub, dumps, sub_path, e, depth + 1, seen)
    return path, value, error


def _parts(value, path):
    if isinstance(value, dict):
        return [(f"{path}[{k!r}]", v) for k, v in value.items()]
    if isinstance(value, (list, tuple, set, frozenset)):
        return [(f"{path}[{i}]", v) for i, v in enumerate(value)]
    if isinstance(value, types.MethodType):
        return [(f"{path}.__self__", value.__self__), (f"{path}.__func__", value.__func__)]
    if isinstance(value, types.FunctionType):
        named = [
            (f"{path}.__globals__[{n!r}]", value.__globals__[n])
            for n in value.__code__.co_names
            if n in value.__globals__
        ]
        cells = [(f"{path}.{n}", c.cell_contents) for n, c in zip(value.__code__.co_freevars, value.__closure__ or ())]
        return named + cells
    if isinstance(value, type):
        return [(f"{value.__qualname__}.{n}", v) for n, v in vars(value).items() if isinstance(v, types.FunctionType)]
    state = getattr(value, "__dict__", None)
    if isinstance(state, dict):
        return [(f"{path}.{k}", v) for k, v in state.items()]
    return []


def unsendable(
    out: dict, dumps: Callable[[Any], Any], origin: dict[str, str], sender: str, receiver: str
) -> FragmentError:
    """The error for a segment's values (``out``: key -> value) that do not pickle: the variable, the
    line that assigns it and the part of it that blocks."""
    # a split loop's records are per-step dicts of the variables a later group replays
    named = [
        (v, x)
        for key, value in out.items()
        for step in (value if isinstance(key, RecordKey) else [{key: value}])
        for v, x in step.items()
    ]
    for var, value in named:
        found = blocker(value, dumps, var)
        if found:
            return FragmentError.at(
                f"`{var}` cannot travel from group {sender!r} to {receiver!r}: {described(found)}. Values that flow between "
                "roles must pickle: keep locks, open files, generators, sockets and modules out of them (send the "
                "numbers or tensors the other side reads), or run under 'single'",
                origin.get(var, ""),
            )
    return FragmentError(f"the values group {sender!r} sends to {receiver!r} do not pickle together ({sorted(out)})")


def refuse_unreturnable(finals: dict[str, Finals], origin: dict[str, str]) -> None:
    """What replicas leave (``finals``, by replica) comes back to the notebook pickled, as a Dask
    task's result: the safety net's replicas, threads, refuse before any worker starts what would
    fail there, and a worker (with no safety net) names the variable rather than Dask's "Could not
    serialize object of type lock"."""
    for name, final in sorted(finals.items()):
        for var, value in final.variables.items():
            if found := blocker(value, pickled, var):
                raise FragmentError.at(
                    f"`{var}` cannot come back from {name} to the notebook: {described(found)}. What the cell leaves "
                    "in its variables must pickle under a distributed policy: keep locks, open files, generators and "
                    "sockets out of them, or run under 'single'",
                    origin.get(var, ""),
                )


@contextlib.contextmanager
def classes_kept(ns: dict):
    """Keep the methods of the classes the notebook ``ns`` defined as they are while this process
    unpickles what replicas hold (a safety net's threads, the values a run sends back): unpickling in
    the process that pickled them hands back the notebook's own class (cloudpickle tracks it) and sets
    on it the methods it carried, whose globals are a copy, not the notebook. Left so, the notebook's
    ``Agent.get_action_and_value`` would read another ``streams`` than the notebook's, and a next run
    would not find that it draws from it."""
    kept = {
        cls: {k: v for k, v in vars(cls).items() if isinstance(v, types.FunctionType)}
        for v in list(ns.values())
        for cls in (v.__mro__ if isinstance(v, type) else type(v).__mro__)
        if any(getattr(f, "__globals__", None) is ns for f in vars(cls).values())
    }
    try:
        yield
    finally:
        for cls, methods in kept.items():
            for name, fn in methods.items():
                if vars(cls).get(name) is not fn:
                    setattr(cls, name, fn)
