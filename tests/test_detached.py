"""Detached runs (:mod:`fragnb.runtime.detached`): a run handed to a `dask scheduler` + `dask worker` cluster
goes on when the kernel that started it is killed, is followed from another process, and ends there with plain
Python's weights; a run is cancelled or ends on its time limit, leaving no task on the cluster; what cannot be
detached is refused before anything runs."""

import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from test_distributed import dask_processes

import fragnb
from fragnb.errors import FragmentError
from fragnb.runtime.detached import RESULT

ROOT = Path(__file__).resolve().parents[1]
HANDS_OVER = Path(__file__).with_name("detached_run.py")


def _plain(canonical, iterations: int) -> dict:
    """Notebook 01's namespace after ``iterations`` iterations of plain Python (``single``)."""
    graph = _graph(canonical, iterations)
    fragnb.run(graph, progress=False, plot=False)
    return graph.namespace


def _graph(canonical, iterations: int):
    """Notebook 01's loop captured from a fresh namespace of its setup, for ``iterations`` iterations."""
    ns = canonical.namespace()
    ns["iterations"] = iterations
    return fragnb.capture(canonical.body, ns, name="ppo")


def _detached(graph, address: str, where, detach=True, **options):
    """``graph`` under ``coarse`` x2 handed to the cluster at ``address``, writing to ``where``."""
    return fragnb.run(
        graph, "coarse", address, actors=2, progress=False, plot=False, checkpoint_dir=where, detach=detach, **options
    )


def _same_end(ns: dict, plain: dict) -> None:
    for key, value in plain["policy"].state_dict().items():
        assert torch.equal(ns["policy"].state_dict()[key], value), key
    assert ns["it"] == plain["it"] and list(ns["returns"]) == list(plain["returns"])


def _idle(address: str, within: float = 20.0) -> bool:
    """Whether the cluster's workers run no task (the conductor and every replica ended) within ``within`` s."""
    from distributed import Client

    with Client(address, timeout="10s", set_as_default=False) as client:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if not any(client.processing().values()):
                return True
            time.sleep(0.2)
    return False


