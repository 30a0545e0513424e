"""The course notebooks agree with each other (nbval runs each of them top to bottom)."""

import json

from conftest import ROOT


def _fragment_cells(name: str) -> list[str]:
    cells = json.loads((ROOT / "notebooks" / name).read_text())["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code" and "".join(c["source"]).startswith("%%fragment")]


def test_notebook_02_runs_notebook_01s_loop_unchanged(canonical):
    # its `ppo` cells place and run the loop of notebook 01; other cells show other loops
    bodies = {cell.partition("\n")[2] for cell in _fragment_cells("02_distribution_policies.ipynb") if cell.split()[1] == "ppo"}
    assert bodies == {canonical.body}
