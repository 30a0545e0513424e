"""Choosing each edge: a placement's crossing transfers named by what they carry, and the operators each may take.

A policy is its groups plus the operator on every crossing edge (MSRL's distribution policies choose the
operator per fragment boundary). ``place(dp, ..., edges={"policy": ("versioned pull", 2)})`` relaxes one
transfer at a time, named as the drawing labels it: the weights (``"policy"`` for ``policy weights``) may
go by a versioned pull within a staleness bound instead of a broadcast after each update, and the
trajectories into a single learner may *stream* (the learner takes whichever arrive first) instead of
being gathered, one from each actor, each iteration.

What that makes of the run is the mode's to say (:meth:`fragnb.policies.modes.Mode.relaxed`): a bound of 0
with the trajectories gathered is the same synchronous run, value for value; a bound above 0, or a stream,
lets the actors run free of the learner by up to that many versions, as ``async`` does (a decoupled walk,
announced statistical). ``async`` is ``coarse`` with both edges relaxed: the same placement, the same run.
Pure: no cluster library.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .operators import Operator
from .transfers import GRADIENTS, Transfer

if TYPE_CHECKING:
    from .placement import Placement

__all__ = ["labels", "transfer_named", "operators", "relax", "parse_edge", "STREAM"]

#: What the drawing calls a relaxed trajectory edge (as under ``async``); a user may write ``"stream"``.
STREAM = Operator.SAMPLE_STREAM
#: A versioned pull's bound when none is given.
DEFAULT_BOUND = 1


def labels(placement: Placement) -> dict[str, Transfer]:
    """Each crossing transfer by the names it may be chosen by: every value it carries, and a network's
    weights also by the network's name (``"policy"`` for ``policy weights``)."""
    out: dict[str, Transfer] = {}
    for t in placement.transfers:
        if t.kind == GRADIENTS:
            continue
        for carried in t.carries:
            out.setdefault(carried, t)
            if t.kind == "state" and carried.endswith(" weights"):
                out.setdefault(carried.removesuffix(" weights"), t)
    return out


def transfer_named(placement: Placement, label: str) -> Transfer:
    """The transfer ``label`` names, or ValueError listing the labels the placement has."""
    named = labels(placement)
    if label not in named:
        raise ValueError(
            f"edges={{{label!r}: ...}}: no edge of {placement.policy.name!r} crossing between groups carries {label!r}; "
            f"its crossing edges carry {_listed(placement)}"
        )
    return named[label]


def operators(placement: Placement, label: str) -> tuple[str, ...]:
    """The operators the transfer ``label`` names may take under this placement (its own first)."""
    t = transfer_named(placement, label)
    return placement.policy.mode.operators(t.kind, t.operator, into_home=_into_home(placement, t))


def parse_edge(text: str) -> tuple[str, tuple[str, int | None]]:
    """The magic's ``--edge LABEL=OPERATOR[:BOUND]``: ``"policy=versioned pull:2"`` (quoted whole: the magic's
    line splits at spaces inside a word's quotes) or ``policy=versioned-pull:2``."""
    label, sep, choice = text.strip("'\"").partition("=")  # a shell's quotes, which the magic's line keeps
    operator, _, bound = choice.strip("'\"").partition(":")
    label = label.strip("'\"")
    if not sep or not label.strip() or not operator.strip():
        raise ValueError(f"--edge {text}: write LABEL=OPERATOR or LABEL=OPERATOR:BOUND, e.g. policy='versioned pull:2'")
    try:
        return label.strip(), (operator.strip().replace("-", " ").replace("_", " "), int(bound) if bound else None)
    except ValueError:
        raise ValueError(f"--edge {text}: the bound after ':' is a whole number of versions") from None


def relax(placement: Placement, edges: dict[str, Any], place) -> Placement:
    """``placement`` with the transfers ``edges`` names (label -> operator, or (operator, bound)) moved so;
    ``place(policy, **params)`` places the graph again where the mode changes. What does not apply is
    refused, listing what does."""
    chosen: dict[tuple[str, str, str], tuple[str, int]] = {}
    for label, choice in edges.items():
        t = transfer_named(placement, label)
        operator, bound = choice if isinstance(choice, tuple) else (choice, None)
        operator = Operator.named(operator)
        valid = operators(placement, label)
        if operator not in valid:
            raise ValueError(
                f"edges={{{label!r}: {operator!r}}}: under {placement.policy.name!r}, {t} may go by "
                f"{' or '.join(repr(v) for v in valid)}"
                + (f" (and {_listed(placement)} are its crossing edges)" if len(valid) == 1 else "")
            )
        if operator == Operator.VERSIONED_PULL and bound is None:  # the policy's own bound (async's), else the default
            bound = placement.params.get("max_staleness", DEFAULT_BOUND)
        if bound is not None and (not isinstance(bound, int) or isinstance(bound, bool) or bound < 0):
            raise ValueError(
                f"edges={{{label!r}: ({operator!r}, {bound!r})}}: a bound is a whole number of versions, 0 or more"
            )
        if bound is not None and not operator.bounded:
            raise ValueError(
                f"edges={{{label!r}: ({operator!r}, {bound})}}: only a versioned pull or a stream takes a bound"
            )
        chosen[t.key] = (operator, bound)
    if not chosen:
        return placement
    bounds = {b for _, b in chosen.values() if b is not None}  # a stream without one takes the weights'
    if len(bounds) > 1:
        raise ValueError(
            f"edges={edges!r}: a run has one staleness bound, which the weights and the trajectories share; "
            f"give both the same (here {sorted(bounds)})"
        )
    bound = next(iter(bounds)) if bounds else 0
    mode = placement.policy.mode
    relaxed = mode.relaxed(bound, any(op == STREAM for op, _ in chosen.values()))
    before = {t.key: t.operator for t in placement.transfers}
    if relaxed is not mode:  # the actors run free of the learner: placed again as a decoupled walk moves values
        policy = replace(placement.policy, mode=relaxed, options={**placement.policy.options, "max_staleness": 0})
        params = {k: v for k, v in placement.params.items() if k in placement.policy.parameters}
        placement = place(policy, **params, max_staleness=bound)
    elif "max_staleness" in placement.params and bounds:  # free already (async): the bound chosen is the run's
        placement = replace(placement, params={**placement.params, "max_staleness": bound})
    for t in placement.transfers:  # each edge as chosen; the others as they were, where the walk can move them so
        wanted = chosen[t.key][0] if t.key in chosen else before.get(t.key, t.operator)
        if wanted != t.operator and wanted in operators(placement, t.carries[0]):
            placement = placement.with_operator(*t.key, wanted)
    return replace(
        placement, relaxed=tuple(sorted((k, (op, bound if b is None else b)) for k, (op, b) in chosen.items()))
    )


def _into_home(placement: Placement, t: Transfer) -> bool:
    """Whether ``t`` brings values into the one replica of the driver's group (a learner's trajectories)."""
    return t.kind == "data" and t.dst == placement.home and placement.groups[placement.home][0] == 1


def _listed(placement: Placement) -> str:
    return "; ".join(
        f"{', '.join(repr(c) for c in t.carries)} ({t.src} -> {t.dst}, {t.operator}: may go by "
        f"{' or '.join(placement.policy.mode.operators(t.kind, t.operator, into_home=_into_home(placement, t)))})"
        for t in placement.transfers
        if t.kind != GRADIENTS
    )
