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

Capture's stages, in the order it runs them, each a module of its own: :mod:`.refusals` (the
cell parsed; what is refused or recorded as a limit, and why), :mod:`.normalize` (control flow and
nested calls into plain statements), this module (each statement with its reads, writes and the
components it uses, by :mod:`.flow`'s def-use facts; :func:`capture` itself), :mod:`.defuse` (which
assignments reach which reads; the roles of statements by who needs their values),
:mod:`.fragments` (fragments and their data and state edges).
"""

from __future__ import annotations

import ast
import builtins
import inspect
import sys
import textwrap
import types
from collections.abc import Callable
from typing import Any

from ..components import ROLES, Component, role_of
from ..errors import FragmentError
from ..shards import invariant
from ..sinks import kind_of
from .defuse import Reach, assign_roles
from .flow import call_root, mutated, names, reads_only
from .fragments import data_edges, group, state_edges
from .inline import Inlined, method_loop
from .model import FragmentGraph, Loop, Statement
from .normalize import Normalizer
from .refusals import Refusals, check_constructs, check_defined, held_components, limit_foreign, parse
from .roles import MODULE, call_role, is_foreign, reentrant_context, role

__all__ = ["capture"]


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
    inlined = None if callable(source_or_function) else method_loop(source, namespace)
    if inlined is not None:  # `agent.train(n)`: the loop is the method's body
        source = inlined.source
    return _Capture(source, namespace, name, _overrides(roles or {}, namespace), inlined).graph()


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


class _Capture:
    """One cell's capture: the pipeline of stages (:meth:`graph`), and what it reads of each
    statement (the components it uses, their roles as this cell gives them)."""

    def __init__(
        self,
        source: str,
        namespace: dict[str, Any],
        name: str,
        overrides: dict[int, str] | None = None,
        inlined: Inlined | None = None,
    ):
        self.source, self.namespace, self.name = source, namespace, name
        self.read_from = inlined.origin if inlined is not None else None
        self.own = inlined.temps if inlined is not None else {}  # a method's variables: never the notebook's
        self.overrides = overrides or {}  # id(object) -> the role the user gave it
        self.lines = source.splitlines()
        self.refusals = Refusals(source, self.read_from)

    # -- pipeline -----------------------------------------------------------------------------
    def graph(self) -> FragmentGraph:
        """Run capture's stages over the cell, in order: parse, normalise, collect statements, check
        names, give roles, group fragments, draw edges."""
        tree = parse(self.source, self.name, self.refusals, self.namespace)
        # A loop that acts or learns through fragnb's components keeps their roles alone; one that only
        # steps a fragnb environment (a text task, the Gymnasium adapter) with its own networks and
        # optimiser is the field's kind of loop, its roles from the ecosystem's types.
        self.native = any(
            role_of(self.namespace.get(n.id)) not in (None, "env") for n in ast.walk(tree) if isinstance(n, ast.Name)
        )
        normalizer = Normalizer(reentrant=lambda expr: reentrant_context(expr, self.namespace))
        tree.body = normalizer.control_flow(tree.body)
        check_constructs(tree, self.namespace, self.refusals)
        self.loops: list[Loop] = []
        self.statements: list[Statement] = []
        self.cell_writes = {n for node in tree.body for n in names(node)[1]}
        for node in ast.walk(tree):
            if isinstance(node, ast.For):
                self.cell_writes |= names(node.target)[1]
        self.cell_writes |= set(normalizer.temps)
        normalizer.role_of_call = self.role_of_call
        tree.body = normalizer.body(tree.body)
        self.temps, self.synthetic = {**self.own, **normalizer.temps}, normalizer.synthetic
        self.cell_writes |= set(self.temps)
        self.collect(tree.body, None)
        if self.loops and not any(s.components for s in self.statements):  # no loop: parse() said so
            held = held_components(tree, self.namespace, self.cell_writes)
            if held:  # a policy running the loop whole needs no names: only one that splits it does
                found = "; ".join(f"`{text}`, {kind}, line {line}" for text, kind, line in held[:4])
                self.refusals.limit(
                    f"the loop reaches what it calls through an object's attributes ({found}): a policy that "
                    "splits the loop places the objects the cell names, not an object's attributes. Name them in "
                    f"an earlier cell (`{held[0][0].rpartition('.')[2]} = {held[0][0]}`) and call those, or use "
                    "'data_parallel', which runs the loop whole",
                    held[0][2],
                    whole=False,
                )
            else:
                self.refusals.limit(
                    "the loop calls no component: call an environment (a Gymnasium env or a fragnb Env), a network, "
                    "an optimiser or a fragnb Actor, Buffer or Learner from an earlier cell",
                    self.loops[0].lineno,
                )
        check_defined(tree.body, set(self.namespace) | set(dir(builtins)), self.cell_writes, self.refusals)
        reach = Reach(self.statements, self.loops)
        self.statements, reached = assign_roles(self.statements, reach, self.namespace)
        fragments = group(self.statements)
        edges = data_edges(self.statements, fragments, reach) + state_edges(fragments, self.namespace)
        components = self.component_roles()
        limit_foreign(components, self.statements, self.namespace, self.refusals)
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
            reach=reached,
            stop_flags=normalizer.stop_flags,
            limits=sorted(self.refusals.limits, key=lambda e: e.lineno or 0),
            whole_limits=sorted(self.refusals.whole_limits, key=lambda e: e.lineno or 0),
            inputs=frozenset(names(tree)[0]),
            read_from=self.read_from,
        )

    # -- statements ---------------------------------------------------------------------------
    def collect(self, body: list[ast.stmt], loop: Loop | None) -> None:
        """Append each statement of ``body`` (run in ``loop``) to :attr:`statements`, in cell order; a
        ``for`` becomes a :class:`Loop` whose body is collected in turn."""
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
                self.refusals.limit(
                    "a loop inside this statement is not supported: loops must nest directly in loops "
                    "(or in an `if`), so that fragnb knows how many times each fragment runs",
                    nested,
                    whole=False,  # a replica that runs the whole cell runs the statement as it is
                )
            reads, writes = names(node)
            # A list the loop appends to is a value that flows on; a component's own state is not
            # (state edges cover it).
            # (`torch.manual_seed(0)` or `np.random.shuffle(x)` changes no variable `torch` or `np`: a
            # module is not a value that flows; nor is a logger or a writer, whose calls are effects: fragnb.sinks.)
            writes |= {
                n
                for n in mutated(node)
                if n in self.cell_writes
                or self.role(self.namespace.get(n)) is None
                and not isinstance(self.namespace.get(n), types.ModuleType)
                and not kind_of(self.namespace.get(n))
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
        root = call_root(call.func)
        if root is None:
            return self.call_role(call)
        obj = self.namespace.get(root.id) if root.id not in self.cell_writes else None
        if isinstance(obj, type) and issubclass(obj, Component):
            raise self.refusals.error(
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
            root = call_root(call.func)
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
            and not reads_only(node, n.id, invariant(self.namespace[n.id]))
        }
        # Reading a plain object's attribute (`envs.single_observation_space.shape` in the learner's
        # flatten) is not using it: the statement goes where its values are needed.
        roles_of_touched = {n: r for n, r in touched.items() if n in called or not is_foreign(self.namespace[n])}
        called_roles = {r for r in called.values() if r != MODULE} or set(called.values())
        components = tuple(dict.fromkeys([*(c for c in called if c), *sorted(touched)]))
        roles = called_roles or set(roles_of_touched.values())
        if len(called_roles) > 1 or (not called and not handed and len(roles) > 1):
            uses = ", ".join(f"`{n}` ({r})" for n, r in {**touched, **called}.items() if n)
            self.refusals.limit(
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
