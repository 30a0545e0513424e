"""What a prediction says: a placement's predicted throughput (:class:`Prediction`), that prediction
beside the run it predicted (:class:`Comparison`), and curves of them against replica counts
(:class:`Scaling`), with their words and plots.

Data only: :mod:`fragnb.predict.model` computes them. Every figure here is a prediction, not a
measurement. Pure (``Scaling.plot`` imports matplotlib when it draws).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Prediction", "Comparison", "Scaling"]


@dataclass
class Prediction:
    """A placement's predicted throughput on a cluster (a prediction, not a measurement).

    Parameters
    ----------
    policy, cluster : str
        Names of the placement's policy and of the cluster.
    replicas : dict
        Worker group to the replicas the prediction is for.
    seconds_per_iteration, env_steps_per_s : float
        The predicted iteration time and throughput.
    busy : dict
        Worker group to the share of the iteration it works.
    communication : float
        Share of the iteration spent passing values (messages, all-reduce) on its critical path.
    bottleneck : str
        The bottleneck, in words.
    terms : dict
        Seconds per iteration on the critical path, by term.
    bound_seconds : float
        The fewest seconds per iteration Amdahl's law allows.
    low, high : float
        env steps/s at the slow and the fast end of the inputs' measured spread.

    Examples
    --------
    What :func:`fragnb.predict.predict` and ``placement.predict`` return; here made by hand:

    >>> from fragnb.predict import Prediction
    >>> p = Prediction("coarse", "a laptop (8 cores)", {"actors": 2, "learner": 1}, 0.0125, 2560.0,
    ...                busy={"actors": 0.33, "learner": 0.64}, communication=0.04,
    ...                bottleneck="the bottleneck is 'learner' (busy 64%): 'actors' waits 67% of the time",
    ...                terms={"work: actors": 0.004, "passing values": 0.0005, "work: learner": 0.008},
    ...                low=2300.0, high=2800.0)
    >>> print(p)
    predicted for coarse (actors x2, learner x1) on a laptop (8 cores): 2,560 (2,300-2,800) env steps/s,
    12 ms per iteration; the bottleneck is 'learner' (busy 64%): 'actors' waits 67% of the time
    [work: actors 32%; passing values 4%; work: learner 64%]
    >>> p.shares()
    {'work: actors': 0.32, 'passing values': 0.04, 'work: learner': 0.64}

    ``p.compare(result)`` sets it beside a run of the placement it predicted.
    """

    policy: str
    cluster: str
    replicas: dict[str, int]  # worker group -> replicas the prediction is for
    seconds_per_iteration: float
    env_steps_per_s: float
    busy: dict[str, float] = field(default_factory=dict)  # worker group -> share of the iteration it works
    communication: float = (
        0.0  # share of the iteration spent passing values (messages, all-reduce) on its critical path
    )
    bottleneck: str = ""
    #: Seconds per iteration on the critical path, by term: each group's work ("work: learner"), the
    #: values passed between groups ("passing values"), the runtime's own costs ("runtime"). They add
    #: up to ``seconds_per_iteration`` for synchronous policies; decoupled ones show the side that bounds them.
    terms: dict[str, float] = field(default_factory=dict)
    #: The fewest seconds per iteration Amdahl's law allows: no term of communication or runtime, every
    #: replicated group's batch shared among as many replicas as the cores run at once.
    bound_seconds: float = 0.0
    #: env steps/s with every measured input (the profile's fragments, the cluster's costs) at the slow
    #: and the fast end of its measured spread.
    low: float = 0.0
    high: float = 0.0

    @property
    def span(self) -> str:
        """`` (LOW-HIGH)``, the range in env steps/s as the prediction prints it ("" without a spread)."""
        return f" ({self.low:,.0f}-{self.high:,.0f})" if self.high > self.low else ""

    def shares(self) -> dict[str, float]:
        """Each term's share of the iteration: :attr:`terms` over their sum."""
        total = sum(self.terms.values())
        return {t: v / total for t, v in self.terms.items() if v > 0} if total else {}

    def compare(self, result) -> Comparison:
        """This prediction beside ``result``, a run of the placement it predicted: env steps/s and each
        group's busy share, both ways. ``cluster.refined(prediction, result)`` learns from it."""
        measured = result.busy()
        busy = {g: (b, measured[g]) for g, b in self.busy.items() if g in measured}
        return Comparison(self.policy, self.env_steps_per_s, result.env_steps_per_s, self.low, self.high, busy)

    def __str__(self) -> str:
        counts = ", ".join(f"{g} x{n}" for g, n in self.replicas.items())
        shares = "; ".join(f"{t} {share:.0%}" for t, share in self.shares().items())
        return (
            f"predicted for {self.policy} ({counts}) on {self.cluster}: {self.env_steps_per_s:,.0f}{self.span} env steps/s, "
            f"{self.seconds_per_iteration * 1e3:.0f} ms per iteration; {self.bottleneck}"
            + (f" [{shares}]" if shares else "")
        )


