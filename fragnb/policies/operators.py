"""Operators: how a transfer moves what crosses between worker groups, as one type with what each one is.

A mode chooses an edge's operator (:meth:`fragnb.policies.modes.Mode.operator`), the user may relax one
(:mod:`fragnb.policies.relaxing`), the drawing labels edges with it, the prediction prices it, and the
replicas move values as it says. What an operator *is* (whether it crosses, whether every receiving replica
gets the whole value, whether it takes a staleness bound, what a user may write for it) is said here once.
An operator is its name (a ``str``): a placement reads and prints the same as before it was a type.
Pure: no cluster library.
"""

from __future__ import annotations

import enum

__all__ = ["Operator"]


class Operator(enum.StrEnum):
    """How a transfer moves its values.

    Examples
    --------
    >>> from fragnb.policies.operators import Operator
    >>> Operator.GATHER == "gather", Operator.LOCAL.crosses, Operator.VERSIONED_PULL.to_each
    (True, False, True)
    >>> Operator.named("stream"), Operator.named("versioned-pull").bounded
    ('sample stream', True)
    """

    #: Inside one group: no move.
    LOCAL = "local"
    #: Each version of a network's weights, whole, to every replica that uses them.
    BROADCAST = "broadcast"
    #: Each replica's share to the one receiving replica, joined along the environments.
    GATHER = "gather"
    #: The one sending replica's values, split among the receiving replicas.
    SCATTER = "scatter"
    #: Shares from several replicas to several others.
    EXCHANGE = "exchange"
    #: The mean of a replicated group's gradients, on every replica of it.
    ALL_REDUCE = "all-reduce"
    #: The newest version of the weights that has arrived, within a staleness bound.
    VERSIONED_PULL = "versioned pull"
    #: Whole trajectories, taken by the learner as they arrive (a decoupled run's).
    SAMPLE_STREAM = "sample stream"
    #: Observations to a policy worker and actions back, within each step (``srl``'s).
    INFERENCE_STREAM = "inference stream"

    def __repr__(self) -> str:  # as the name it is: refusals quote operators as strings
        return repr(self.value)

    @property
    def crosses(self) -> bool:
        """Whether it moves values between groups (every operator but ``local``)."""
        return self is not Operator.LOCAL

    @property
    def to_each(self) -> bool:
        """Whether every receiving replica gets the whole value (weights), not a share of a batch."""
        return self in (Operator.BROADCAST, Operator.VERSIONED_PULL)

    @property
    def bounded(self) -> bool:
        """Whether it takes a staleness bound (``edges={label: (operator, bound)}``)."""
        return self in (Operator.VERSIONED_PULL, Operator.SAMPLE_STREAM)

    @classmethod
    def named(cls, text: str) -> Operator | str:
        """The operator a user's word names (``"stream"``, ``"versioned-pull"``, ``"versioned_pull"``), or the
        word as written when it names none (the caller lists the ones that apply)."""
        if not isinstance(text, str):
            return text
        for word in (text, "sample stream" if text == "stream" else text, text.replace("-", " ").replace("_", " ")):
            if word in cls._value2member_map_:
                return cls(word)
        return text
