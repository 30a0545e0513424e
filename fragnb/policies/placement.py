"""Placement: graph + policy + parameters --> Placement (replicas, devices, edge operators).

Placing is a pure function: it imports no cluster library and starts no worker, so every parameter
error surfaces before anything runs.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..errors import FragmentError
from ..shards import num_envs, shardwise
from ..text import human, workers
from .policy import DistributionPolicy, resolve
from .transfers import Transfer, averaged, transfers_of

if TYPE_CHECKING:
    from ..graph import Edge, FragmentGraph
    from ..graph.model import Statement

__all__ = ["Placement", "FragmentPlacement", "EdgePlacement", "place", "choices"]


@dataclass(frozen=True)
class FragmentPlacement:
    """Where one fragment runs: its worker group, how many replicas, on which device."""

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
        valid = self.policy.mode.operators(kind, found.operator)
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
    """
    policy = resolve(policy)
    limits = policy.mode.limits(graph)
    if policy.mode.distributed and limits:
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
            raise ValueError(f"{n}={count!r}: policy {policy.name!r} needs at least 1 replica in group {group!r}")
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
    _check_driver_replicas(graph, policy, counts)
    gpu = _gpu(params.get("device", "cpu"))

    groups, notes = _groups_of_roles(graph, policy, counts)
    if policy.mode.fused and not gpu:
        notes.append("no CUDA GPU in use: the fused fragments run on the CPU")
    fragments = {}
    for frag in graph.fragments:
        group = groups[frag.role]
        fragments[frag.name] = FragmentPlacement(
            frag.name, group, counts[group], "cuda" if gpu and group in policy.gpu_groups else "cpu"
        )
    if policy.mode.splits:  # else nothing is split: every replica holds whole copies
        _check_divisible(graph, fragments, policy)
        _check_one_group_per_component(graph, fragments)
        _check_no_bare_parameters_shared(graph, fragments)
        _check_plain_learners(graph, fragments, policy)
    elif max(counts.values()) > 1:
        _check_an_optimiser(graph, policy)
    edges = [_operator(policy, e, fragments[e.src], fragments[e.dst]) for e in graph.edges]
    return Placement(graph, policy, params, fragments, edges, notes, colocated, transfers_of(policy, edges, fragments))


_LEAST = {"ring": 1}  # the smallest value of an integer option (others: 0)


def choices(graph: FragmentGraph, policy: str | DistributionPolicy, name: str, upto: int = 16, **params) -> list:
    """The values of parameter ``name`` that :func:`place` accepts for ``graph``, the policy's other
    parameters being ``params`` (or their defaults): e.g. the divisors of ``num_envs`` for ``actors``.
    Integers are tried up to ``upto``."""
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


def _check_driver_replicas(graph: FragmentGraph, policy: DistributionPolicy, counts: dict[str, int]) -> None:
    """The driver's statements (the cell's bookkeeping) run once per replica of their group: either
    that group has one replica, or every group is replicated (data parallel, each replica a whole loop).
    A replicated driver beside a single learner would interleave its values in another order than
    plain Python."""
    home = policy.groups["driver"]
    single = sorted(
        {policy.groups[f.role] for f in graph.fragments} - {home} & {g for g, n in counts.items() if n == 1}
    )
    if counts[home] > 1 and single:
        raise ValueError(
            f"policy {policy.name!r} runs the driver's statements in {home!r} x{counts[home]} but {single} x1: "
            "the cell's bookkeeping would run once per replica and its values would not be plain Python's. "
            "Put the driver with a group of one replica (the learner's), or replicate every group (data parallel)"
        )


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


