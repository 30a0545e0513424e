"""Placement: what placing a graph under a policy decides (replicas, devices, edge operators), as data.

:func:`fragnb.policies.placing.place` makes one; a placement draws itself, predicts its throughput and
chooses another operator for an edge (:meth:`Placement.with_operator`), each a new frozen placement.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..shards import num_envs
from ..text import human, workers
from . import relaxing
from .operators import Operator
from .policy import DistributionPolicy
from .transfers import Transfer, averaged

if TYPE_CHECKING:
    from ..graph import FragmentGraph

__all__ = ["Placement", "FragmentPlacement", "EdgePlacement"]


@dataclass(frozen=True)
class FragmentPlacement:
    """Where one fragment runs: its worker group, how many replicas, on which device.

    Parameters
    ----------
    fragment : str
        The fragment's name.
    group : str
        The worker group it runs in.
    replicas : int
        The group's replica count.
    device : str
        ``"cpu"`` or ``"cuda"``.

    Examples
    --------
    A :class:`Placement` holds one per fragment (``placement.fragments["learner"]``); under ``coarse``
    with two actors, an actor's fragment runs in each of the two replicas of the ``actors`` group:

    >>> from fragnb.policies import FragmentPlacement
    >>> where = FragmentPlacement("actor@step", "actors", 2, "cpu")
    >>> where
    FragmentPlacement(fragment='actor@step', group='actors', replicas=2, device='cpu')
    """

    fragment: str
    group: str
    replicas: int
    device: str


@dataclass(frozen=True)
class EdgePlacement:
    """What one graph edge becomes.

    ``local`` (same process), ``gather`` (many replicas to one, concatenated along the environment
    axis), ``scatter`` (one to many, split along it), ``broadcast`` (one to many, whole: weights) or
    ``exchange`` (any other pair of groups: two replicated ones, or two of one replica each). Decoupled policies: ``sample stream`` (to the
    learner, as it arrives), ``versioned pull`` (the newest weights, by version) and ``inference
    stream`` (requests and replies between actor and policy workers).

    Parameters
    ----------
    src, dst : str
        The fragments the edge joins.
    kind : str
        ``"data"`` (values) or ``"state"`` (a component's state: a network's weights).
    variables : tuple of str
        What it carries.
    operator : Operator or str
        What it becomes, as above (:class:`~fragnb.policies.operators.Operator`; a name is taken as one).
    bytes_per_iteration : int, optional
        Its size, once measured (``Placement.measured(fragnb.measure(graph))``).

    Examples
    --------
    A :class:`Placement` holds one per graph edge (``placement.edges``); under ``coarse`` the learner
    broadcasts the policy's weights to the actors' replicas:

    >>> from fragnb.policies import EdgePlacement
    >>> edge = EdgePlacement("learner", "actor@step", "state", ("policy weights",), "broadcast")
    >>> edge.label
    'broadcast: policy weights'
    >>> EdgePlacement("learner", "actor@step", "state", ("policy weights",), "broadcast", 36620).label
    'broadcast: policy weights (37 kB/iteration)'
    """

    src: str
    dst: str
    kind: str
    variables: tuple[str, ...]
    operator: Operator
    bytes_per_iteration: int | None = None  # known once sizes were given: Placement.measured(fragnb.measure(graph))

    def __post_init__(self):
        object.__setattr__(self, "operator", Operator(self.operator))

    @property
    def label(self) -> str:
        return self.labelled(", ".join(self.variables))

    def labelled(self, names: str) -> str:
        """``operator: names (size/iteration)``, with the variables shown as ``names``."""
        size = "" if self.bytes_per_iteration is None else f" ({human(self.bytes_per_iteration)}/iteration)"
        return f"{self.operator}: {names}{size}"


@dataclass
class Placement:
    """A graph placed by a policy: per fragment a group, replica count and device; per edge an operator.

    Build one with ``graph.place(policy, **params)``; it draws itself in a notebook.

    Parameters
    ----------
    graph : FragmentGraph
        The graph placed.
    policy : DistributionPolicy
        The policy that placed it.
    params : dict
        The policy's parameters, defaults included.
    fragments : dict
        Fragment name to its :class:`FragmentPlacement`.
    edges : list of EdgePlacement
        One per graph edge, in the graph's order.
    notes : list of str
        Why the placement differs from the policy's table.
    colocated : dict
        Groups whose replicas run as threads of one worker process, that many per process.
    transfers : tuple of Transfer
        What crosses between groups as the run moves it.
    relaxed : tuple
        The transfers the user chose an operator for.

    Examples
    --------
    Notebook 01's PPO loop, small, placed under ``coarse`` with two actors (``device="cpu"``: the
    default, ``"auto"``, puts the learner on a GPU where there is one). Placing runs nothing:

    >>> import torch, fragnb
    >>> from fragnb.algos.ppo import SMALL_LOOP, small_setup
    >>> globals().update(small_setup(seed=0))  # notebook 01's components: 4 envs, 8 steps
    >>> graph = fragnb.capture(SMALL_LOOP, globals(), name="ppo")
    >>> placement = graph.place("coarse", actors=2, device="cpu")
    >>> print(placement)
    Placement of 'ppo' under 'coarse' {'actors': 2, 'device': 'cpu'}
      actors x2 (cpu): env@cell, actor@step, env@step, buffer@step, actor@it, buffer@it
      learner x1 (cpu): learner
      buffer@it -> learner [gather: batch]
      learner -> actor@step [broadcast: policy weights]
      learner -> actor@it [broadcast: policy weights]
    >>> placement.groups, placement.exact
    ({'actors': (2, 'cpu'), 'learner': (1, 'cpu')}, True)
    >>> [str(t) for t in placement.transfers]
    ['actors -> learner: gather (batch)', 'learner -> actors: broadcast (policy weights)']

    The operators the weights' edge may take instead, and the placement with one of them:

    >>> placement.operators("policy weights")
    ('broadcast', 'versioned pull')
    >>> relaxed = placement.with_operator("learner", "actors", "state", "versioned pull")
    >>> [str(t) for t in relaxed.transfers]
    ['actors -> learner: gather (batch)', 'learner -> actors: versioned pull (policy weights)']
    """

    graph: FragmentGraph
    policy: DistributionPolicy
    params: dict[str, Any]
    fragments: dict[str, FragmentPlacement]
    edges: list[EdgePlacement]
    #: Why the placement differs from the policy's table (e.g. a buffer kept with the learner).
    notes: list[str] = field(default_factory=list)
    #: Groups whose replicas run as threads of one worker process, that many per process (srl's ring).
    colocated: dict[str, int] = field(default_factory=dict)
    #: What crosses between groups as the run moves it: the edges by group pair and kind, and the
    #: gradients a group averages (:mod:`fragnb.policies.transfers`); the Script carries them.
    transfers: tuple[Transfer, ...] = ()
    #: The transfers the user chose an operator for (``place(..., edges=...)``): ((src, dst, kind), (operator, bound)).
    relaxed: tuple = ()

    @property
    def home(self) -> str:
        """The group that runs the driver's statements: the cell's bookkeeping, once."""
        return self.policy.groups["driver"]

    @property
    def exact(self) -> bool:
        """Whether the placement must reproduce plain Python value for value: yes, unless every
        group is replicated (data parallel, e.g. ``multi_learner``: per-replica values come from replica 0)."""
        return self.groups[self.home][0] == 1

    @property
    def groups(self) -> dict[str, tuple[int, str]]:
        """Worker group to (replicas, device), in the order fragments first appear."""
        return {p.group: (p.replicas, p.device) for p in self.fragments.values()}

    def traffic(self) -> list[tuple[EdgePlacement, int | None]]:
        """Each edge that crosses between worker groups, with the bytes it moves per iteration: its
        values' size, times the receiving replicas where each receives them whole (broadcast,
        versioned pull). None where no sizes were given (``placement.measured(fragnb.measure(graph))``)."""
        moved, seen = [], set()
        for e in self.edges:
            # the same values to two fragments of one group travel once (a model's weights to `act` and `value`)
            key = (self.fragments[e.src].group, self.fragments[e.dst].group, e.variables)
            if not e.operator.crosses or key in seen:
                continue
            seen.add(key)
            size = e.bytes_per_iteration
            moved.append(
                (e, None if size is None else size * (self.fragments[e.dst].replicas if e.operator.to_each else 1))
            )
        return moved

    @property
    def averaged(self) -> list[str]:
        """The groups whose replicas average their gradients (an all-reduce transfer)."""
        return averaged(self.transfers)

    def with_operator(self, src: str, dst: str, kind: str, operator: str) -> Placement:
        """This placement with the transfer from group ``src`` to ``dst`` of ``kind`` moved by
        ``operator`` (and its edges drawn so): one the policy's mode can run
        (:meth:`~fragnb.policies.modes.Mode.operators`), else ValueError listing them. E.g.
        ``p.with_operator("replicas", "replicas", "gradients", "local")``: ``data_parallel``'s replicas
        keep their own gradients, independent copies side by side. An operator the mode's walk does not move
        (a sample stream under ``coarse``: :meth:`~fragnb.policies.modes.Mode.walks`) places the graph again to run
        free, as ``place(..., edges={label: operator})`` does: the drawing and the run change together."""
        found = next((t for t in self.transfers if t.key == (src, dst, kind)), None)
        if found is None:
            raise ValueError(
                f"no transfer {src!r} -> {dst!r} of {kind!r} in this placement; it has "
                + (", ".join(f"{t.src!r} -> {t.dst!r} ({t.kind})" for t in self.transfers) or "none")
            )
        into_home = kind == "data" and dst == self.home and self.groups[self.home][0] == 1
        valid = self.policy.mode.operators(kind, found.operator, into_home=into_home)
        if operator not in valid:
            raise ValueError(f"{found}: policy {self.policy.name!r} moves it by one of {list(valid)}, not {operator!r}")
        if not self.policy.mode.walks(Operator(operator)):  # a stream: the others run free of the driver's group
            return relaxing.relax(self, {found.carries[0]: operator}, lambda p, **kw: self.graph.place(p, **kw))
        crosses = (
            {f for f, p in self.fragments.items() if p.group == src},
            {f for f, p in self.fragments.items() if p.group == dst},
        )
        edges = [
            replace(e, operator=operator) if e.src in crosses[0] and e.dst in crosses[1] and e.kind == kind else e
            for e in self.edges
        ]
        transfers = tuple(replace(t, operator=operator) if t is found else t for t in self.transfers)
        return replace(self, edges=edges, transfers=transfers)

    def operators(self, label: str) -> tuple[str, ...]:
        """The operators the crossing edge that carries ``label`` (as the drawing names it: ``"batch"``,
        ``"policy weights"`` or ``"policy"``) may take under this placement, its own first: what
        ``place(..., edges={label: operator})`` accepts (:mod:`fragnb.policies.relaxing`)."""
        return relaxing.operators(self, label)

    @property
    def labels(self) -> list[str]:
        """What its crossing edges carry, as ``edges=`` and :meth:`operators` name them."""
        return list(relaxing.labels(self))

    def measured(self, sizes: Mapping[tuple[str, str, str], int]) -> Placement:
        """This placement with each edge labelled with its bytes per iteration: ``sizes`` as
        :func:`fragnb.measure` returns them (or a profile's ``edge_bytes``), ``(src, dst, kind)`` to bytes.

        Sizes are given here rather than to :func:`place`, whose keywords are the policy's own
        parameters: placing stays a function of graph, policy and parameters alone, and one
        measurement labels any number of placements."""
        edges = [replace(e, bytes_per_iteration=sizes.get((e.src, e.dst, e.kind))) for e in self.edges]
        return replace(self, edges=edges)

    def predict(self, cluster="here", replicas: int | None = None, *, profile=None):
        """This placement's predicted env steps/s, seconds per iteration, busy shares and bottleneck on
        ``cluster`` (a preset name or a :class:`fragnb.predict.model.Cluster`), optionally at another
        replica count, from ``profile``: the loop's :class:`~fragnb.predict.profile.Profile`, which
        :func:`fragnb.profile` returns (running it is left to the caller: placing never runs the loop)."""
        from ..predict.model import predict

        if profile is None:
            name = self.graph.name if self.graph.name.isidentifier() else "graph"
            raise ValueError(
                f"no profile of {self.graph.name!r} to predict from: profile the loop first: "
                f"p = fragnb.profile({name}); placement.predict(cluster, profile=p) "
                "(a few iterations under single, on copies of its objects)"
            )
        return predict(self, profile, cluster, replicas)

    def render(self):
        """One cluster per worker group, with replica counts; edges labelled operator: variables."""
        from ..ui.render import render_placement

        return render_placement(self)

    @property
    def inference_batch(self) -> int | None:
        """Environments each replica of the actor fragments serves per inference call."""
        ns = self.graph.namespace
        envs = next(
            (n for c, r in self.graph.components.items() if r == "env" and (n := num_envs(ns[c])) is not None), None
        )
        actor = next((p for f, p in self.fragments.items() if self.graph.fragment(f).role == "actor"), None)
        return envs // actor.replicas if envs and actor else None

    def _repr_mimebundle_(self, include=None, exclude=None):
        from ..ui.render import mimebundle

        return mimebundle(self.render(), include, exclude)

    def __repr__(self) -> str:
        lines = [f"Placement of {self.graph.name!r} under {self.policy.name!r} {self.params}"]
        for group, (n, device) in self.groups.items():
            names = [f for f, p in self.fragments.items() if p.group == group]
            ring = (
                f", {workers(n // self.colocated[group])} x ring {self.colocated[group]}"
                if group in self.colocated
                else ""
            )
            lines.append(f"  {group} x{n} ({device}{ring}): {', '.join(names)}")
        lines += [
            f"  {e.src} -> {e.dst} [{e.labelled(self.graph.describe(e.variables))}]"
            for e in self.edges
            if e.operator.crosses
        ]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)
