"""Seeds side by side: one loop run from several seeds (and a small grid of settings), each run on a
worker of the cluster, with a live view of every run and of each configuration's mean.

A seed must change what the setup seeds (the network's initialisation, the environments' seeds,
``args.seed``), not only the draws inside the loop, so a sweep takes the setup with the loop
(:class:`~fragnb.setups.Setup`). Run ``k`` of a sweep does on its worker what plain Python does in a fresh process: the
setup with ``seed = s``, each grid setting assigned (``args.learning_rate = 1e-3``), then the loop
under ``single`` (the loop's own statements, in that process). What it leaves is compared value for
value with plain Python in ``tests/test_sweep.py``.

A distributed policy's runs go one after another, each on the whole cluster (a run already takes
the workers it needs); ``single``'s go side by side, one worker each, and more runs than workers
queue (Dask gives a single-threaded worker one task at a time), so the cores are never
oversubscribed.

The notebook's namespace is left as it was: each run's variables are in ``SweepResult.runs[k].values``.

This module holds what a sweep is and what it found; :mod:`fragnb.runtime.sweep` carries the runs out
(the runtime comes first, so it is handed the setup's ``namespace`` and fills in each :class:`Run`).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .arguments import Accepts, boolean, check, either, event, instance, number, optional, whole
from .graph import FragmentGraph, capture
from .runtime.pipeline import ACCEPTS as RUN_ACCEPTS
from .runtime.pipeline import OPTIONS
from .runtime.result import RunResult, first_solved
from .runtime.sweep import run_sweep
from .setups import Setup, configurations
from .stats import LAST_EPISODES, confidence_interval, iqm

__all__ = ["SweepResult", "sweep"]


# -- results -----------------------------------------------------------------------------------------
@dataclass
class Run:
    """One run of a sweep: its seed and settings, and what it did (``result``) or why it failed."""

    index: int
    seed: int
    settings: dict[str, Any]
    result: RunResult | None = None
    error: str = ""
    values: dict[str, Any] = field(default_factory=dict, repr=False)  # its namespace's values at the end
    unreturned: list[str] = field(default_factory=list, repr=False)  # names whose values could not travel back
    progress: list[tuple[int, float]] = field(default_factory=list, repr=False)  # (env steps, mean return) live
    #: times it ran again from its start on another worker (its worker was lost; Dask resubmitted it)
    restarts: int = 0
    iteration: int = 0  # the last iteration it reported

    @property
    def label(self) -> str:
        return f"seed {self.seed}" + "".join(f", {k}={v!r}" for k, v in self.settings.items())

    @property
    def configuration(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.settings.items()) or "all runs"


@dataclass
class SweepResult:
    """What a sweep did: every run (``runs``: each with its seed, settings, ``RunResult`` and values),
    per configuration a table of final returns (mean, IQM, 95 % bootstrap interval), time and env steps
    to a threshold per seed, and env steps/s.

    Parameters
    ----------
    graph, policy : str
        Names of the loop and of the policy its runs ran under.
    runs : list of Run
        In the sweep's order: each configuration of the grid, with each seed.
    seconds : float
        Wall-clock time of the whole sweep.
    threshold : float, optional
        The return whose env steps and seconds the table gives per seed.
    stopped : str
        Why the sweep ended early ("" when every run ended on its own).

    Examples
    --------
    What :func:`fragnb.sweep` returns; here made by hand from two seeds of two learning rates:

    >>> from fragnb import RunResult, SweepResult
    >>> from fragnb.seeds import Run
    >>> finals = {(0, 1e-3): 180.0, (1, 1e-3): 220.0, (0, 5e-3): 400.0, (1, 5e-3): 440.0}
    >>> runs = [  # each run: 50 iterations, 51,200 env steps in 20 s, one episode's return as its curve
    ...     Run(i, seed, {"config.learning_rate": lr},
    ...         RunResult("ppo", "single", 50, 20.0, 51200, curve=[(51200, ret, 20.0)]))
    ...     for i, ((seed, lr), ret) in enumerate(finals.items())
    ... ]
    >>> result = SweepResult("ppo", "single", runs, seconds=41.5)
    >>> print(result)
    sweep of ppo under single: 4 of 4 runs finished in 41.5 s
    config.learning_rate=0.001: 2 runs, final return 200.0 (IQM 200.0, 95 % CI 180.0-220.0), 20.0 s, 2,560 env steps/s
    config.learning_rate=0.005: 2 runs, final return 420.0 (IQM 420.0, 95 % CI 400.0-440.0), 20.0 s, 2,560 env steps/s
    >>> result.best().label
    'seed 1, config.learning_rate=0.005'
    >>> result.failed
    []

    ``result.to_dataframe()`` gives the table as a pandas DataFrame, ``result.plot()`` the curves.
    """

    graph: str
    policy: str
    runs: list[Run]
    seconds: float = 0.0
    threshold: float | None = None
    stopped: str = ""

    @property
    def failed(self) -> list[Run]:
        return [r for r in self.runs if r.error]

    def configurations(self) -> dict[str, list[Run]]:
        """Configuration (its settings in words) -> its finished runs, in the sweep's order."""
        out: dict[str, list[Run]] = {}
        for r in self.runs:
            out.setdefault(r.configuration, [])
            if r.result is not None:
                out[r.configuration].append(r)
        return out

    def rows(self) -> list[dict[str, Any]]:
        """One row per configuration: what :meth:`to_dataframe` and the printed table show."""
        rows = []
        for name, runs in self.configurations().items():
            finals = [r.result.mean_return(LAST_EPISODES) for r in runs if r.result.curve]
            low, high = confidence_interval(finals) if finals else (float("nan"), float("nan"))
            row = {
                "configuration": name,
                "runs": len(runs),
                "final return (mean)": sum(finals) / len(finals) if finals else float("nan"),
                "IQM": iqm(finals),
                "95% CI low": low,
                "95% CI high": high,
                "seconds (mean)": sum(r.result.seconds for r in runs) / len(runs) if runs else float("nan"),
                "env steps/s (mean)": sum(r.result.env_steps_per_s for r in runs) / len(runs) if runs else float("nan"),
            }
            if self.threshold is not None:
                reached = [_reached(r.result, self.threshold) for r in runs]
                row["env steps to threshold"] = [s for s, _ in reached]
                row["seconds to threshold"] = [t for _, t in reached]
            rows.append(row)
        return rows

    def to_dataframe(self):
        """:meth:`rows` as a pandas DataFrame, one row per configuration."""
        import pandas as pd

        return pd.DataFrame(self.rows()).set_index("configuration")

    def best(self) -> Run:
        """The best configuration's best run: the configuration with the highest mean final return,
        and in it the run (seed) with the highest."""
        rows = [r for r in self.rows() if r["runs"]]
        if not rows:
            raise ValueError("no run of the sweep finished")
        top = max(rows, key=lambda r: r["final return (mean)"])["configuration"]
        return max(self.configurations()[top], key=lambda r: r.result.mean_return(LAST_EPISODES))

    def plot(self, ax=None):
        """One faint curve per run and, per configuration, its mean with a 95 % bootstrap band."""
        from .ui.seeds import draw

        return draw(self, ax)

    def table(self) -> str:
        """The rows in words, one line per configuration."""
        lines = []
        for row in self.rows():
            line = (
                f"{row['configuration']}: {row['runs']} runs, final return {row['final return (mean)']:.1f} "
                f"(IQM {row['IQM']:.1f}, 95 % CI {row['95% CI low']:.1f}-{row['95% CI high']:.1f}), "
                f"{row['seconds (mean)']:.1f} s, {row['env steps/s (mean)']:,.0f} env steps/s"
            )
            if self.threshold is not None:
                steps = ", ".join("-" if s is None else f"{s:,}" for s in row["env steps to threshold"])
                line += f"; env steps to {self.threshold:g} per seed: {steps}"
            lines.append(line)
        lines += [f"{r.label}: failed: {r.error}" for r in self.failed]
        lines += [
            f"{r.label}: its worker was lost; it ran again from its start ({r.restarts} time{'s' * (r.restarts > 1)})"
            for r in self.runs
            if r.restarts
        ]
        return "\n".join(lines)

    def __str__(self) -> str:
        done = sum(r.result is not None for r in self.runs)
        head = f"sweep of {self.graph} under {self.policy}: {done} of {len(self.runs)} runs finished in {self.seconds:.1f} s"
        return head + (f" ({self.stopped})" if self.stopped else "") + "\n" + self.table()

    def _repr_pretty_(self, p, cycle):
        p.text(str(self))


