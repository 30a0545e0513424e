"""A small machine: notebooks 01 and 02 as mybinder.org runs them, in a container of 2 GB, with the fewest
worker processes that run every policy they show (FRAGNB_WORKERS=2: notebook 02's multi_learner is a process
group of two learners, one process each, which a limit of one refuses), every cell's assert holding, with two
CPU-bound neighbours beside them whenever the session is a busy one (--busy above 0). In a session that collects this test, it is also those
notebooks' nbval run: conftest.py deselects their own items, so each notebook runs once per session.

The limit is a real one where this process may make a cgroup (root on Linux, as in CI): the notebooks run in
a memory cgroup of 2 GiB, swap included, and the kernel is killed if it needs more. Where it may not, the
test watches the notebooks' processes (their PSS, summed, once a second) and fails past 2 GiB.
"""

import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import psutil
import pytest

from conftest import ROOT

pytestmark = pytest.mark.slow

LIMIT = 2 * 2**30
#: CPU-bound neighbours beside these notebooks in a busy session (`make test`'s own BUSY is 1).
BUSY = 2
NOTEBOOKS = ["01_first_fragment_graph.ipynb", "02_distribution_policies.ipynb"]


def _cgroup(limit: int) -> Path | None:
    """A fresh memory cgroup (v2, else v1) limited to ``limit`` bytes with no swap; None where this
    process may not make one."""
    for root, files in (
        (Path("/sys/fs/cgroup"), ("memory.max", "memory.swap.max")),
        (Path("/sys/fs/cgroup/memory"), ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes")),
    ):
        if not (root / files[0]).exists() and not (root / "cgroup.procs").exists():
            continue
        group = root / f"fragnb-small-{uuid.uuid4().hex[:8]}"
        try:
            group.mkdir()
            (group / files[0]).write_text(str(limit))
            if (group / files[1]).exists():
                (group / files[1]).write_text("0" if files[1] == "memory.swap.max" else str(limit))
            return group
        except OSError:
            if group.exists():
                group.rmdir()
    return None


def test_notebooks_01_and_02_run_in_2_gb_with_two_worker_processes(request):
    group = _cgroup(LIMIT)
    env = dict(os.environ, FRAGNB_WORKERS="2", FRAGNB_WARM="0")
    env.pop("FRAGNB_BUSY", None)
    # the spinning processes are in the group too (a few MiB); a busy session gives these notebooks, the first a
    # student meets, the two neighbours of a laptop with a browser and a call open, whatever its own --busy
    busy = BUSY if request.config.getoption("busy") > 0 else 0
    command = [sys.executable, "-m", "pytest", "-q", "-rf", "-p", "no:cacheprovider", "--nbval-lax", "-o", "addopts="]
    command += [f"--busy={busy}"]
    command += [str(ROOT / "notebooks" / name) for name in NOTEBOOKS]

    def enter():  # runs in the child before pytest starts: it and every process it starts are in the group
        (group / "cgroup.procs").write_text(str(os.getpid()))

    peak, stop = [0], threading.Event()

    def watch(pid):
        while not stop.wait(1.0):
            try:
                tree = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
            except psutil.Error:
                return
            total = 0
            for p in tree:
                try:
                    total += p.memory_full_info().pss
                except psutil.Error:
                    pass
            peak[0] = max(peak[0], total)

    begin = time.monotonic()
    child = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=enter if group else None,
    )
    watcher = threading.Thread(target=watch, args=(child.pid,), daemon=True)
    watcher.start()
    try:
        out, _ = child.communicate(timeout=1500)
    finally:
        stop.set()
        if child.poll() is None:
            child.kill()
        watcher.join()
        if group is not None:
            failcnt = group / "memory.failcnt"
            hits = int(failcnt.read_text()) if failcnt.exists() else None
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    group.rmdir()
                    break
                except OSError:  # its last processes are still ending
                    time.sleep(0.5)
    where = f"in a {LIMIT / 2**30:.0f} GiB cgroup" if group else "watched (no cgroup could be made here)"
    print(
        f"notebooks 01 and 02 with FRAGNB_WORKERS=2 {where}: {time.monotonic() - begin:.0f} s, "
        f"peak PSS {peak[0] / 2**20:.0f} MiB"
        + (f", the limit reached {hits} times" if group and hits is not None else "")
    )
    assert child.returncode == 0, out[-6000:]
    assert peak[0] < LIMIT, f"the notebooks' processes took {peak[0] / 2**20:.0f} MiB"
