"""Script: a placement planned as what every replica of a run walks.

A Script is built once per run from the Placement and the run's :class:`Preflight` (what the safety
net found: shapes, where the cell draws random numbers, where the generators start): the program
(segments and driven loops), the replica counts, the networks shared across groups, the stop rules.
It is frozen, complete when built; the payloads are packed from it, and it is pickled once and sent
to every replica. The safety net plans a short one of its own, limited to its iterations.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from .. import shards
from ..components import role_of
from ..graph.model import cell_filename
from ..policies.modes import Lockstep, Mode
from ..policies.transfers import Transfer
from .decoupled import refuse, sample_ahead
from .keys import WeightsKey, weights_key
from .program import plan
from .recording import Recording, recording_of
from .segments import DrivenLoop, Program, Segment, Table, segments_of
from .values import graph_writes, per_env_lines

if TYPE_CHECKING:
    from ..policies import Placement

__all__ = ["Script", "Preflight", "RandomStart", "Weights", "ReplicaId", "peers"]


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

    source: WeightsKey  # weights:learner:policy
    owner: str
    owner_comp: str
    target: WeightsKey  # weights:actor:policy
    group: str
    target_comp: str


#: Iterations between checkpoints of synchronous distributed runs. Keeping and fetching one costs 17 ms
#: for notebook 01's loop under coarse (0.4 MB, a third of an iteration; DQN's replay buffer: 30 ms,
#: 3.3 MB; benchmarks/checkpoints.py): every 10 iterations costs about 3 %, and a lost worker at most
#: 10 iterations' work. By default (``checkpoint_every=None``) that is the most often a run keeps one:
#: a loop whose iteration is one environment step (CleanRL's dqn.py) would otherwise spend 90 % of its
#: time on them (benchmarks/data_parallel.py), so checkpoints also wait until they would take at most
#: CHECKPOINT_SHARE of the time since the last.
CHECKPOINT_EVERY = 10
CHECKPOINT_SHARE = 0.05


@dataclass(frozen=True)
class RandomStart:
    """Where each replica's global random generators start (:mod:`fragnb.runtime.draws`), and what the
    cell's draws make of the run; decided before the run's Script is built from it.

    Parameters
    ----------
    seed : int
        Every replica but ``group``'s seeds its own generators from it and its name.
    group : str or None
        The one-replica group that starts from the notebook's generator states ``states`` and so
        draws what plain Python draws (None: no group does).
    states : dict or None
        The notebook's generator states, for ``group`` (:func:`fragnb.runtime.worker.generators.states`).
    drawn : frozenset of int or None
        The graph's statements that draw from a global generator (None: not looked for, any may).
    statistical : bool
        Replicated statements draw: values that depend on the draws differ by replica, so values that
        cannot be combined take replica 0's instead of being an error.
    """

    seed: int = 0
    group: str | None = None
    states: dict | None = None
    drawn: frozenset[int] | None = None
    statistical: bool = False


@dataclass(frozen=True)
class Preflight:
    """What a run learns before it is planned: the safety net's findings (or, without it, where the
    draws were looked for), which :meth:`Script.of` plans the run from, once.

    Parameters
    ----------
    start : RandomStart
        Where the replicas' global generators start, from the run's seed.
    shapes : dict
        Plain Python's shapes of the cell's tensor variables, as the safety net saw them.
    seconds : float
        What the safety net took (``RunResult.check_seconds``).
    guarantee : str
        ``"exact"``, ``"rounding"``, ``"statistical"``, ``"unchecked"`` or ``"data-parallel"`` (``RunResult.guarantee``).
    draws : tuple of str
        A statistical run's global draws, by cell line (``RunResult.draws``).
    """

    start: RandomStart = RandomStart()
    shapes: dict[str, tuple] = field(default_factory=dict)
    seconds: float = 0.0
    guarantee: str = "exact"
    draws: tuple[str, ...] = ()


@dataclass(frozen=True)
class Script:
    """What every replica of a run walks; pickled once and sent to each. Built by :meth:`of`, frozen all
    the way down (its tables are :class:`~fragnb.plan.program.Table`): another plan is another Script."""

    name: str
    program: Program
    groups: Table  # group -> replica count
    weights: tuple[Weights, ...]
    num_envs: int | None
    stop_flags: tuple[str, ...]
    strict: bool  # values that cannot be combined are an error (else replica 0's is taken)
    limit: int | None = None  # iterations of the iteration loop to run (the safety net runs one or two)
    variables: tuple[str, ...] = ()  # what the cell assigns: sent back at the end
    #: A stop condition checked after every iteration: ``until(curve, iterations, env_steps)`` with the
    #: curve as (env steps, return) per finished episode, in plain Python's order.
    until: Callable[[list, int, int], bool] | None = None
    #: The replica that decides after each iteration whether the run ends: the first of the group
    #: whose segment ends the iteration (a learner), so the others hear it with what they wait for anyway.
    leader: str = ""
    #: How the replicas run together (:mod:`fragnb.policies.modes`): its walker, what it splits and keeps.
    mode: Mode = Lockstep()
    #: What crosses between groups, and by which operator (:mod:`fragnb.policies.transfers`): the
    #: placement's, as drawn; the groups with an all-reduce average their gradients.
    transfers: tuple[Transfer, ...] = ()
    max_staleness: int = 0
    #: async: the most samples drawn per transition inserted; the learner samples its replay buffer
    #: (``replay``) ahead of the actors within it, and keeps every trajectory (None: one per actor slot).
    samples_per_insert: float | None = None
    replay: str | None = None
    #: Synchronous Dask runs: every replica keeps its state after every this many iterations, for the
    #: notebook to fetch; a run that loses a worker resumes from the last one all replicas kept (0: never).
    checkpoint_every: int = 0
    #: The most share of the run's time checkpoints may take: one waits, past ``checkpoint_every``
    #: iterations, until the time since the last is that many times what the last cost (the leader
    #: decides, every replica keeps the same iteration). None: after every ``checkpoint_every`` exactly.
    checkpoint_share: float | None = None
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
    shapes: Table = field(default_factory=Table)
    #: Whole-cell policies: the notebook globals that functions the cell calls reach (the DQN tutorial's
    #: ``optimize_model`` steps ``optimizer``, ``select_action`` counts ``steps_done``): they travel, the
    #: functions run on the replica's namespace, and they come back as plain Python leaves them.
    function_globals: tuple[str, ...] = ()
    #: The cell's statements by what they read and write, and the fragments this run records
    #: (:mod:`fragnb.plan.recording`; the safety net's Script records none).
    recording: Recording | None = None
    #: A replica holding a share of the environments computes its row-wise torch ops on the whole
    #: batch's shape (:mod:`fragnb.rows`), so that its rows round as plain Python's did: every run whose
    #: values the safety net compares with plain Python's.
    whole_rows: bool = False
    #: The lines of statements computed from the environments' results: a sink call there is made by each
    #: replica for its own environments, any other by replica 0 for all (:func:`fragnb.sinks.perform`). None
    #: under whole copies: replica 0's run is the one plain Python's is.
    per_env: frozenset[int] = frozenset()

    @classmethod
    def of(
        cls,
        placement: Placement,
        *,
        limit: int | None = None,
        until: Callable[[list, int, int], bool] | None = None,
        checkpoint_every: int | None = 0,
        preflight: Preflight = Preflight(),
        record=None,
    ) -> Script:
        """Plan ``placement``; what a policy cannot run raises FragmentError here, before any worker starts.

        Parameters
        ----------
        placement : Placement
            The placed graph.
        limit, until, checkpoint_every
            As the attributes of the same names (a decoupled policy keeps no checkpoints); a
            ``checkpoint_every`` of None is every 10 iterations at the most, within 5 % of the time.
        preflight : Preflight
            What the safety net found (shapes, draws) and where the replicas' global generators start;
            by default nothing is known, and every replica seeds its own from 0 (the net's own Script).
        record : list, dict or Recording, optional
            The fragments whose statements every replica records, at which iterations
            (:func:`~fragnb.plan.recording.recording_of`), or that checked already.
        """
        graph, mode, start = placement.graph, placement.policy.mode, preflight.start
        if unwalked := [str(t) for t in placement.transfers if not mode.walks(t.operator)]:
            raise ValueError(  # what the placement draws is what runs: never a stream moved as a gather
                f"{placement.policy.name!r} walks its replicas in step, and cannot move {'; '.join(unwalked)}: "
                "Placement.with_operator and place(..., edges=...) place a stream's graph again, to run free"
            )
        recording = record if isinstance(record, Recording) else recording_of(graph, record)
        program = plan(placement, recording.recorded)
        envs = [shards.num_envs(graph.namespace[c]) for c, r in graph.components.items() if r == "env"]
        num_envs = (
            next((n for n in envs if n is not None), None) if not mode.whole_copies() else None
        )  # whole copies: none split
        loop = next((i for i in program.items if isinstance(i, DrivenLoop)), None)
        last = segments_of(loop.body)[-1].group if loop and segments_of(loop.body) else program.segments[0].group
        replay = None
        if (home := mode.home(placement.policy.groups)) is not None:
            refuse(placement, program)
            if placement.params.get("samples_per_insert") is not None:
                program, replay = sample_ahead(placement, program)
            last = home  # the driver's group leads: the other groups run free of it
        drawn = start.drawn
        drawing = None if drawn is None else frozenset(seg.index for seg in program.segments if seg.statements & drawn)
        return cls(
            name=graph.name,
            program=program,
            groups=Table({g: n for g, (n, _) in placement.groups.items()}),
            weights=tuple(_shared_weights(placement, program.segments)),
            num_envs=num_envs,
            stop_flags=tuple(graph.stop_flags),
            strict=placement.exact and mode.in_step and not start.statistical,
            limit=limit,
            variables=tuple(sorted(graph_writes(graph))),
            until=until,
            leader=str(ReplicaId(last, 0)),
            mode=mode,
            transfers=placement.transfers,
            max_staleness=placement.params.get("max_staleness", 0),
            samples_per_insert=placement.params.get("samples_per_insert"),
            replay=replay,
            checkpoint_every=mode.checkpoint_every(CHECKPOINT_EVERY if checkpoint_every is None else checkpoint_every),
            checkpoint_share=CHECKPOINT_SHARE if checkpoint_every is None else None,
            seed=start.seed,
            rng_group=start.group,
            rng=start.states,
            drawing=drawing,
            shapes=Table(preflight.shapes),
            function_globals=function_globals(graph) if mode.whole_copies() else (),
            recording=recording,
            whole_rows=mode.checked(placement.exact),
            per_env=frozenset() if mode.whole_copies() else per_env_lines(graph),  # whole copies: replica 0's alone
        )

    @property
    def filename(self) -> str:
        """The name the cell's code is compiled under, as :attr:`FragmentGraph.filename`."""
        return cell_filename(self.name)

    def replicas(self) -> list[str]:
        return [name for g, n in self.groups.items() for name in peers(g, n)]

    def transfer(self, src: str, dst: str, kind: str) -> Transfer:
        """The transfer from group ``src`` to ``dst`` of ``kind``: what moves it is its operator."""
        found = next((t for t in self.transfers if t.key == (src, dst, kind)), None)
        if found is None:  # every crossing edge of the placement is one: a walk that finds none is a bug
            raise LookupError(
                f"the Script has no transfer {src!r} -> {dst!r} of {kind!r}: {list(map(str, self.transfers))}"
            )
        return found

    def components(self) -> dict[str, list[str]]:
        """The components each group's statements use: what its replicas send back at the end."""
        return {
            g: sorted({c for s in self.program.segments if s.group == g for c in s.components}) for g in self.groups
        }


def function_globals(graph) -> tuple[str, ...]:
    """The names of the notebook's namespace that the cell's functions (defined in the notebook, and
    those they call in turn) read or rebind, in a stable order; not the cell's own names."""
    import types

    ns, found, todo = graph.namespace, {}, [n for n in sorted(graph.inputs) if n in graph.namespace]
    while todo:
        fn = ns.get(todo.pop())
        if not isinstance(fn, types.FunctionType) or fn.__globals__ is not ns:
            continue
        codes, names = [fn.__code__], []
        while codes:  # comprehensions and nested functions hold code objects of their own
            code = codes.pop()
            names += code.co_names
            codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
        for name in names:
            if name in ns and name not in found:
                found[name] = True
                todo.append(name)
    return tuple(sorted(set(found) - set(graph.inputs)))


def peers(group: str, count: int) -> list[str]:
    """The names of a group's ``count`` replicas."""
    return [str(ReplicaId(group, i)) for i in range(count)]


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
        comp, attr, owner = next((e for e in entries if role_of(ns[e[0]]) == "learner"), None) or next(
            (e for e in entries if not role_of(ns[e[0]]) and e[2] in trains), entries[0]
        )
        out += [
            Weights(weights_key(comp, attr), owner, comp, weights_key(c, a), g, c) for c, a, g in entries if g != owner
        ]
    return out
