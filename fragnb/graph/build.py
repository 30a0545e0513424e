"""Capture: a cell's source --AST--> FragmentGraph.

A statement's role comes from the type of what it calls (:mod:`fragnb.graph.roles`: a fragnb
component, a Gymnasium env, a ``torch.optim`` optimiser, a network), whatever the variable is called.
Statements that call none of them join the fragment of the statement whose values they read
(def-use), or failing that of the statement that reads what they assign. Fragments are the
statements of one role inside one loop. Data edges carry the variables that cross fragments;
state edges mark components and networks that two fragments share by object identity.

Capture refuses only what plain Python would not run either (a syntax error, a name never
assigned). What plain Python runs but a distributed policy cannot split (a ``try`` around
statements of several roles, a loop with no component, ...) is recorded in ``graph.limits`` and
refused when the graph is placed under such a policy: ``single`` runs every cell plain Python runs.
"""

from __future__ import annotations

import ast
import bisect
import builtins
import inspect
import sys
import textwrap
import types
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..components import ROLES, Component, modules_of, role_of
from ..errors import FragmentError
from ..shards import invariant, unsupported
from .model import Edge, Fragment, FragmentGraph, Loop, Statement, cell_filename
from .normalize import Normalizer
from .roles import MODULE, call_role, is_foreign, reentrant_context, role

__all__ = ["capture"]

# Constructs a distributed policy cannot split, and why: fragments run in separate processes.
# (``single`` runs them as plain Python does.)
#: Constructs refused only because they would span worker groups, or run a number of times replicas cannot
#: know in advance (a whole-cell policy keeps them inside one replica).
SPANS = (ast.Try, ast.TryStar, ast.With, ast.While)

UNSUPPORTED = {
    ast.FunctionDef: ("a function definition", "define functions in an earlier cell and call them here"),
    ast.AsyncFunctionDef: ("an async function definition", "define functions in an earlier cell"),
    ast.ClassDef: ("a class definition", "define classes in an earlier cell"),
    ast.Return: ("`return`", "a cell is not a function"),
    ast.Yield: ("`yield`", "a cell is not a generator"),
    ast.YieldFrom: ("`yield from`", "a cell is not a generator"),
    ast.Await: ("`await`", "fragments are run by fragnb, not by an event loop"),
    ast.AsyncFor: ("`async for`", "fragments are run by fragnb, not by an event loop"),
    ast.AsyncWith: ("`async with`", "fragments are run by fragnb, not by an event loop"),
    ast.Global: ("`global`", "fragments may run in other processes, which do not share globals"),
    ast.Nonlocal: ("`nonlocal`", "a cell is not a function"),
    ast.Try: (
        "`try`",
        "a handler cannot span fragments that run in different processes; handle errors inside a component method",
    ),
    ast.TryStar: (
        "`try`",
        "a handler cannot span fragments that run in different processes; handle errors inside a component method",
    ),
    ast.With: (
        "this `with`",
        "a context cannot span fragments that run in different processes; enter it inside a component method "
        "(mode contexts such as `torch.no_grad()` are entered in each fragment)",
    ),
    ast.While: (
        "a `while` loop inside the training loop",
        "only the training loop itself may be a `while` (at the top of the cell); "
        "inner loops must have a length every replica knows when they start: use `for ... in range(n)`",
    ),
}


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


def capture(
    source_or_function: str | Callable,
    namespace: dict[str, Any] | None = None,
    name: str = "fragment",
    roles: dict[str, str] | None = None,
) -> FragmentGraph:
    """Capture a training loop into a :class:`~fragnb.graph.FragmentGraph`.

    Parameters
    ----------
    source_or_function : str or function
        The cell's source, or a function whose body is the loop.
    namespace : dict, optional
        Where the loop's names live (the notebook's user namespace). Defaults to the function's
        globals, or to the caller's globals for a string. It is read, never changed.
    name : str
        Name of the graph (``%%fragment NAME``).
    roles : dict, optional
        Roles to give the objects of these notebook names, instead of what their types say
        (``{"q_net": "actor"}``; ``%%fragment NAME --role q_net=actor``): ``env``, ``actor``,
        ``learner`` or ``buffer``.

    Raises
    ------
    FragmentError
        For a cell fragnb cannot capture; the message names the problem and the cell line.

    Examples
    --------
    >>> import fragnb, torch
    >>> env = fragnb.envs.CartPole(num_envs=2)
    >>> g = fragnb.capture('''
    ... obs = env.reset()
    ... for it in range(3):
    ...     obs, reward, terminated, truncated, info = env.step(torch.zeros(2, dtype=torch.int64))
    ... ''', {"env": env, "torch": torch})
    >>> [f.name for f in g.fragments]
    ['env@cell', 'env@it']
    """
    if callable(source_or_function):
        source, default_ns = _function_body(source_or_function)
    else:
        source, default_ns = str(source_or_function), sys._getframe(1).f_globals
    namespace = default_ns if namespace is None else namespace
    return _Capture(source, namespace, name, _overrides(roles or {}, namespace)).graph()


