"""A replica's namespace as its walk binds and returns it: loop targets bound, the variable a sender has
not assigned yet, what the notebook merges back, and the cell line an error came from."""

from __future__ import annotations

import ast
import linecache
import types
from typing import TYPE_CHECKING

import torch

from ...components import Component
from ...shards import to_cpu
from .edges import to_device

if TYPE_CHECKING:
    from ...plan.script import Script

__all__ = ["MISSING", "CellExit", "bind", "holdings", "shape_error", "where"]


def holdings(script: Script, group: str, ns: dict, components: list[str]) -> tuple[dict, dict]:
    """A replica's part of what the notebook merges: the variables its group assigned last, and its components."""
    written = {v for s in script.program.segments if s.group == group for v in s.writes}
    variables = {v: ns[v] for v in script.variables if v in written and v in ns}
    comps = {c: to_cpu(ns[c]) for c in components if c in ns}
    for name in (n for n in script.function_globals if n in ns):  # whole cell: what the functions changed
        value = ns[name]
        if isinstance(value, (torch.nn.Module, torch.optim.Optimizer, Component)):
            comps[name] = to_cpu(value)
        elif not isinstance(value, (type, types.FunctionType, types.ModuleType)):
            variables[name] = value
    return to_device(variables, "cpu"), comps  # the notebook may have no GPU


class CellExit(RuntimeError):
    """A ``KeyboardInterrupt`` or ``SystemExit`` that the cell's own code raised on a replica (``sys.exit()``,
    ``raise KeyboardInterrupt`` in an environment): the user's error, with its line. Nothing else raises them
    on a worker (the notebook's Ctrl-C reaches replicas as a stop at an iteration's end), and raised as they
    are they end the worker's task as no error does: the run would read it as a lost worker and start again."""

    def __init__(self, raised: BaseException):
        said = f": {raised}" if str(raised) else ""
        super().__init__(
            f"the cell's code raised {type(raised).__name__}{said} on a worker. fragnb ends the run with it "
            "as with any error of the cell's (to end a run early, `break` out of the loop, or give `until=`)"
        )


def where(error: BaseException, replica: str) -> str:
    """The user's cell line the error came from, for a message that survives the trip to the notebook."""
    tb, last = error.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.startswith("<fragment "):
            last = tb
        tb = tb.tb_next
    if last is None:
        return f"(raised in {replica})"
    filename, lineno = last.tb_frame.f_code.co_filename, last.tb_lineno
    text = linecache.getline(filename, lineno).strip()
    return f'  File "{filename}", line {lineno}, in {replica}' + (f"\n    {text}" if text else "")


def shape_error(e: BaseException) -> bool:
    """Whether ``e`` looks like a tensor sized for another batch than the replica's share."""
    text = str(e)
    return isinstance(e, (RuntimeError, ValueError, IndexError)) and any(
        w in text for w in ("size of tensor", "shape", "must match", "out of bounds", "broadcast")
    )


class _Missing:
    """A variable the sender has not assigned (yet): the receiver keeps what it has."""

    def __reduce__(self):
        return "MISSING"  # unpickles as this module's one instance


MISSING = _Missing()


def bind(target: ast.expr, value, scalars: dict) -> None:
    """Assign ``value`` to a loop's ``target`` (a name or a tuple of names) in ``scalars``."""
    if isinstance(target, ast.Name):
        scalars[target.id] = value
        return
    names: dict = {}
    assign = ast.Module([ast.Assign([target], ast.Name("_value", ast.Load()), lineno=1, col_offset=0)], [])
    exec(compile(ast.fix_missing_locations(assign), "<fragnb>", "exec"), {"_value": value}, names)
    scalars.update(names)
