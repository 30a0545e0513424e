"""What a student waits for in a fresh kernel: notebook 01's cells as a kernel runs them, then its loop
for 40 iterations through `%%fragment ppo --run` under `single` and under `coarse` with 2 actors.

Each configuration runs in a fresh process (an IPython shell: `%load_ext fragnb`, the setup cells,
then the magic cell, timed); `single`'s has no cluster at all (FRAGNB_WARM=0). Beside each cell's
time it prints the loop's own seconds and the wait around it (the cell's time minus the loop's:
capture and drawing, the safety net, the cluster's start, shipping the replicas, merging). Each
process then runs `single` once more: after `coarse`, in a kernel whose cluster is up, against the
second `single` run of a kernel without one (the first pays for imports; the ratio should stay within 1.1).

    .venv/bin/python benchmarks/wait.py [--repeat 3] [--iterations 40] [--start capture|load|run]

``--start`` says when `coarse`'s workers start: ``capture`` (the default, no FRAGNB_WARM) as the magic
captures the `--run` cell, in the background while it measures and draws; ``load`` at `%load_ext`
(FRAGNB_WARM=1: the cluster is up before the cell); ``run`` when the run asks for them (FRAGNB_WARM=0).
Medians of ``--repeat`` fresh processes, the configurations alternating.
Targets (issue "Distribution that pays, second step"): `coarse` x2's cell at most 3 s more than
`single`'s; `single` after a distributed run at most 1.1x `single` before it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "01_first_fragment_graph.ipynb"
TARGET_EXTRA_S, TARGET_AFTER = 3.0, 1.1


def cells() -> tuple[list[str], str]:
    """Notebook 01's cells before its first ``%%fragment`` cell, and that cell's loop."""
    nb = json.loads(NOTEBOOK.read_text())
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    first = next(i for i, c in enumerate(code) if c.startswith("%%fragment"))
    return code[:first], code[first].split("\n", 1)[1]


def kernel(policy: str, iterations: int) -> dict:
    """In this (fresh) process: run the notebook's cells as a kernel would, then the timed cells."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    setup, loop = cells()
    start = time.perf_counter()
    for cell in setup:
        shell.run_cell(cell, silent=True).raise_error()
    shell.user_ns["iterations"] = iterations
    out = {"setup_s": time.perf_counter() - start}

    def magic(line: str) -> tuple[float, float]:
        begin = time.perf_counter()
        shell.run_cell(f"%%fragment ppo {line} --run --no-plot --no-progress\n{loop}", silent=True).raise_error()
        return time.perf_counter() - begin, shell.user_ns["ppo"].last_run.seconds

    out["cell_s"], out["loop_s"] = magic("" if policy == "single" else "--policy coarse --actors 2")
    out["again_s"] = magic("")[0]  # `single` again: in a kernel whose cluster is up, after `coarse`
    return out


#: FRAGNB_WARM for each ``--start``: when the cluster of a distributed run starts.
WARM = {"capture": None, "load": "1", "run": "0"}


def fresh(policy: str, iterations: int, start: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "FRAGNB_WARM"}
    if policy == "single" or WARM[start] is not None:
        env["FRAGNB_WARM"] = "0" if policy == "single" else WARM[start]  # single: no cluster
    done = subprocess.run(
        [sys.executable, __file__, "--child", policy, "--iterations", str(iterations)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--start", choices=list(WARM), default="capture")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(kernel(args.child, args.iterations)))
        return
    runs: dict[str, list[dict]] = {"single": [], "coarse": []}
    for i in range(args.repeat):
        for policy in ("single", "coarse") if i % 2 == 0 else ("coarse", "single"):
            runs[policy].append(fresh(policy, args.iterations, args.start))
            print(f"  {policy}: {runs[policy][-1]}", file=sys.stderr)

    def med(policy: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[policy])

    single, coarse = med("single", "cell_s"), med("coarse", "cell_s")
    print(f"\nnotebook 01, {args.iterations} iterations, a fresh kernel each (median of {args.repeat})", end="")
    print(
        {
            "capture": ", coarse's workers started as the magic captured its cell",
            "load": ", the cluster warmed at %load_ext (FRAGNB_WARM=1)",
            "run": ", the cluster started by the run (FRAGNB_WARM=0)",
        }[args.start]
    )
    print(f"{'':<22}{'cell s':>8}{'loop s':>8}{'around s':>10}{'setup cells s':>15}")
    for policy in ("single", "coarse"):
        cell, loop = med(policy, "cell_s"), med(policy, "loop_s")
        label = policy if policy == "single" else "coarse x2"
        print(f"{label:<22}{cell:>8.2f}{loop:>8.2f}{cell - loop:>10.2f}{med(policy, 'setup_s'):>15.2f}")
    extra = coarse - single
    print(f"coarse x2 over single: +{extra:.2f} s (target <= +{TARGET_EXTRA_S:.0f} s)")
    after = med("coarse", "again_s") / med("single", "again_s")
    print(f"single after a distributed run / before it, same kernel: {after:.2f}x (target <= {TARGET_AFTER})")


if __name__ == "__main__":
    main()
