"""Measure: the bytes each edge of a graph carries per iteration, from one dry iteration on copies.

Placements show these sizes on their edges, so a student can see what a policy would move before
anything runs. The sizes are a value the caller hands on (``graph.place(...).measured(sizes)``), not
an attribute written onto the graph: placing the same graph the same way gives the same placement
whether or not it was measured before.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import torch

from ..graph import FragmentGraph
from ..text import human
from .local import Dry, aside, copies, exec_cell, torch_threads

__all__ = ["measure", "nbytes", "EdgeSizes"]

Key = tuple[str, str, str]  # an edge: (src, dst, kind)


class EdgeSizes(Mapping[Key, int]):
    """Bytes each edge of one graph carries per training iteration, keyed by ``(src, dst, kind)``.

    Read-only: what :func:`measure` found, handed on as it is (to :meth:`Placement.measured
    <fragnb.policies.Placement.measured>`, or kept in a :class:`~fragnb.predict.profile.Profile`).

    Parameters
    ----------
    graph : str
        The name of the graph measured, for the repr.
    sizes : Mapping
        ``(src, dst, kind)`` to bytes per iteration.
    """

    def __init__(self, graph: str, sizes: Mapping[Key, int]):
        self.graph = graph
        self._sizes = dict(sizes)

    def __getitem__(self, edge: Key) -> int:
        return self._sizes[edge]

    def __iter__(self) -> Iterator[Key]:
        return iter(self._sizes)

    def __len__(self) -> int:
        return len(self._sizes)

    def __repr__(self) -> str:
        lines = [f"EdgeSizes of {self.graph!r}, per iteration:"]
        lines += [f"  {src} -> {dst} [{kind}]: {human(n)}" for (src, dst, kind), n in self._sizes.items()]
        return "\n".join(lines)


def measure(graph: FragmentGraph) -> EdgeSizes:
    """Bytes each edge carries in one training iteration, from one dry iteration on copies.

    The cell's first iteration runs in this process on deep copies of the objects it uses, so the
    notebook's components, and the graph, are untouched. Label a placement's edges with the result:
    ``graph.place("coarse", actors=2).measured(sizes)``.

    Parameters
    ----------
    graph : FragmentGraph
        A captured loop whose namespace holds its components.

    Returns
    -------
    EdgeSizes
        ``(src, dst, kind)`` to bytes per iteration, for every data edge and every state edge whose
        state has a ``state_dict`` to size.

    Examples
    --------
    >>> import torch, fragnb
    >>> from fragnb.algos.ppo import SMALL_LOOP, small_setup
    >>> globals().update(small_setup(seed=0))  # notebook 01's components: 4 envs, 8 steps
    >>> graph = fragnb.capture(SMALL_LOOP, globals(), name="ppo")
    >>> sizes = fragnb.measure(graph)
    >>> sizes[("buffer@it", "learner", "data")], sizes[("learner", "actor@step", "state")]
    (1552, 36620)
    >>> "stats" in globals()  # the loop ran on copies: nothing assigned here
    False

    What ``coarse`` would move per iteration (``device="cpu"``: the default, ``"auto"``, puts its
    learner on a GPU where there is one):

    >>> print(graph.place("coarse", actors=2, device="cpu").measured(sizes))
    Placement of 'ppo' under 'coarse' {'actors': 2, 'device': 'cpu'}
      actors x2 (cpu): env@cell, actor@step, env@step, buffer@step, actor@it, buffer@it
      learner x1 (cpu): learner
      buffer@it -> learner [gather: batch (2 kB/iteration)]
      learner -> actor@step [broadcast: policy weights (37 kB/iteration)]
      learner -> actor@it [broadcast: policy weights (37 kB/iteration)]
    """
    ns = copies(graph)
    sizes = _DrySizes(graph, ns)
    with aside(graph), torch_threads(1):  # the bytes are the same on any thread count; one is fastest beside others
        exec_cell(graph, ns, sizes, trace=True)
    return EdgeSizes(graph.name, sizes.totals())


def nbytes(value) -> int:
    """Bytes of tensors in ``value`` (nested dicts, lists, tuples); 8 for other leaves."""
    if isinstance(value, torch.Tensor):
        return value.nbytes
    if isinstance(value, dict):
        return sum(nbytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(nbytes(v) for v in value)
    return 8


class _DrySizes(Dry):
    """A dry iteration adding up what each edge's variables weigh when assigned."""

    def __init__(self, graph: FragmentGraph, ns: dict):
        super().__init__(graph, ns, 1)
        self.data = {(e.src, e.dst, e.kind): 0 for e in graph.edges}
        self.fragment = {s.index: graph.fragment_of(s).name for s in graph.statements}

    def done(self, index: int) -> None:
        stmt = self.graph.statements[index]
        for e in self.graph.edges:
            if e.kind == "data" and e.src == self.fragment[index]:
                self.data[(e.src, e.dst, e.kind)] += sum(
                    nbytes(self.ns[v]) for v in e.variables if v in stmt.writes and v in self.ns
                )

    def totals(self) -> dict:
        for e in self.graph.edges:
            if e.kind == "state":  # what moving that state once an iteration would carry
                sizes = [self.state_bytes(label) for label in e.variables]
                if None in sizes:  # left unlabelled ("not measured") rather than guessed
                    del self.data[(e.src, e.dst, e.kind)]
                else:
                    self.data[(e.src, e.dst, e.kind)] = sum(sizes)
        return self.data

    def state_bytes(self, label: str) -> int | None:
        """Bytes of the state an edge label names, or None where it has no ``state_dict`` to size (a
        Gymnasium vector env, a plain object): its size is unknown, not zero."""
        name, _, kind = label.rpartition(" ")
        if kind == "weights":  # "policy weights": a network held as attribute `policy`
            for comp in self.graph.components:
                module = vars(self.ns[comp]).get(name) if hasattr(self.ns.get(comp), "__dict__") else None
                if isinstance(module, torch.nn.Module):
                    return nbytes(module.state_dict())
            return None
        state_dict = getattr(self.ns.get(name), "state_dict", None)  # "buffer state": a component's own state
        return nbytes(state_dict()) if callable(state_dict) else None
