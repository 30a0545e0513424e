"""Script: a placement planned as what every replica of a run walks.

One Script per run, built once from the Placement: the program (segments and driven loops), the
replica counts, the networks shared across groups, the stop rules. It is pickled once and sent to
every replica; the safety net walks the same Script with a limit on its iterations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, NamedTuple

from .. import shards
from ..components import role_of
from ..graph.model import cell_filename
from .decoupled import refuse
from .program import DrivenLoop, Program, Segment, graph_writes, plan, segments_of

if TYPE_CHECKING:
    from ..policies import Placement

__all__ = ["Script", "Weights", "ReplicaId", "peers", "weights_key", "weights_attribute"]


class ReplicaId(NamedTuple):
    """Replica ``index`` of worker group ``group``; written ``group[index]`` (channel peers, timelines,
    results are keyed by that text, which :meth:`parse` reads back)."""

    group: str
    index: int

    def __str__(self) -> str:
        return f"{self.group}[{self.index}]"

    @classmethod
    def parse(cls, name: str) -> ReplicaId:
        group, _, rest = name.rpartition("[")
        return cls(group, int(rest.rstrip("]")))


@dataclass(frozen=True)
class Weights:
    """A network held by components in two groups: ``source`` (in the owner group) is sent to
    ``target`` (a component of ``group``) before that group next uses it, when it has changed."""

    source: str  # "weights:learner:policy"
    owner: str
    owner_comp: str
    target: str  # "weights:actor:policy"
    group: str
    target_comp: str


@dataclass
class Script:
    """What every replica of a run walks; pickled once and sent to each."""

    name: str
    program: Program
    groups: dict[str, int]  # group -> replica count
    weights: list[Weights]
    num_envs: int | None
    stop_flags: list[str]
    strict: bool  # values that cannot be combined are an error (else replica 0's is taken)
    limit: int | None = None  # iterations of the iteration loop to run (the safety net runs one or two)
    variables: list[str] = field(default_factory=list)  # what the cell assigns: sent back at the end
    #: A stop condition checked after every iteration: ``until(curve, iterations, env_steps)`` with the
    #: curve as (env steps, return) per finished episode, in plain Python's order.
    until: Callable[[list, int, int], bool] | None = None
    #: The replica that decides after each iteration whether the run ends: the first of the group
    #: whose segment ends the iteration (a learner), so the others hear it with what they wait for anyway.
    leader: str = ""
    #: Decoupled policies (fragnb.runtime.worker.free): groups other than the leader's run free of it.
    decoupled: bool = False
    max_staleness: int = 0
    #: Synchronous Dask runs: every replica keeps its state after every this many iterations, for the
    #: notebook to fetch; a run that loses a worker resumes from the last one all replicas kept (0: never).
    checkpoint_every: int = 0
    #: Global random generators (fragnb.runtime.draws): the one-replica group that starts from the
    #: notebook's generator states ``rng`` and so draws what plain Python draws; every other replica
    #: seeds its own from ``seed`` and its name.
    seed: int = 0
    rng_group: str | None = None
    rng: dict | None = None
    #: The segments whose statements draw from a global generator (None: not looked for, any may):
    #: where replicas sharing a process swap in their own generators (fragnb.runtime.worker.generators.Own).
    drawing: frozenset[int] | None = None
    #: Shapes of the cell's tensor variables in plain Python, as the safety net saw them: which axis
    #: replicas' parts of one join along (fragnb.runtime.worker.edges.env_axis). Empty with --no-check.
    shapes: dict[str, tuple] = field(default_factory=dict)

    @classmethod
    def of(cls, placement: Placement, limit: int | None = None, until=None, checkpoint_every: int = 0) -> Script:
        graph = placement.graph
        program = plan(placement)
        envs = [shards.num_envs(graph.namespace[c]) for c, r in graph.components.items() if r == "env"]
        num_envs = next((n for n in envs if n is not None), None)
        loop = next((i for i in program.items if isinstance(i, DrivenLoop)), None)
        last = segments_of(loop.body)[-1].group if loop and segments_of(loop.body) else program.segments[0].group
        if placement.policy.decoupled:
            refuse(placement, program)
            last = placement.home
        return cls(graph.name, program, {g: n for g, (n, _) in placement.groups.items()}, _shared_weights(placement, program.segments),
                   num_envs, list(graph.stop_flags), placement.exact and not placement.policy.decoupled, limit, sorted(graph_writes(graph)), until,
                   str(ReplicaId(last, 0)), placement.policy.decoupled, placement.params.get("max_staleness", 0),
                   0 if placement.policy.decoupled else checkpoint_every)

    @property
    def filename(self) -> str:
        """The name the cell's code is compiled under, as :attr:`FragmentGraph.filename`."""
        return cell_filename(self.name)

    def replicas(self) -> list[str]:
        return [name for g, n in self.groups.items() for name in peers(g, n)]

    def components(self) -> dict[str, list[str]]:
        """The components each group's statements use: what its replicas send back at the end."""
        return {g: sorted({c for s in self.program.segments if s.group == g for c in s.components}) for g in self.groups}


def peers(group: str, count: int) -> list[str]:
    """The names of a group's ``count`` replicas."""
    return [str(ReplicaId(group, i)) for i in range(count)]


def weights_key(component: str, attribute: str) -> str:
    """How the network ``component.attribute`` is named among a segment's exports: ``weights:component:attribute``
    (``weights:agent:`` for a bare network ``agent`` the loop calls itself)."""
    return f"weights:{component}:{attribute}"


def weights_attribute(key: str) -> tuple[str, str]:
    """(component, attribute) of a :func:`weights_key`."""
    _, component, attribute = key.split(":")
    return component, attribute


def _shared_weights(placement: Placement, segments: list[Segment]) -> list[Weights]:
    """Networks held by components in two groups; the group of a learner holding one owns it (a bare
    network the loop calls, CleanRL's ``agent``: the group whose statements train it)."""
    graph = placement.graph
    ns = graph.namespace
    trains = {placement.fragments[f.name].group for f in graph.fragments if f.role == "learner"}
    holders: dict[int, list[tuple[str, str, str]]] = {}
    for seg in segments:
        for comp in sorted(seg.components):
            for attr, value in shards.networks(ns[comp]).items():
                if (comp, attr, seg.group) not in holders.setdefault(id(value), []):
                    holders[id(value)].append((comp, attr, seg.group))
    out = []
    for entries in holders.values():
        comp, attr, owner = next((e for e in entries if role_of(ns[e[0]]) == "learner"), None) or \
            next((e for e in entries if not role_of(ns[e[0]]) and e[2] in trains), entries[0])
        out += [Weights(weights_key(comp, attr), owner, comp, weights_key(c, a), g, c) for c, a, g in entries if g != owner]
    return out
