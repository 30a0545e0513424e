"""Instrumenting the cell's code: fragment timers, the iteration hook and statement traces.

Every way of running a cell (in the notebook, dry on copies, a replica's segments) executes code
rewritten here; it calls the one name fragnb puts in a namespace while it runs, ``DRIVER``.
"""

from __future__ import annotations

import ast
import contextlib
import linecache
from collections.abc import Iterable, Iterator
from typing import Protocol

__all__ = ["DRIVER", "Driver", "instrument", "compile_cell", "remember_source", "plain_env_steps"]

DRIVER = "__fragnb_run__"  # the one name fragnb puts in a namespace, only while code of a run executes


class Driver(Protocol):
    """What code instrumented here calls on ``DRIVER``: every way of running a cell declares it (the
    notebook's ``single`` run, the dry runs on copies, the safety net's watcher, a replica).

    Each method is called only where :func:`instrument` was asked for it, and does by default what
    plain Python would: nothing around the code (``timer``), the loop's own values (``iterate``, the
    first top-level loop with ``hook_loop``), nothing after a statement (``done``, with ``trace``) or a
    plain vector environment's step (``stepped``, with ``steps``).
    """

    def timer(self, name: str) -> contextlib.AbstractContextManager:
        """Around each run of statements of fragment ``name``."""
        return contextlib.nullcontext()

    def iterate(self, iterable: Iterable) -> Iterator:
        """The iteration loop's values, one per iteration."""
        yield from iterable

    def done(self, index: int) -> None:
        """After the graph's statement ``index``."""

    def stepped(self, n: int) -> None:
        """After a statement that stepped ``n`` environments of a plain (Gymnasium) vector environment."""

    def recording(self, index: int) -> contextlib.AbstractContextManager:
        """Around each run of the graph's statement ``index``, where the run records its fragment."""
        return contextlib.nullcontext()


def instrument(
    body: list[ast.stmt],
    owner: dict[int, str],
    hook_loop: bool = False,
    trace: dict[int, int] | None = None,
    steps: dict[int, int] | None = None,
    record: dict[int, int] | None = None,
) -> list[ast.stmt]:
    """``body`` with each run of consecutive statements of one fragment timed by
    ``__fragnb_run__.timer(fragment)``; with ``hook_loop`` the (first) top-level loop iterates through
    ``__fragnb_run__.iterate`` (progress); with ``trace`` (node id -> statement index) every statement
    is followed by ``__fragnb_run__.done(index)``; with ``steps`` (node id -> environments it steps) each
    statement that steps a plain vector environment is followed by ``__fragnb_run__.stepped(n)``; with
    ``record`` (node id -> statement index) each of those statements runs inside
    ``__fragnb_run__.recording(index)`` (:mod:`fragnb.plan.recording`)."""

    def call(method: str, *args: ast.expr) -> ast.Call:
        return ast.Call(ast.Attribute(ast.Name(DRIVER, ast.Load()), method, ast.Load()), list(args), [])

    def timed(name: str, run: list[ast.stmt]) -> ast.With:
        return ast.copy_location(ast.With([ast.withitem(call("timer", ast.Constant(name)))], run), run[0])

    hooked = []

    def build(nodes: list[ast.stmt], top: bool) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        run: list[ast.stmt] = []
        current = None
        for node in nodes:
            name = None if isinstance(node, ast.For) else owner[id(node)]
            if run and name != current:
                out.append(timed(current, run))
                run = []
            current = name
            if isinstance(node, ast.For):
                hook = top and hook_loop and not hooked  # the first top-level loop counts the iterations
                if hook:
                    hooked.append(node)
                it = ast.copy_location(call("iterate", node.iter), node.iter) if hook else node.iter
                out.append(ast.copy_location(ast.For(node.target, it, build(node.body, False), [], None), node))
            else:
                recorded = record and id(node) in record
                run.append(
                    ast.copy_location(
                        ast.With([ast.withitem(call("recording", ast.Constant(record[id(node)])))], [node]), node
                    )
                    if recorded
                    else node
                )
                if trace is not None:
                    run.append(ast.copy_location(ast.Expr(call("done", ast.Constant(trace[id(node)]))), node))
                if steps and id(node) in steps:
                    run.append(ast.copy_location(ast.Expr(call("stepped", ast.Constant(steps[id(node)]))), node))
        if run:
            out.append(timed(current, run))
        return out

    return build(body, True)


def plain_env_steps(graph, statements, replicas: int = 1) -> dict[int, int]:
    """Which of ``statements`` step a plain (Gymnasium) environment, with how many environments each
    of ``replicas`` replicas steps (node id -> count): fragnb's own envs count their steps themselves."""
    from ..components import Env

    ns = graph.namespace
    plain = [c for c, role in graph.components.items() if role == "env" and not isinstance(ns.get(c), Env)]
    return {
        id(s.node): int(getattr(ns[c], "num_envs", 1)) // replicas
        for s in statements
        for c in plain
        if f"{c}.step" in s.calls
    }


def remember_source(filename: str, source: str) -> None:
    """Let tracebacks of code compiled under ``filename`` show the user's cell lines (in this process)."""
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)


def compile_cell(filename: str, source: str, body: list[ast.stmt]):
    """Compile instrumented statements of a cell under ``filename``; errors and tracebacks name its lines."""
    remember_source(filename, source)
    return compile(ast.fix_missing_locations(ast.Module(body, [])), filename, "exec")
