"""Modes: how a policy's replicas run together, one class per kind, chosen once by the policy.

Every stage asks the policy's mode what it decides (does it split the environments, which walker its
replicas run, does it keep checkpoints, can a run go on without a lost replica, what each crossing
edge becomes) instead of branching on flags of its own: a new kind of policy is a new class here.

======================  ===============================  =============================================
mode                    policies                         what its replicas do
======================  ===============================  =============================================
:class:`Local`          ``single``                       nothing: the cell runs in the notebook
:class:`Lockstep`       ``coarse``, ``fine``             shares of the environments, one iteration at a
                                                         time, every value plain Python's
:class:`Averaged`       ``multi_learner``                lockstep, every group replicated, gradients
                                                         averaged (values plain Python's statistically)
:class:`Fused`          ``gpu_only``                     averaged, the environments on the device too
:class:`Whole`          ``data_parallel``                whole re-seeded copies of the cell, gradients
                                                         averaged at every ``optimizer.step()``
:class:`Decoupled`      ``async``, ``srl``               groups other than the driver's run free of it:
                                                         streams in, weights pulled by version
======================  ===============================  =============================================

Pure: decisions about a placement, no cluster and no thread (the runtime acts on them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from .operators import Operator

if TYPE_CHECKING:
    from ..graph import FragmentGraph

__all__ = ["Mode", "Local", "Lockstep", "Averaged", "Fused", "Whole", "Decoupled", "MODES", "mode_of"]


class Mode:
    """What one kind of policy decides about a run; instances are stateless and compare by class."""

    name: ClassVar[str] = ""
    #: The replicas run on a cluster's workers (every mode but :class:`Local`).
    _distributed: ClassVar[bool] = True
    #: The walker its replicas run (:mod:`fragnb.runtime.worker.walker`: ``"lockstep"``;
    #: :mod:`fragnb.runtime.worker.free`: ``"free"``). These declarations are read by the methods below alone.
    _walker: ClassVar[str] = "lockstep"
    #: Replicas hold shares of the environments (False: whole copies of every object, re-seeded).
    _splits: ClassVar[bool] = True
    #: A replicated group's replicas average their gradients at every optimiser step: they join a
    #: process group (torch.distributed), and each holds a worker process of its own.
    _averages: ClassVar[bool] = False
    #: The environments run on the group's device with the networks.
    _fused: ClassVar[bool] = False
    #: Where the placement is exact, the safety net compares the values of a first iteration or two with
    #: plain Python's (:meth:`checked`); averaged gradients are plain Python's only statistically.
    _compares: ClassVar[bool] = True
    #: The iterations the safety net runs (the most first).
    _net_iterations: ClassVar[tuple[int, ...]] = (1, 2)
    #: Replicas keep checkpoints, and a run that loses a worker starts again from the last one.
    _checkpoints: ClassVar[bool] = True
    #: Every group walks the same iteration at once: episodes and stop conditions go in plain Python's
    #: order, and a value the replicas cannot combine is an error (else groups run apart, episodes go by
    #: arrival, and such a value is replica 0's).
    _in_step: ClassVar[bool] = True
    #: Why a run that raised in the cell's code on a worker cannot be replayed in the kernel to debug it
    #: ("" where it can: every replica walks the same Script again from the same payloads or checkpoint,
    #: as threads of the kernel, value for value: :func:`fragnb.debug`).
    _unreplayable: ClassVar[str] = ""

    def __eq__(self, other) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    # -- what the stages ask. The declarations above are the classes' own: every other module asks these
    # methods (tests/test_packaging.py's guard), so that a kind of policy's behaviour is read here, once.

    def on_workers(self) -> bool:
        """Its replicas run on a cluster's workers, planned into a Script (else the cell runs in the kernel,
        as plain Python: ``single``)."""
        return self._distributed

    def shares(self, replicas: int) -> int:
        """Into how many shares a group of ``replicas`` splits the environments and what is sized by them:
        one per replica, or 1 where every replica holds whole copies of every object (``data_parallel``)."""
        return replicas if self._splits else 1

    def whole_copies(self) -> bool:
        """Every replica runs the whole cell on whole copies of its objects, re-seeded, and the notebook
        takes replica 0's values (each replica's are the user's to look at): ``shares`` is always 1."""
        return not self._splits

    def averages(self) -> bool:
        """A replicated group's replicas average their gradients at every optimiser step: they join a
        process group (torch.distributed), and each holds a worker process of its own."""
        return self._averages

    def fuses(self) -> bool:
        """The environments run on the group's device beside the networks (Anakin): its replicas are
        built on the device, its placement's notes say where, and a GPU placement wants ``cluster="cuda"``."""
        return self._fused

    def announced(self, notes: list[str]) -> list[str]:
        """The placement's ``notes`` a run says before it starts: a fused placement's (where its environments
        run, why a group is on the CPU), none otherwise (the drawing shows them)."""
        return list(notes) if self._fused else []

    def cluster(self, cluster, devices: list[str]):
        """The cluster a run goes to, given the one asked for and its groups' ``devices``: a fused placement
        on GPUs takes one worker per GPU (``"cuda"``) unless a cluster was given."""
        return "cuda" if self._fused and cluster is None and "cuda" in devices else cluster

    def walker(self) -> str:
        """The name of the walk its replicas run (:data:`fragnb.runtime.worker.entry.WALKERS`)."""
        return self._walker

    @property
    def in_step(self) -> bool:
        """Every group walks the same iteration at once: episodes and stop conditions go in plain Python's
        order, a value the replicas cannot combine is an error, and the groups take turns (else groups run
        apart, episodes go by arrival, and such a value is replica 0's)."""
        return self._in_step  # a property: a fact the course reads (`"sync" if mode.in_step else "async"`)

    def episode_order(self) -> str:
        """How a run's episodes are ordered: ``"plain"`` (by step, then environment, as plain Python) for a
        run in step, else ``"arrival"`` (:data:`fragnb.runtime.worker.report.ORDERS`)."""
        return "plain" if self._in_step else "arrival"

    def checkpoint_every(self, asked: int) -> int:
        """How often its replicas keep a checkpoint, where ``asked`` is the run's setting: never (0) where a
        mode keeps none."""
        return asked if self._checkpoints else 0

    def restarts(self, lost: int, restarts: int) -> bool:
        """Whether a run that lost a worker, ``lost`` times so far before this one, starts again from its last
        checkpoint on fresh workers, within ``restarts``."""
        return self._checkpoints and lost < restarts

    def why_it_stops(self, restarts: int) -> str:
        """Why a run that lost a worker cannot go on (for the error's note)."""
        if self._checkpoints:
            return f"its {restarts} restart(s) are spent."
        return "a decoupled policy's learner (or any srl worker) cannot be replaced mid-run."

    def net_iterations(self) -> tuple[int, ...]:
        """The iterations the safety net runs (the most first)."""
        return self._net_iterations

    def unreplayable(self) -> str:
        """Why a run that raised in the cell's code on a worker cannot be replayed in the kernel to debug it
        ("" where it can: :func:`fragnb.debug`)."""
        return self._unreplayable

    def checked(self, exact: bool) -> bool:
        """Whether the safety net compares a run's values with plain Python's, for a placement that is
        ``exact`` (:attr:`~fragnb.policies.Placement.exact`) or not."""
        return exact and self._compares

    def limits(self, graph: FragmentGraph) -> list:
        """The graph's constructs this mode cannot run (:attr:`FragmentGraph.limits`)."""
        return graph.limits if self._splits else graph.whole_limits

    def home(self, groups: dict[str, str]) -> str | None:
        """The group the others run free of (None: every group walks the iterations in step)."""
        return None

    def operator(self, kind: str, src: tuple[str, int], dst: tuple[str, int], home: str | None) -> Operator:
        """What an edge of ``kind`` (``"state"``: weights; else values) from group ``src`` to ``dst``
        (each a (group, replicas) pair) becomes; see :class:`~fragnb.policies.placement.EdgePlacement`."""
        (sg, sn), (dg, dn) = src, dst
        if sg == dg:
            return Operator.LOCAL
        if kind == "state":  # weights go whole to every replica that uses them, whatever the counts
            return Operator.BROADCAST
        if sn > 1 and dn == 1:
            return Operator.GATHER
        if sn == 1 and dn > 1:
            return Operator.SCATTER
        return Operator.EXCHANGE

    def walks(self, operator: Operator) -> bool:
        """Whether its replicas' walk moves values by ``operator``: a walk in step meets at every iteration and
        has no stream (a placement that draws one runs free: :meth:`relaxed`)."""
        return operator not in (Operator.SAMPLE_STREAM, Operator.INFERENCE_STREAM)

    def operators(self, kind: str, operator: str, into_home: bool = False) -> tuple[Operator, ...]:
        """The operators this mode's replicas can move a transfer of ``kind`` with, where the mode
        chose ``operator`` (``into_home``: it brings values into the driver's one replica, a learner's
        trajectories): the replicas of a group that averages its gradients may keep their own
        instead (``"local"``: independent copies, as seeds side by side); weights that a mode
        broadcasts may go by versioned pull instead, within the run's ``max_staleness`` (0 for a
        synchronous policy: the very version a broadcast would bring, value for value); other transfers
        move as the mode routes them (:mod:`fragnb.policies.relaxing`)."""
        if kind == "gradients":
            return (Operator.ALL_REDUCE, Operator.LOCAL)
        if kind == "state" and operator == Operator.BROADCAST:
            return (Operator.BROADCAST, Operator.VERSIONED_PULL)
        return (Operator(operator),)

    def stale(self, params: dict) -> str:
        """Why a run under this mode with ``params`` is not plain Python's values whatever it draws (its
        actors may act on older weights), in a clause; empty where it is."""
        return ""

    def relaxed(self, bound: int, stream: bool) -> Mode:
        """The mode of this one's placement with its weights pulled within ``bound`` versions and, with
        ``stream``, its trajectories streamed (:func:`fragnb.policies.relaxing.relax`): itself at bound 0
        without a stream (the same run), else refused: its replicas meet at every update."""
        if bound == 0 and not stream:
            return self
        raise ValueError(
            f"a {self.name} policy's replicas meet at every update: its edges take a bound of 0 and no stream "
            "(relax coarse's or fine's, whose learner is one replica)"
        )

    def unchecked(self, exact: bool) -> str:
        """The guarantee of a run whose values nothing compared with plain Python's."""
        return "unchecked" if self.checked(exact) else "data-parallel"

    def goes_on_without(self, lost: list[str], forsaken: list[str], groups: dict[str, int], leader: str) -> bool:
        """Whether a run can go on without the replicas ``lost`` (besides those ``forsaken`` already):
        a synchronous run needs every replica every iteration."""
        return False


