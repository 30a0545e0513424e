"""Capture time against cell length: notebook 01's loop with n bookkeeping lines added to its rollout.

.venv/bin/python benchmarks/capture_time.py [--lines 250 500 1000 2000]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from fragnb import capture
from fragnb.notebook import load_canonical

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "01_first_fragment_graph.ipynb"


def cell(body: str, lines: int) -> str:
    extra = "".join(f"        total_{i % 50} = reward.sum() + {i}\n" for i in range(lines))
    return body.replace("        obs = next_obs\n", "        obs = next_obs\n" + extra)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, nargs="+", default=[250, 500, 1000, 2000])
    args = parser.parse_args()
    canonical = load_canonical(NOTEBOOK)
    ns = canonical.namespace()
    previous = None
    for n in args.lines:
        source = cell(canonical.body, n)
        start = time.perf_counter()
        graph = capture(source, ns)
        graph.place("coarse", actors=2)
        seconds = time.perf_counter() - start
        ratio = "" if previous is None else f"   x{seconds / previous[1]:.2f} for x{n / previous[0]:.1f} lines"
        print(f"{len(source.splitlines()):>6} lines: capture + place {seconds:6.2f} s{ratio}")
        previous = (n, seconds)


if __name__ == "__main__":
    main()
