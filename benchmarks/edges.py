"""Relaxing one edge at a time: coarse x2 with its weights pulled within a staleness bound of 0, 1, 2 and 4, and
with its trajectories streamed too (async's placement), predicted against measured (issue "Choose each edge").

Notebook 01's CartPole loop and the same loop with a costly environment (``CartPole(step_cost=100 us)``): one
profile under ``single``, then for each case the predicted speed-up over ``single`` on the "here" preset and on a
description of this machine measured a moment before, beside the measured one (median of ``--repeat`` pairs,
each run paired with a ``single`` run just before it), and the staleness the relaxed runs reported. The error is
(predicted - measured) / measured; the target is within 25 %.

    .venv/bin/python benchmarks/edges.py [--iterations 12] [--repeat 2] [--only cartpole|costly]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from predict import STEP_COST, cartpole, rate, table  # noqa: E402  (benchmarks/ is not a package)

from fragnb import run  # noqa: E402
from fragnb.predict.calibrate import calibrate  # noqa: E402

BOUNDS = (0, 1, 2, 4)
CASES = (
    [("coarse", {"actors": 2})]
    + [("coarse", {"actors": 2, "edges": {"policy": ("versioned pull", k)}}) for k in BOUNDS]
    + [("coarse", {"actors": 2, "edges": {"policy": ("versioned pull", 1), "batch": "stream"}})]
)


def staleness(make, edges: dict) -> str:
    """The mean and largest staleness of one relaxed run's updates."""
    r = run(make(), "coarse", actors=2, edges=edges, progress=False, plot=False, check=False)
    ages = [a for per in r.staleness for a in per] or [0]
    return f"mean {statistics.mean(ages):.2f}, max {max(ages)}, dropped {r.dropped}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=12)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--only", choices=["cartpole", "costly"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()
    rate(cartpole(1), "coarse", actors=2)  # fragnb's cluster up before anything is timed
    clusters = {"here": "here", "calibrated": calibrate()}
    errors = []
    for name, make in (
        ("cartpole", cartpole(args.iterations)),
        ("costly", cartpole(args.iterations, STEP_COST)),
    ):
        if args.only not in (None, name):
            continue
        title = (
            "CartPole, notebook 01's loop" if name == "cartpole" else f"CartPole, step_cost={STEP_COST * 1e6:.0f} us"
        )
        errors += table(title, make, CASES, clusters, args.repeat)
        for k in BOUNDS[1:]:
            print(f"   staleness at bound {k}: {staleness(make, {'policy': ('versioned pull', k)})}")
    within = [abs(e["calibrated"]) <= 0.25 for e in errors]
    print(
        f"\n{sum(within)} of {len(within)} predictions within 25 % of the measured speed-up (calibrated description; "
        f"target: all); {time.perf_counter() - start:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