def _overrides(roles: dict[str, str], namespace: dict) -> dict[int, str]:
    """``roles`` by object (id), checked: what a user names must exist and the role must be one fragnb places."""
    out = {}
    for var, r in roles.items():
        if r not in ROLES:
            raise ValueError(f"role {r!r} for `{var}`: a role is one of {sorted(ROLES)}")
        if var not in namespace:
            raise ValueError(
                f"role for `{var}`: no such name in the notebook (give roles to objects made in earlier cells)"
            )
        out[id(namespace[var])] = r
    return out


def _function_body(fn: Callable) -> tuple[str, dict]:
    """The body of ``fn`` as cell source, and the names it sees (globals, then closure)."""
    source = textwrap.dedent(inspect.getsource(fn))
    func = ast.parse(source).body[0]
    if not isinstance(func, ast.FunctionDef):
        raise FragmentError(f"capture expects a cell's source or a plain function, got {fn!r}")
    lines = source.splitlines()[func.body[0].lineno - 1 : func.end_lineno]
    return textwrap.dedent("\n".join(lines)), {**fn.__globals__, **inspect.getclosurevars(fn).nonlocals}


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


def _names(node: ast.AST) -> tuple[dict[str, int], set[str]]:
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


def _mutated(node: ast.AST) -> set[str]:
    visitor = _Names()
    visitor.visit(node)
    return visitor.mutates


def _call_root(func: ast.expr) -> ast.Name | None:
    """The variable a call goes through: `env` for `env.step(...)` and `actor.policy.eval()`."""
    while isinstance(func, ast.Attribute):
        func = func.value
    return func if isinstance(func, ast.Name) else None