class Local(Mode):
    """``single``: the cell itself, in the notebook; nothing is placed on a worker."""

    name = "local"
    _distributed = False
    _checkpoints = False
    _unreplayable = "it ran in the kernel already: `%debug` opens where it failed"


class Lockstep(Mode):
    """Replicas hold shares of the environments and walk the iterations in step; every value is plain
    Python's (the safety net checks it first)."""

    name = "lockstep"

    def operators(self, kind: str, operator: str, into_home: bool = False) -> tuple[Operator, ...]:
        if kind == "data" and operator == Operator.GATHER and into_home and not self._averages:
            return (Operator.GATHER, Operator.SAMPLE_STREAM)  # the learner may take whichever trajectories arrive first
        return super().operators(kind, operator, into_home)

    def relaxed(self, bound: int, stream: bool) -> Mode:
        # weights up to `bound` versions old, or streamed trajectories: the actors run free of the
        # learner, as async's do (a learner that gathers takes one iteration of each actor, in order)
        if self._averages or (bound == 0 and not stream):
            return super().relaxed(bound, stream)
        return Decoupled()


class Averaged(Lockstep):
    """Lockstep with every group replicated: each replica a whole loop on its share, gradients
    all-reduced at every update (DD-PPO). With one replica it averages nothing: its placement is exact,
    and the safety net compares it as any other."""

    name = "averaged"
    _averages = True


