"""Roles of the objects a loop calls: fragnb's component classes, and the ecosystem's own types.

A loop written as the field writes it calls a Gymnasium vector env, an ``nn.Module`` agent and a
``torch.optim`` optimiser. Their types say what they are, whatever the variables are called:

- Gymnasium environments and vector environments, PettingZoo parallel environments: ``env``;
- optimisers and learning-rate schedulers (and ``backward()``, see :func:`call_role`): ``learner``;
- networks: ``module``, a role capture settles from the dataflow (a call whose results reach the
  environment's ``step`` is the actor's; any other is computed where its results are needed);
- a function from an earlier cell takes the role of what it reaches through its globals (a DQN
  tutorial's ``select_action`` samples with ``policy_net``; its ``optimize_model`` steps an optimiser).

Nothing is imported to ask: a Gymnasium object exists only once ``gymnasium`` has been imported.
"""

from __future__ import annotations

import ast
import os
import sys
import sysconfig
import types
from typing import Any

import torch

from ..components import role_of

__all__ = ["MODULE", "role", "is_foreign", "call_role", "reentrant_context"]

#: A network's provisional role, until the dataflow says whether it acts or learns.
MODULE = "module"

# (module, attribute path) of the ecosystem's environment base classes, looked up only when loaded.
_ENV_TYPES = (
    ("gymnasium", "Env"),
    ("gymnasium", "vector.VectorEnv"),
    ("pettingzoo", "ParallelEnv"),
    ("pettingzoo", "AECEnv"),
    ("gym", "Env"),
)

# Contexts that only set a thread-local mode (no state of their own, no `as` value that matters):
# entering one again around each statement it wraps does what entering it once around all does.
_MODE_CONTEXTS = tuple(
    c
    for c in (
        getattr(torch, "no_grad", None),
        getattr(torch, "enable_grad", None),
        getattr(torch, "inference_mode", None),
        getattr(torch, "set_grad_enabled", None),
        getattr(torch, "autocast", None),
        getattr(getattr(torch, "amp", None), "autocast", None),
    )
    if c is not None
)


def _lookup(module: str, path: str):
    obj = sys.modules.get(module)
    for part in path.split("."):
        obj = getattr(obj, part, None)
    return obj if isinstance(obj, type) else None


def _foreign_role(obj: Any) -> str | None:
    if isinstance(
        obj, (torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)
    ):
        return "learner"
    if isinstance(obj, torch.nn.Module):
        return MODULE
    if any(cls is not None and isinstance(obj, cls) for cls in (_lookup(m, p) for m, p in _ENV_TYPES)):
        return "env"
    if isinstance(obj, types.FunctionType):
        return _function_role(obj)
    return None


def _function_role(fn: types.FunctionType) -> str | None:
    """What a function reaches through its globals (and the functions it calls in turn): an
    optimiser makes it the learner's, else a network an actor's or learner's, else an environment."""
    found: set[str] = set()
    seen: set[int] = set()

    def visit(f: types.FunctionType):
        if id(f) in seen or _library(f):
            return  # library code (torch's, numpy's, fragnb's) is not the user's loop
        seen.add(id(f))
        for name in _code_names(f.__code__):
            value = f.__globals__.get(name)
            if isinstance(value, types.FunctionType):
                visit(value)
            elif (r := role_of(value) or _foreign_role(value)) is not None:
                found.add(r)

    visit(fn)
    for r in ("learner", "actor", MODULE, "env", "buffer"):
        if r in found:
            return r
    return None


def _library(f: types.FunctionType) -> bool:
    filename = os.path.abspath(f.__code__.co_filename)
    return filename.startswith(_LIBRARY_DIRS)


_LIBRARY_DIRS = tuple(
    os.path.abspath(p) + os.sep
    for p in {
        *(sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")),
        os.path.dirname(os.path.dirname(__file__)),
    }
)


def _code_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def role(obj: Any) -> str | None:
    """The role an object gives a statement that calls it: a fragnb component's, or what its type
    is in the ecosystem (see the module's docstring); ``None`` for anything else."""
    return role_of(obj) or _foreign_role(obj)


def is_foreign(obj: Any) -> bool:
    """Whether an object has a role without being a fragnb component (a plain Gymnasium env, a network)."""
    return role_of(obj) is None and _foreign_role(obj) is not None


def call_role(call: ast.Call) -> str | None:
    """A role a call has whatever it is called on: ``loss.backward()`` trains."""
    if isinstance(call.func, ast.Attribute) and call.func.attr == "backward":
        return "learner"
    return None


def reentrant_context(expr: ast.expr, namespace: dict) -> bool:
    """Whether ``expr`` (a ``with`` item) makes a mode context such as ``torch.no_grad()``."""
    func = expr.func if isinstance(expr, ast.Call) else expr
    path = []
    while isinstance(func, ast.Attribute):
        path.append(func.attr)
        func = func.value
    if not isinstance(func, ast.Name) or func.id not in namespace:
        return False
    obj = namespace[func.id]
    for attr in reversed(path):
        obj = getattr(obj, attr, None)
    return any(obj is c for c in _MODE_CONTEXTS)
