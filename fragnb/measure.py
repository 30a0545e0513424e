"""Measure: the bytes each edge of a graph carries per iteration, from one dry iteration on copies.

Placements show these sizes on their edges, so a student can see what a policy would move before
anything runs.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import io
import itertools
import types

import torch

from .graph import FragmentGraph
from .program import DRIVER, instrument

__all__ = ["measure", "nbytes"]


def measure(graph: FragmentGraph) -> dict[tuple[str, str, str], int]:
    """Bytes each edge carries in one training iteration, from one dry iteration on copies.

    The cell's first iteration runs in this process on deep copies of the objects it uses, so the
    notebook's components are untouched. The result is kept as ``graph.edge_bytes``, where
    placements find it to label their edges.
    """
    ns = _copies(graph)
    statements = graph.statements
    owner = {id(s.node): graph.fragment_of(s).name for s in statements}
    index = {id(s.node): s.index for s in statements}
    module = ast.fix_missing_locations(ast.Module(instrument(graph.tree.body, owner, hook_loop=True, trace=index), []))
    sizes = _DrySizes(graph, ns)
    ns[DRIVER] = sizes
    with contextlib.redirect_stdout(io.StringIO()):  # a dry run prints nothing of the cell's own
        exec(compile(module, f"<fragment {graph.name}>", "exec"), ns)
    graph.edge_bytes = sizes.totals()
    return graph.edge_bytes


def run_plain(graph: FragmentGraph, ns: dict, iterations: int) -> None:
    """Run the cell's first ``iterations`` iterations as plain Python in ``ns``."""
    owner = {id(s.node): graph.fragment_of(s).name for s in graph.statements}
    module = ast.fix_missing_locations(ast.Module(instrument(graph.tree.body, owner, hook_loop=True), []))
    ns[DRIVER] = _Dry(graph, ns, iterations)
    try:
        exec(compile(module, f"<fragment {graph.name}>", "exec"), ns)
    finally:
        for name in (DRIVER, *graph.temps):
            ns.pop(name, None)


def _copies(graph: FragmentGraph) -> dict:
    """Deep copies (sharing preserved) of the namespace values the cell reads; modules, classes and
    functions are shared as they are."""
    keep = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType)
    headers = (node.iter for node in ast.walk(graph.tree) if isinstance(node, ast.For))
    names = {n for s in graph.statements for n in s.reads} | {n.id for h in headers for n in ast.walk(h) if isinstance(n, ast.Name)}
    values = {n: graph.namespace[n] for n in names if n in graph.namespace}
    memo = {id(v): v for v in values.values() if isinstance(v, keep)}
    return {"__builtins__": graph.namespace.get("__builtins__", __builtins__), **copy.deepcopy(values, memo)}


def nbytes(value) -> int:
    """Bytes of tensors in ``value`` (nested dicts, lists, tuples); 8 for other leaves."""
    if isinstance(value, torch.Tensor):
        return value.nbytes
    if isinstance(value, dict):
        return sum(nbytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(nbytes(v) for v in value)
    return 8


class _Dry:
    """Driver of a dry run: no timing, the first ``iterations`` iterations only."""

    def __init__(self, graph: FragmentGraph, ns: dict, iterations: int = 1):
        self.graph, self.ns, self.iterations = graph, ns, iterations

    def timer(self, name: str):
        return contextlib.nullcontext()

    def iterate(self, iterable):
        for item in itertools.islice(iterable, self.iterations):
            if self.graph.stopped(self.ns):
                return
            yield item

    def done(self, index: int) -> None:
        pass


class _DrySizes(_Dry):
    """A dry iteration adding up what each edge's variables weigh when assigned."""

    def __init__(self, graph: FragmentGraph, ns: dict):
        super().__init__(graph, ns, 1)
        self.data = {(e.src, e.dst, e.kind): 0 for e in graph.edges}
        self.fragment = {s.index: graph.fragment_of(s).name for s in graph.statements}

    def done(self, index: int) -> None:
        stmt = self.graph.statements[index]
        for e in self.graph.edges:
            if e.kind == "data" and e.src == self.fragment[index]:
                self.data[(e.src, e.dst, e.kind)] += sum(nbytes(self.ns[v]) for v in e.variables if v in stmt.writes and v in self.ns)

    def totals(self) -> dict:
        for e in self.graph.edges:
            if e.kind == "state":  # what moving that state once an iteration would carry
                self.data[(e.src, e.dst, e.kind)] = sum(self.state_bytes(label) for label in e.variables)
        return self.data

    def state_bytes(self, label: str) -> int:
        name, _, kind = label.rpartition(" ")
        if kind == "weights":  # "policy weights": a network held as attribute `policy`
            for comp in self.graph.components:
                module = vars(self.ns[comp]).get(name)
                if isinstance(module, torch.nn.Module):
                    return nbytes(module.state_dict())
            return 0
        return nbytes(self.ns[name].state_dict())  # "buffer state": a component's own state
