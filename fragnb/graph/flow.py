"""What each statement of a cell reads, binds and changes in place: capture's def-use facts.

Pure functions of the AST, with no namespace: :func:`names` (reads before binds, and binds, in the
order the statement runs them), :func:`mutated` (objects a statement may change in place),
:func:`call_root`, and two shapes capture recognises, :func:`reads_only` and :func:`stores`.
"""

from __future__ import annotations

import ast
from typing import Any

__all__ = ["PURE_METHODS", "names", "mutated", "call_root", "along", "reads_only", "stores"]

# Methods of tensors, arrays, lists, dicts and strings that never change their receiver: calling one
# is a read. Any other method call may change the object it is called on (``returns.append(x)``,
# ``t.add_(1)``, a user's ``tracker.log(x)``), so the receiver counts as written.
PURE_METHODS = frozenset(
    """
    sum mean std var max min amax amin argmax argmin abs exp log log_softmax softmax sqrt pow square norm prod cumsum
    all any item tolist numpy float int long double bool half cpu cuda to clone detach numel size dim view reshape
    flatten squeeze unsqueeze permute transpose t expand repeat gather index_select masked_fill where clamp round
    floor ceil sign nonzero eq ne lt le gt ge isnan isfinite logical_not type_as new_zeros new_ones unbind split chunk
    get keys values items copy count index startswith endswith format join lower upper strip replace
""".split()
)


class _Names(ast.NodeVisitor):
    """Names a statement reads and writes; comprehension and lambda variables stay local."""

    def __init__(self):
        self.reads: dict[str, int] = {}
        self.writes: set[str] = set()  # names bound
        self.mutates: set[str] = set()  # names whose object may be changed in place
        self._local: list[set[str]] = []

    def visit_Name(self, node: ast.Name):
        if any(node.id in scope for scope in self._local):
            return
        if isinstance(node.ctx, ast.Load):
            self.reads.setdefault(node.id, node.lineno)
        else:
            self.writes.add(node.id)
            if isinstance(node.ctx, ast.Del):  # `del x` needs the x it removes
                self.reads.setdefault(node.id, node.lineno)

    def _mutates(self, target: ast.expr):
        # `x.a = ...`, `x[i] += ...`, `x.append(...)` change the object `x` names.
        while isinstance(target, (ast.Attribute, ast.Subscript)):
            target = target.value
        if isinstance(target, ast.Name) and not any(target.id in s for s in self._local):
            self.mutates.add(target.id)

    def visit_Assign(self, node):
        self.generic_visit(node)
        for t in node.targets:
            self._mutates(t)

    def visit_AugAssign(self, node):
        self.generic_visit(node)
        self._mutates(node.target)
        if isinstance(node.target, ast.Name):
            self.reads.setdefault(node.target.id, node.lineno)

    def visit_Call(self, node):
        self.generic_visit(node)
        if isinstance(node.func, ast.Attribute) and node.func.attr not in PURE_METHODS:
            self._mutates(node.func.value)

    def _scoped(self, node, bound: set[str], children):
        self._local.append(bound)
        for child in children:
            self.visit(child)
        self._local.pop()

    def visit_Lambda(self, node):
        args = node.args
        bound = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
        bound |= {a.arg for a in (args.vararg, args.kwarg) if a}
        for default in args.defaults + [d for d in args.kw_defaults if d]:
            self.visit(default)
        self._scoped(node, bound, [node.body])

    def _comprehension(self, node):
        bound = {n.id for gen in node.generators for n in ast.walk(gen.target) if isinstance(n, ast.Name)}
        self.visit(node.generators[0].iter)  # evaluated in the enclosing scope
        rest = [node.generators[0].target, *node.generators[0].ifs]
        for gen in node.generators[1:]:
            rest += [gen.target, gen.iter, *gen.ifs]
        elts = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
        self._scoped(node, bound, rest + elts)

    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = _comprehension


def names(node: ast.AST) -> tuple[dict[str, int], set[str]]:
    """Names read before the node binds them (with the line of their first such read), and names bound.

    Inside a compound statement the order counts: ``if c: frac = f(it); lr = frac * x`` reads ``c``,
    ``it`` and ``x``, not ``frac`` (it is assigned before it is read)."""
    reads, writes, _ = _flow(node)
    return reads, writes


_BLOCKS = (
    ast.Module,
    ast.If,
    ast.While,
    ast.With,
    ast.For,
    ast.Try,
    ast.TryStar,
    ast.FunctionDef,
    ast.ClassDef,
    ast.AsyncFunctionDef,
)


