"""Placement: graph + policy + parameters --> Placement (replicas, devices, edge operators).

Placing is a pure function: it imports no cluster library and starts no worker, so every parameter
error surfaces before anything runs. What a policy cannot place in a given loop (environments that do
not split, a component used from two groups, ...) is refused by the checks of :mod:`.refusals`, which
:func:`place` calls in order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..errors import ArgumentError, FragmentError
from ..shards import num_envs, shardwise
from ..text import human, workers
from . import refusals, relaxing
from .policy import DistributionPolicy, resolve
from .transfers import Transfer, averaged, transfers_of

if TYPE_CHECKING:
    from ..graph import Edge, FragmentGraph

__all__ = ["Placement", "FragmentPlacement", "EdgePlacement", "place", "choices"]


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
    operator : str
        What it becomes, as above.
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
    operator: str
    bytes_per_iteration: int | None = None  # known once sizes were given: Placement.measured(fragnb.measure(graph))

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
        whole = ("broadcast", "versioned pull")
        moved, seen = [], set()
        for e in self.edges:
            # the same values to two fragments of one group travel once (a model's weights to `act` and `value`)
            key = (self.fragments[e.src].group, self.fragments[e.dst].group, e.variables)
            if e.operator == "local" or key in seen:
                continue
            seen.add(key)
            size = e.bytes_per_iteration
            moved.append(
                (e, None if size is None else size * (self.fragments[e.dst].replicas if e.operator in whole else 1))
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
        keep their own gradients, independent copies side by side."""
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
            if e.operator != "local"
        ]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def place(graph: FragmentGraph, policy: str | DistributionPolicy = "single", **params) -> Placement:
    """Place ``graph`` under ``policy``; every bad parameter raises here, before any worker starts.

    Parameters
    ----------
    graph : FragmentGraph
        A captured loop.
    policy : str or DistributionPolicy
        A registered name or a policy object.
    **params
        The policy's parameters: replica counts (``actors``, ``learners``) and ``device``
        (``"auto"``: a GPU for the policy's GPU groups when one is present; ``"cpu"``; ``"cuda"``).
        Under any policy, ``edges={LABEL: OPERATOR}`` or ``{LABEL: (OPERATOR, BOUND)}`` chooses the
        operator of the crossing edge that carries LABEL, one of :meth:`Placement.operators`: e.g.
        ``edges={"policy": ("versioned pull", 2)}`` lets ``coarse``'s actors act with weights up to two
        versions old (:mod:`fragnb.policies.relaxing`).

    Returns
    -------
    Placement
        Per fragment a group, replica count and device; per edge an operator.

    Raises
    ------
    TypeError
        For a parameter the policy does not take.
    ValueError
        For a value it cannot place the graph with (a :class:`~fragnb.errors.FragmentError`, naming
        the cell's line, where the loop is the reason).

    Examples
    --------
    >>> import torch, fragnb
    >>> from fragnb.algos.ppo import SMALL_LOOP, small_setup
    >>> globals().update(small_setup(seed=0))  # notebook 01's components: 4 envs, 8 steps
    >>> graph = fragnb.capture(SMALL_LOOP, globals(), name="ppo")
    >>> from fragnb.policies import place
    >>> placement = place(graph, "coarse", actors=2, device="cpu")  # as graph.place("coarse", ...)
    >>> {f: p.group for f, p in placement.fragments.items()}
    {'env@cell': 'actors', 'actor@step': 'actors', 'env@step': 'actors', 'buffer@step': 'actors',
     'actor@it': 'actors', 'buffer@it': 'actors', 'learner': 'learner'}
    >>> place(graph, "coarse", learners=2)
    Traceback (most recent call last):
        ...
    TypeError: policy 'coarse' takes ['actors', 'device'], got ['learners']

    ``edges=`` chooses an edge's operator: the actors act with weights up to one version old.

    >>> print(place(graph, "coarse", actors=2, device="cpu", edges={"policy weights": ("versioned pull", 1)}))
    Placement of 'ppo' under 'coarse' {'actors': 2, 'device': 'cpu', 'max_staleness': 1}
      actors x2 (cpu): env@cell, actor@step, env@step, buffer@step, actor@it, buffer@it
      learner x1 (cpu): learner
      buffer@it -> learner [gather: batch]
      learner -> actor@step [versioned pull: policy weights]
      learner -> actor@it [versioned pull: policy weights]
    """
    edges = params.pop("edges", None)
    if edges is not None and not isinstance(edges, Mapping):
        raise ValueError(f"edges={edges!r}: give a dict of LABEL -> OPERATOR or (OPERATOR, BOUND)")
    placement = _place(graph, resolve(policy), **params)
    return relaxing.relax(placement, edges, lambda p, **kw: _place(graph, p, **kw)) if edges else placement


