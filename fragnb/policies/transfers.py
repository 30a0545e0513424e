"""Transfers: what crosses between worker groups, as the run moves it.

A placement's crossing edges, grouped by the pair of groups and what they carry (``"state"``: a
network's weights; ``"data"``: values), each with the operator that moves it (its mode decides:
:meth:`fragnb.policies.modes.Mode.operator`), and the gradients a replicated group averages inside
itself (``all-reduce``). The drawing labels each edge with its transfer's operator, ``traffic()`` and
the prediction price them, and the Script carries them to the replicas, which move what they say:
change one (:meth:`fragnb.policies.Placement.with_operator`) and the drawing and the run change with it.
Pure: no cluster library.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .operators import Operator

if TYPE_CHECKING:
    from .placement import EdgePlacement, FragmentPlacement
    from .policy import DistributionPolicy

__all__ = ["Transfer", "GRADIENTS", "transfers_of", "averaged"]

#: What an all-reduce transfer carries: the gradients of a replicated group's networks.
GRADIENTS = "gradients"


@dataclass(frozen=True)
class Transfer:
    """One crossing of the run: from group ``src`` to group ``dst`` (the same group for an all-reduce),
    carrying ``carries`` (the variables of its edges, or the gradients) of ``kind`` (``"state"``,
    ``"data"``, or ``"gradients"``), moved by ``operator``.

    Parameters
    ----------
    src, dst : str
        The worker groups.
    kind : str
        ``"state"``, ``"data"`` or ``"gradients"``.
    carries : tuple of str
        What it moves.
    operator : Operator or str
        How it moves it (``"gather"``, ``"broadcast"``, ``"all-reduce"``, ...: an
        :class:`~fragnb.policies.operators.Operator`; a name is taken as one).

    Examples
    --------
    A placement's ``transfers``: under ``coarse``, the actors' batches gathered to the learner, and
    under ``multi_learner``, each learner's gradients averaged with the others':

    >>> from fragnb.policies import Transfer
    >>> batch = Transfer("actors", "learner", "data", ("batch",), "gather")
    >>> str(batch), batch.key
    ('actors -> learner: gather (batch)', ('actors', 'learner', 'data'))
    >>> print(Transfer("replicas", "replicas", "gradients", ("gradients",), "all-reduce"))
    replicas: all-reduce (gradients)
    """

    src: str
    dst: str
    kind: str
    carries: tuple[str, ...]
    operator: Operator

    def __post_init__(self):
        object.__setattr__(self, "operator", Operator(self.operator))

    @property
    def key(self) -> tuple[str, str, str]:
        """(src, dst, kind): a placement has one transfer per key."""
        return self.src, self.dst, self.kind

    def __str__(self) -> str:
        where = self.src if self.src == self.dst else f"{self.src} -> {self.dst}"
        return f"{where}: {self.operator} ({', '.join(self.carries)})"


def transfers_of(
    policy: DistributionPolicy, edges: list[EdgePlacement], fragments: dict[str, FragmentPlacement]
) -> tuple[Transfer, ...]:
    """The transfers of a placement: one for each (source group, destination group, kind) its edges
    cross with an operator, in the order they first cross; then an all-reduce inside each replicated
    group of a mode that averages gradients."""
    found: dict[tuple[str, str, str], tuple[list[str], str]] = {}
    for e in edges:
        src, dst = fragments[e.src].group, fragments[e.dst].group
        if src == dst:
            continue
        carries, _ = found.setdefault((src, dst, e.kind), ([], e.operator))
        carries += [v for v in e.variables if v not in carries]
    out = [Transfer(s, d, k, tuple(carries), op) for (s, d, k), (carries, op) in found.items()]
    if policy.mode.averages():
        groups = {p.group: p.replicas for p in fragments.values()}
        out += [Transfer(g, g, GRADIENTS, (GRADIENTS,), Operator.ALL_REDUCE) for g, n in groups.items() if n > 1]
    return tuple(out)


def averaged(transfers) -> list[str]:
    """The groups whose replicas average their gradients (an all-reduce transfer): they join a process
    group before the run, and each holds a worker process of its own."""
    return [t.src for t in transfers if t.kind == GRADIENTS and t.operator == Operator.ALL_REDUCE]
