"""A cell whose training loop lives in a method it calls, read as the loop itself.

Object-oriented tutorials (rainbow-is-all-you-need, most course notebooks) keep the loop in the agent:
the cell is ``agent.train(num_frames)``, whose body steps ``self.env`` and updates ``self.dqn``. Capture
reads that body instead, as the cell it stands for:

- ``self`` becomes the object's name in the notebook (``self.env.step(a)`` is ``agent.env.step(a)``);
- each parameter is bound, on the ``def`` line, to the argument the cell passes (or its default, where
  that is a literal): ``num_frames = 2000``;
- a last ``return value`` becomes the cell's assignment (``scores = agent.train(...)``: ``scores = value``);
- every statement keeps the line it has in the method's source (the cell defining the class, or its file),
  so the drawing and every refusal quote the method's own lines.

Only that shape is read: one statement, a method of a user's class (not a library's) with a loop, a
parameter list of plain names, ``return`` only as the last statement, ``self`` never rebound, no ``super()``
and no private ``self.__x`` (both need the class the method is compiled in). Anything else
is captured as written, and refused with the method named (:func:`~fragnb.graph.refusals.parse`). The method's
variables stay its own, as in plain Python: they are capture's temporaries (never written to the notebook), and
one the notebook also names is renamed ``_fragnb_m_<name>``, so the notebook's value stays as it was.
"""

from __future__ import annotations

import ast
import inspect
import io
import textwrap
import tokenize
import types
from dataclasses import dataclass

from .normalize import TEMP_PREFIX
from .roles import _library

__all__ = ["Inlined", "method_loop"]

# literals a default may be, to be written on the `def` line as it is
_LITERALS = (int, float, str, bool, type(None))


@dataclass(frozen=True)
class Inlined:
    """A method's body read as a cell: its ``source`` (the method's lines at their own numbers), where it
    was read from (``origin``, e.g. "Agent.train, lines 12-30 of a notebook cell") and its variables."""

    source: str
    origin: str
    #: The method's own variables, which plain Python keeps inside the call: never written to the notebook
    #: (capture's temporaries), those whose names the notebook already uses renamed ``_fragnb_m_<name>``.
    temps: dict[str, str]


def method_loop(source: str, namespace: dict) -> Inlined | None:
    """The method body a one-statement cell calls, as a cell; None where the cell is not that shape."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    if len(tree.body) != 1 or any(isinstance(n, (ast.For, ast.While)) for n in ast.walk(tree)):
        return None
    stmt = tree.body[0]
    target = None
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        target, call = stmt.targets[0], stmt.value
    elif isinstance(stmt, ast.Expr):
        call = stmt.value
    else:
        return None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
        return None
    receiver = call.func.value
    if not isinstance(receiver, ast.Name) or receiver.id not in namespace:
        return None
    bound = getattr(namespace[receiver.id], call.func.attr, None)
    if not isinstance(bound, types.MethodType) or not isinstance(bound.__func__, types.FunctionType):
        return None
    fn = bound.__func__
    if _library(fn) or any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return None
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return None
    text = textwrap.dedent("".join(lines))
    func = ast.parse(text).body[0]
    if not isinstance(func, ast.FunctionDef) or not _simple(func, receiver.id):
        return None
    bindings = _bindings(func, call, fn)
    if bindings is None or not _same_globals(func, fn, namespace):
        return None
    self_name = func.args.args[0].arg
    assigned = {n.id for n in ast.walk(target) if isinstance(n, ast.Name)} if target is not None else set()
    own = ({a.arg for a in func.args.args[1:]} | _stored(func)) - assigned
    renames = {self_name: receiver.id, **{v: f"{TEMP_PREFIX}m_{v}" for v in sorted(own) if v in namespace}}
    temps = {renames.get(v, v): v for v in own}
    text_lines = _rename(text, renames).splitlines()
    body_start = func.body[0].lineno  # in `text`; its line in the method's source is this + first - 1
    body = text_lines[body_start - 1 : func.end_lineno]
    last = func.body[-1]
    if isinstance(last, ast.Return):  # the cell's assignment, on the return's first line
        value = ast.unparse(_Rename(renames).visit(last.value)) if last.value is not None else "None"
        line = body[last.lineno - body_start]
        indent = line[: len(line) - len(line.lstrip())]
        assign = value if target is None else f"{ast.unparse(target)} = {value}" if ast.unparse(target) != value else ""
        body[last.lineno - body_start] = indent + assign if assign else ""  # `scores = scores` needs no line
        for i in range(last.lineno + 1, last.end_lineno + 1):
            body[i - body_start] = ""
    elif target is not None:
        body.append(body[0][: len(body[0]) - len(body[0].lstrip())] + f"{ast.unparse(target)} = None")
    head = body_start + first - 2  # the line before the body (the `def` line): the parameters' bindings
    bound = "; ".join(f"{renames.get(p, p)} = {value}" for p, value in bindings.items()) or "pass"
    source = "\n" * (head - 1) + bound + "\n" + textwrap.dedent("\n".join(body)) + "\n"
    try:
        ast.parse(source)
    except SyntaxError:  # a body dedent cannot align (a multi-line string less indented than the code)
        return None
    where = fn.__code__.co_filename
    where = "a notebook cell" if where.startswith("<") or "ipykernel" in where else where
    return Inlined(source, f"{fn.__qualname__}, lines {first}-{first + len(lines) - 1} of {where}", temps)


def _stored(func: ast.FunctionDef) -> set[str]:
    """The names the method's body assigns (its local variables)."""
    return {n.id for n in ast.walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}