@dataclass
class Comparison:
    """A prediction beside the run it predicted: env steps/s and each group's busy share, both ways."""

    policy: str
    predicted: float
    measured: float
    low: float
    high: float
    busy: dict[str, tuple[float, float]]  # group -> (predicted, measured) share of the time it works

    @property
    def error(self) -> float:
        """(predicted - measured) / measured."""
        return self.predicted / self.measured - 1 if self.measured else float("nan")

    @property
    def within_range(self) -> bool:
        return self.low <= self.measured <= self.high

    def __str__(self) -> str:
        where = "within" if self.within_range else "outside"
        groups = "; ".join(f"{g} busy {p:.0%} predicted, {m:.0%} measured" for g, (p, m) in self.busy.items())
        return (
            f"{self.policy}: {self.predicted:,.0f} env steps/s predicted ({self.low:,.0f}-{self.high:,.0f}), "
            f"{self.measured:,.0f} measured ({self.error:+.0%}, {where} the range)" + (f"; {groups}" if groups else "")
        )


@dataclass
class Scaling:
    """Predicted env steps/s against replica counts, per policy, on one cluster (predictions).

    Parameters
    ----------
    cluster : str
        The cluster's name.
    counts : list of int
        The replica counts predicted.
    curves : dict
        Policy to one :class:`Prediction` per count.

    Examples
    --------
    What :func:`fragnb.predict.scaling` returns; here made by hand, two policies at four counts:

    >>> from fragnb.predict import Prediction, Scaling
    >>> def predicted(policy, n, rate):
    ...     return Prediction(policy, "a laptop (8 cores)", {"actors": n, "learner": 1}, 32 * n / rate, rate,
    ...                       bottleneck="the bottleneck is 'learner'")
    >>> counts = [1, 2, 4, 8]
    >>> curves = Scaling("a laptop (8 cores)", counts, {
    ...     "coarse": [predicted("coarse", n, r) for n, r in zip(counts, (1900.0, 2600.0, 3100.0, 3200.0))],
    ...     "async": [predicted("async", n, r) for n, r in zip(counts, (1900.0, 3000.0, 5200.0, 8800.0))],
    ... })
    >>> curves.stops_gaining("coarse"), curves.stops_gaining("async"), curves.overtakes("async", "coarse")
    (4, None, 2)
    >>> for finding in curves.findings():
    ...     print(finding)
    coarse stops gaining past 4 replicas, where the bottleneck is 'learner'; at most 3,200 env steps/s predicted
    async still gains at 8 replicas, where the bottleneck is 'learner'; at most 8,800 env steps/s predicted

    In a notebook ``curves.plot()`` draws them.
    """

    cluster: str
    counts: list[int]
    curves: dict[str, list[Prediction]]  # policy -> one prediction per count

    def stops_gaining(self, policy: str, gain: float = 1.1) -> int | None:
        """The replica count past which doubling gains less than ``gain`` times the steps/s (None: it
        gains to the last count)."""
        rates = [p.env_steps_per_s for p in self.curves[policy]]
        return next((n for n, a, b in zip(self.counts, rates, rates[1:]) if b < gain * a), None)

    def overtakes(self, faster: str, slower: str, margin: float = 1.05) -> int | None:
        """The first replica count at which ``faster`` is predicted to step ``margin`` times as fast as
        ``slower`` or more, if any (two flat curves a hair apart are no overtaking)."""
        return next(
            (
                n
                for n, a, b in zip(self.counts, self.curves[faster], self.curves[slower])
                if a.env_steps_per_s >= margin * b.env_steps_per_s
            ),
            None,
        )

    def findings(self) -> list[str]:
        """In words, per policy: where it stops gaining and what stops it there; whether fine overtakes coarse."""
        lines = []
        for policy, curve in self.curves.items():
            n = self.stops_gaining(policy)
            top = max(curve, key=lambda p: p.env_steps_per_s)
            where = f"stops gaining past {n} replicas" if n else f"still gains at {self.counts[-1]} replicas"
            there = curve[self.counts.index(n) if n else -1].bottleneck
            lines.append(f"{policy} {where}, where {there}; at most {top.env_steps_per_s:,.0f} env steps/s predicted")
        if "fine" in self.curves and "coarse" in self.curves:
            n = self.overtakes("fine", "coarse")
            lines.append(
                f"fine overtakes coarse at {n} replicas"
                if n
                else f"fine does not overtake coarse up to {self.counts[-1]} replicas on this cluster"
            )
        return lines

    def plot(self, ax=None, measured: dict[str, dict[int, float]] | None = None):
        """Predicted curves on log-log axes (marked where each stops gaining and where fine overtakes
        coarse), with ``measured`` steps/s ({policy: {replicas: steps/s}}) as points beside them."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(7, 4.2))
        for policy, curve in self.curves.items():
            (line,) = ax.plot(
                self.counts, [p.env_steps_per_s for p in curve], marker=".", label=f"{policy} (predicted)"
            )
            n = self.stops_gaining(policy)
            if n:
                ax.plot(
                    [n], [curve[self.counts.index(n)].env_steps_per_s], "o", mfc="none", ms=11, color=line.get_color()
                )
            if measured and policy in measured:
                xs = sorted(measured[policy])
                ax.plot(
                    xs,
                    [measured[policy][x] for x in xs],
                    "x",
                    ms=9,
                    mew=2,
                    color=line.get_color(),
                    label=f"{policy} (measured here)",
                )
        if "fine" in self.curves and "coarse" in self.curves and (n := self.overtakes("fine", "coarse")):
            ax.axvline(n, color="grey", ls=":", label=f"fine overtakes coarse ({n})")
        ax.set(
            xscale="log",
            yscale="log",
            xlabel="replicas (each with the same environments)",
            ylabel="env steps/s",
            title=f"Predicted on {self.cluster}; circles: stops gaining",
        )
        ax.set_xticks(self.counts, [str(c) for c in self.counts])
        ax.legend(fontsize=8)
        return ax
