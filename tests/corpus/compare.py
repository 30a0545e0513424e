"""Deep comparison of what a plain run and a fragnb run leave in a namespace.

:func:`assert_same` compares two values recursively and raises an ``AssertionError`` naming the
path of the first difference (e.g. ``log['loss'][3]``). :func:`compare_namespaces` applies it to
two whole namespaces.
"""

from __future__ import annotations

import ast
import collections
import dataclasses
import math
import types
import warnings
from typing import Any

import numpy as np
import torch

from fragnb.components import Component, Episode
from fragnb.streams import EnvStreams

__all__ = ["assert_same", "compare_namespaces", "cell_names", "run_like_plain"]

ATOL = RTOL = 1e-4


#: Gymnasium's RecordEpisodeStatistics keeps wall-clock times (and ``info["episode"]["t"]``): never equal twice.
_WALL_CLOCK = {"time_queue", "episode_start_time"}


def _same_class(a: type, b: type) -> bool:
    """Classes a setup cell defines are built once per namespace: the same class by name and module."""
    return (a.__qualname__, a.__module__) == (b.__qualname__, b.__module__)


def _fail(path: str, message: str) -> None:
    raise AssertionError(f"{path or '<value>'}: {message}")


def assert_same(plain: Any, other: Any, path: str = "", _seen: set | None = None) -> None:
    """Assert that ``other`` equals ``plain`` (tensors and floats within 1e-4), naming the path on failure."""
    seen = set() if _seen is None else _seen
    if plain is None or other is None:
        if plain is not other:
            _fail(path, f"{plain!r} != {other!r}")
        return
    if type(plain) is not type(other) and not _same_class(type(plain), type(other)):
        _fail(path, f"type {type(plain).__name__} != {type(other).__name__} ({_short(plain)} vs {_short(other)})")

    if isinstance(plain, torch.Tensor):
        if plain.shape != other.shape or plain.dtype != other.dtype:
            _fail(path, f"tensor {tuple(plain.shape)} {plain.dtype} != {tuple(other.shape)} {other.dtype}")
        try:
            torch.testing.assert_close(other.detach().cpu(), plain.detach().cpu(), atol=ATOL, rtol=RTOL)
        except AssertionError as e:
            _fail(path, str(e).splitlines()[0] + " " + " ".join(str(e).splitlines()[1:4]))
        return
    if isinstance(plain, np.ndarray):
        assert_same(
            torch.from_numpy(np.ascontiguousarray(plain)), torch.from_numpy(np.ascontiguousarray(other)), path, seen
        )
        return
    if isinstance(plain, torch.Generator):
        if not torch.equal(plain.get_state(), other.get_state()):
            _fail(path, "torch.Generator states differ")
        return
    if isinstance(plain, np.random.Generator):
        assert_same(plain.bit_generator.state, other.bit_generator.state, f"{path}.bit_generator.state", seen)
        return
    if isinstance(plain, EnvStreams):
        assert_same(plain.env_ids, other.env_ids, f"{path}.env_ids", seen)
        assert_same(plain.counters, other.counters, f"{path}.counters", seen)
        return
    if isinstance(plain, (torch.nn.Module, torch.optim.Optimizer)):
        assert_same(plain.state_dict(), other.state_dict(), f"{path}.state_dict()", seen)
        return
    if type(plain).__name__ == "TensorDict":  # no truth value: its tensors, key by key
        assert_same(plain.to_dict(), other.to_dict(), f"{path}.to_dict()", seen)
        return
    if isinstance(plain, Episode):
        assert_same(tuple(plain._replace(time=0.0)), tuple(other._replace(time=0.0)), path, seen)
        return
    if isinstance(plain, float) or isinstance(plain, np.floating):
        if not (math.isclose(plain, other, rel_tol=RTOL, abs_tol=ATOL) or (math.isnan(plain) and math.isnan(other))):
            _fail(path, f"{plain!r} != {other!r}")
        return
    if isinstance(plain, dict):
        if set(plain) != set(other):
            _fail(
                path,
                f"keys differ: only in plain {sorted(map(repr, set(plain) - set(other)))}, "
                f"only in other {sorted(map(repr, set(other) - set(plain)))}",
            )
        for key in plain:
            if key in _WALL_CLOCK or (key == "t" and path.endswith("['episode']")):
                continue
            assert_same(plain[key], other[key], f"{path}[{key!r}]", seen)
        return
    if isinstance(plain, (list, tuple, collections.deque)):
        if len(plain) != len(other):
            _fail(path, f"length {len(plain)} != {len(other)}")
        for i, (a, b) in enumerate(zip(plain, other)):
            assert_same(a, b, f"{path}[{i}]", seen)
        return
    if isinstance(plain, (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type)):
        if getattr(plain, "__qualname__", getattr(plain, "__name__", None)) != getattr(
            other, "__qualname__", getattr(other, "__name__", None)
        ):
            _fail(path, f"{plain!r} != {other!r}")
        return
    if (
        isinstance(plain, Component)
        or dataclasses.is_dataclass(plain)
        or (type(plain).__eq__ is object.__eq__ and hasattr(plain, "__dict__"))
    ):
        # Components (and objects without their own equality, e.g. Gymnasium environments and
        # wrappers): compare attribute by attribute.
        if id(plain) in seen:
            return
        seen.add(id(plain))
        assert_same(vars(plain), vars(other), path + (".__dict__" if not isinstance(plain, Component) else ""), seen)
        return
    try:
        equal = plain == other
        if isinstance(equal, np.ndarray):
            equal = bool(equal.all())
    except Exception as e:  # noqa: BLE001 - anything that cannot be compared is a failure to report
        _fail(path, f"cannot compare {_short(plain)} and {_short(other)}: {e}")
    if not equal:
        _fail(path, f"{_short(plain)} != {_short(other)}")


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def cell_names(cell: str) -> list[str]:
    """Names the cell binds or deletes at its own scope (assignment, loop targets, ``del``, imports), in order."""
    names: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Lambda)):
            return  # their variables do not leak
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)) and node.id not in names:
            names.append(node.id)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.extend(a.asname or a.name.split(".")[0] for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(cell))
    return names


