"""fragnb's own cluster: started before a run asks for it, its workers forked warm, quiet while idle."""

import subprocess
import sys
import time

import dask
import psutil
import pytest

import fragnb
import fragnb.ui.magics
from conftest import NOTEBOOK_01, wait_for_no_workers, worker_processes
from fragnb.runtime.cluster import clusters


@pytest.fixture
def no_cluster():
    clusters.shutdown()
    wait_for_no_workers()
    yield
    clusters.shutdown()


def _worker_state():
    return (
        "torch._dynamo" in sys.modules,  # imported by the forkserver, not by a task
        dask.config.get("distributed.worker.profile.enabled"),
        dask.config.get("distributed.admin.tick.interval"),
    )


def test_warm_starts_the_cluster_in_the_background_and_a_run_waits_for_it_instead_of_starting_another(no_cluster):
    begin = time.perf_counter()
    clusters.warm(workers=2)
    assert time.perf_counter() - begin < 1.0  # it returns at once
    assert clusters._WARMING and clusters._WARMING[0].is_alive()
    client, owned = clusters.connect(None, 2)  # waits for that start
    assert owned and len(clusters._EMBEDDED) == 1 and len(clusters.workers(client)) == 2
    assert not clusters._WARMING[0].is_alive()
    states = client.run(_worker_state)
    assert {s[0] for s in states.values()} == {True}, states  # forked from the preloaded forkserver
    assert {(s[1], s[2]) for s in states.values()} == {(False, "500ms")}, states  # Dask's clocks slowed
    clusters.warm(workers=2)  # up already: nothing to do
    assert not clusters._WARMING[0].is_alive()
    pids = {p.pid for p in worker_processes()}
    clusters.connect(None, 3)  # grown by one more fork, the first two kept
    assert pids < {p.pid for p in worker_processes()}
    clusters.shutdown()
    wait_for_no_workers()
    assert [p for p in psutil.Process().children() if "forkserver" in " ".join(p.cmdline())]  # kept for the next
    fragnb.shutdown()  # and ended with it
    deadline = time.monotonic() + 30
    while [p for p in psutil.Process().children() if "forkserver" in " ".join(p.cmdline())]:
        assert time.monotonic() < deadline, "fragnb.shutdown() left the forkserver running"
        time.sleep(0.1)


def test_FRAGNB_WARM_0_leaves_the_start_to_the_first_run(no_cluster, monkeypatch):
    monkeypatch.setenv("FRAGNB_WARM", "0")
    clusters.warm()
    time.sleep(0.5)
    assert "local" not in clusters._EMBEDDED and not worker_processes()


def test_loading_the_extension_starts_no_worker_unless_FRAGNB_WARM_is_1(no_cluster, shell, monkeypatch):
    monkeypatch.delenv("FRAGNB_WARM", raising=False)
    fragnb.load_ipython_extension(shell)  # what `%load_ext fragnb` calls (once per kernel)
    time.sleep(0.5)
    assert not any(t.is_alive() for t in clusters._WARMING) and "local" not in clusters._EMBEDDED
    assert not worker_processes()  # a student who only captures and draws holds no idle worker
    monkeypatch.setenv("FRAGNB_WARM", "1")
    fragnb.load_ipython_extension(shell)
    clusters._WARMING[0].join(timeout=120)
    assert len(clusters.workers(clusters._EMBEDDED["local"][1])) == 2


def test_the_magic_starts_the_workers_its_run_needs_as_it_captures_and_none_to_draw(no_cluster, shell, monkeypatch):
    monkeypatch.setattr(clusters, "_embedded", lambda *a, **k: started.append(a[1]))
    started = []
    shell.run_cell(f"from fragnb.notebook import load_canonical\ncell = load_canonical({str(NOTEBOOK_01)!r})")
    shell.user_ns.update(shell.user_ns["cell"].namespace())
    shell.run_cell_magic("fragment", "ppo --policy coarse --actors 4 -q", shell.user_ns["cell"].body)
    time.sleep(0.5)
    assert started == []  # captured and drawn only
    monkeypatch.setattr(fragnb.ui.magics, "run_placement", lambda *a, **k: "ran")
    shell.run_cell_magic("fragment", "ppo --policy coarse --actors 4 --run -q", shell.user_ns["cell"].body)
    clusters._WARMING[0].join(timeout=10)
    assert started == [5]  # the learner's and one per actor


def test_a_run_whose_cluster_is_starting_in_the_background_uses_it(no_cluster, canonical, ppo_ns):
    clusters.warm()
    ns = ppo_ns(1)
    result = fragnb.run(fragnb.capture(canonical.body, ns, name="ppo"), "coarse", actors=2, progress=False, plot=False)
    assert result.iterations == 1 and len(clusters._EMBEDDED) == 1


def test_a_kernel_killed_outright_leaves_no_worker_and_no_forkserver_behind():
    code = (
        "import os, psutil\n"
        "from fragnb.runtime.cluster import clusters\n"
        "if __name__ == '__main__':\n"
        "    clusters.connect(None, 2)\n"
        "    print(' '.join(str(p.pid) for p in psutil.Process().children(recursive=True)), flush=True)\n"
        "    import time; time.sleep(600)\n"
    )
    kernel = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        pids = [int(p) for p in kernel.stdout.readline().split()]
        assert len(pids) >= 3  # the forkserver, the resource tracker and the workers it forked
        kernel.kill()  # no atexit, no shutdown(): as when a kernel dies
        deadline = time.monotonic() + 30
        while alive := [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]:
            assert time.monotonic() < deadline, f"left behind: {[psutil.Process(p).cmdline()[:3] for p in alive]}"
            time.sleep(0.2)
    finally:
        kernel.kill()
