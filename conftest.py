"""`pytest --busy=N` (or FRAGNB_BUSY=N): N CPU-bound processes run beside the course notebooks' cells.

A notebook may assert only what holds on any machine that can run it (issue 49); a busy machine is how CI
checks that. The processes run at the tests' own priority while nbval runs notebook cells, and only then:
they start before a notebook's first cell and end after its last (tests/ measure their own leftover
processes, which these must not be). They end with the session, on a failure or Ctrl-C too, and each ends
on its own when the pytest process that started it is gone. This file lives at the root so that it loads
for `pytest notebooks/NN.ipynb` as well as for `pytest`.

It also keeps the rendered course (``docs/course/``) as current as the code: a notebook cell whose run says
other things than its rendered copy's (fragnb's guarantees, caveats, refusals; numbers and addresses aside,
:func:`fragnb.course.rendered.behind`) fails, naming what changed, until the course is rendered again.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# A spinning loop that leaves when its parent does (a killed pytest leaves nothing spinning).
SPIN = "import os, sys\nparent = int(sys.argv[1])\nwhile os.getppid() == parent:\n    for _ in range(200_000): pass\n"


def pytest_addoption(parser):
    parser.addoption(
        "--busy",
        type=int,
        default=int(os.environ.get("FRAGNB_BUSY") or 0),
        metavar="N",
        help="run N CPU-bound processes beside the notebooks' cells (default: $FRAGNB_BUSY or 0)",
    )


class Busy:
    """The spinning processes, started for notebook items and ended when the next item is not one."""

    def __init__(self, n: int):
        self.n, self.procs = n, []

    def start(self):
        if not self.procs:
            self.procs = [subprocess.Popen([sys.executable, "-c", SPIN, str(os.getpid())]) for _ in range(self.n)]

    def stop(self):
        procs, self.procs = self.procs, []
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


_busy = pytest.StashKey[Busy]()


def _notebook(item) -> bool:
    return item is not None and item.path.suffix == ".ipynb"


def pytest_configure(config):
    if config.getoption("busy") > 0:
        config.stash[_busy] = Busy(config.getoption("busy"))


def pytest_report_header(config):
    if _busy in config.stash:
        return f"busy: {config.stash[_busy].n} CPU-bound processes beside the notebooks' cells"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if _busy in item.config.stash and _notebook(item):
        item.config.stash[_busy].start()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    if _busy in item.config.stash and not _notebook(nextitem):
        item.config.stash[_busy].stop()


def pytest_sessionfinish(session):
    if _busy in session.config.stash:
        session.config.stash[_busy].stop()


def pytest_unconfigure(config):
    if _busy in config.stash:
        config.stash[_busy].stop()


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected theirs
def pytest_collection_modifyitems(config, items):
    """The notebooks tests/test_small_machine.py runs (nbval, in 2 GiB, with the same busy neighbours) are
    not run a second time in the same session: one nbval run of each notebook per session, minutes less
    on a 2-core machine. Run alone (``pytest notebooks/01_first_fragment_graph.ipynb``) they run as usual."""
    small = [item for item in items if item.path.name == "test_small_machine.py"]
    inside = {name for item in small for name in getattr(item.module, "NOTEBOOKS", ())}
    if not inside:
        return
    twice = [item for item in items if _notebook(item) and item.path.name in inside]
    if twice:
        items[:] = [item for item in items if item not in twice]
        config.hook.pytest_deselected(items=twice)


_RENDERED: dict[Path, list] = {}


def _rendered_cell(item):
    """The rendered copy's code cell that nbval ``item`` runs, if the copy exists and holds the same source."""
    path = Path(item.path)
    if path.parent.name != "notebooks" or not hasattr(item, "cell_num"):
        return None
    copy = path.parent.parent / "docs" / "course" / path.name
    if copy not in _RENDERED:
        cells = json.loads(copy.read_text())["cells"] if copy.exists() else []
        _RENDERED[copy] = [c for c in cells if c["cell_type"] == "code"]
    cells = _RENDERED[copy]
    if item.cell_num >= len(cells) or "".join(cells[item.cell_num]["source"]) != item.cell.source:
        return None  # a copy older than the notebook's cells: tests/test_notebooks.py says so
    return cells[item.cell_num]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if call.when != "call" or not report.passed or getattr(item, "test_outputs", None) is None:
        return
    rendered = _rendered_cell(item)
    if rendered is None:
        return
    from fragnb.course.rendered import behind

    differs = behind(rendered.get("outputs", []), item.test_outputs)
    if differs:
        report.outcome = "failed"
        report.longrepr = (
            f"docs/course/{Path(item.path).name} is behind the code in cell {item.cell_num}: {differs}. "
            "Render the course again (`make course`), in the same commit as the change."
        )
