"""Placing: graph + policy + parameters --> Placement (replicas, devices, edge operators).

Placing is a pure function: it imports no cluster library and starts no worker, so every parameter
error surfaces before anything runs. What a policy cannot place in a given loop (environments that do
not split, a component used from two groups, ...) is refused by the checks of :mod:`.refusals`, which
:func:`place` calls in order; :mod:`.placement` holds what it returns.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..errors import ArgumentError, FragmentError
from ..shards import shardwise
from . import refusals, relaxing
from .placement import EdgePlacement, FragmentPlacement, Placement
from .policy import DistributionPolicy, resolve
from .transfers import transfers_of

if TYPE_CHECKING:
    from ..graph import Edge, FragmentGraph

__all__ = ["place", "choices"]


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
        refusals.check_an_optimiser(graph, policy, lambda: _coarse_refuses(graph))
    edges = [_operator(policy, e, fragments[e.src], fragments[e.dst]) for e in graph.edges]
    return Placement(graph, policy, params, fragments, edges, notes, colocated, transfers_of(policy, edges, fragments))


def _coarse_refuses(graph: FragmentGraph) -> str | None:
    """Why ``coarse`` (actors splitting the loop, one learner) cannot place ``graph``, in a clause with its line;
    None where it can. A refusal offers only a policy that runs the loop."""
    try:
        place(graph, "coarse", actors=1)
    except (FragmentError, ValueError) as e:
        why = getattr(e, "problem", str(e)).split(": use ")[0]  # its own way out may be the refusing policy
        return why + (f" (line {e.lineno})" if getattr(e, "lineno", None) else "")
    return None


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
