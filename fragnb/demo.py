"""Headless demo: train notebook 01's PPO loop on CartPole and save its learning curve.

python -m fragnb.demo --notebook notebooks/01_first_fragment_graph.ipynb --out demo/learning_curve.png
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .graph import capture
from .notebook import load_canonical
from .runtime import run

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fragnb.demo", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--notebook",
        default="notebooks/01_first_fragment_graph.ipynb",
        help="notebook whose first %%%%fragment cell to run",
    )
    parser.add_argument("--out", default="demo/learning_curve.png", help="where to write the learning curve")
    parser.add_argument("--seed", type=int, help="override the notebook's seed")
    args = parser.parse_args(argv)

    cell = load_canonical(args.notebook)
    ns = cell.namespace(args.seed)
    graph = capture(cell.body, ns, name=cell.name)
    print(graph)
    result = run(graph, progress=True, plot=False)
    print(result)
    solved = result.solved_at()
    print(
        "not solved"
        if solved is None
        else f"solved (mean of last 20 returns >= 475) after {solved[0]} env steps, {solved[1]:.1f} s"
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    result.plot().savefig(out, dpi=120)
    print(f"learning curve written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
