"""What capture refuses, and what it records as limits of distributed policies.

Capture refuses (raises :class:`~fragnb.errors.FragmentError`) only what plain Python would not run
either: a syntax error, a name read before it is assigned, ``import *``. What plain Python runs but a
distributed policy cannot split is a *limit*: recorded on the graph and refused when the graph is
placed under such a policy (``single`` runs it). :class:`Refusals` collects both for one cell; the
functions here are the checks of the cell as a whole (its loops, its constructs, its names, the
foreign objects it calls), while the statement-by-statement ones happen where statements are read.
"""

from __future__ import annotations

import ast
import inspect
import sys
import textwrap
import types

from ..errors import FragmentError
from ..shards import unsupported
from .flow import along, names
from .model import Statement, cell_filename
from .roles import _library, is_foreign, reentrant_context, role

__all__ = [
    "SPANS",
    "UNSUPPORTED",
    "Refusals",
    "parse",
    "check_constructs",
    "check_defined",
    "limit_foreign",
    "held_components",
]

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


class Refusals:
    """The errors and limits of capturing one cell, each quoting the cell's line.

    Parameters
    ----------
    source : str
        The cell's source, which errors quote.
    read_from : str, optional
        Where the source was read from, where it is a method's body the cell calls.

    Attributes
    ----------
    limits : list of FragmentError
        What a distributed policy cannot split, in the order found.
    whole_limits : list of FragmentError
        Those of them that a policy running the whole cell in each replica meets too.
    """

    def __init__(self, source: str, read_from: str | None = None):
        self.source, self.read_from = source, read_from
        self.limits: list[FragmentError] = []
        self.whole_limits: list[FragmentError] = []

    def error(self, message: str, node: ast.AST | int | None = None) -> FragmentError:
        """A refusal of the cell at ``node`` (a node or a line number), to raise; where the loop was read
        from a method (:mod:`fragnb.graph.inline`), the line is the method's and the message says so."""
        lineno = node if isinstance(node, int) or node is None else node.lineno
        if self.read_from is not None:
            message = f"{message} [the loop as read from {self.read_from}]"
        return FragmentError.in_source(message, lineno, self.source)

    def limit(self, message: str, node: ast.AST | int | None = None, *, whole: bool = True) -> None:
        """Record what a distributed policy cannot split; ``single`` runs it as plain Python does.
        ``whole=False``: a limit of splitting the cell across groups only, which a policy that runs
        the whole cell in each replica (``data_parallel``) does not meet."""
        self.limits.append(self.error(message, node))
        if whole:
            self.whole_limits.append(self.limits[-1])


def parse(source: str, name: str, refusals: Refusals, namespace: dict | None = None) -> ast.Module:
    """The cell's AST; refused where plain Python refuses it, a limit where it holds no training loop or several
    (naming the function or method of ``namespace``'s objects that holds the loop the cell calls)."""
    try:
        tree = ast.parse(source)
        compile(tree, cell_filename(name), "exec")  # what plain Python refuses too (`return` in a cell)
    except SyntaxError as e:
        raise refusals.error(f"syntax error: {e.msg}", e.lineno) from None
    if not tree.body:
        raise FragmentError("the cell is empty: write the training loop below the %%fragment line")
    loops = [n for n in tree.body if isinstance(n, (ast.For, ast.While))]
    if not loops and not any(isinstance(n, (ast.For, ast.While)) for n in ast.walk(tree)):
        inside = _loop_inside(tree, namespace or {})
        if inside is None:
            refusals.limit(
                "the cell has no loop: write the training loop as `for it in range(n):` "
                "(the outermost loop counts training iterations)"
            )
        else:
            call, where, fn = inside
            refusals.limit(
                f"the training loop is inside `{fn.__qualname__}` ({where}), which this line calls: fragnb splits a "
                "loop written in the cell itself, and reads no function's body. Write the loop in the cell, calling "
                "what it calls through `self` on the object (its environment, networks and optimiser)",
                call,
            )
    if len(loops) > 1:
        refusals.limit(
            f"the cell has {len(loops)} top-level loops (lines {', '.join(str(n.lineno) for n in loops)}); "
            "a %%fragment cell holds one training loop",
            loops[1],
        )
    return tree


def _loop_inside(tree: ast.Module, namespace: dict):
    """The first call of the cell's top level to a function or method of the user's (not a library's) whose
    body holds a loop: (the call, where the loop is, the function), or None."""
    for node in tree.body:
        for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
            chain = along(call.func, namespace)
            if not chain:
                continue
            fn = getattr(chain[-1][1], "__func__", chain[-1][1])  # a bound method's function
            if not isinstance(fn, types.FunctionType) or _library(fn):
                continue
            try:
                lines, first = inspect.getsourcelines(fn)
            except (OSError, TypeError):
                continue
            body = ast.parse(textwrap.dedent("".join(lines)))
            loop = next((n for n in ast.walk(body) if isinstance(n, (ast.For, ast.While))), None)
            if loop is not None:
                filename = fn.__code__.co_filename
                origin = "a notebook cell" if filename.startswith("<") or "ipykernel" in filename else filename
                return call, f"{origin}, line {first + loop.lineno - 1}", fn
    return None