def _place(graph: FragmentGraph, policy: DistributionPolicy, **params) -> Placement:
    """:func:`place` before any edge is chosen."""
    limits = policy.mode.limits(graph)
    if policy.mode.on_workers() and limits:
        first = limits[0]
        others = "`single` runs it as plain Python"
        if first not in graph.whole_limits and "data_parallel" not in first.problem:
            others += "; so does each replica of `data_parallel`, which runs the whole cell and splits nothing"
        raise FragmentError(
            f"policy {policy.name!r} cannot split this cell: {first.problem} ({others})",
            first.lineno,
            first.line,
        )
    known = policy.parameters
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise TypeError(f"policy {policy.name!r} takes {sorted(known) or 'no parameters'}, got {unknown}")
    params = {**known, **params}
    roles = {f.role for f in graph.fragments}
    missing = [r for r in policy.required_roles if r not in roles]
    if missing:
        raise ValueError(
            f"policy {policy.name!r} needs fragments of roles {list(policy.required_roles)}; "
            f"the graph {graph.name!r} has no {missing} (it has {sorted(roles)})"
        )
    counts, colocated = {}, {}
    for group, n in policy.replicas.items():
        n, per_worker = (n, None) if not isinstance(n, tuple) else n
        count = params[n] if isinstance(n, str) else n
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ArgumentError(
                f"{n}={count!r}: policy {policy.name!r} needs a whole number of replicas, 1 or more, in group {group!r}"
            )
        counts[group] = count
        if per_worker:
            colocated[group] = params[per_worker]
    for name, default in policy.options.items():
        value = params[name]
        if isinstance(default, int) and (
            not isinstance(value, int) or isinstance(value, bool) or value < _LEAST.get(name, 0)
        ):
            raise ValueError(f"{name}={value!r}: policy {policy.name!r} needs an integer >= {_LEAST.get(name, 0)}")
        if (
            default is None
            and value is not None
            and (not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0)
        ):
            raise ValueError(f"{name}={value!r}: policy {policy.name!r} needs a positive number, or None (off)")
    for group, per_worker in colocated.items():  # checked above, as an option
        counts[group] *= per_worker
    refusals.check_driver_replicas(graph, policy, counts)
    gpu = _gpu(params.get("device", "cpu"))

    groups, notes = _groups_of_roles(graph, policy, counts)
    if policy.mode.fuses() and not gpu:
        notes.append("no CUDA GPU in use: the fused fragments run on the CPU")
    fragments = {}
    for frag in graph.fragments:
        group = groups[frag.role]
        fragments[frag.name] = FragmentPlacement(
            frag.name, group, counts[group], "cuda" if gpu and group in policy.gpu_groups else "cpu"
        )
    if not policy.mode.whole_copies():  # else nothing is split: every replica holds whole copies
        refusals.check_divisible(graph, fragments, policy)
        refusals.check_one_group_per_component(graph, fragments)
        refusals.check_no_bare_parameters_shared(graph, fragments)
        refusals.check_plain_learners(graph, fragments, policy)
    elif max(counts.values()) > 1:
        refusals.check_an_optimiser(graph, policy)
    edges = [_operator(policy, e, fragments[e.src], fragments[e.dst]) for e in graph.edges]
    return Placement(graph, policy, params, fragments, edges, notes, colocated, transfers_of(policy, edges, fragments))


_LEAST = {"ring": 1}  # the smallest value of an integer option (others: 0)