@pytest.mark.slow
def test_a_run_detached_by_a_kernel_killed_at_once_is_attached_from_another_and_ends_with_plain_pythons_weights(
    canonical, tmp_path
):
    where = tmp_path / "run"
    with dask_processes() as address:
        started = subprocess.run(
            [sys.executable, str(HANDS_OVER), "detach", address, str(where), "6", str(ROOT)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert started.returncode == -9, started.stderr[-3000:]  # the kernel was SIGKILLed once it handed over
        assert "goes on on" in started.stderr and "fragnb.attach('ppo'" in started.stderr
        listed = fragnb.runs(address)
        assert [r["name"] for r in listed] == ["ppo"] and listed[0]["policy"] == "coarse"

        graph = _graph(canonical, 6)  # the cell captured again in this kernel
        ns = graph.namespace
        result = fragnb.attach("ppo", address, graph=graph, progress=False, plot=False)
        assert result.iterations == 6 and graph.last_run is result
        assert fragnb.runs(address)[0]["state"] == "finished"
        assert (where / RESULT).exists() and any(where.glob("checkpoint-*.fragnb"))
        assert _idle(address)
    _same_end(ns, _plain(canonical, 6))


@pytest.mark.slow
def test_a_detached_run_is_cancelled_or_ends_on_its_time_limit_and_leaves_no_task(canonical, shell, tmp_path):
    with dask_processes() as address:
        # through the magic: named, handed over, and the cell returns at once
        shell.run_cell(canonical.setup, store_history=False).raise_error()
        shell.user_ns["iterations"] = 10_000
        shell.run_cell_magic(
            "fragment",
            f"ppo --policy coarse --actors 2 --cluster {address} --checkpoint-dir {tmp_path / 'long'} --detach long "
            "--run --no-progress --no-plot",
            canonical.body,
        )
        assert shell.user_ns["ppo"].last_run is None  # a detached run's result is fragnb.attach's
        with pytest.raises(FragmentError, match="a run named 'long' is (starting|running)"):
            fragnb.run(
                shell.user_ns["ppo"], "coarse", address, actors=2, checkpoint_dir=tmp_path / "again", detach="long"
            )
        deadline = time.monotonic() + 120
        while fragnb.runs(address)[0]["progress"]["iterations"] < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        fragnb.runs(address).cancel("long")
        cancelled = fragnb.attach("long", address, graph=shell.user_ns["ppo"], progress=False, plot=False)
        assert 2 <= cancelled.iterations < 10_000
        assert fragnb.runs(address)[0]["state"] == "cancelled"
        _same_end(shell.user_ns, _plain(canonical, cancelled.iterations))  # plain Python's after as many

        # through fragnb.run: a time limit nobody attaches to ends it all the same
        graph = _graph(canonical, 10_000)
        handed = _detached(graph, address, tmp_path / "limited", detach="limited", time_limit=3)
        assert handed.name == "limited"
        deadline = time.monotonic() + 120
        while fragnb.runs(address)[0]["state"] not in ("stopped", "failed") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert fragnb.runs(address)[0]["state"] == "stopped"
        assert _idle(address)
        stopped = handed.attach(graph)  # its handle follows it as run() would have shown it
        assert 0 < stopped.iterations < 10_000 and graph.last_run is stopped
        with pytest.raises(FragmentError, match="has already ended"):
            fragnb.runs(address).cancel("limited")
        with pytest.raises(FragmentError, match="no detached run is named 'nope'.*'limited', 'long'"):
            fragnb.attach("nope", address)


@pytest.fixture
def graph(canonical):
    return _graph(canonical, 2)


@pytest.mark.parametrize(
    "cluster, options, said",
    [
        (None, {"checkpoint_dir": "memory://x"}, "cluster=None is the kernel's own"),
        ("local", {"checkpoint_dir": "memory://x"}, "cluster='local' is the kernel's own"),
        ("tcp://127.0.0.1:1", {}, "detach= needs checkpoint_dir="),
        ("tcp://127.0.0.1:1", {"checkpoint_dir": "memory://x", "resume": "memory://x"}, "with resume= is not"),
    ],
)
def test_what_cannot_be_detached_is_refused_before_anything_runs(graph, cluster, options, said):
    before = {k: v for k, v in graph.namespace.items() if k == "it"}
    with pytest.raises(FragmentError, match=said):
        fragnb.run(graph, "coarse", cluster, actors=2, detach=True, **options)
    assert {k: v for k, v in graph.namespace.items() if k == "it"} == before  # nothing ran


def test_single_cannot_detach_and_a_time_limit_is_seconds(graph):
    with pytest.raises(ValueError, match="'single' policy runs in this kernel"):
        fragnb.run(graph, detach=True)
    with pytest.raises(TypeError, match="time_limit"):
        fragnb.run(graph, time_limit=0)


def _where(address: str) -> dict[str, str]:
    """Task key -> the address of the worker running it, as the scheduler knows."""
    from distributed import Client

    with Client(address, timeout="10s", set_as_default=False) as client:
        return client.run_on_scheduler(
            lambda dask_scheduler: {
                str(k): ts.processing_on.address for k, ts in dask_scheduler.tasks.items() if ts.processing_on
            }
        )


def _kill(address: str, worker: str) -> None:
    """SIGKILL the process of ``worker`` (its nanny starts another)."""
    import os
    import signal

    from distributed import Client

    with Client(address, timeout="10s", set_as_default=False) as client:
        pid = client.run(os.getpid, workers=[worker])[worker]
    os.kill(pid, signal.SIGKILL)


def _until(what, within: float = 120.0) -> None:
    deadline = time.monotonic() + within
    while not what():
        assert time.monotonic() < deadline, "waited too long"
        time.sleep(0.1)


@pytest.mark.slow
def test_a_detached_run_recovers_a_lost_replica_worker_and_a_lost_conductor_with_nobody_attached(canonical, tmp_path):
    from distributed import Client

    with dask_processes() as address, Client(address, timeout="10s", set_as_default=False) as client:
        graph = _graph(canonical, 60)
        ns = graph.namespace
        _detached(graph, address, tmp_path / "run", checkpoint_every=1)

        def board(key):
            return client.get_metadata(["fragnb-runs", "ppo", key], None)

        _until(lambda: board("progress")["iterations"] >= 3)
        where = _where(address)
        conductor = next(w for k, w in where.items() if k.startswith("fragnb-conductor"))
        replica = next(w for k, w in where.items() if not k.startswith("fragnb-conductor") and w != conductor)
        first = board("attempt")
        _kill(address, replica)  # a replica's worker: the conductor restarts the run from its last checkpoint
        _until(lambda: board("attempt") not in (None, first))
        _kill(address, conductor)  # the conductor's own: the scheduler starts it again, and it goes on
        _until(lambda: board("conductors") == 2)
        result = fragnb.attach("ppo", address, graph=graph, progress=False, plot=False)
        assert result.iterations == 60
        first, conductor = result.lost_workers[:2]  # in the order they happened, across the two conductors
        assert first.startswith("lost the worker of replica") and conductor.startswith("lost the run's conductor")
        assert _idle(address)
    _same_end(ns, _plain(canonical, 60))


def test_an_attached_run_ends_on_its_time_limit_after_the_iteration_under_way(canonical):
    graph = _graph(canonical, 10_000)
    result = fragnb.run(graph, progress=False, plot=False, time_limit=1.0)
    assert 0 < result.iterations < 10_000 and result.stopped
    assert graph.namespace["it"] == result.iterations - 1  # plain Python's namespace after as many iterations
