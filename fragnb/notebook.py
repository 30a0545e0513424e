"""Read a course notebook's canonical example: its setup cells and its first ``%%fragment`` cell.

Tests, benchmarks and ``make demo`` run the very loop the notebook teaches, not a copy of it.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CanonicalCell", "load_canonical"]


@dataclass(frozen=True)
class CanonicalCell:
    """The first ``%%fragment`` cell of a notebook and the plain Python that precedes it."""

    setup: str  # code cells before it, without IPython magics
    magic: str  # its ``%%fragment ...`` line
    body: str  # the training loop

    @property
    def name(self) -> str:
        return self.magic.split()[1]

    def namespace(self, seed: int | None = None) -> dict:
        """A fresh namespace after running the setup cells, with ``seed = ...`` set to ``seed`` if given.
        The setup's own settings of this process (notebook 01 sets torch to one thread for its kernel, as
        fragnb's workers run it) hold while it runs, and are undone after: the caller's are its own."""
        import torch

        tree = ast.parse(self.setup)
        if seed is not None:
            assigns = [n for n in tree.body if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "seed"]
            if not assigns:
                raise ValueError("the notebook's setup assigns no `seed` to override")
            assigns[0].value = ast.copy_location(ast.Constant(seed), assigns[0].value)
        ns: dict = {}
        threads = torch.get_num_threads()
        try:
            exec(compile(tree, "<notebook setup>", "exec"), ns)
        finally:
            torch.set_num_threads(threads)
        return ns


def load_canonical(path: str | Path) -> CanonicalCell:
    """Parse ``path`` (an .ipynb) and return its first ``%%fragment`` cell with its setup."""
    cells = json.loads(Path(path).read_text())["cells"]
    setup: list[str] = []
    for cell in cells:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        if source.startswith("%%fragment"):
            magic, _, body = source.partition("\n")
            return CanonicalCell("\n".join(setup), magic, body)
        setup += [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    raise ValueError(f"{path} has no %%fragment cell")