class Fused(Averaged):
    """Averaged, with the environments fused on the device beside the networks (Anakin)."""

    name = "fused"
    _fused = True


class Whole(Mode):
    """Each replica runs the whole cell on whole copies of its objects, re-seeded (replica 0 keeps the
    notebook's draws); gradients averaged at every ``optimizer.step()``. Nothing is split, so any loop
    plain Python runs can be replicated; the notebook takes replica 0's values."""

    name = "whole"
    _splits = False
    _averages = True


class Decoupled(Mode):
    """The driver's group (the learner) leads; the other groups run free of it, streaming what they
    produce and pulling its weights by version within a staleness bound (IMPALA, SRL). Its safety net
    runs one iteration (from the second, actors may act on older weights); it keeps no checkpoints,
    and goes on without an actor whose worker died."""

    name = "decoupled"
    _walker = "free"
    _net_iterations = (1,)
    _checkpoints = False
    _in_step = False
    _unreplayable = (
        "what its learner takes depends on when the actors' trajectories arrive, which a replay cannot repeat"
    )

    def home(self, groups: dict[str, str]) -> str | None:
        return groups["driver"]

    def operators(self, kind: str, operator: str, into_home: bool = False) -> tuple[Operator, ...]:
        if kind == "data" and operator == Operator.SAMPLE_STREAM and into_home:
            return (Operator.SAMPLE_STREAM, Operator.GATHER)  # or one iteration of every actor, in order (coarse's)
        return (Operator(operator),)

    def walks(self, operator: Operator) -> bool:
        return True  # inside the loop its free walk takes data by a stream alone (fragnb.runtime.worker.free.STREAMS)

    def relaxed(self, bound: int, stream: bool) -> Mode:
        return self  # free already: the bound is the run's max_staleness

    def stale(self, params: dict) -> str:
        bound = params.get("max_staleness", 0)
        if not bound:
            return ""  # every actor waits for the newest weights: plain Python's updates (tested against coarse)
        return (
            f"the actors act on weights up to {bound} version{'s' * (bound > 1)} older than the learner's "
            "(max_staleness), so each update learns from what older weights collected: plain Python's algorithm, "
            "not its values (RunResult.staleness says each update's)"
        )

    def operator(self, kind: str, src: tuple[str, int], dst: tuple[str, int], home: str | None) -> Operator:
        (sg, _), (dg, _) = src, dst
        if sg == dg:
            return Operator.LOCAL
        if dg == home:
            return Operator.SAMPLE_STREAM
        if sg == home and kind == "state":
            return Operator.VERSIONED_PULL
        if home not in (sg, dg):
            return Operator.INFERENCE_STREAM
        return super().operator(kind, src, dst, home)

    def goes_on_without(self, lost: list[str], forsaken: list[str], groups: dict[str, int], leader: str) -> bool:
        # the learner takes whole trajectories from whichever actors deliver them: it goes on without an
        # actor while one is left, where the free side is one group (srl's actor and policy workers wait
        # on each other every step: losing either stalls the other)
        free = [g for g in groups if g != _group(leader)]
        if len(free) != 1 or any(_group(n) != free[0] for n in lost):
            return False
        return len(set(lost) | set(forsaken)) < groups[free[0]]


def _group(replica: str) -> str:
    """The group of a replica's name, ``group[index]`` (:class:`fragnb.plan.script.ReplicaId`)."""
    return replica.rpartition("[")[0]


#: The modes by name, as a policy may give one (``mode="decoupled"``).
MODES: dict[str, type[Mode]] = {m.name: m for m in (Local, Lockstep, Averaged, Fused, Whole, Decoupled)}


def mode_of(mode: str | Mode) -> Mode:
    """``mode`` itself, or the mode of that name; an unknown name lists the known ones."""
    if isinstance(mode, Mode):
        return mode
    try:
        return MODES[mode]()
    except KeyError:
        raise ValueError(f"unknown mode {mode!r} (one of {sorted(MODES)})") from None