def choices(graph: FragmentGraph, policy: str | DistributionPolicy, name: str, upto: int = 16, **params) -> list:
    """The values of parameter ``name`` that :func:`place` accepts for ``graph``, the policy's other
    parameters being ``params`` (or their defaults): e.g. the divisors of ``num_envs`` for ``actors``.
    Integers are tried up to ``upto``.

    Parameters
    ----------
    graph : FragmentGraph
        A captured loop.
    policy : str or DistributionPolicy
        A registered name or a policy object.
    name : str
        One of the policy's parameters.
    upto : int
        The largest integer tried.
    **params
        The policy's other parameters.

    Returns
    -------
    list
        The values :func:`place` accepts, in order.

    Examples
    --------
    Notebook 01's PPO loop, small: its 4 environments split among 1, 2 or 4 actors.

    >>> import torch, fragnb
    >>> from fragnb.algos.ppo import SMALL_LOOP, small_setup
    >>> globals().update(small_setup(seed=0))  # notebook 01's components: 4 envs, 8 steps
    >>> graph = fragnb.capture(SMALL_LOOP, globals(), name="ppo")
    >>> from fragnb.policies import choices
    >>> choices(graph, "coarse", "actors")
    [1, 2, 4]
    """
    policy = resolve(policy)
    default = policy.parameters[name]
    if name == "device":
        candidates = ["auto", "cpu", "cuda"]
    elif isinstance(default, int):
        candidates = range(_LEAST.get(name, 0 if name in policy.options else 1), upto + 1)
    else:
        candidates = [default]
    fits = []
    for value in candidates:
        try:
            place(graph, policy, **{**params, name: value})
        except (TypeError, ValueError):
            continue
        fits.append(value)
    return fits


def _groups_of_roles(
    graph: FragmentGraph, policy: DistributionPolicy, counts: dict[str, int]
) -> tuple[dict[str, str], list[str]]:
    """The policy's group per role, except that state stays with its reader: a role whose
    components the loop calls in a way that is not environment by environment (a replay buffer's
    ``sample``) is not replicated; it joins the driver's group, where the learner reads it."""
    groups, notes = dict(policy.groups), []
    home = groups["driver"]
    if counts[home] > 1:
        return groups, notes  # every group is replicated (data parallel): nothing can move
    for role in sorted({f.role for f in graph.fragments}):
        if counts[groups[role]] == 1:
            continue
        calls = sorted({c for f in graph.fragments if f.role == role for s in f.statements for c in s.calls})
        methods = [c for c in calls if not shardwise(graph.namespace[c.split(".")[0]], c.split(".")[1])]
        if methods:
            groups[role] = home
            notes.append(
                f"{role} placed with {home!r}, not replicated: the loop calls {', '.join(f'`{m}`' for m in methods)}, "
                "which do not work environment by environment (see Component.shardwise)"
            )
    if counts[groups["buffer"]] > 1 and (read := _read_every_step(graph, groups, home)):
        groups["buffer"] = home
        notes.append(
            f"buffer placed with {home!r}, not replicated: line {read.lineno} reads `{', '.join(sorted(read.reads & _stored(graph)))}` "
            "in the loop that fills it, so each step's values travel there, not the whole store"
        )
    return groups, notes


def _stored(graph: FragmentGraph) -> set[str]:
    return {
        v for f in graph.fragments if f.role == "buffer" and not f.components for s in f.statements for v in s.writes
    }


def _read_every_step(graph: FragmentGraph, groups: dict[str, str], home: str):
    """A statement of the home group that reads a plain store (a replay ``deque``) inside the loop
    that fills it (DQN samples it every step): then the store belongs there, with its reader."""
    stored = _stored(graph)
    loops = [f.loop for f in graph.fragments if f.role == "buffer" and not f.components and f.loop is not None]
    return next(
        (
            s
            for f in graph.fragments
            if f.role != "buffer" and groups[f.role] == home
            for s in f.statements
            if s.reads & stored and any(loop.encloses(s.loop) for loop in loops)
        ),
        None,
    )


def _gpu(device: str) -> bool:
    if device not in ("auto", "cpu", "cuda"):
        raise ValueError(f"unknown device: {device!r} (must be one of ['auto', 'cpu', 'cuda'])")
    if device == "cpu":
        return False
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            "device='cuda' but this machine has no CUDA GPU that torch can use; use device='cpu' (or 'auto')"
        )
    return torch.cuda.is_available()


def _operator(policy: DistributionPolicy, edge: Edge, src: FragmentPlacement, dst: FragmentPlacement) -> EdgePlacement:
    """What ``edge`` becomes under ``policy``: its mode decides (:meth:`fragnb.policies.modes.Mode.operator`)."""
    mode = policy.mode
    op = mode.operator(edge.kind, (src.group, src.replicas), (dst.group, dst.replicas), mode.home(policy.groups))
    return EdgePlacement(edge.src, edge.dst, edge.kind, edge.variables, op)
