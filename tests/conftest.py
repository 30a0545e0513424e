"""Shared fixtures: the canonical PPO cell of notebook 01 and an IPython shell with fragnb loaded."""

import shutil
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch

from fragnb.notebook import load_canonical

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_01 = ROOT / "notebooks" / "01_first_fragment_graph.ipynb"
#: Notebook 01's training loop, which other algorithms' tests run unchanged with their own components.
NOTEBOOK_01_LOOP = load_canonical(NOTEBOOK_01).body


@pytest.fixture(scope="session")
def canonical():
    """Notebook 01's setup code and its first %%fragment cell (the PPO loop)."""
    return load_canonical(NOTEBOOK_01)


@pytest.fixture
def ppo_ns(canonical):
    """A fresh namespace with notebook 01's components; ``iterations=None`` keeps the notebook's count."""

    def make(iterations: int | None = 2):
        ns = canonical.namespace()
        if iterations is not None:
            ns["iterations"] = iterations
        return ns

    return make


@pytest.fixture
def interrupt_once(monkeypatch):
    """The run's first progress update raises KeyboardInterrupt, as a first Ctrl-C in the notebook would."""
    interrupted = []

    def update(self, *args, **kwargs):
        if not interrupted:
            interrupted.append(True)
            raise KeyboardInterrupt

    monkeypatch.setattr("fragnb.ui.live.LiveProgress.update", update)


@pytest.fixture
def shell():
    """An IPython shell with `%load_ext fragnb` done; its namespace is cleared afterwards, and torch's thread
    count is this process's again (notebook 01's setup, which tests run in it, sets one for its kernel)."""
    from IPython.testing.globalipapp import get_ipython

    threads = torch.get_num_threads()
    ip = get_ipython()
    ip.run_line_magic("load_ext", "fragnb")
    yield ip
    ip.reset(new_session=False)
    torch.set_num_threads(threads)


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    skip_dot = pytest.mark.skip(reason="needs graphviz's `dot` binary")
    for item in items:
        if "gpu" in item.keywords and not torch.cuda.is_available():
            item.add_marker(skip_gpu)
        if "needs_dot" in item.keywords and shutil.which("dot") is None:
            item.add_marker(skip_dot)


def hand_in(student: Path, out: Path, wrong: dict, kernel_record: Path | None = None) -> tuple[Path, int]:
    """A handout (``student``, as `make handouts` writes it) answered as a student would, with its teacher's key
    but for ``wrong`` (question -> answer): each quiz answer and each prediction written before the runs. With
    ``kernel_record``, a cell before the answers writes the kernel's ``sys.prefix`` there (which Python graded
    it). Returns the handed-in notebook and how many answers the quiz grades."""
    import json
    import re

    teachers = json.loads((ROOT / "notebooks" / student.name).read_text())["cells"]
    key = next("".join(c["source"]) for c in teachers if "".join(c["source"]).startswith("# The quiz's key"))
    answers = eval(re.search(r"^answers = (.*)$", key, re.M)[1])  # noqa: S307 - the key's dict literal
    answers.update(wrong)
    predictions = dict(re.findall(r'^predict\("(.+?)", (.+?)\)\s*(?:#.*)?$', key, re.M))
    nb = json.loads(student.read_text())
    for cell in nb["cells"]:
        source = "".join(cell["source"])
        for name, answer in predictions.items():
            source = re.sub(
                rf'^predict\("{re.escape(name)}", None\)', f'predict("{name}", {answer})', source, flags=re.M
            )
        cell["source"] = source
    assert not [c for c in nb["cells"] if re.search(r'^predict\(".+?", None\)', c["source"], re.M)], "unkeyed"
    at = next(i for i, c in enumerate(nb["cells"]) if c["source"].startswith("answers = {"))
    nb["cells"][at]["source"] = f"answers = {answers!r}"
    if kernel_record is not None:
        record = f"import sys\nopen({str(kernel_record)!r}, 'w').write(sys.prefix)"
        nb["cells"].insert(
            at, {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": record}
        )
    handed_in = out / student.name
    handed_in.write_text(json.dumps(nb))
    return handed_in, len(answers) + len(predictions)


def worker_processes() -> list[psutil.Process]:
    """This process's children, but for multiprocessing's resource tracker and forkserver (one per
    process, not workers: the forkserver forks fragnb's workers, which show its command line too, as
    its children; fragnb.shutdown() ends it)."""
    helpers = {
        p.pid
        for p in psutil.Process().children()
        if any(helper in " ".join(p.cmdline()) for helper in ("resource_tracker", "forkserver"))
    }
    return [
        p
        for p in psutil.Process().children(recursive=True)
        if p.is_running() and p.status() != psutil.STATUS_ZOMBIE and p.pid not in helpers
    ]


def wait_for_no_workers(timeout=30.0):
    deadline = time.monotonic() + timeout
    while worker_processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not worker_processes(), [p.cmdline() for p in worker_processes()]


def kill_a_worker_when_shown(monkeypatch, at: int) -> list:
    """Kill the newest worker process when the notebook shows iteration ``at`` (as the OOM killer would)."""
    from fragnb.ui import live

    killed, shown = [], []
    update = live.LiveProgress.update

    def kill(self, *args, **kwargs):
        shown.append(1)
        if len(shown) == at and not killed:
            victim = max(worker_processes(), key=lambda p: p.pid)
            victim.kill()
            killed.append(victim.pid)
        update(self, *args, **kwargs)

    monkeypatch.setattr(live.LiveProgress, "update", kill)
    return killed


@pytest.fixture(scope="module", autouse=True)
def _close_embedded_cluster():
    """Every test module leaves no Dask cluster of fragnb's behind for the next (each starts its own workers)."""
    yield
    if "fragnb.runtime.cluster.clusters" in sys.modules:
        sys.modules["fragnb.runtime.cluster.clusters"].shutdown()


@pytest.fixture
def one_thread():
    """Small networks: intra-op threads only add overhead (and contention) on a 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


#: `make docs`'s command (tests/test_docs.py checks that the Makefile runs this one): warnings are errors, and
#: every page is read again (-E): an incremental build does not repeat an unchanged page's warnings.
SPHINX = ["-m", "sphinx", "-E", "-W", "--keep-going", "-q", "-b", "html", "docs", "docs/_build/html"]


@pytest.fixture(scope="session")
def site() -> Path:
    """The documentation site, built as `make docs` builds it (about 15 s); fails with Sphinx's warnings."""
    import subprocess

    done = subprocess.run([sys.executable, *SPHINX], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"make docs failed:\n{done.stderr[-6000:]}"
    return ROOT / "docs" / "_build" / "html"