def _flow(node: ast.AST) -> tuple[dict[str, int], set[str], set[str]]:
    """(names read before bound, names bound, names bound on every path through ``node``)."""
    if not isinstance(node, _BLOCKS):
        visitor = _Names()
        visitor.visit(node)
        return visitor.reads, visitor.writes, set(visitor.writes)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        # the body runs when called (names it reads are looked up then); only decorators, defaults
        # and bases are read now
        args = getattr(node, "args", None)
        parts = [
            *node.decorator_list,
            *getattr(node, "bases", []),
            *getattr(node, "keywords", []),
            *((args.defaults + [d for d in args.kw_defaults if d]) if args else []),
        ]
        reads = _sequence([ast.Expr(p) for p in parts])[0]
        return reads, {node.name}, {node.name}
    if isinstance(node, ast.Module):
        return _sequence(node.body)
    if isinstance(node, ast.If):
        test = _flow(ast.Expr(node.test))
        body, orelse = _sequence(node.body), _sequence(node.orelse)
        return _join(test, _branches(body, orelse))
    if isinstance(node, ast.While):
        test = _flow(ast.Expr(node.test))
        return _join(test, _maybe(_sequence(node.body + node.orelse)))
    if isinstance(node, ast.For):
        head = _flow(ast.Expr(node.iter))
        return _join(head, _maybe(_sequence([ast.Assign([node.target], ast.Constant(None)), *node.body, *node.orelse])))
    if isinstance(node, ast.With):
        items = [
            ast.Assign([i.optional_vars], i.context_expr) if i.optional_vars else ast.Expr(i.context_expr)
            for i in node.items
        ]
        return _sequence(items + node.body)
    # try: any statement of the body may be the one that raised, so each part is read as it stands
    parts = [_sequence(node.body), *(_sequence(h.body) for h in node.handlers), _sequence(node.orelse)]
    reads: dict[str, int] = {}
    writes: set[str] = set()
    for r, w, _ in parts:
        reads = {**r, **reads}
        writes |= w
    writes |= {h.name for h in node.handlers if h.name}
    final = _sequence(node.finalbody)
    return {**final[0], **reads}, writes | final[1], final[2]


def _sequence(nodes: list[ast.stmt]) -> tuple[dict[str, int], set[str], set[str]]:
    reads: dict[str, int] = {}
    writes: set[str] = set()
    must: set[str] = set()
    for node in nodes:
        r, w, m = _flow(node)
        for name, line in r.items():
            if name not in must:
                reads.setdefault(name, line)
        writes |= w
        must |= m
    return reads, writes, must


def _join(first, then):
    """``first`` then ``then``, as one sequence."""
    reads = dict(first[0])
    for name, line in then[0].items():
        if name not in first[2]:
            reads.setdefault(name, line)
    return reads, first[1] | then[1], first[2] | then[2]


def _branches(a, b):
    return {**b[0], **a[0]}, a[1] | b[1], a[2] & b[2]


def _maybe(flow):
    """A part that may not run at all (a loop's body): it binds nothing for sure."""
    return flow[0], flow[1], set()


def mutated(node: ast.AST) -> set[str]:
    visitor = _Names()
    visitor.visit(node)
    return visitor.mutates


def call_root(func: ast.expr) -> ast.Name | None:
    """The variable a call goes through: `env` for `env.step(...)` and `actor.policy.eval()`."""
    while isinstance(func, ast.Attribute):
        func = func.value
    return func if isinstance(func, ast.Name) else None


def along(expr: ast.expr, namespace: dict) -> list[tuple[ast.expr, Any]]:
    """The objects a dotted expression passes through, from the namespace's variable out: ``agent.env.step``
    gives ``agent``, ``agent.env`` and ``agent.env.step`` with each object (None past a missing attribute);
    empty where it is not a namespace variable's attribute chain."""
    chain = []
    while isinstance(expr, ast.Attribute):
        chain.append(expr)
        expr = expr.value
    if not isinstance(expr, ast.Name) or expr.id not in namespace:
        return []
    obj = namespace[expr.id]
    out = [(expr, obj)]
    for attribute in reversed(chain):
        obj = getattr(obj, attribute.attr, None)
        out.append((attribute, obj))
    return out


def reads_only(node: ast.AST, name: str, attributes: frozenset[str]) -> bool:
    """Whether all ``node`` does with ``name`` is read some of ``attributes`` (``envs.single_action_space``)."""
    if not attributes:
        return False
    mentions = sum(1 for n in ast.walk(node) if isinstance(n, ast.Name) and n.id == name)
    reads = sum(
        1
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute)
        and isinstance(n.value, ast.Name)
        and n.value.id == name
        and n.attr in attributes
    )
    return mentions == reads


def stores(node: ast.stmt) -> bool:
    """Whether a statement only puts values into a container: ``x[i] = v`` or ``xs.append(v)``."""
    while isinstance(node, ast.With) and len(node.body) == 1:
        node = node.body[0]
    if isinstance(node, ast.Assign):
        return all(isinstance(t, ast.Subscript) for t in node.targets)
    call = node.value if isinstance(node, ast.Expr) else None
    return (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr in ("append", "extend", "push", "add")
    )