class _Capture:
    def __init__(self, source: str, namespace: dict[str, Any], name: str, overrides: dict[int, str] | None = None):
        self.source, self.namespace, self.name = source, namespace, name
        self.overrides = overrides or {}  # id(object) -> the role the user gave it
        self.lines = source.splitlines()

    def error(self, message: str, node: ast.AST | int | None = None) -> FragmentError:
        lineno = node if isinstance(node, int) or node is None else node.lineno
        return FragmentError.in_source(message, lineno, self.source)

    # -- pipeline -----------------------------------------------------------------------------
    def limit(self, message: str, node: ast.AST | int | None = None, *, whole: bool = True) -> None:
        """Record what a distributed policy cannot split; ``single`` runs it as plain Python does.
        ``whole=False``: a limit of splitting the cell across groups only, which a policy that runs
        the whole cell in each replica (``data_parallel``) does not meet."""
        self.limits.append(self.error(message, node))
        if whole:
            self.whole_limits.append(self.limits[-1])

    def graph(self) -> FragmentGraph:
        self.limits: list[FragmentError] = []
        self.whole_limits: list[FragmentError] = []
        tree = self.parse()
        # A loop that acts or learns through fragnb's components keeps their roles alone; one that only
        # steps a fragnb environment (a text task, the Gymnasium adapter) with its own networks and
        # optimiser is the field's kind of loop, its roles from the ecosystem's types.
        self.native = any(
            role_of(self.namespace.get(n.id)) not in (None, "env") for n in ast.walk(tree) if isinstance(n, ast.Name)
        )
        normalizer = Normalizer(reentrant=lambda expr: reentrant_context(expr, self.namespace))
        tree.body = normalizer.control_flow(tree.body)
        self.check_constructs(tree)
        self.loops: list[Loop] = []
        self.statements: list[Statement] = []
        self.cell_writes = {n for node in tree.body for n in _names(node)[1]}
        for node in ast.walk(tree):
            if isinstance(node, ast.For):
                self.cell_writes |= _names(node.target)[1]
        self.cell_writes |= set(normalizer.temps)
        normalizer.role_of_call = self.role_of_call
        tree.body = normalizer.body(tree.body)
        self.temps, self.synthetic = normalizer.temps, normalizer.synthetic
        self.cell_writes |= set(self.temps)
        self.collect(tree.body, None)
        if not any(s.components for s in self.statements):
            self.limit(
                "the loop calls no component: call an environment (a Gymnasium env or a fragnb Env), a network, "
                "an optimiser or a fragnb Actor, Buffer or Learner from an earlier cell",
                self.loops[0].lineno if self.loops else None,
            )
        self.check_defined(tree.body, set(self.namespace) | set(dir(builtins)))
        self.assign_roles()
        fragments = self.group()
        edges = self.data_edges(fragments) + self.state_edges(fragments)
        components = self.component_roles()
        self.limit_foreign(components)
        return FragmentGraph(
            self.name,
            self.source,
            tree,
            self.loops,
            self.statements,
            fragments,
            edges,
            components,
            self.namespace,
            temps=self.temps,
            reach=self.reach,
            stop_flags=normalizer.stop_flags,
            limits=sorted(self.limits, key=lambda e: e.lineno or 0),
            whole_limits=sorted(self.whole_limits, key=lambda e: e.lineno or 0),
            inputs=frozenset(_names(tree)[0]),
        )

    def parse(self) -> ast.Module:
        try:
            tree = ast.parse(self.source)
            compile(tree, cell_filename(self.name), "exec")  # what plain Python refuses too (`return` in a cell)
        except SyntaxError as e:
            raise self.error(f"syntax error: {e.msg}", e.lineno) from None
        if not tree.body:
            raise FragmentError("the cell is empty: write the training loop below the %%fragment line")
        loops = [n for n in tree.body if isinstance(n, (ast.For, ast.While))]
        if not loops and not any(isinstance(n, (ast.For, ast.While)) for n in ast.walk(tree)):
            self.limit(
                "the cell has no loop: write the training loop as `for it in range(n):` "
                "(the outermost loop counts training iterations)"
            )
        if len(loops) > 1:
            self.limit(
                f"the cell has {len(loops)} top-level loops (lines {', '.join(str(n.lineno) for n in loops)}); "
                "a %%fragment cell holds one training loop",
                loops[1],
            )
        return tree

    def check_constructs(self, tree: ast.Module) -> None:
        for node in ast.walk(tree):
            if isinstance(node, ast.With) and all(
                reentrant_context(i.context_expr, self.namespace) and i.optional_vars is None for i in node.items
            ):
                continue  # a mode context: entered around each statement it holds, in every fragment
            if type(node) in UNSUPPORTED:
                what, why = UNSUPPORTED[type(node)]
                # a handler or a context inside one segment is fine: only spanning groups is not
                self.limit(f"{what} is not supported in a %%fragment cell: {why}", node, whole=type(node) not in SPANS)
            if isinstance(node, ast.For) and node.orelse:
                # an inner one is a single statement to a replica that runs the whole cell (collect() keeps it so)
                self.limit(
                    "`for ... else` is not supported in a %%fragment cell: loops always run to the end",
                    node,
                    whole=node in tree.body,
                )
            if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
                raise self.error("`import *` is not supported: fragnb must know every name the loop uses", node)
        if not any(isinstance(n, ast.For) for n in tree.body) and any(isinstance(n, ast.For) for n in ast.walk(tree)):
            nested = next(n for n in ast.walk(tree) if isinstance(n, ast.For))
            self.limit("the training loop must be at the top level of the cell, not inside another statement", nested)

    def collect(self, body: list[ast.stmt], loop: Loop | None) -> None:
        for node in body:
            if isinstance(node, ast.For) and not (node.orelse and loop is not None):
                header = self.segment(node).splitlines()[0].rstrip(":").strip()
                var = ast.unparse(node.target)
                inner = Loop(var, node.lineno, header, loop, first=len(self.statements), node=node)
                self.loops.append(inner)
                self.collect(node.body, inner)
                continue
            if any(isinstance(n, ast.For) for n in ast.walk(node)):
                nested = next(n for n in ast.walk(node) if isinstance(n, ast.For))
                self.limit(
                    "a loop inside this statement is not supported: loops must nest directly in loops "
                    "(or in an `if`), so that fragnb knows how many times each fragment runs",
                    nested,
                    whole=False,  # a replica that runs the whole cell runs the statement as it is
                )
            reads, writes = _names(node)
            # A list the loop appends to is a value that flows on; a component's own state is not
            # (state edges cover it).
            # (`torch.manual_seed(0)` or `np.random.shuffle(x)` changes no variable `torch` or `np`: a
            # module is not a value that flows.)
            writes |= {
                n
                for n in _mutated(node)
                if n in self.cell_writes
                or self.role(self.namespace.get(n)) is None
                and not isinstance(self.namespace.get(n), types.ModuleType)
            }
            components, calls, role_ = self.uses(node)
            synthetic = id(node) in self.synthetic
            self.statements.append(
                Statement(
                    index=len(self.statements),
                    lineno=node.lineno,
                    end_lineno=node.end_lineno,
                    source=ast.unparse(node) if synthetic else self.segment(node),
                    node=node,
                    loop=loop,
                    reads=frozenset(reads),
                    writes=frozenset(writes),
                    components=components,
                    role=role_,
                    calls=calls,
                )
            )

    def segment(self, node: ast.AST) -> str:
        """The cell's text of ``node`` (``ast.get_source_segment`` splits the whole cell on every call)."""
        first, last = node.lineno - 1, node.end_lineno - 1
        lines = [line.encode() for line in self.lines[first : last + 1]]  # AST columns count UTF-8 bytes
        if first == last:
            return lines[0][node.col_offset : node.end_col_offset].decode()
        return b"\n".join([lines[0][node.col_offset :], *lines[1:-1], lines[-1][: node.end_col_offset]]).decode()

    def role(self, obj) -> str | None:
        """A loop written against fragnb's components keeps their roles alone (its networks and
        optimisers are plain values, as they always were); a loop of plain objects gets roles from
        the ecosystem's types (:mod:`fragnb.graph.roles`)."""
        if obj is not None and id(obj) in self.overrides:
            return self.overrides[id(obj)]
        return role_of(obj) if self.native else role(obj)

    def call_role(self, call: ast.Call) -> str | None:
        return None if self.native else call_role(call)

    def component(self, name: str):
        """The object with a role a name refers to in the loop (a fragnb component, a Gymnasium env,
        a network, ...), or ``None`` (cell variables shadow the notebook)."""
        if name in self.cell_writes or name not in self.namespace:
            return None
        obj = self.namespace[name]
        return obj if self.role(obj) is not None else None

    def role_of_call(self, call: ast.Call) -> str | None:
        root = _call_root(call.func)
        if root is None:
            return self.call_role(call)
        obj = self.namespace.get(root.id) if root.id not in self.cell_writes else None
        if isinstance(obj, type) and issubclass(obj, Component):
            raise self.error(
                f"`{root.id}` is a component class, not an instance; create it in an earlier cell "
                f"(e.g. `{obj.__name__.lower()} = {obj.__name__}(...)`) and call that instance here",
                call,
            )
        found = self.component(root.id)
        return self.role(found) if found is not None else self.call_role(call)

    def uses(self, node: ast.stmt) -> tuple[tuple[str, ...], frozenset[str], str]:
        """The components a statement uses (called, read or handed to a function), the methods it
        calls (``"buffer.sample"``) and its role ("" for a statement that uses no component).

        A component handed to a function that is not a component's method may be used in any way,
        so such a statement runs where the cell's bookkeeping runs (role ``driver``)."""
        called: dict[str, str] = {}
        calls: set[str] = set()
        handed = False
        for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):  # breadth-first: outermost first
            root = _call_root(call.func)
            r = self.role_of_call(call)
            if r is not None:
                # "" for a call whose role is its own (`loss.backward()`), whatever it is called on
                name = root.id if root is not None and self.component(root.id) is not None else ""
                called.setdefault(name, r)
                if name and isinstance(call.func, ast.Attribute) and call.func.value is root:
                    calls.add(f"{name}.{call.func.attr}")
            elif any(
                isinstance(arg, ast.Name) and self.component(arg.id) is not None
                for arg in call.args + [k.value for k in call.keywords]
            ):
                handed = True  # the component itself, not one of its attributes
        touched = {
            n.id: self.role(self.component(n.id))
            for n in ast.walk(node)
            if isinstance(n, ast.Name)
            and isinstance(n.ctx, ast.Load)
            and self.component(n.id) is not None
            and not _reads_only(node, n.id, invariant(self.namespace[n.id]))
        }
        # Reading a plain object's attribute (`envs.single_observation_space.shape` in the learner's
        # flatten) is not using it: the statement goes where its values are needed.
        roles_of_touched = {n: r for n, r in touched.items() if n in called or not is_foreign(self.namespace[n])}
        called_roles = {r for r in called.values() if r != MODULE} or set(called.values())
        components = tuple(dict.fromkeys([*(c for c in called if c), *sorted(touched)]))
        roles = called_roles or set(roles_of_touched.values())
        if len(called_roles) > 1 or (not called and not handed and len(roles) > 1):
            uses = ", ".join(f"`{n}` ({r})" for n, r in {**touched, **called}.items() if n)
            self.limit(
                f"one statement uses components of different roles: {uses}; fragnb splits nested calls and `if` "
                "blocks itself, but not this one: split it into one statement per role, assigning the intermediate "
                "value to a variable, so each can run where its role is placed",
                node,
                whole=False,
            )
        if called:
            return (
                components,
                frozenset(calls),
                sorted(called_roles)[0] if len(called_roles) > 1 else next(iter(called_roles)),
            )
        if handed:
            return components, frozenset(calls), "driver"
        return components, frozenset(calls), next(iter(roles), "")

    def check_defined(self, body: list[ast.stmt], defined: set[str]) -> None:
        """Every name must exist when it is read: on the loop's first iteration, in cell order."""
        for node in body:
            if isinstance(node, ast.For):
                self.check_reads(_names(node.iter)[0], defined)
                defined |= _names(node.target)[1]
                self.check_defined(node.body, defined)
            else:
                reads, writes = _names(node)
                self.check_reads(reads, defined)
                defined |= writes

    def check_reads(self, reads: dict[str, int], defined: set[str]) -> None:
        for var, lineno in reads.items():
            if var in defined:
                continue
            if var in self.cell_writes:
                raise self.error(f"`{var}` is read before it is assigned", lineno)
            raise self.error(
                f"`{var}` is not defined: it is not assigned in the cell nor in the notebook's namespace", lineno
            )

    # -- roles and fragments ------------------------------------------------------------------
    def reaching_defs(self) -> None:
        """Per variable, where it is assigned, in cell order: by statements (an ``if`` only maybe),
        and by loop headers (``for value in`` rebinds ``value`` on every iteration)."""
        events = []  # (position, statement or None, loop it runs in, always runs there)
        for s in self.statements:
            events += [(2 * s.index + 1, s, s.loop, not isinstance(s.node, ast.If), v) for v in s.writes]
        for loop in self.loops:
            events += [(2 * loop.first, None, loop, True, v) for v in _names(loop.node.target)[1]]
        self.defs: dict[str, list] = {}
        for event in sorted(events, key=lambda e: e[0]):
            self.defs.setdefault(event[4], []).append(event)

    def producers(self, stmt: Statement, var: str) -> list[Statement]:
        """Statements whose assignment of ``var`` can reach ``stmt``: those before it back to one that
        always runs before it, and later ones in a loop around both unless such an assignment
        comes first in that loop's iteration."""
        defs = self.defs.get(var, ())
        read = 2 * stmt.index + 1
        i = bisect.bisect_left([d[0] for d in defs], read)
        found, stop = [], -1
        for pos, s, where, always, _ in reversed(defs[:i]):
            if s is not None:
                found.append(s)
            if always and (where is None or where.encloses(stmt.loop)):
                stop = pos
                break
        for pos, s, where, _, _ in defs[i:]:
            common = _innermost_common(where, stmt.loop)
            if s is not None and pos > read and common is not None and stop < 2 * common.first:
                found.append(s)
        return found[::-1]

    def assign_roles(self) -> None:
        """Statements that use no component take the role of the statements that need their values:
        a value only one role needs is computed there; bookkeeping no component needs runs with the
        driver (once, on gathered values, wherever a policy replicates the rest)."""
        self.reaching_defs()
        roles = {s.index: s.role or None for s in self.statements}
        readers: dict[int, list[int]] = {s.index: [] for s in self.statements}
        self.reach: dict[int, dict[str, tuple[int, ...]]] = {}
        for r in self.statements:
            for v in sorted(r.reads):
                producers = self.producers(r, v)
                self.reach.setdefault(r.index, {})[v] = tuple(p.index for p in producers)
                for p in producers:
                    if p.index != r.index:
                        readers[p.index].append(r.index)
        for i in (s.index for s in self.statements if roles[s.index] == MODULE):
            roles[i] = "actor" if self.reaches_env(i, readers, roles) else "learner"
        plain = [s.index for s in self.statements if roles[s.index] is None]
        need: dict[int, set[str]] = {i: set() for i in plain}
        changed = True
        while changed:  # needs flow backwards through chains of plain statements
            changed = False
            for i in reversed(plain):
                new = set().union(*({roles[r]} if roles[r] else need[r] for r in readers[i]))
                if new != need[i]:
                    need[i], changed = new, True
        for i in plain:
            if len(need[i]) < 2 and not isinstance(
                self.statements[i].node, ast.Delete
            ):  # `del` goes where its name lives
                roles[i] = next(iter(need[i]), "driver")
        # Needed by several roles: computed with what it reads (latest producer), else its first reader.
        for s in self.statements:
            if roles[s.index] is None:
                sources = sorted(
                    (p for ps in self.reach.get(s.index, {}).values() for p in ps if roles[p]), reverse=True
                )
                firsts = [roles[r] for r in readers[s.index] if roles[r]]
                roles[s.index] = roles[sources[0]] if sources else (firsts[0] if firsts else "driver")
        if not any(role_of(self.namespace[c]) for s in self.statements for c in s.components):
            self.find_buffer(roles)
        self.statements = [replace(s, role=roles[s.index]) for s in self.statements]

    def reaches_env(self, start: int, readers: dict[int, list[int]], roles: dict) -> bool:
        """Whether a network's results reach an environment's ``step`` (through statements of no
        other role): then the call is the actor's."""
        seen, todo = {start}, [start]
        while todo:
            for r in readers[todo.pop()]:
                if roles[r] == "env":
                    return True
                if r not in seen and roles[r] in (None, MODULE):
                    seen.add(r)
                    todo.append(r)
        return False

    def find_buffer(self, roles: dict) -> None:
        """In a loop of plain objects, statements of the rollout (a loop that steps an environment)
        that only store values for the learner (``obs[step] = next_obs``, ``memory.append(x)``)
        are the buffer. (A fragnb Buffer marks its own.)"""
        rollouts = {s.loop for s in self.statements if roles[s.index] == "env"}
        for s in self.statements:
            if s.role == "" and roles[s.index] == "learner" and s.loop in rollouts and _stores(s.node):
                roles[s.index] = "buffer"

    def component_roles(self) -> dict[str, str]:
        """Each component the loop uses, with its role: a network's is the learner's when the
        learner's statements use it (CleanRL's ``agent``: acted with and trained), else theirs."""
        used: dict[str, list[str]] = {}
        for s in self.statements:
            for c in s.components:
                used.setdefault(c, []).append(s.role)
        out = {}
        for c, roles in used.items():
            r = self.role(self.namespace[c])
            out[c] = r if r != MODULE else ("learner" if "learner" in roles else roles[0])
        return out

    def limit_foreign(self, components: dict[str, str]) -> None:
        """Distributed policies split and send Gymnasium vector envs, networks and optimisers
        (:mod:`fragnb.shards`); a loop calling another object of the ecosystem runs under `single` only."""
        for c in components:
            why = unsupported(self.namespace[c]) if is_foreign(self.namespace[c]) else None
            if why:
                first = next(s for s in self.statements if c in s.components)
                self.limit(
                    f"the loop calls `{c}` ({_type_name(self.namespace[c])}), which a distributed policy cannot "
                    f"move: {why}",
                    first.lineno,
                    whole=False,  # copied whole, it need not split (what cannot travel the payload refuses by name)
                )
                return

    def group(self) -> list[Fragment]:
        groups: dict[tuple[str, Loop | None], list[Statement]] = {}
        for s in self.statements:
            groups.setdefault((s.role, s.loop), []).append(s)
        role_count: dict[str, int] = {}
        for name, _ in groups:
            role_count[name] = role_count.get(name, 0) + 1
        return [
            Fragment(name if role_count[name] == 1 else f"{name}@{loop.var if loop else 'cell'}", name, loop, stmts)
            for (name, loop), stmts in groups.items()
        ]

    def data_edges(self, fragments: list[Fragment]) -> list[Edge]:
        owner = {s.index: f for f in fragments for s in f.statements}
        flows: dict[tuple[str, str], dict[str, None]] = {}
        for s in self.statements:
            for var in sorted(s.reads):
                for p in self.producers(s, var):
                    src, dst = owner[p.index].name, owner[s.index].name
                    if src != dst:
                        flows.setdefault((src, dst), {})[var] = None
        return [Edge(src, dst, tuple(vs)) for (src, dst), vs in flows.items()]

    def state_edges(self, fragments: list[Fragment]) -> list[Edge]:
        """Shared component state: one component called from two fragments, or one network held by
        components in two fragments (weights flow from the learner to the others)."""
        edges: list[Edge] = []
        for i, a in enumerate(fragments):
            for b in fragments[i + 1 :]:
                shared = [f"{c} state" for c in a.components if c in b.components]
                shared += self.shared_modules(a, b)
                if not shared:
                    continue
                src, dst = (b, a) if b.role == "learner" and a.role != "learner" else (a, b)
                edges.append(Edge(src.name, dst.name, tuple(shared), kind="state"))
        return edges

    def shared_modules(self, a: Fragment, b: Fragment) -> list[str]:
        mods_a = self.modules(a)
        return [
            f"{label.split('.')[1]} weights"
            for key, label in self.modules(b).items()
            if key in mods_a and not _same_component(a, b, label)
        ]

    def modules(self, frag: Fragment) -> dict[int, str]:
        found: dict[int, str] = {}
        for comp in frag.components:
            if role_of(self.namespace[comp]) is None:
                continue  # a plain object: shared by name, its state edge says so
            for attr, value in modules_of(self.namespace[comp]).items():
                found.setdefault(id(value), f"{comp}.{attr}")
        return found