def compare_namespaces(plain_ns: dict, run_ns: dict, cell: str | None = None, bits: bool = False) -> None:
    """Assert that ``run_ns`` holds what ``plain_ns`` holds after plain execution of the cell.

    The same names must exist (so a ``del`` in the cell is honoured), and every value must be the
    same: first the names the cell binds (if ``cell`` is given), then everything else, components
    and their networks included; within 1e-4, or with ``bits`` to the last bit (an exact run's promise).
    """
    global ATOL, RTOL
    saved = ATOL, RTOL
    if bits:
        ATOL = RTOL = 0.0
    try:
        _compare_namespaces(plain_ns, run_ns, cell)
    finally:
        ATOL, RTOL = saved


def _compare_namespaces(plain_ns: dict, run_ns: dict, cell: str | None) -> None:
    plain_names = set(plain_ns) - {"__builtins__"}
    run_names = set(run_ns) - {"__builtins__"}
    if plain_names != run_names:
        raise AssertionError(
            f"namespace names differ: only after plain run {sorted(plain_names - run_names)}, "
            f"only after fragnb run {sorted(run_names - plain_names)}"
        )
    first = [n for n in cell_names(cell) if n in plain_names] if cell else []
    for name in first + sorted(plain_names - set(first)):
        assert_same(plain_ns[name], run_ns[name], name)


def run_like_plain(cell: str, namespace, policy: str, **params) -> tuple[dict, dict]:
    """Run ``cell`` as plain Python on ``namespace()`` and through fragnb under ``policy`` on a second
    ``namespace()``; return both namespaces. Learner replicas that drift apart are an error."""
    import fragnb

    plain = namespace()
    exec(compile(cell, "<cell>", "exec"), plain)
    ns = namespace()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # Learner.merge: replicas not synchronised
        fragnb.run(fragnb.capture(cell, ns), policy, progress=False, plot=False, **params)
    return plain, ns
