"""Exported keys: the names under which one group's segment hands values to another group's.

Three kinds travel: the cell's variables (a plain ``str``, the variable's name), a network's weights
(:class:`WeightsKey`) and the values a split loop records for another group at one of its
statements (:class:`RecordKey`). The kind is the key's type, so the replicas, the edges and the
errors ask ``isinstance`` instead of parsing prefixes; the text (``weights:learner:policy``,
``record:L12``) stays readable in messages and drawings, and a key equals its text.
"""

from __future__ import annotations

__all__ = ["WeightsKey", "RecordKey", "weights_key", "record_key", "kind_of"]


class WeightsKey(str):
    """The weights of the network ``component.attribute`` (``attribute`` empty: the component is the
    network, as CleanRL's bare ``agent``)."""

    __slots__ = ()

    @property
    def component(self) -> str:
        return self.split(":")[1]

    @property
    def attribute(self) -> str:
        return self.split(":")[2]


class RecordKey(str):
    """Values one group records for another at a statement (``record:K``) or before a loop (``record:LN``)."""

    __slots__ = ()


def weights_key(component: str, attribute: str) -> WeightsKey:
    """The key of network ``component.attribute`` among a segment's exports."""
    return WeightsKey(f"weights:{component}:{attribute}")


def record_key(place: int | str) -> RecordKey:
    """The key of what is recorded at statement ``place`` (an index) or before a loop (``"L<line>"``)."""
    return RecordKey(f"record:{place}")


def kind_of(key: str) -> str:
    """``"weights"``, ``"record"`` or ``"variable"``."""
    return "weights" if isinstance(key, WeightsKey) else "record" if isinstance(key, RecordKey) else "variable"