def _simple(func: ast.FunctionDef, receiver: str) -> bool:
    """A body capture can read as a cell: a loop at its top, ``return`` only last, ``self`` never rebound,
    no name of the method's the receiver's own, no ``yield``, ``global`` or ``nonlocal``."""
    a = func.args
    if a.vararg or a.kwarg or a.posonlyargs or a.kwonlyargs or not a.args:
        return False
    if not any(isinstance(n, (ast.For, ast.While)) for n in func.body):
        return False
    self_name = a.args[0].arg
    for node in ast.walk(func):
        if isinstance(node, (ast.Yield, ast.YieldFrom, ast.Global, ast.Nonlocal, ast.Lambda)):
            return False
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not func:
            return False
        if isinstance(node, ast.Return) and node is not func.body[-1]:
            return False
        if isinstance(node, ast.Name) and node.id in ("super", "__class__"):
            return False  # both need the class the method is compiled in
        if isinstance(node, ast.Attribute) and node.attr.startswith("__") and not node.attr.endswith("__"):
            return False  # `self.__x` is `self._Agent__x` inside the class only
        if isinstance(node, ast.Name) and (
            node.id == receiver or (node.id == self_name and isinstance(node.ctx, (ast.Store, ast.Del)))
        ):
            return False
    return all(p.arg != receiver for p in a.args)


def _same_globals(func: ast.FunctionDef, fn: types.FunctionType, namespace: dict) -> bool:
    """Whether each global the body reads is the notebook's same object (a class defined in the notebook
    shares its namespace; one from a module needs what it reads imported in the notebook too)."""
    if fn.__globals__ is namespace:
        return True
    local = {a.arg for a in func.args.args} | {
        n.id for n in ast.walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }
    read = {n.id for n in ast.walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - local
    return all(namespace.get(name) is fn.__globals__[name] for name in read if name in fn.__globals__)


def _bindings(func: ast.FunctionDef, call: ast.Call, fn: types.FunctionType) -> dict[str, str] | None:
    """Each parameter after ``self`` and the argument the call binds it to, as source; None where one gets
    no argument and its default is not a literal."""
    params = [p.arg for p in func.args.args[1:]]
    if len(call.args) > len(params):
        return None
    given = dict(zip(params, (ast.unparse(a) for a in call.args)))
    for k in call.keywords:
        if k.arg not in params or k.arg in given:
            return None
        given[k.arg] = ast.unparse(k.value)
    defaults = {
        name: p.default
        for name, p in inspect.signature(fn).parameters.items()
        if p.default is not inspect.Parameter.empty
    }
    for p in params:
        if p not in given:
            if p not in defaults or not isinstance(defaults[p], _LITERALS):
                return None
            given[p] = repr(defaults[p])
    return {p: given[p] for p in params}


class _Rename(ast.NodeTransformer):
    def __init__(self, renames: dict[str, str]):
        self.renames = renames

    def visit_Name(self, node: ast.Name) -> ast.Name:
        new = self.renames.get(node.id)
        return ast.copy_location(ast.Name(new, node.ctx), node) if new is not None else node


def _rename(text: str, renames: dict[str, str]) -> str:
    """``text`` with each variable of ``renames`` written as its new name, line for line: not an attribute
    (``x.obs``) nor a keyword argument (``f(obs=...)``) of that name."""
    lines = text.splitlines(keepends=True)
    spots: list[tuple[int, int, str]] = []
    tokens = [
        t
        for t in tokenize.generate_tokens(io.StringIO(text).readline)
        if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT)
    ]
    depth = 0
    for i, tok in enumerate(tokens):
        if tok.type == tokenize.OP and tok.string in "([{":
            depth += 1
        elif tok.type == tokenize.OP and tok.string in ")]}":
            depth -= 1
        if tok.type != tokenize.NAME or tok.string not in renames:
            continue
        attribute = i > 0 and tokens[i - 1].string == "."
        keyword = depth > 0 and i + 1 < len(tokens) and tokens[i + 1].string == "="
        if not (attribute or keyword):
            spots.append((*tok.start, tok.string))
    for row, col, old in reversed(spots):
        line = lines[row - 1]
        lines[row - 1] = line[:col] + renames[old] + line[col + len(old) :]
    return "".join(lines)
