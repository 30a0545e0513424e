"""Global random draws: which statements draw from torch's, NumPy's or Python's global generator, and
what a distributed run can promise about them.

Per-environment streams (:mod:`fragnb.streams`) make a run *exact*: every replica draws what its
environments draw in plain Python. A loop as the field writes it samples from the global generators
instead (``Categorical(logits).sample()``, ``random.random()``, ``np.random.shuffle``, dropout).
One dry iteration on copies finds those statements by watching the generators' states after every
statement. Then:

- draws in one group of one replica only (a learner's minibatch shuffle): that replica starts from
  the notebook's generator states and draws what plain Python draws: still **exact**;
- draws anywhere else: each replica draws from its own generators, seeded from the run's seed and
  its name: the run is **statistical** (the same algorithm, other random numbers), and says so
  once, naming the line of each draw.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from ..errors import FragmentError
from ..shards import SEED_STRIDE, networks
from .local import Dry, aside, copies, exec_cell
from .worker.generators import GENERATORS, NAMES, moved, states

__all__ = [
    "Draws",
    "Watching",
    "find_draws",
    "refuse_inexact",
    "announcement",
    "notebook_group",
    "reached_from",
    "clock_reads",
]


class Watching(Dry):
    """A dry run's driver that notes, after every statement of the cell's first iteration (and of what
    comes before and after its loop), which global generators moved. Reading every generator's state
    after every statement costs more than the statement (a third of a millisecond): later iterations
    run the same statements, and are not watched."""

    def __init__(self, graph, ns: dict, iterations: int = 1):
        super().__init__(graph, ns, iterations)
        self.found: dict[int, set[str]] = {}
        self.last = states()
        self.watching = True

    def iterate(self, iterable):
        for i, item in enumerate(super().iterate(iterable)):
            if i == 1:
                self.watching = False
            yield item
        self.watching, self.last = True, states()  # what follows the loop is watched again

    def done(self, index: int) -> None:
        if not self.watching:
            return
        now = states()
        found = moved(self.last, now)
        if found:
            self.found.setdefault(index, set()).update(found)
        self.last = now

    def draws(self) -> Draws:
        return Draws({i: tuple(g for g in GENERATORS if g in gens) for i, gens in sorted(self.found.items())})


@dataclass
class Draws:
    """Statements that draw from a global generator, and what that means for a placement."""

    statements: dict[int, tuple[str, ...]] = field(default_factory=dict)  # statement index -> generators

    def __bool__(self) -> bool:
        return bool(self.statements)

    def groups(self, placement) -> set[str]:
        graph = placement.graph
        return {placement.fragments[graph.fragment_of(graph.statements[i]).name].group for i in self.statements}

    def exact(self, placement) -> bool:
        """Whether every draw happens in one group of one replica, which then draws what plain Python draws."""
        groups = self.groups(placement)
        return not groups or (len(groups) == 1 and placement.groups[next(iter(groups))][0] == 1)

    def causes(self, placement) -> dict[int, tuple[str, ...]]:
        """The draws that keep a run from plain Python's numbers: those in a replicated group. A draw in one
        replica of one group is plain Python's (that replica starts from the notebook's generator states), so
        it is a cause only where another group draws too (one generator's sequence split between them)."""
        graph = placement.graph
        replicated = {
            i: gens
            for i, gens in self.statements.items()
            if placement.fragments[graph.fragment_of(graph.statements[i]).name].replicas > 1
        }
        return replicated or dict(self.statements)

    def lines(self, placement, which: dict[int, tuple[str, ...]] | None = None) -> list[str]:
        """Each draw (of ``which``, by default all), as a run names it: its line, generators, group and count."""
        graph = placement.graph
        out = []
        for i, gens in sorted((self.statements if which is None else which).items()):
            s = graph.statements[i]
            frag = placement.fragments[graph.fragment_of(s).name]
            lineno, text = _line_of(graph, s)
            out.append(
                f"line {lineno} (`{text}`) draws from {' and '.join(NAMES[g] for g in gens)} "
                f"in {frag.group!r} x{frag.replicas}"
            )
        return out

    def tainted(self, graph) -> set[str]:
        """Names whose values depend on the draws (see :func:`reached_from`)."""
        return reached_from(graph, set(self.statements))


def notebook_group(counts: dict[str, int], drawing: set[str] | None, home: str) -> str | None:
    """The group whose replica starts from the notebook's global generator states, and so draws what
    plain Python draws; every other replica seeds its own generators from the run's seed and its name.

    Parameters
    ----------
    counts : dict
        Each worker group's replica count.
    drawing : set of str or None
        The groups whose statements draw from a global generator; None where that was not looked for
        (``--no-check``): the driver's group is taken.
    home : str
        The driver's group (``Placement.home``).

    Returns
    -------
    str or None
        The drawing group when it is one group of one replica; None when the cell draws nowhere, or
        in several groups or in a group of several replicas (a statistical run: no replica draws
        plain Python's numbers).
    """
    if drawing is None:
        drawing = {home}
    if len(drawing) == 1 and counts[group := next(iter(drawing))] == 1:
        return group
    return None


def _line_of(graph, s) -> tuple[int, str]:
    """The line a statement's draw is on: inside a `with torch.no_grad():`, the statement it wraps."""
    node = s.node
    while isinstance(node, ast.With) and node.body:
        node = node.body[0]
    return node.lineno, graph.source.splitlines()[node.lineno - 1].strip()


def reached_from(graph, statements: set[int]) -> set[str]:
    """Names whose values depend on what ``statements`` compute (random draws, clock readings): what
    they write or change, and everything computed from it, components included (a learner trained on
    sampled actions)."""
    bad = set(statements)
    names: set[str] = set()
    changed = True
    while changed:
        changed = False
        for s in graph.statements:
            if s.index in bad:
                new = set(s.writes) | set(s.components)
            else:
                if not (set(s.reads) | set(s.components)) & names:
                    continue
                bad.add(s.index)
                new = set(s.writes) | set(s.components)
                changed = True
            if not new <= names:
                names |= new
                changed = True
        # a network shared with a changed component changes with it (the actor samples with the learner's
        # weights), and so does an optimiser over its parameters (CleanRL's `optimizer` over `agent`'s)
        params = {c: _parameters(graph.namespace[c]) for c in graph.components}
        nets = set().union(*(params[c] for c in names if c in params))
        sharing = {c for c, ps in params.items() if ps & nets}
        if not sharing <= names:
            names |= sharing
            changed = True
        # a loop over tainted values binds tainted targets (`for i in np.nonzero(infos["_episode"])[0]`)
        for loop in graph.loops:
            if loop.node is not None and {n.id for n in ast.walk(loop.node.iter) if isinstance(n, ast.Name)} & names:
                bound = {n.id for n in ast.walk(loop.node.target) if isinstance(n, ast.Name)}
                if not bound <= names:
                    names |= bound
                    changed = True
    return names


def _parameters(obj) -> set[int]:
    """The ids of the trained tensors an object holds: its networks', or an optimiser's."""
    import torch

    if isinstance(obj, torch.optim.Optimizer):
        return {id(p) for group in obj.param_groups for p in group["params"]}
    return {id(p) for net in networks(obj).values() for p in net.parameters()}


def clock_reads(graph) -> set[int]:
    """Statements that read a clock (``time.time()``, ``time.perf_counter()``, ``datetime.now()``):
    what they compute differs run to run (CleanRL's steps-per-second in its writer)."""
    import datetime
    import time

    clocks = {
        time.time,
        time.perf_counter,
        time.monotonic,
        time.process_time,
        time.time_ns,
        time.perf_counter_ns,
        time.monotonic_ns,
        datetime.datetime.now,
        datetime.datetime.utcnow,
    }
    found = set()
    for s in graph.statements:
        for call in (n for n in ast.walk(s.node) if isinstance(n, ast.Call)):
            path, func = [], call.func
            while isinstance(func, ast.Attribute):
                path.append(func.attr)
                func = func.value
            if isinstance(func, ast.Name) and func.id in graph.namespace and func.id not in graph.temps:
                obj = graph.namespace[func.id]
                for attr in reversed(path):
                    obj = getattr(obj, attr, None)
                if any(obj is c for c in clocks):
                    found.add(s.index)
    return found


def find_draws(graph, iterations: int = 1) -> Draws:
    """The statements of the cell's first iteration(s) that draw from a global generator, from a dry
    run on copies (the notebook's objects and generators are left as they were)."""
    ns = copies(graph)
    watcher = Watching(graph, ns, iterations)
    with aside(graph):
        exec_cell(graph, ns, watcher, trace=True)
    return watcher.draws()


def refuse_inexact(placement, draws: Draws, exact: bool) -> None:
    """With ``exact``, a run that could only be statistical is refused, naming the line of each draw."""
    if exact and not draws.exact(placement):
        causes = draws.causes(placement)
        s = placement.graph.statements[min(causes)]
        raise FragmentError(
            f"the exact guarantee was asked for, but {'; '.join(draws.lines(placement, causes))}: replicas cannot draw plain "
            "Python's numbers from one global generator. Draw from per-environment streams instead "
            "(`streams.sample(dist)` for `dist.sample()`, `streams.uniform`, `streams.normal`: fragnb.streams.EnvStreams), "
            "or leave out --exact for a statistical run",
            *_line_of(placement.graph, s),
        )


def announcement(placement, draws: Draws) -> str | None:
    """What a run says once, before it starts, about its guarantee (None: exact)."""
    if draws.exact(placement):
        return None
    return (
        "statistical run: "
        + "; ".join(draws.lines(placement))
        + ". Each replica draws from its own generators, seeded "
        "from the run's seed and its name: the run is plain Python's algorithm with other random numbers, not its values "
        "(the safety net checked what does not depend on them). For the exact guarantee draw from per-environment "
        "streams (`streams.sample(dist)`); --exact (run(exact=True)) refuses instead"
    )


def whole_copies(placement) -> str:
    """What a whole-cell run (``data_parallel``) says once, before it starts: how its replicas differ
    from plain Python and what the notebook gets back."""
    n = placement.groups[placement.home][0]
    return (
        f"data-parallel run: each of the {n} replicas runs the whole cell on its own copies of every object; replica i "
        f"adds i x {SEED_STRIDE:,} to the seeds its Gymnasium environments are reset with (fragnb environments serve "
        f"environments i x num_envs on), and draws its own global random numbers. Every optimizer.step() applies the "
        f"gradients averaged over the {n} replicas, so each update sees {n} times the data and the networks stay equal: "
        "plain Python's algorithm with a larger batch, not its values. The notebook gets replica 0's namespace; "
        "result.replica_values holds what every replica's cell assigned"
    )
