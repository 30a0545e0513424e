"""The fragmented dataflow graph: loops, statements, fragments and the edges between them."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Loop", "Statement", "Fragment", "Edge", "FragmentGraph", "cell_filename"]


def cell_filename(name: str) -> str:
    """What the code of the cell captured as ``name`` is compiled as: tracebacks and timelines show its lines."""
    return f"<fragment {name}>"


@dataclass(frozen=True)
class Loop:
    """A ``for`` loop of the cell; ``parent`` is the loop around it (``None`` for the iteration loop)."""

    var: str
    lineno: int
    header: str
    parent: Loop | None = None
    first: int = 0  # index of the first statement inside it
    node: ast.For | None = field(default=None, repr=False, compare=False)

    @property
    def depth(self) -> int:
        return 0 if self.parent is None else self.parent.depth + 1

    def encloses(self, other: Loop | None) -> bool:
        while other is not None:
            if other is self:
                return True
            other = other.parent
        return False


@dataclass(frozen=True)
class Statement:
    """One leaf statement of the cell (a whole ``if`` block counts as one)."""

    index: int
    lineno: int
    end_lineno: int
    source: str
    node: ast.stmt = field(repr=False, compare=False)
    loop: Loop | None
    reads: frozenset[str]
    writes: frozenset[str]
    components: tuple[str, ...]  # names of the components it uses (calls, reads, hands to a function)
    role: str
    calls: frozenset[str] = frozenset()  # component methods it calls, as "buffer.sample"


@dataclass
class Fragment:
    """Statements of one role inside one loop: the unit a distribution policy places and replicates."""

    name: str
    role: str
    loop: Loop | None
    statements: list[Statement]

    @property
    def components(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c for s in self.statements for c in s.components))

    @property
    def lines(self) -> tuple[int, ...]:
        return tuple(s.lineno for s in self.statements)

    def __repr__(self) -> str:
        where = f"loop `{self.loop.var}`" if self.loop else "cell"
        return f"Fragment({self.name!r}, role={self.role!r}, {where}, lines={list(self.lines)})"


@dataclass(frozen=True)
class Edge:
    """Values flowing from one fragment to another.

    ``kind`` is ``"data"`` for variables assigned in ``src`` and read in ``dst``, and ``"state"`` for
    component state both fragments touch (a buffer's contents, a network's weights).
    """

    src: str
    dst: str
    variables: tuple[str, ...]
    kind: str = "data"

    @property
    def label(self) -> str:
        return ", ".join(self.variables)


@dataclass
class FragmentGraph:
    """A training loop captured from a cell; build one with :func:`fragnb.capture`.

    Attributes
    ----------
    name : str
        Name given at capture (the ``%%fragment NAME``).
    source : str
        The cell's source.
    fragments : list of Fragment
        In order of their first statement.
    edges : list of Edge
        Data edges, then state edges, each in a stable order.
    components : dict
        Component variable name to role, for every component the loop calls.
    loops : list of Loop
        Outermost first.

    Examples
    --------
    Notebook 01's PPO loop, small: each fragment is the statements of one role in one loop, each edge
    the values (``data``) or the component state (``state``) that one fragment hands another.

    >>> import torch, fragnb
    >>> from fragnb.algos.ppo import SMALL_LOOP, small_setup
    >>> globals().update(small_setup(seed=0))  # notebook 01's components: 4 envs, 8 steps
    >>> graph = fragnb.capture(SMALL_LOOP, globals(), name="ppo")
    >>> print(graph)
    FragmentGraph 'ppo': 7 fragments, 15 edges
      Fragment('env@cell', role='env', cell, lines=[2])
      Fragment('actor@step', role='actor', loop `step`, lines=[5])
      Fragment('env@step', role='env', loop `step`, lines=[6, 8])
      Fragment('buffer@step', role='buffer', loop `step`, lines=[7])
      Fragment('actor@it', role='actor', loop `it`, lines=[9])
      Fragment('buffer@it', role='buffer', loop `it`, lines=[10])
      Fragment('learner', role='learner', loop `it`, lines=[11])
      env@step -> actor@step [data: obs]
      env@cell -> actor@step [data: obs]
      actor@step -> env@step [data: action]
      actor@step -> buffer@step [data: action, logprob, value]
      env@step -> buffer@step [data: obs, reward, terminated, truncated]
      env@cell -> buffer@step [data: obs]
      env@cell -> actor@it [data: obs]
      env@step -> actor@it [data: obs]
      actor@it -> buffer@it [data: last_value]
      buffer@it -> learner [data: batch]
      env@cell -> env@step [state: env state]
      actor@step -> actor@it [state: actor state]
      learner -> actor@step [state: policy weights]
      buffer@step -> buffer@it [state: buffer state]
      learner -> actor@it [state: policy weights]
    >>> graph.components
    {'env': 'env', 'actor': 'actor', 'buffer': 'buffer', 'learner': 'learner'}
    >>> [s.source for s in graph.fragment("learner").statements]
    ['stats = learner.update(batch)']

    In a notebook the graph draws itself (``graph.render()``); :meth:`place` places it under a policy.
    """

    name: str
    source: str
    tree: ast.Module = field(repr=False)
    loops: list[Loop]
    statements: list[Statement] = field(repr=False)
    fragments: list[Fragment]
    edges: list[Edge]
    components: dict[str, str]
    namespace: dict[str, Any] = field(repr=False, compare=False)
    #: The RunResult of the latest run of this graph (set by :func:`fragnb.run`).
    last_run: Any = field(default=None, repr=False, compare=False)
    #: The SweepResult of the latest ``%%fragment ... --seeds`` run of this graph.
    last_sweep: Any = field(default=None, repr=False, compare=False)
    #: Temporaries capture introduced (split nested calls and ``if`` conditions) -> the source they stand for.
    temps: dict[str, str] = field(default_factory=dict, repr=False, compare=False)
    #: Reaching definitions: statement index -> variable it reads -> indices of the statements
    #: whose assignment can reach it.
    reach: dict[int, dict[str, tuple[int, ...]]] = field(default_factory=dict, repr=False, compare=False)
    #: Temporaries that, once true, end the run before the next iteration (`break`, `while`).
    stop_flags: list[str] = field(default_factory=list, repr=False, compare=False)
    #: What plain Python runs but a distributed policy cannot split, in cell order: placing the graph
    #: under any policy but ``single`` raises the first (each names its line and the way out).
    limits: list = field(default_factory=list, repr=False, compare=False)
    #: The limits that hold even where each replica runs the whole cell (``data_parallel``): no loop to
    #: iterate, a function defined in the loop; not those of splitting it across groups.
    whole_limits: list = field(default_factory=list, repr=False, compare=False)
    #: Names the cell reads before it assigns them: what it takes from the notebook.
    inputs: frozenset = field(default_factory=frozenset, repr=False, compare=False)
    #: Where the loop was read from when the cell calls a method holding it (``agent.train(n)``): the
    #: method and its lines; ``source`` is then its body, each statement on the method's own line.
    read_from: str | None = field(default=None, repr=False, compare=False)

    def describe(self, variables: tuple[str, ...]) -> str:
        """Variables as the cell writes them: capture's temporaries show the expression they hold."""
        return ", ".join(self.temps.get(v, v) for v in variables)

    def stopped(self, namespace: dict) -> bool:
        """Whether a stop flag holds in ``namespace`` (a flag not yet assigned does not)."""
        return any(bool(namespace.get(flag, False)) for flag in self.stop_flags)

    def __post_init__(self):
        self._fragment_of = {s.index: f for f in self.fragments for s in f.statements}

    def fragment(self, name: str) -> Fragment:
        for frag in self.fragments:
            if frag.name == name:
                return frag
        raise KeyError(f"no fragment {name!r}; fragments are {[f.name for f in self.fragments]}")

    def fragment_of(self, statement: Statement) -> Fragment:
        return self._fragment_of[statement.index]

    def first_use(self, name: str) -> int | None:
        """The cell line of the first statement that reads ``name`` or calls it as a component, for
        errors about an object the notebook holds."""
        return next((s.lineno for s in self.statements if name in s.reads or name in s.components), None)

    def owners(self) -> dict[int, str]:
        """The fragment of each statement, by the id of its AST node (what instrumented code times)."""
        return {id(s.node): self._fragment_of[s.index].name for s in self.statements}

    @property
    def filename(self) -> str:
        """The name the cell's code is compiled under: tracebacks and timelines show its lines."""
        return cell_filename(self.name)

    def render(self):
        """The graph as a ``graphviz.Digraph``: fragments coloured by role, loops as clusters."""
        from ..ui.render import render_graph

        return render_graph(self)

    def place(self, policy="single", **params):
        """Place the graph under a distribution policy; see :func:`fragnb.policies.place`."""
        from ..policies import place

        return place(self, policy, **params)

    @property
    def dot(self) -> str:
        """The DOT source of :meth:`render`; stable for the same cell and namespace."""
        return self.render().source

    def _repr_mimebundle_(self, include=None, exclude=None):
        from ..ui.render import mimebundle

        return mimebundle(self.render(), include, exclude)

    def __repr__(self) -> str:
        lines = [f"FragmentGraph {self.name!r}: {len(self.fragments)} fragments, {len(self.edges)} edges"]
        lines += [f"  {f!r}" for f in self.fragments]
        lines += [f"  {e.src} -> {e.dst} [{e.kind}: {self.describe(e.variables)}]" for e in self.edges]
        return "\n".join(lines)
