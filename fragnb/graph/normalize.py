"""Normalize a cell's AST so that every leaf statement calls components of one role.

Three rewrites, all exact (the rewritten cell computes what the original does, in the same order):

- a call nested in a call of another role is hoisted into a temporary assigned just before:
  ``batch = buffer.batch(actor.value(obs))`` becomes ``_fragnb_1 = actor.value(obs)`` then
  ``batch = buffer.batch(_fragnb_1)``;
- an ``if`` whose block calls several roles or holds a loop is split per statement, with the
  condition evaluated once into a temporary: ``if c: a; b`` becomes ``_fragnb_2 = c``,
  ``if _fragnb_2: a``, ``if _fragnb_2: b``. A loop inside it iterates over nothing when the
  condition is false (``for x in (xs if _fragnb_2 else ())``), so loops always nest in loops;
- a ``with`` of a mode context (``torch.no_grad()``, ``torch.autocast(...)``: it only sets a
  thread-local mode) is entered around each statement it holds: ``with torch.no_grad(): a; b``
  becomes ``with torch.no_grad(): a`` and ``with torch.no_grad(): b``, and a loop inside it keeps
  its header outside and enters the context around each statement of its body.

Control flow becomes data before that (:meth:`Normalizer.control_flow`):

- ``if c: ...; continue`` in any loop becomes ``_fragnb_3 = c``, the statements before the
  ``continue`` guarded by it, and the rest of the body guarded by ``not _fragnb_3``;
- ``if c: ...; break`` in the iteration loop does the same, and ``_fragnb_3`` becomes a *stop flag*:
  the driver starts no further iteration once it holds (the loop variable keeps its value);
- a top-level ``while c:`` becomes the iteration loop ``for _fragnb_4 in iter(int, 1):`` with the
  stop flag ``_fragnb_5 = not c`` assigned before it and at the end of every iteration;
- a ``for ... else`` is wrapped in ``if True:``, one statement that runs as written.

Any other ``break`` and ``continue`` stay as written: they run where their whole loop runs
(the planner refuses a loop that spans worker groups and jumps).

Temporaries are named ``_fragnb_<n>``; they never reach the notebook's namespace.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable

__all__ = ["TEMP_PREFIX", "Normalizer"]

TEMP_PREFIX = "_fragnb_"

# Expressions whose parts Python may skip or run many times: a call inside is never hoisted.
_CONDITIONAL = (ast.IfExp, ast.BoolOp, ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
# Statements that hold a block: the calls in it run where the block runs, as written (never hoisted).
_COMPOUND = (
    ast.If,
    ast.With,
    ast.While,
    ast.For,
    ast.Try,
    ast.TryStar,
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
)


class Normalizer:
    """Rewrites a cell body. ``role_of_call(call)`` is the role of the component a call goes
    through, or ``None``. ``temps`` maps each temporary to the source text it stands for."""

    def __init__(
        self,
        role_of_call: Callable[[ast.Call], str | None] | None = None,
        reentrant: Callable[[ast.expr], bool] = lambda expr: False,
    ):
        self.role_of_call = role_of_call
        self.reentrant = reentrant  # whether a `with` item is a mode context, entered again per statement
        self.temps: dict[str, str] = {}
        self.synthetic: set[int] = set()  # ids of nodes that are not a cell line as written
        self.stop_flags: list[str] = []  # checked by the driver before each iteration
        self.opaque: set[int] = set()  # ids of statements kept whole (a `for ... else`)

    # -- control flow ---------------------------------------------------------------------------
    def control_flow(self, nodes: list[ast.stmt]) -> list[ast.stmt]:
        """The cell with its top-level ``while``, the iteration loop's ``break`` and every loop's
        ``continue`` turned into flags and guards; what is left of them capture refuses."""
        out: list[ast.stmt] = []
        for node in nodes:
            if isinstance(node, ast.While) and not node.orelse:
                flag = self._temp(f"not ({ast.unparse(node.test)})")
                self.stop_flags.append(flag)

                def stop(flag=flag, node=node):  # a fresh statement each time: the loop's end and before it
                    return self._located(
                        ast.Assign([ast.Name(flag, ast.Store())], ast.UnaryOp(ast.Not(), copy.deepcopy(node.test))),
                        node.test,
                    )

                counter = self._temp("the iteration count of a `while` loop")
                forever = ast.Call(ast.Name("iter", ast.Load()), [ast.Name("int", ast.Load()), ast.Constant(1)], [])
                loop = ast.For(
                    ast.Name(counter, ast.Store()), forever, self._loop_body(node.body + [stop()], top=True), [], None
                )
                out += [stop(), self._located(loop, node)]
            elif isinstance(node, ast.For) and not node.orelse:
                node.body = self._loop_body(node.body, top=True)
                out.append(node)
            elif isinstance(node, ast.For):
                out.append(self._kept_whole(node))
            else:
                out.append(node)
        return out

    def _kept_whole(self, node: ast.stmt) -> ast.stmt:
        wrapper = self._located(ast.If(ast.Constant(True), [node], []), node)
        self.opaque.add(id(wrapper))
        return wrapper

    def _loop_body(self, nodes: list[ast.stmt], top: bool) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for i, node in enumerate(nodes):
            if isinstance(node, ast.For) and node.orelse:
                node = self._kept_whole(node)
            elif isinstance(node, ast.For):
                node.body = self._loop_body(node.body, top=False)
            jump = node.body[-1] if isinstance(node, ast.If) and not node.orelse and node.body else None
            if isinstance(jump, ast.Continue) or (isinstance(jump, ast.Break) and top):
                flag = self._temp(ast.unparse(node.test))
                if isinstance(jump, ast.Break):
                    self.stop_flags.append(flag)
                out.append(self._located(ast.Assign([ast.Name(flag, ast.Store())], node.test), node.test))
                out += [self._guard(s, ast.Name(flag, ast.Load())) for s in node.body[:-1]]
                rest = self._loop_body(nodes[i + 1 :], top)
                return out + [self._guard(s, ast.UnaryOp(ast.Not(), ast.Name(flag, ast.Load()))) for s in rest]
            out.append(node)
        return out

    def body(self, nodes: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for node in nodes:
            if isinstance(node, ast.For):
                node.body = self.body(node.body)
                out.append(node)
            elif isinstance(node, ast.If) and id(node) not in self.opaque and self._needs_split(node):
                out += self._split_if(node)
            elif isinstance(node, ast.With) and all(
                self.reentrant(i.context_expr) and i.optional_vars is None for i in node.items
            ):
                out += [self._entered(s, node) for s in self.body(node.body)]
            else:
                out += self._hoist(node)
        return out

    # -- if blocks ------------------------------------------------------------------------------
    def _roles(self, node: ast.AST) -> set[str]:
        return {r for n in ast.walk(node) if isinstance(n, ast.Call) and (r := self.role_of_call(n))}

    def _needs_split(self, node: ast.If) -> bool:
        return len(self._roles(node)) > 1 or any(isinstance(n, ast.For) for n in ast.walk(node))

    def _split_if(self, node: ast.If) -> list[ast.stmt]:
        name = self._temp(ast.unparse(node.test))
        out = self._hoist(self._located(ast.Assign([ast.Name(name, ast.Store())], node.test), node))
        for stmts, test in (
            (node.body, ast.Name(name, ast.Load())),
            (node.orelse, ast.UnaryOp(ast.Not(), ast.Name(name, ast.Load()))),
        ):
            out += [self._guard(s, test) for s in self.body(stmts)]
        return out

    def _entered(self, stmt: ast.stmt, context: ast.With) -> ast.stmt:
        """``stmt`` inside a copy of ``context``'s mode contexts (a loop: each statement of its body)."""
        if isinstance(stmt, ast.For):
            stmt.body = [self._entered(s, context) for s in stmt.body]
            return stmt
        return self._located(ast.With(copy.deepcopy(context.items), [stmt]), stmt)

    def _guard(self, stmt: ast.stmt, test: ast.expr) -> ast.stmt:
        if isinstance(stmt, ast.For):  # a loop runs zero times when its guard is false
            stmt.iter = ast.copy_location(ast.IfExp(test, stmt.iter, ast.Tuple([], ast.Load())), stmt.iter)
            ast.fix_missing_locations(stmt.iter)
            return stmt
        return self._located(ast.If(test, [stmt], []), stmt)

    # -- nested calls ---------------------------------------------------------------------------
    def _hoist(self, stmt: ast.stmt) -> list[ast.stmt]:
        if len(self._roles(stmt)) < 2 or isinstance(stmt, _COMPOUND):  # a block's calls run where it runs, as written
            return [stmt]
        # ast.walk is breadth-first: the outermost call comes first, and its role is the statement's
        outer = next(r for n in ast.walk(stmt) if isinstance(n, ast.Call) and (r := self.role_of_call(n)))
        before: list[ast.stmt] = []
        normalizer = self

        class Hoist(ast.NodeTransformer):
            def generic_visit(self, node):
                if isinstance(node, _CONDITIONAL):
                    return node  # hoisting out of these would change how often the call runs
                return super().generic_visit(node)

            def visit_Call(self, call: ast.Call):
                self.generic_visit(call)  # innermost first: arguments are evaluated before the call
                role = normalizer.role_of_call(call)
                if role is None or role == outer:
                    return call
                name = normalizer._temp(ast.unparse(call))
                before.append(normalizer._located(ast.Assign([ast.Name(name, ast.Store())], call), stmt))
                return ast.copy_location(ast.Name(name, ast.Load()), call)

        Hoist().visit(stmt)
        self.synthetic.add(id(stmt))
        return before + [stmt]

    # -- helpers --------------------------------------------------------------------------------
    def _temp(self, text: str) -> str:
        name = f"{TEMP_PREFIX}{len(self.temps) + 1}"
        self.temps[name] = text
        return name

    def _located(self, new: ast.stmt, like: ast.AST) -> ast.stmt:
        ast.copy_location(new, like)
        new.end_lineno, new.end_col_offset = like.end_lineno, like.end_col_offset
        ast.fix_missing_locations(new)
        self.synthetic.add(id(new))
        return new