#: How a refusal names what a role is.
_KINDS = {
    "env": "an environment",
    "module": "a network",
    "learner": "an optimiser",
    "actor": "an actor",
    "buffer": "a buffer",
}


def held_components(tree: ast.Module, namespace: dict, cell_writes: set[str]) -> list[tuple[str, str, int]]:
    """What the cell calls through an object's attributes that has a role of its own (a tutorial agent's
    ``agent.env.step(a)``, ``agent.net(obs)``, ``agent.optimizer.step()``): ``(text, kind, line)`` for each,
    first line first, each text once."""
    found: dict[str, tuple[str, str, int]] = {}
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        chain = along(call.func, namespace)
        if len(chain) < 2 or chain[0][0].id in cell_writes:
            continue
        for attribute, obj in chain[1:]:  # each attribute along the chain, the object's own first
            r = role(obj)
            if r is not None and r in _KINDS:
                text = ast.unparse(attribute)
                found.setdefault(text, (text, _KINDS[r], call.lineno))
                break
    return sorted(found.values(), key=lambda f: f[2])


def check_constructs(tree: ast.Module, namespace: dict, refusals: Refusals) -> None:
    """Limits for the constructs a distributed policy cannot split (:data:`UNSUPPORTED`) and for a
    training loop that is not at the cell's top level; ``import *`` is refused."""
    for node in ast.walk(tree):
        if isinstance(node, ast.With) and all(
            reentrant_context(i.context_expr, namespace) and i.optional_vars is None for i in node.items
        ):
            continue  # a mode context: entered around each statement it holds, in every fragment
        if type(node) in UNSUPPORTED:
            what, why = UNSUPPORTED[type(node)]
            # a handler or a context inside one segment is fine: only spanning groups is not
            refusals.limit(f"{what} is not supported in a %%fragment cell: {why}", node, whole=type(node) not in SPANS)
        if isinstance(node, ast.For) and node.orelse:
            # an inner one is a single statement to a replica that runs the whole cell (collect() keeps it so)
            refusals.limit(
                "`for ... else` is not supported in a %%fragment cell: loops always run to the end",
                node,
                whole=node in tree.body,
            )
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
            raise refusals.error("`import *` is not supported: fragnb must know every name the loop uses", node)
    if not any(isinstance(n, ast.For) for n in tree.body) and any(isinstance(n, ast.For) for n in ast.walk(tree)):
        nested = next(n for n in ast.walk(tree) if isinstance(n, ast.For))
        refusals.limit("the training loop must be at the top level of the cell, not inside another statement", nested)


def check_defined(body: list[ast.stmt], defined: set[str], cell_writes: set[str], refusals: Refusals) -> None:
    """Every name must exist when it is read: on the loop's first iteration, in cell order.
    ``defined`` grows with what ``body`` binds."""
    for node in body:
        if isinstance(node, ast.For):
            _check_reads(names(node.iter)[0], defined, cell_writes, refusals)
            defined |= names(node.target)[1]
            check_defined(node.body, defined, cell_writes, refusals)
        else:
            reads, writes = names(node)
            _check_reads(reads, defined, cell_writes, refusals)
            defined |= writes


def _check_reads(reads: dict[str, int], defined: set[str], cell_writes: set[str], refusals: Refusals) -> None:
    for var, lineno in reads.items():
        if var in defined:
            continue
        if var in cell_writes:
            raise refusals.error(f"`{var}` is read before it is assigned", lineno)
        raise refusals.error(
            f"`{var}` is not defined: it is not assigned in the cell nor in the notebook's namespace", lineno
        )


def limit_foreign(components: dict[str, str], statements: list[Statement], namespace: dict, refusals: Refusals) -> None:
    """Distributed policies split and send Gymnasium vector envs, networks and optimisers
    (:mod:`fragnb.shards`); a loop calling another object of the ecosystem runs under `single` only."""
    for c in components:
        why = unsupported(namespace[c]) if is_foreign(namespace[c]) else None
        if why:
            first = next(s for s in statements if c in s.components)
            refusals.limit(
                f"the loop calls `{c}` ({_type_name(namespace[c])}), which a distributed policy cannot move: {why}",
                first.lineno,
                whole=False,  # copied whole, it need not split (what cannot travel the payload refuses by name)
            )
            return


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