def _check_one_group_per_component(graph: FragmentGraph, fragments: dict[str, FragmentPlacement]) -> None:
    """A component used from two worker groups would have two diverging copies: refuse. (A bare
    network is the exception: its weights go from the group that trains it to the others.)"""
    import torch

    where: dict[str, dict[str, Statement]] = {}
    for frag in graph.fragments:
        for s in frag.statements:
            for comp in s.components:
                if isinstance(graph.namespace[comp], torch.nn.Module):
                    continue
                where.setdefault(comp, {}).setdefault(fragments[frag.name].group, s)
    for comp, groups in where.items():
        if len(groups) > 1:
            home, (group, late) = next(iter(groups)), max(groups.items(), key=lambda gs: gs[1].lineno)
            read = _attributes_read(late.node, comp)
            if read:
                n = fragments[next(f.name for f in graph.fragments if groups[home] in f.statements)].replicas
                raise FragmentError.in_source(
                    f"`{comp}.{read}` is read in group {group!r}, and `{comp}` lives in group {home!r}"
                    f"{f' (x{n}, each replica holding a share of it)' if n > 1 else ''}: no copy of it is there. Read it "
                    f"into a notebook value in an earlier cell (`{read} = {comp}.{read}`) and use that, or compute it in "
                    f"a statement of {comp}'s own role",
                    late.lineno,
                    graph.source,
                )
            uses = ", ".join(f"line {st.lineno} in group {g!r}" for g, st in groups.items())
            raise FragmentError.in_source(
                f"`{comp}` is used from two worker groups ({uses}); each would hold its own copy and their states "
                "would diverge. Use it from statements of one role (e.g. call its method yourself instead of handing "
                "it to a function), or choose a policy that places those roles together",
                late.lineno,
                graph.source,
            )


def _attributes_read(node: ast.AST, name: str) -> str | None:
    """The attribute of ``name`` a statement reads, if all it does with ``name`` is read attributes
    (``env.num_envs``), not call a method or hand ``name`` itself on."""
    calls = {id(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)}
    attributes = [
        n
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == name
    ]
    names = [n for n in ast.walk(node) if isinstance(n, ast.Name) and n.id == name]
    if attributes and len(attributes) == len(names) and not any(id(a) in calls for a in attributes):
        return attributes[0].attr
    return None


def _check_plain_learners(
    graph: FragmentGraph, fragments: dict[str, FragmentPlacement], policy: DistributionPolicy
) -> None:
    """Replicated learners average the gradients of fragnb Learners' networks; a plain optimiser's
    network would train on each replica's share alone."""
    import torch

    found = []  # (statement, name): what the replicated learner fragments train with plain torch
    for frag in graph.fragments:
        if frag.role != "learner" or fragments[frag.name].replicas == 1:
            continue
        for s in frag.statements:
            for c in s.components:
                value = graph.namespace[c]
                trainable = isinstance(value, torch.nn.Module) and any(p.requires_grad for p in value.parameters())
                if trainable or isinstance(value, torch.optim.Optimizer):
                    found.append((s, c, frag))
    if not found:
        return
    # The optimiser is the true cause (what steps the weights), not a frozen reference network read beside it.
    s, name, frag = next((f for f in found if isinstance(graph.namespace[f[1]], torch.optim.Optimizer)), found[0])
    raise FragmentError.in_source(
        f"policy {policy.name!r} runs {fragments[frag.name].replicas} learners, which average the gradients of "
        f"fragnb Learners' networks; `{name}` ({type(graph.namespace[name]).__name__}) "
        + ("steps networks" if isinstance(graph.namespace[name], torch.optim.Optimizer) else "is")
        + " trained by the loop itself, so each learner would train on its own share alone. Use 'data_parallel', which averages the "
        "gradients of any optimiser, one learner (coarse, fine, async, srl), or wrap the update in a "
        "fragnb.components.Learner",
        s.lineno,
        graph.source,
    )


def _check_an_optimiser(graph: FragmentGraph, policy: DistributionPolicy) -> None:
    """A whole-cell policy keeps its replicas' networks equal by averaging what torch optimisers step:
    a loop that steps none (tabular values, weights updated by hand) would learn N times alone."""
    import types

    import torch

    def optimisers(value, depth: int, visited: set) -> bool:
        """Whether ``value`` is or holds a torch optimiser: in a dict or list (TorchRL's multi-agent tutorial
        keeps one per agent group in a dict), an object's attributes (a Learner's), or the globals of a
        function the cell calls (the DQN tutorial's optimize_model()); a few levels deep."""
        if isinstance(value, torch.optim.Optimizer):
            return True
        if depth == 0 or id(value) in visited or isinstance(value, (type, types.ModuleType, torch.Tensor)):
            return False
        visited.add(id(value))
        if isinstance(value, types.FunctionType):
            inner = [value.__globals__[n] for n in value.__code__.co_names if n in value.__globals__]
        elif isinstance(value, dict):
            inner = list(value.values())
        elif isinstance(value, (list, tuple)):
            inner = list(value)
        elif hasattr(value, "__dict__"):  # minimalRL's networks hold their optimiser as an attribute
            inner = list(vars(value).values())
        else:
            return False
        return any(optimisers(v, depth - 1, visited) for v in inner)

    visited: set = set()
    if not any(optimisers(graph.namespace[n], 3, visited) for n in graph.inputs if n in graph.namespace):
        first = graph.loops[0].lineno if graph.loops else None
        raise FragmentError.in_source(
            f"policy {policy.name!r} keeps its replicas' networks equal by averaging the gradients torch optimisers "
            "apply, and this loop steps no torch.optim optimiser (from the cell's objects, their attributes or the "
            "functions it calls): each replica would learn alone. Use 'single', or a policy that splits the loop "
            "('coarse': one learner)",
            first,
            graph.source,
        )