def _reached(result: RunResult, threshold: float) -> tuple[int | None, float | None]:
    """Env steps and seconds at which ``result``'s mean return of the last 20 episodes first reached
    ``threshold`` (None, None if never)."""
    at = first_solved([r for _, r, _ in result.curve], threshold, LAST_EPISODES)
    if at is None:
        return None, None
    steps, _, seconds = result.curve[at]
    return steps, seconds


#: What :func:`sweep` accepts besides the loop, its setup and its policy (``run_options`` as :func:`fragnb.run`).
ACCEPTS = {
    "seeds": Accepts(
        lambda v: isinstance(v, Iterable) and not isinstance(v, (str, bytes)) and all(whole(0).test(s) for s in v),
        "whole numbers, 0 or more, in a list or range",
    ),
    "params": optional(instance(Mapping, 'a dict of name -> values ({"config.lr": [1e-3, 5e-3]})')),
    "threshold": optional(number()),
    "progress": either(boolean, Accepts(lambda v: callable(getattr(v, "begin", None)), "a SweepView")),
    "plot": boolean,
    "stop": optional(event),
    "name": optional(instance(str, "a name")),
    "roles": optional(instance(Mapping, 'a dict of name -> role ({"agent": "learner"})')),
}


def sweep(
    graph: FragmentGraph | str,
    setup,
    seeds: Iterable[int] = (0, 1, 2),
    params: dict[str, Iterable] | None = None,
    policy: str = "single",
    cluster=None,
    *,
    threshold: float | None = None,
    progress=True,
    plot: bool = True,
    stop: threading.Event | None = None,
    name: str | None = None,
    roles: dict[str, str] | None = None,
    **run_options,
) -> SweepResult:
    """Run the loop once per seed (and per combination of ``params``), side by side on the cluster.

    Ctrl-C or ``stop`` ends every run at an iteration boundary and keeps what finished; a run that fails
    is reported with its seed and settings, and the others go on. The notebook's namespace is left as it
    was: each run's variables are in ``SweepResult.runs[k].values``.

    Parameters
    ----------
    graph : FragmentGraph or str
        A captured loop (its cell's source is what each run executes) or a cell's source.
    setup : Setup, str or callable
        A ``%%setup`` cell's :class:`Setup`, a cell's source (run with ``seed`` defined) or a function
        of the seed returning the namespace.
    seeds : iterable of int
        Distinct seeds, one run each (per combination of ``params``).
    params : dict, optional
        A small grid, ``{"args.learning_rate": [2.5e-4, 1e-3]}``, each name assigned in the setup's
        namespace after it runs (an unknown name is refused before anything starts).
    policy : str or DistributionPolicy
        ``single`` (each run on one worker, side by side) or a distributed policy (each run on the
        cluster, one after another).
    cluster : optional
        As :func:`fragnb.run` takes it.
    threshold : float, optional
        A return the table gives each seed's env steps and seconds to reach.
    progress, plot : bool
        A bar over the runs and, in a notebook, the live figure; ``progress`` may instead be a
        :class:`~fragnb.ui.seeds.SweepView` that shows them elsewhere (the explorer's widgets).
    stop : threading.Event, optional
        Setting it ends every run at an iteration boundary, as Ctrl-C does.
    name : str, optional
        The loop's name (by default the graph's, or ``"loop"`` for a cell's source).
    roles : dict, optional
        As :func:`fragnb.capture` takes them (``--role``).
    **run_options
        As :func:`fragnb.run` takes them, for a distributed policy.

    Returns
    -------
    SweepResult
        Every run with its seed, settings, RunResult and values, and the table per configuration.

    Examples
    --------
    Notebook 01's PPO loop, small, from two seeds for each of two learning rates. The setup runs once
    here first, and the loop is captured, so that what cannot run is refused before any worker starts:

    >>> import fragnb
    >>> setup = '''
    ... import torch
    ... from fragnb.envs import CartPole
    ... from fragnb.algos.ppo import PPOConfig, ActorCritic, PPOActor, RolloutBuffer, PPOLearner
    ... torch.manual_seed(seed)
    ... config = PPOConfig(num_envs=4, num_steps=8, update_epochs=1, num_minibatches=1)
    ... env = CartPole(num_envs=4, seed=seed)
    ... policy = ActorCritic(obs_dim=4, num_actions=2)
    ... actor, learner = PPOActor(policy, num_envs=4, seed=seed), PPOLearner(policy, config, seed=seed)
    ... buffer = RolloutBuffer(4, 8, env.obs_shape, config.gamma, config.gae_lambda)
    ... '''
    >>> loop = '''
    ... obs = env.reset()
    ... for it in range(2):
    ...     for step in range(8):
    ...         action, logprob, value = actor.act(obs)
    ...         next_obs, reward, terminated, truncated, info = env.step(action)
    ...         buffer.add(obs, action, logprob, value, reward, terminated | truncated)
    ...         obs = next_obs
    ...     last_value = actor.value(obs)
    ...     batch = buffer.batch(last_value)
    ...     stats = learner.update(batch)
    ... '''
    >>> fragnb.sweep(loop, setup, seeds=(0, 1), params={"config.lr": [1e-3, 5e-3]})
    Traceback (most recent call last):
        ...
    ValueError: params: 'config.lr': `config` has no `lr`

    The sweep itself runs on the workers of fragnb's local cluster, one run per worker side by side
    (``fragnb.shutdown()`` closes it):

    >>> grid = {"config.learning_rate": [1e-3, 5e-3]}
    >>> result = fragnb.sweep(loop, setup, seeds=(0, 1), params=grid)  # doctest: +SKIP

    ``print(result)`` then shows a line per learning rate (see :class:`SweepResult`).
    """
    seeds = (
        list(seeds) if isinstance(seeds, Iterable) and not isinstance(seeds, (str, bytes)) else seeds
    )  # a generator once
    check("sweep", ACCEPTS, seeds=seeds, params=params, threshold=threshold, progress=progress, plot=plot, stop=stop)
    check("sweep", ACCEPTS, name=name, roles=roles)
    # run_options holds fragnb.run's options and the policy's parameters (actors=2): placing checks those
    check("sweep", RUN_ACCEPTS, cluster=cluster, **{k: v for k, v in run_options.items() if k in OPTIONS})
    if stored := sorted(k for k in ("checkpoint_dir", "resume") if run_options.get(k) is not None):
        raise TypeError(f"sweep() takes no {stored}: its runs are short and side by side; give them to fragnb.run")
    setup = Setup.of(setup)
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds={seeds!r}: give distinct seeds")
    if isinstance(graph, FragmentGraph):
        cell, name, roles = graph.source, name or graph.name, roles or {}
    else:
        cell, name, roles = graph, name or "loop", roles or {}
    grid = configurations(params)
    # Everything checked before anything starts: the setup runs, the grid's names exist, the loop captures.
    try:
        ns = setup.namespace(seeds[0], grid[0])
    except KeyError as e:
        raise ValueError(f"params: {e.args[0]}") from None
    except NameError as e:
        raise ValueError(
            f"the setup {setup.name!r} uses {e.name!r}, which it does not define: each run starts it in a fresh "
            "namespace on its worker, so a setup brings its own imports and definitions"
        ) from None
    capture(cell, ns, name=name, roles=roles)
    runs = [Run(i, s, settings) for i, (settings, s) in enumerate(itertools.product(grid, seeds))]
    from .ui.seeds import SweepView

    view = (progress if isinstance(progress, SweepView) else SweepView(progress, plot)).begin(name, policy, runs)
    start = time.perf_counter()
    stopped = ""
    try:  # the runtime carries the runs out (fragnb.runtime.sweep), filling each in
        stopped = run_sweep(setup.namespace, cell, name, roles, runs, policy, cluster, view, stop, run_options)
    finally:
        result = SweepResult(name, str(getattr(policy, "name", policy)), runs, time.perf_counter() - start, threshold)
        result.stopped = stopped
        view.close(result)
    return result