def _reads_only(node: ast.AST, name: str, attributes: frozenset[str]) -> bool:
    """Whether all ``node`` does with ``name`` is read some of ``attributes`` (``envs.single_action_space``)."""
    if not attributes:
        return False
    names = sum(1 for n in ast.walk(node) if isinstance(n, ast.Name) and n.id == name)
    reads = sum(
        1
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute)
        and isinstance(n.value, ast.Name)
        and n.value.id == name
        and n.attr in attributes
    )
    return names == reads


def _stores(node: ast.stmt) -> bool:
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


def _type_name(obj) -> str:
    """A class as users import it: ``torch.optim.Adam``, ``gymnasium.vector.SyncVectorEnv``, ``Agent``."""
    cls = type(obj)
    if cls.__module__ in ("__main__", "builtins"):
        return cls.__qualname__
    parts = cls.__module__.split(".")
    for k in range(1, len(parts) + 1):
        if getattr(sys.modules.get(".".join(parts[:k])), cls.__qualname__, None) is cls:
            return f"{'.'.join(parts[:k])}.{cls.__qualname__}"
    return f"{cls.__module__}.{cls.__qualname__}"


def _same_component(a: Fragment, b: Fragment, label: str) -> bool:
    # A component called from both fragments already has a state edge; don't list its modules twice.
    comp = label.split(".")[0]
    return comp in a.components and comp in b.components


def _innermost_common(a: Loop | None, b: Loop | None) -> Loop | None:
    while a is not None and not a.encloses(b):
        a = a.parent
    return a