def _check_no_bare_parameters_shared(graph: FragmentGraph, fragments: dict[str, FragmentPlacement]) -> None:
    """A trained tensor held directly by components of two groups (a Gaussian policy's ``log_std``
    beside its network) would never reach the other group: fragnb sends networks, whole, not bare tensors."""
    import torch

    held: dict[int, dict[str, tuple[str, int]]] = {}  # id(tensor) -> group -> (component.attribute, first line)
    for frag in graph.fragments:
        group = fragments[frag.name].group
        for s in frag.statements:
            for comp in s.components:
                for attr, value in (
                    vars(graph.namespace[comp]).items() if hasattr(graph.namespace[comp], "__dict__") else ()
                ):
                    if isinstance(value, torch.Tensor) and value.requires_grad:
                        held.setdefault(id(value), {}).setdefault(group, (f"{comp}.{attr}", s.lineno))
    for groups in held.values():
        if len(groups) > 1:
            (a, (name_a, _)), (b, (name_b, line)) = list(groups.items())[:2]
            raise FragmentError.in_source(
                f"`{name_a}` (group {a!r}) and `{name_b}` (group {b!r}) are one trained tensor: fragnb sends a learner's "
                "networks (torch.nn.Module) to the other groups after each update, not tensors held beside them, so one "
                "side would go on with a copy that never learns. Hold it inside a network both use (`self.log_std = "
                "nn.Parameter(...)` in the policy's nn.Module), or run under 'single'",
                line,
                graph.source,
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


def _check_divisible(graph: FragmentGraph, fragments: dict[str, FragmentPlacement], policy: DistributionPolicy) -> None:
    """Every component of a replicated fragment that holds a batch of environments must split evenly."""
    for frag in graph.fragments:
        n = fragments[frag.name].replicas
        for comp in frag.components:
            num_envs = getattr(graph.namespace.get(comp), "num_envs", None)
            if n > 1 and isinstance(num_envs, int) and num_envs % n:
                divisors = [d for d in range(1, num_envs + 1) if num_envs % d == 0]
                setting = _num_envs_setting(graph, comp)
                raise FragmentError.in_source(  # the loop's objects, not a parameter: a refusal of the loop, at its line
                    f"`{comp}` has num_envs={num_envs}, which {n} replicas of {frag.name!r} under "
                    f"{policy.name!r} cannot split evenly: make num_envs a multiple of {n} "
                    f"({'`' + setting + '`, which the loop reads, ' if setting else ''}in the cell that makes `{comp}`), "
                    f"ask for {_one_of(divisors)} replica{'s' if divisors != [1] else ''}, or use policy "
                    "'data_parallel', which runs the whole loop in each replica on its own copy of the environments",
                    graph.first_use(comp),
                    graph.source,
                )


def _one_of(values: list) -> str:
    return " or ".join(filter(None, [", ".join(map(str, values[:-1])), str(values[-1])]))


def _num_envs_setting(graph: FragmentGraph, comp: str) -> str | None:
    """The setting the cell reads the number of environments from, other than ``comp`` itself
    (CleanRL's ``args.num_envs``), if it reads one."""
    for node in ast.walk(graph.tree):
        if isinstance(node, ast.Attribute) and node.attr == "num_envs" and ast.unparse(node.value) != comp:
            return ast.unparse(node)
    return None


def _operator(policy: DistributionPolicy, edge: Edge, src: FragmentPlacement, dst: FragmentPlacement) -> EdgePlacement:
    """What ``edge`` becomes under ``policy``: its mode decides (:meth:`fragnb.policies.modes.Mode.operator`)."""
    mode = policy.mode
    op = mode.operator(edge.kind, (src.group, src.replicas), (dst.group, dst.replicas), mode.home(policy.groups))
    return EdgePlacement(edge.src, edge.dst, edge.kind, edge.variables, op)
