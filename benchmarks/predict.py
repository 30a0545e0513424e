"""Predicted against measured env steps/s, for every DP on this machine (issue 21's check, first part).

One profile of notebook 01's loop under ``single`` (:func:`fragnb.runtime.profile.profile`: fragment
seconds at the whole batch and at half of it, bytes per edge, optimizer steps), then for each DP and
replica count :func:`fragnb.plan.predict.predict` on the ``"here"`` preset beside a measured run
of ``--iterations`` iterations on the embedded cluster (workers started and code imported by a run
before it), each paired with a ``single`` run just before it: this machine's speed drifts by a third
within minutes, so the predicted speed-up over ``single`` is compared with the measured one. The
error is (predicted - measured) / measured; the target is within 25 %.

    .venv/bin/python benchmarks/predict.py [--iterations 12]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

import fragnb
from fragnb import capture, run
from fragnb.notebook import load_canonical
from fragnb.plan.predict import predict
from fragnb.runtime.profile import profile

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "01_first_fragment_graph.ipynb"

CASES = [("single", {}), ("gpu_only", {}), ("coarse", {"actors": 1}), ("coarse", {"actors": 2}), ("coarse", {"actors": 4}),
         ("fine", {"actors": 2}), ("fine", {"actors": 4}), ("multi_learner", {"learners": 2}), ("async", {"actors": 2}),
         ("async", {"actors": 4}), ("srl", {"actors": 2})]


def measured(cell, policy: str, iterations: int, **params) -> float:
    ns = cell.namespace(0)
    ns["iterations"] = iterations
    kw = {} if policy == "single" else {"check": False}
    r = run(capture(cell.body, ns, name="ppo"), policy, progress=False, plot=False, **kw, **params)
    return r.env_steps / r.seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=12)
    args = parser.parse_args()
    torch.set_num_threads(1)
    cell = load_canonical(NOTEBOOK)
    ns = cell.namespace(0)
    graph = capture(cell.body, ns, name="ppo")
    start = time.perf_counter()
    prof = profile(graph)
    print(f"profile: {time.perf_counter() - start:.1f} s; {prof.iteration_seconds * 1e3:.0f} ms per iteration under single, "
          f"{prof.updates} optimizer steps, {prof.vector_steps} vector steps per iteration")
    print("   speed-up over single, predicted and measured (the measured run's env steps/s beside it)")
    print(f"{'policy':<24} {'predicted':>10} {'measured':>9} {'steps/s':>11} {'error':>7} {'within 25 %':>11}  bottleneck (predicted)")
    alone = predict(graph.place("single"), prof, "here").env_steps_per_s
    for policy, params in CASES:
        if policy != "single":
            measured(cell, policy, 1, **params)  # its workers up, its code imported
        base = measured(cell, "single", args.iterations)
        rate = measured(cell, policy, args.iterations, **params)
        guess = predict(graph.place(policy, **params), prof, "here")
        error = (guess.env_steps_per_s / alone) / (rate / base) - 1
        name = f"{policy} {' '.join(f'{k}={v}' for k, v in params.items())}"
        print(f"{name:<24} {guess.env_steps_per_s / alone:>9.2f}x {rate / base:>8.2f}x {rate:>11,.0f} {error:>+6.0%} "
              f"{'yes' if abs(error) <= 0.25 else 'no':>11}  {guess.bottleneck}", flush=True)
    fragnb.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
