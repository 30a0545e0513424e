"""Predicted against measured env steps/s, for every DP on this machine (issue 21's check).

For each loop (notebook 01's CartPole, every DP at 1, 2 and 4 replicas; a CleanRL-style PPO loop,
``tests/corpus/field.py``'s, as written for Gymnasium's CartPole; the same CartPole with a costly
environment, ``CartPole(step_cost=...)``; HalfCheetah-v5 where MuJoCo is installed) one profile under ``single`` (:func:`fragnb.profile`), then
for each DP and replica count a prediction on two descriptions of this machine, the ``"here"`` preset
and one measured a moment before by :func:`fragnb.predict.calibrate.calibrate`, beside measured runs
on the embedded cluster (workers started and code imported by a run before). Each measured run is
paired with a ``single`` run just before it, as this machine's speed drifts by a third within minutes:
the predicted speed-up over ``single`` is compared with the measured one (median of ``--repeat``
pairs). The error is (predicted - measured) / measured; the target is within 25 %.

    .venv/bin/python benchmarks/predict.py [--iterations 12] [--repeat 2] [--large] [--only cartpole|cleanrl|costly|cheetah]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

import torch

import fragnb
from fragnb import FragmentError, capture, run
from fragnb.notebook import load_canonical
from fragnb.predict.calibrate import calibrate
from fragnb.predict.model import predict

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "01_first_fragment_graph.ipynb"
STEP_COST = 100e-6  # seconds of CPU per environment and step: 3.2 ms a step for 32 environments

#: every DP at 1, 2 and 4 replicas of its replicated group
EVERY = [("single", {})] + [
    (policy, {parameter: n})
    for policy, parameter in (
        ("gpu_only", "learners"),
        ("coarse", "actors"),
        ("fine", "actors"),
        ("multi_learner", "learners"),
        ("async", "actors"),
        ("srl", "actors"),
        ("data_parallel", "replicas"),
    )
    for n in (1, 2, 4)
]
CARTPOLE = EVERY + [("coarse", {"actors": 8})]
LARGE = [
    ("coarse", {"actors": 16}),
    ("coarse", {"actors": 32}),
    ("async", {"actors": 16}),
]  # replicas sharing processes
#: the policies that split a loop, at 1, 2 and 4 replicas (issue 53: the costly and field loops at each)
SCALED = [case for case in EVERY if case[0] in ("coarse", "fine", "async", "multi_learner")]


def cartpole(iterations: int, step_cost: float = 0.0):
    """A function making notebook 01's loop afresh (its namespace from seed 0), with ``step_cost``."""
    cell = load_canonical(NOTEBOOK)
    setup = cell.setup.replace(
        "CartPole(num_envs=config.num_envs, seed=seed)",
        f"CartPole(num_envs=config.num_envs, seed=seed, step_cost={step_cost!r})",
    )
    assert step_cost == 0 or setup != cell.setup
    cell = dataclasses.replace(cell, setup=setup)

    def make():
        ns = cell.namespace(0)
        ns["iterations"] = iterations
        return capture(cell.body, ns, name="ppo")

    return make


def cleanrl(iterations: int):
    """A function making tests/corpus/field.py's CleanRL-style PPO loop afresh: Gymnasium's CartPole-v1,
    4 environments x 128 steps an iteration, its own setup (``Args``, ``make_env``, ``Agent``) from seed 1."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from corpus.field import FIELD_BY_NAME

    loop = FIELD_BY_NAME["cleanrl_ppo"]
    setup = loop.setup.replace("total_timesteps: int = 192", f"total_timesteps: int = {4 * 128 * iterations}")
    setup = setup.replace("num_steps: int = 16", "num_steps: int = 128")
    assert setup.count("128") == 1 and str(4 * 128 * iterations) in setup

    def make():
        ns: dict = {}
        exec(compile(setup, "<setup>", "exec"), ns)
        return capture(loop.cell, ns, name="cleanrl_ppo")

    return make


def cheetah(iterations: int):
    from algorithms import ppo_halfcheetah

    def make():
        body, ns = ppo_halfcheetah(0, 8 * 256 * iterations)
        return capture(body, ns, name="cheetah")

    return make


def case(policy: str, params: dict) -> str:
    """A row's name: the policy, its parameters, and each relaxed edge as LABEL=OPERATOR:BOUND."""
    edges = params.get("edges") or {}
    words = [f"{k}={v}" for k, v in params.items() if k != "edges"]
    words += [
        f"{label}={op[0].replace(' ', '-')}:{op[1]}" if isinstance(op, tuple) else f"{label}={op}"
        for label, op in edges.items()
    ]
    return " ".join([policy, *words])


def rate(make, policy: str, **params) -> float:
    kw = {} if policy == "single" else {"check": False}
    r = run(make(), policy, progress=False, plot=False, **kw, **params)
    return r.env_steps / r.seconds


