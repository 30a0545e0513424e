"""Capture: a cell's source --AST--> FragmentGraph.

A statement's role comes from the type of the component it calls (an :class:`~fragnb.components.Env`
instance makes it an env statement, whatever the variable is called). Statements that call no
component join the fragment of the statement whose values they read (def-use), or failing that
of the statement that reads what they assign. Fragments are the statements of one role inside one
loop. Data edges carry the variables that cross fragments; state edges mark components and
networks that two fragments share by object identity.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import sys
import textwrap
from dataclasses import replace
from typing import Any, Callable

import torch

from .components import Component, role_of
from .errors import FragmentError
from .graph import Edge, Fragment, FragmentGraph, Loop, Statement

__all__ = ["capture"]

# Constructs a cell cannot contain, and why: fragments run in separate processes.
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
    ast.Try: ("`try`", "a handler cannot span fragments that run in different processes; handle errors inside a component method"),
    ast.TryStar: ("`try`", "a handler cannot span fragments that run in different processes; handle errors inside a component method"),
    ast.With: ("`with`", "a context cannot span fragments that run in different processes; enter it inside a component method"),
    ast.While: ("a `while` loop", "every replica must run the same number of iterations, known when the loop starts; use `for it in range(n)`"),
    ast.Break: ("`break`", "replicas of a fragment run every iteration; leaving a loop early would desynchronise them"),
    ast.Continue: ("`continue`", "replicas of a fragment run every iteration; skipping one would desynchronise them"),
}


def capture(source_or_function: str | Callable, namespace: dict[str, Any] | None = None, name: str = "fragment") -> FragmentGraph:
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
    return _Capture(source, namespace, name).graph()


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
        if isinstance(node.func, ast.Attribute):
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
    """Names read (with the line of their first read) and names bound."""
    visitor = _Names()
    visitor.visit(node)
    return visitor.reads, visitor.writes


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
    def __init__(self, source: str, namespace: dict[str, Any], name: str):
        self.source, self.namespace, self.name = source, namespace, name
        self.lines = source.splitlines()

    def error(self, message: str, node: ast.AST | int | None = None) -> FragmentError:
        lineno = node if isinstance(node, int) or node is None else node.lineno
        line = self.lines[lineno - 1] if lineno and lineno <= len(self.lines) else None
        return FragmentError(message, lineno, line)

    # -- pipeline -----------------------------------------------------------------------------
    def graph(self) -> FragmentGraph:
        tree = self.parse()
        self.check_constructs(tree)
        self.loops: list[Loop] = []
        self.statements: list[Statement] = []
        self.cell_writes = {n for node in tree.body for n in _names(node)[1]}
        for node in ast.walk(tree):
            if isinstance(node, ast.For):
                self.cell_writes |= _names(node.target)[1]
        self.collect(tree.body, None)
        if not any(s.components for s in self.statements):
            raise self.error(
                "the loop calls no component; call an Env, Actor, Buffer or Learner instance "
                "(an object of a fragnb.components class) from an earlier cell",
                self.loops[0].lineno,
            )
        self.check_defined(tree.body, set(self.namespace) | set(dir(builtins)))
        self.assign_roles()
        fragments = self.group()
        edges = self.data_edges(fragments) + self.state_edges(fragments)
        components = {c: role_of(self.namespace[c]) for s in self.statements for c in s.components}
        return FragmentGraph(self.name, self.source, tree, self.loops, self.statements, fragments, edges, components, self.namespace)

    def parse(self) -> ast.Module:
        try:
            tree = ast.parse(self.source)
        except SyntaxError as e:
            raise FragmentError(f"syntax error: {e.msg}", e.lineno, e.text) from None
        if not tree.body:
            raise FragmentError("the cell is empty: write the training loop below the %%fragment line")
        loops = [n for n in tree.body if isinstance(n, ast.For)]
        if not loops:
            if any(isinstance(n, (ast.For, ast.While)) for n in ast.walk(tree)):
                pass  # nested inside something else: check_constructs names it
            else:
                raise FragmentError(
                    "the cell has no loop: write the training loop as `for it in range(n):` "
                    "(the outermost loop counts training iterations)"
                )
        if len(loops) > 1:
            raise self.error(
                f"the cell has {len(loops)} top-level loops (lines {', '.join(str(n.lineno) for n in loops)}); "
                "a %%fragment cell holds one training loop",
                loops[1],
            )
        return tree

    def check_constructs(self, tree: ast.Module) -> None:
        for node in ast.walk(tree):
            if type(node) in UNSUPPORTED:
                what, why = UNSUPPORTED[type(node)]
                raise self.error(f"{what} is not supported in a %%fragment cell: {why}", node)
            if isinstance(node, ast.For) and node.orelse:
                raise self.error("`for ... else` is not supported in a %%fragment cell: loops always run to the end", node)
            if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
                raise self.error("`import *` is not supported: fragnb must know every name the loop uses", node)
        if not any(isinstance(n, ast.For) for n in tree.body):
            nested = next(n for n in ast.walk(tree) if isinstance(n, ast.For))
            raise self.error("the training loop must be at the top level of the cell, not inside another statement", nested)

    def collect(self, body: list[ast.stmt], loop: Loop | None) -> None:
        for node in body:
            if isinstance(node, ast.For):
                header = ast.get_source_segment(self.source, node).splitlines()[0].rstrip(":").strip()
                var = ast.unparse(node.target)
                inner = Loop(var, node.lineno, header, loop)
                self.loops.append(inner)
                self.collect(node.body, inner)
                continue
            if any(isinstance(n, ast.For) for n in ast.walk(node)):
                nested = next(n for n in ast.walk(node) if isinstance(n, ast.For))
                raise self.error(
                    "a loop inside an `if` is not supported: loops must nest directly in loops, so that "
                    "fragnb knows how many times each fragment runs",
                    nested,
                )
            reads, writes = _names(node)
            # A list the loop appends to is a value that flows on; a component's own state is not
            # (state edges cover it).
            writes |= {n for n in _mutated(node) if role_of(self.namespace.get(n)) is None or n in self.cell_writes}
            self.statements.append(
                Statement(
                    index=len(self.statements),
                    lineno=node.lineno,
                    end_lineno=node.end_lineno,
                    source=ast.get_source_segment(self.source, node),
                    node=node,
                    loop=loop,
                    reads=frozenset(reads),
                    writes=frozenset(writes),
                    components=self.components_called(node),
                    role="",
                )
            )

    def components_called(self, node: ast.stmt) -> tuple[str, ...]:
        """Component variables the statement calls, outermost call first; one role per statement."""
        found: dict[str, str] = {}
        for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):  # breadth-first: outermost first
            root = _call_root(call.func)
            if root is None or root.id in self.cell_writes or root.id not in self.namespace:
                continue
            obj = self.namespace[root.id]
            if isinstance(obj, type) and issubclass(obj, Component):
                raise self.error(
                    f"`{root.id}` is a component class, not an instance; create it in an earlier cell "
                    f"(e.g. `{obj.__name__.lower()} = {obj.__name__}(...)`) and call that instance here",
                    call,
                )
            role = role_of(obj)
            if role is not None:
                found.setdefault(root.id, role)
        if len(set(found.values())) > 1:
            calls = ", ".join(f"`{n}` ({r})" for n, r in found.items())
            raise self.error(
                f"one statement calls components of different roles: {calls}; split it into one statement "
                "per role, assigning the intermediate value to a variable, so each can run where its role is placed",
                node,
            )
        return tuple(found)

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
            raise self.error(f"`{var}` is not defined: it is not assigned in the cell nor in the notebook's namespace", lineno)

    # -- roles and fragments ------------------------------------------------------------------
    def producers(self, stmt: Statement, var: str) -> list[Statement]:
        """Statements whose assignment of ``var`` can reach ``stmt``: the last one before it, and
        any later one in a loop around ``stmt`` (it reaches the next iteration)."""
        before = [s for s in self.statements[: stmt.index] if var in s.writes]
        after = [
            s for s in self.statements[stmt.index + 1 :]
            if var in s.writes and s.loop is not None and _common_loop(s.loop, stmt.loop)
        ]
        return before[-1:] + after

    def assign_roles(self) -> None:
        roles = {s.index: (role_of(self.namespace[s.components[0]]) if s.components else None) for s in self.statements}
        # Plain statements take the role of what they read (latest producer first) ...
        for s in self.statements:
            if roles[s.index] is None:
                sources = sorted((p.index for v in s.reads for p in self.producers(s, v) if roles[p.index]), reverse=True)
                roles[s.index] = roles[sources[0]] if sources else None
        # ... or else of the first statement that reads what they assign.
        for s in reversed(self.statements):
            if roles[s.index] is None:
                readers = [
                    r for r in self.statements
                    if roles[r.index] and any(s in self.producers(r, v) for v in s.writes & r.reads)
                ]
                roles[s.index] = roles[readers[0].index] if readers else "driver"
        self.statements = [_with_role(s, roles[s.index]) for s in self.statements]

    def group(self) -> list[Fragment]:
        groups: dict[tuple[str, Loop | None], list[Statement]] = {}
        for s in self.statements:
            groups.setdefault((s.role, s.loop), []).append(s)
        role_count: dict[str, int] = {}
        for role, _ in groups:
            role_count[role] = role_count.get(role, 0) + 1
        return [
            Fragment(role if role_count[role] == 1 else f"{role}@{loop.var if loop else 'cell'}", role, loop, stmts)
            for (role, loop), stmts in groups.items()
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
        return [f"{label.split('.')[1]} weights" for key, label in self.modules(b).items() if key in mods_a and not _same_component(a, b, label)]

    def modules(self, frag: Fragment) -> dict[int, str]:
        found: dict[int, str] = {}
        for comp in frag.components:
            for attr, value in vars(self.namespace[comp]).items():
                if isinstance(value, torch.nn.Module):
                    found.setdefault(id(value), f"{comp}.{attr}")
        return found


def _same_component(a: Fragment, b: Fragment, label: str) -> bool:
    # A component called from both fragments already has a state edge; don't list its modules twice.
    comp = label.split(".")[0]
    return comp in a.components and comp in b.components


def _common_loop(a: Loop, b: Loop | None) -> bool:
    while a is not None:
        if a.encloses(b):
            return True
        a = a.parent
    return False


def _with_role(s: Statement, role: str) -> Statement:
    return replace(s, role=role)
