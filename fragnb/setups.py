"""Setups: what a sweep runs before each of its runs' loops, a ``%%setup`` cell or a function of the seed,
and the grid of settings assigned after it (``args.learning_rate = 1e-3``).

A seed must change what the setup seeds (the network's initialisation, the environments' seeds,
``args.seed``), not only the draws inside the loop, so a sweep (:mod:`fragnb.seeds`) takes the setup with
the loop: a :class:`Setup` is a cell's source, run with ``seed`` defined, or a function of the seed
returning the namespace.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["Setup", "seeds_from", "configurations", "assign"]


@dataclass(frozen=True)
class Setup:
    """What a run executes before the loop, for a given seed: ``source`` run as plain Python with
    ``seed`` defined (a ``%%setup`` cell's), or ``function(seed)`` returning the namespace.

    Parameters
    ----------
    name : str
        Shown in errors (``%%setup NAME``).
    source : str, optional
        A cell's source, run with ``seed`` defined.
    function : callable, optional
        ``function(seed)`` returning the namespace, instead of ``source``.

    Examples
    --------
    A setup that seeds what the loop starts from, run as one run of a sweep runs it, with a setting
    of the grid: the optimiser made from ``config.learning_rate`` gets the new value.

    >>> import fragnb
    >>> setup = fragnb.Setup("tiny", source='''
    ... import torch
    ... from fragnb.algos.ppo import PPOConfig
    ... torch.manual_seed(seed)
    ... config = PPOConfig(num_envs=4)
    ... net = torch.nn.Linear(4, 2)
    ... optimizer = torch.optim.Adam(net.parameters(), lr=config.learning_rate)
    ... ''')
    >>> ns = setup.namespace(1, {"config.learning_rate": 1e-3})
    >>> ns["seed"], ns["config"].learning_rate, ns["optimizer"].param_groups[0]["lr"]
    (1, 0.001, 0.001)

    A function of the seed does as well (:meth:`of` takes either, as :func:`fragnb.sweep` does):

    >>> def make(seed):
    ...     return {"lr": 1e-3, "envs": 4 * (seed + 1)}
    >>> fragnb.Setup.of(make).namespace(2)
    {'lr': 0.001, 'envs': 12, 'seed': 2}
    """

    name: str
    source: str | None = None
    function: Callable[[int], dict] | None = None

    def namespace(self, seed: int, settings: dict[str, Any] | None = None) -> dict:
        """A fresh namespace after the setup ran with ``seed`` and ``settings`` ({"args.learning_rate":
        1e-3}). A setting is assigned right after each top-level statement of the source that binds its
        first name (``args = Args(seed=seed)``), so what the setup derives from it afterwards (an
        optimiser's learning rate, CleanRL's ``batch_size``) follows it; a function's, after it returns.
        A KeyError names a setting the namespace has no place for."""
        settings = settings or {}
        if self.function is not None:
            ns = dict(self.function(seed))
            ns.setdefault("seed", seed)
            for key, value in settings.items():
                assign(ns, key, value)
            return ns
        ns: dict = {"seed": seed}
        tree = ast.parse(self.source)
        filename = f"<setup {self.name}>"
        pending = dict(settings)
        for statement in tree.body:
            exec(compile(ast.Module([statement], type_ignores=[]), filename, "exec"), ns)
            bound = _bound(statement)
            for key in [k for k in settings if k.split(".")[0] in bound]:
                assign(ns, key, settings[key])
                pending.pop(key, None)
        for key, value in pending.items():  # bound inside a block, or not at all: a KeyError says which
            assign(ns, key, value)
        return ns

    @classmethod
    def of(cls, setup) -> Setup:
        """``setup`` as a Setup: one already, a cell's source, or a function of the seed."""
        if isinstance(setup, Setup):
            return setup
        if isinstance(setup, str):
            try:
                ast.parse(setup)
            except SyntaxError as e:
                raise ValueError(f"the setup's line {e.lineno}: {e.msg}") from None
            return cls("setup", source=setup)
        if callable(setup):
            return cls(getattr(setup, "__name__", "setup"), function=setup)
        raise TypeError(f"setup= takes a cell's source or a function of the seed, not {type(setup).__name__}")


def _bound(statement: ast.stmt) -> set[str]:
    """Names a top-level statement binds (assignments, imports, definitions, ``for`` and ``with`` targets)."""
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {statement.name}
    if isinstance(statement, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in statement.names}
    return {n.id for n in ast.walk(statement) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def seeds_from(text: str) -> list[int]:
    """``"0-3"`` -> [0, 1, 2, 3]; ``"1,5,9"`` -> [1, 5, 9]; ``"4"`` -> [4] (the magic's ``--seeds``)."""
    seeds: list[int] = []
    for part in text.split(","):
        lo, dash, hi = part.strip().partition("-")
        try:
            seeds += list(range(int(lo), int(hi) + 1)) if dash else [int(lo)]
        except ValueError:
            raise ValueError(f"--seeds {text!r}: give seeds as 0-3 or 1,5,9") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds {text!r}: give distinct seeds, as 0-3 or 1,5,9")
    return seeds


# -- where a setting goes in the setup's namespace -------------------------------------------------
def _parent(ns: dict, name: str) -> tuple[Any, str]:
    """The object holding ``name``'s last part (``args`` for ``args.learning_rate``) and that part;
    a KeyError names what the namespace lacks."""
    first, *rest = name.split(".")
    if not all(p.isidentifier() for p in [first, *rest]):
        raise KeyError(f"{name!r} is not a dotted name such as args.learning_rate")
    if first not in ns:
        raise KeyError(f"{name!r}: the setup defines no `{first}`")
    obj, path = ns, [first]
    if not rest:
        return ns, first
    obj = ns[first]
    for part in rest[:-1]:
        path.append(part)
        obj = obj[part] if isinstance(obj, dict) else getattr(obj, part, _MISSING)
        if obj is _MISSING:
            raise KeyError(f"{name!r}: `{'.'.join(path)}` is not in the setup's namespace")
    last = rest[-1]
    present = last in obj if isinstance(obj, dict) else hasattr(obj, last)
    if not present:
        raise KeyError(f"{name!r}: `{'.'.join(path)}` has no `{last}`")
    return obj, last


_MISSING = object()


def assign(ns: dict, name: str, value: Any) -> None:
    """Set ``name`` (``"lr"``, ``"args.learning_rate"``, ``"config['lr']"`` is not one) in ``ns``."""
    obj, last = _parent(ns, name)
    if isinstance(obj, dict):
        obj[last] = value
    else:
        setattr(obj, last, value)


def configurations(params: dict[str, Iterable] | None) -> list[dict[str, Any]]:
    """Every combination of ``params``' values, in order ({} alone without a grid)."""
    if not params:
        return [{}]
    names = list(params)
    values = [list(params[n]) for n in names]
    for n, v in zip(names, values):
        if not v:
            raise ValueError(f"params[{n!r}] has no values")
    return [dict(zip(names, combo)) for combo in itertools.product(*values)]