def table(title: str, make, cases, clusters, repeat: int) -> list[dict[str, float]]:
    graph = make()
    prof = fragnb.profile(graph)
    print(
        f"\n{title}: {prof.iteration_seconds * 1e3:.0f} ms per iteration under single, {prof.env_steps} env steps, "
        f"{prof.updates} optimizer steps (profile)"
    )
    print(
        f"   speed-up over single: predicted on each description of this machine, and measured (median of {repeat} pairs)"
    )
    print(
        f"{'policy':<26}"
        + "".join(f"{name:>12} {'error':>6}" for name in clusters)
        + f" {'range':>12} {'measured':>9} {'steps/s':>9}  bottleneck ({list(clusters)[-1]})"
    )
    alone = {name: predict(graph.place("single"), prof, c).env_steps_per_s for name, c in clusters.items()}
    errors = []
    for policy, params in cases:
        try:  # its workers up, its code imported
            graph.place(policy, **params)
            rate(make, policy, **params)
        except (FragmentError, ValueError) as e:  # a DP that cannot run this loop says why before anything starts
            print(f"{case(policy, params):<26} refused: {str(e)[:150]}")
            continue
        pairs = []
        for _ in range(repeat):
            base = rate(make, "single")
            pairs.append((rate(make, policy, **params) / base, base))
        measured, _ = sorted(pairs)[len(pairs) // 2]
        steps = measured * statistics.median(b for _, b in pairs)
        row = f"{case(policy, params):<26}"
        errors.append({})
        for name, c in clusters.items():
            guess = predict(graph.place(policy, **params), prof, c)
            errors[-1][name] = error = (guess.env_steps_per_s / alone[name]) / measured - 1
            row += f"{guess.env_steps_per_s / alone[name]:>11.2f}x {error:>+6.0%}"
        span = f"{guess.low / alone[name]:.2f}-{guess.high / alone[name]:.2f}x"
        print(f"{row} {span:>12} {measured:>8.2f}x {steps:>9,.0f}  {guess.bottleneck}", flush=True)
    return errors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=12)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--large", action="store_true", help="also 16-32 replicas sharing worker processes")
    parser.add_argument("--only", choices=["cartpole", "cleanrl", "costly", "cheetah"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()
    rate(cartpole(1), "coarse", actors=8)  # fragnb's cluster at its largest before anything is timed
    here = calibrate()
    print(
        f"calibrated: {here.cores:.2f} cores' worth, latency {here.latency_s * 1e6:.0f} us, {here.message_s * 1e6:.0f} us a message, "
        f"{here.bandwidth / 1e6:.0f} MB/s, all-reduce {here.collective_s * 1e6:.0f} us, runtime {here.iteration_s * 1e3:.1f} ms "
        f"an iteration, spread {here.spread:.0%}  (the 'here' preset: 2 cores, 350 us, 120 us, 250 MB/s, 110 us, 6 ms)"
    )
    clusters = {"here": "here", "calibrated": here}
    errors = []
    if args.only in (None, "cartpole"):
        errors += table(
            "CartPole, notebook 01's loop",
            cartpole(args.iterations),
            CARTPOLE + (LARGE if args.large else []),
            clusters,
            args.repeat,
        )
    if args.only in (None, "cleanrl"):
        errors += table(
            "CleanRL-style PPO (tests/corpus/field.py), CartPole-v1, 4 environments x 128 steps",
            cleanrl(max(4, args.iterations // 2)),
            EVERY,
            clusters,
            args.repeat,
        )
    if args.only in (None, "costly"):
        errors += table(
            f"CartPole with step_cost={STEP_COST * 1e6:.0f} us per environment",
            cartpole(args.iterations, STEP_COST),
            [("single", {})] + SCALED,
            clusters,
            args.repeat,
        )
    if args.only in (None, "cheetah"):
        try:
            import mujoco  # noqa: F401  (the `mujoco` extra)

            errors += table(
                "HalfCheetah-v5 (8 environments x 256 steps)",
                cheetah(2),
                [("single", {})] + [case for case in SCALED if case[0] != "multi_learner"],
                clusters,
                args.repeat,
            )
        except ImportError as e:
            print(f"\nHalfCheetah: skipped ({e}; `pip install 'fragnb[mujoco]'`)")
    print()
    for name in clusters:
        within = sum(abs(e[name]) <= 0.25 for e in errors)
        beyond = sum(abs(e[name]) > 0.5 for e in errors)
        print(
            f"within 25 % on the {name} description: {within} of {len(errors)} cases, {within / len(errors):.0%} "
            f"(target >= 80 %); beyond 50 %: {beyond} (target 0)"
        )
    print(f"({time.perf_counter() - start:.0f} s)")
    fragnb.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
