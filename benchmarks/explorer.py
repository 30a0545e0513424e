"""How long a student waits on the policy explorer for notebook 01's graph: opening it (one dry
iteration to measure edges), and redrawing after each change of policy, first time and again (the
drawing is cached by its DOT source). The budget is 300 ms per change.

    .venv/bin/python benchmarks/explorer.py
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from fragnb import capture, explore
from fragnb.notebook import load_canonical
from fragnb.policies import POLICIES

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "01_first_fragment_graph.ipynb"
BUDGET_S = 0.3


def main() -> None:
    canonical = load_canonical(NOTEBOOK)
    graph = capture(canonical.body, canonical.namespace(), name="ppo")
    start = time.perf_counter()
    explorer = explore(graph)
    print(f"open the explorer (measure + three tabs drawn): {time.perf_counter() - start:.2f} s")
    print(f"{'policy':<14} {'first draw':>11} {'again':>8}  (budget {BUDGET_S * 1000:.0f} ms)")
    rows = []
    for name in POLICIES:
        if name == "single":
            continue
        explorer.policy.value = "single"
        explorer.policy.value = name
        first = explorer.redraw_seconds
        explorer.policy.value = "single"
        explorer.policy.value = name
        again = explorer.redraw_seconds
        rows.append(first)
        print(f"{name:<14} {first * 1000:>8.0f} ms {again * 1000:>5.0f} ms  x{BUDGET_S / first:.1f} under budget")
    print(f"median first draw {statistics.median(rows) * 1000:.0f} ms, worst {max(rows) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
