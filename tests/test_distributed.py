"""Distribution policies running for real on Dask workers (an embedded LocalCluster on 127.0.0.1)."""

import contextlib
import json
import re
import socket
import subprocess
import sys
import time
import traceback
import warnings

import psutil
import pytest
import torch

from conftest import kill_a_worker_when_shown, wait_for_no_workers, worker_processes
from fragnb import capture, run
from fragnb.runtime.cluster import clusters
from fragnb.runtime.cluster.clusters import ClusterError
from fragnb.ui import live

K = 2  # iterations: enough for a weight broadcast and a second rollout on the new weights


def _run(canonical, ppo_ns, policy, iterations=K, **params):
    ns = ppo_ns(iterations)
    result = run(capture(canonical.body, ns, name="ppo"), policy, progress=False, plot=False, **params)
    return ns, result


def _weights(ns):
    return ns["learner"].policy.state_dict()


@pytest.mark.parametrize("policy", ["multi_learner", "gpu_only"])
def test_an_averaging_policy_with_one_replica_is_checked_and_exact_not_announced_statistical(
    canonical, ppo_ns, policy, capsys
):
    """One learner averages nothing: its run is plain Python's, value for value, so the safety net compares it
    and its guarantee is 'exact'; it used to say its weights equal plain Python's only statistically."""
    single, _ = _run(canonical, ppo_ns, "single")
    ns, result = _run(canonical, ppo_ns, policy, learners=1)
    assert result.guarantee == "exact" and result.check_seconds > 0
    assert "only statistically" not in capsys.readouterr().err
    for key, value in _weights(single).items():
        torch.testing.assert_close(_weights(ns)[key], value, atol=1e-5, rtol=0, msg=f"{policy}: {key}")


def test_coarse_two_actors_and_fine_two_env_workers_match_single_weights(canonical, ppo_ns):
    single, _ = _run(canonical, ppo_ns, "single")
    for policy in ("coarse", "fine"):
        ns, result = _run(canonical, ppo_ns, policy, actors=2)
        assert result.policy == policy and result.iterations == K and result.env_steps == K * 32 * 32
        for key, value in _weights(single).items():
            torch.testing.assert_close(_weights(ns)[key], value, atol=1e-5, rtol=0, msg=f"{policy}: {key}")
        # The cell's variables are back, gathered along the environment axis.
        torch.testing.assert_close(ns["obs"], single["obs"])
        assert sorted(ns["returns"]) == sorted(single["returns"]) and ns["stats"].keys() == single["stats"].keys()
        # Components hold their trained state in place: the actor samples with the learner's network.
        assert ns["actor"].policy is ns["learner"].policy and ns["env"].vector_steps == single["env"].vector_steps
        assert torch.equal(ns["actor"].streams.counters, single["actor"].streams.counters)


def test_the_weights_move_by_the_operator_their_transfer_names_and_the_drawing_shows(canonical, ppo_ns):
    from fragnb.runtime.pipeline import run_placement

    single, _ = _run(canonical, ppo_ns, "single")
    for operator in ("versioned pull", "broadcast"):
        ns = ppo_ns()
        placement = capture(canonical.body, ns, name="ppo").place("coarse", actors=2)
        weights = next(t for t in placement.transfers if t.kind == "state")
        placement = placement.with_operator(weights.src, weights.dst, "state", operator)
        moved = next(t for t in placement.transfers if t.kind == "state")
        other = ({"broadcast", "versioned pull"} - {operator}).pop()
        drawn = placement.render().source
        assert moved.operator == operator and operator in drawn and other not in drawn
        result = run_placement(placement, progress=False, plot=False)
        # each actor loaded the learner's one new version, by the operator drawn: the run moved what the drawing says
        assert result.moved == {str(moved): 2 * (K - 1)}, result.moved
        for key, value in _weights(single).items():  # bound 0: the same version, value for value
            torch.testing.assert_close(_weights(ns)[key], value, atol=1e-5, rtol=0, msg=f"{operator}: {key}")


def test_multi_learner_replicas_stay_synchronised_through_all_reduce(canonical, ppo_ns, capsys):
    before = {k: v.clone() for k, v in _weights(ppo_ns()).items()}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Learner.merge warns if the replicas' networks differ
        ns, result = _run(canonical, ppo_ns, "multi_learner", learners=2)
    assert result.env_steps == K * 32 * 32
    # the safety net does not run for it, and the run says so before it starts
    assert result.guarantee == "data-parallel" and "the safety net does not run for it" in capsys.readouterr().err
    assert any(not torch.equal(before[k], v) for k, v in _weights(ns).items())


def test_trajectories_and_weights_move_between_workers_not_through_the_notebook(canonical, ppo_ns):
    _, result = _run(canonical, ppo_ns, "coarse", iterations=3, actors=2)
    batch_bytes = 32 * 32 * (4 + 5) * 4  # obs and five float/int columns per step, per iteration
    assert result.transfer_bytes > batch_bytes, (result.transfer_bytes, result.client_bytes)
    assert result.client_bytes < result.transfer_bytes / 10, (result.transfer_bytes, result.client_bytes)


@contextlib.contextmanager
def dask_processes(protocol: str = "tcp", tls: tuple[str, ...] = (), security=None):
    """`dask scheduler` and `dask worker --nworkers 3` (a nanny each) on loopback, as a user starts
    them; the scheduler's address once the workers are there. Ended, and fragnb's client to them
    closed, on the way out."""
    from distributed import Client

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"{protocol}://127.0.0.1:{port}"
    scheduler = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "distributed.cli.dask_scheduler",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--protocol",
            protocol,
            "--no-dashboard",
            *tls,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "distributed.cli.dask_worker",
            address,
            "--nworkers",
            "3",
            "--nthreads",
            "1",
            "--host",
            "127.0.0.1",
            "--no-dashboard",
            *tls,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with Client(address, timeout="30s", security=security, set_as_default=False) as client:
            client.wait_for_workers(3, timeout=60)
        yield address
    finally:
        clusters.shutdown()
        for proc in (worker, scheduler):
            proc.terminate()
            proc.wait(30)


def test_separate_scheduler_and_worker_processes_on_loopback(canonical, ppo_ns, tmp_path):
    with dask_processes() as address:
        single, _ = _run(canonical, ppo_ns, "single", iterations=1)
        ns, result = _run(canonical, ppo_ns, "coarse", iterations=1, actors=2, cluster=address)
        for key, value in _weights(single).items():
            torch.testing.assert_close(_weights(ns)[key], value, atol=1e-5, rtol=0)
        _run(canonical, ppo_ns, "fine", iterations=1, actors=2, cluster=address)
        clients = clusters._REMOTE[address].run_on_scheduler(lambda dask_scheduler: sorted(dask_scheduler.clients))
        assert len(clients) == 2, (
            clients
        )  # after two runs, one client of fragnb's (and the scheduler's own fire-and-forget)


def test_a_remote_cluster_over_tls_with_certificates_made_here(canonical, ppo_ns, tmp_path, shell):
    import dask
    from distributed import Client
    from distributed.security import Security

    made = Security.temporary()  # a self-signed CA and a certificate it signed, as PEM text
    pem = {"ca": made.tls_ca_file, "cert": made.tls_scheduler_cert, "key": made.tls_scheduler_key}
    for name, text in pem.items():
        (tmp_path / f"{name}.pem").write_text(text)
    ca, cert, key = (str(tmp_path / f"{name}.pem") for name in pem)
    tls = ("--tls-ca-file", ca, "--tls-cert", cert, "--tls-key", key)
    security = Security(tls_ca_file=ca, tls_client_cert=cert, tls_client_key=key, require_encryption=True)
    with (
        dask_processes("tls", tls, security) as address,
        Client(address, security=security, timeout="30s", set_as_default=False) as client,
    ):
        with pytest.raises(ClusterError, match="speaks TLS, and Dask's configuration names no certificates"):
            _run(canonical, ppo_ns, "coarse", iterations=1, actors=2, cluster=address)
        with dask.config.set(
            {
                "distributed.comm.tls.ca-file": ca,
                "distributed.comm.tls.client.cert": cert,
                "distributed.comm.tls.client.key": key,
            }
        ):
            _, result = _run(canonical, ppo_ns, "coarse", iterations=1, actors=2, cluster=address)
        assert result.iterations == 1
        # the magic takes the name of a Client the notebook holds
        shell.run_cell(canonical.setup, store_history=False).raise_error()
        shell.user_ns.update(iterations=1, mine=client)
        shell.run_cell_magic(
            "fragment", "ppo --policy coarse --actors 2 --cluster mine --run --no-progress --no-plot", canonical.body
        )
        assert shell.user_ns["ppo"].last_run.iterations == 1


def test_the_magic_refuses_a_cluster_name_that_holds_no_client(shell, canonical):
    from IPython.core.error import UsageError

    shell.run_cell(canonical.setup, store_history=False).raise_error()
    with pytest.raises(UsageError, match="--cluster nothere: no variable of that name holds a distributed.Client"):
        shell.run_cell_magic("fragment", "ppo --policy coarse --actors 2 --cluster nothere --run", canonical.body)


def test_unreachable_scheduler_is_a_clear_error(canonical, ppo_ns):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ClusterError, match=f"nothing listens at tcp://127.0.0.1:{port} \\(connection refused\\)"):
        _run(canonical, ppo_ns, "coarse", actors=2, cluster=f"tcp://127.0.0.1:{port}")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on machines without a GPU")
def test_cuda_cluster_without_a_gpu_names_the_fallback(canonical, ppo_ns):
    with pytest.raises(ClusterError, match="cluster='cuda' needs a CUDA GPU.*use cluster='local'"):
        _run(canonical, ppo_ns, "coarse", actors=2, cluster="cuda")


PARAMS = {
    "coarse": {"actors": 2},
    "fine": {"actors": 2},
    "multi_learner": {"learners": 2},
    "async": {"actors": 2},
    "srl": {"actors": 2, "policy_workers": 1, "ring": 2},
    "gpu_only": {"learners": 2},
}


@pytest.mark.parametrize("policy", PARAMS)
def test_error_in_a_fragment_names_the_cell_line_and_replica_and_leaves_no_processes(canonical, ppo_ns, policy, capsys):
    cell = canonical.body.replace("env.step(action)", "env.step(action[:3])")
    ns = ppo_ns(K)
    before = {k: v.clone() for k, v in _weights(ns).items()}
    start = time.monotonic()
    with pytest.raises(ValueError, match=r"has \d+ environments but got 3 actions") as info:
        run(
            capture(cell, ns, name="broken"), policy, progress=False, plot=False, check=False, **PARAMS[policy]
        )  # the worker-side path
    assert time.monotonic() - start < 60
    said = capsys.readouterr().err  # before it started, the run said that nothing checked it
    assert (
        "each of the 2 replicas runs the whole cell" if policy == "data_parallel" else "the safety net is off"
    ) in said
    lineno = next(i for i, line in enumerate(cell.splitlines(), 1) if "action[:3]" in line)
    note = "\n".join(info.value.__notes__)
    assert f'File "<fragment broken>", line {lineno}, in replica' in note and "env.step(action[:3])" in note
    assert "site-packages/distributed" not in "".join(traceback.format_tb(info.value.__traceback__))
    assert (
        all(torch.equal(v, _weights(ns)[k]) for k, v in before.items()) and "stats" not in ns
    )  # the notebook is untouched
    wait_for_no_workers()


@pytest.mark.parametrize("raised", ["KeyboardInterrupt", "SystemExit"])
def test_an_interrupt_the_cells_own_code_raises_on_a_worker_is_its_error_not_a_lost_worker(canonical, ppo_ns, raised):
    """``raise KeyboardInterrupt`` or ``sys.exit()`` in the loop's code on a worker ends the run as the
    cell's error, with its line, at once: not a worker lost (two restarts, then "out of memory")."""
    cell = canonical.body.replace(
        "env.step(action)", f"env.step(action)\n        if it == 1: raise {raised}('the environment gave up')", 1
    )
    ns = ppo_ns(K)
    start = time.monotonic()
    with pytest.raises(
        RuntimeError, match=f"the cell's code raised {raised}: the environment gave up on a worker"
    ) as info:
        run(capture(cell, ns, name="quits"), "coarse", progress=False, plot=False, check=False, actors=2)
    assert time.monotonic() - start < 60
    assert "lost" not in str(info.value) and "memory" not in str(info.value)
    lineno = next(i for i, line in enumerate(cell.splitlines(), 1) if "gave up" in line)
    assert f'File "<fragment quits>", line {lineno}, in replica' in "\n".join(info.value.__notes__)
    assert "stats" not in ns
    wait_for_no_workers()


@pytest.mark.parametrize("policy", ["coarse", "fine"])
def test_a_first_keyboard_interrupt_ends_the_run_after_the_current_iteration(canonical, ppo_ns, interrupt_once, policy):
    ns, result = _run(canonical, ppo_ns, policy, iterations=30, actors=2)
    assert 1 <= result.iterations < 30 and result.stopped.startswith("interrupted"), result.stopped
    plain = ppo_ns(result.iterations)
    exec(canonical.body, plain)
    assert ns["it"] == plain["it"] and sorted(ns["returns"]) == sorted(plain["returns"])
    for key, value in _weights(plain).items():
        torch.testing.assert_close(_weights(ns)[key], value, atol=1e-5, rtol=0)


@pytest.mark.parametrize("policy", PARAMS)
def test_a_second_keyboard_interrupt_aborts_the_run_and_its_workers(canonical, ppo_ns, monkeypatch, policy):
    def interrupt(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("fragnb.ui.live.LiveProgress.update", interrupt)
    # The replicas do not hear the first interrupt's stop request, so a second interrupt surely
    # comes with the next progress event (heard, a short run could end before one arrives).
    monkeypatch.setattr("fragnb.runtime.attempt.Attempt.request_stop", lambda self: None)
    ns = ppo_ns(20)
    with pytest.raises(KeyboardInterrupt):
        run(capture(canonical.body, ns, name="ppo"), policy, progress=False, plot=False, **PARAMS[policy])
    assert "stats" not in ns
    wait_for_no_workers()


def test_cluster_is_reused_across_runs_and_closed_by_shutdown(canonical, ppo_ns):
    _run(canonical, ppo_ns, "coarse", iterations=1, actors=2)
    workers = {p.pid for p in worker_processes()}
    _run(canonical, ppo_ns, "fine", iterations=1, actors=2)
    assert workers and workers <= {p.pid for p in worker_processes()}  # the same worker processes served both runs
    clusters.shutdown()
    wait_for_no_workers()


def test_torch_tensors_serialise_through_dask(tmp_path):
    from distributed.protocol import deserialize, serialize

    clusters.register_torch_serializer()
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    header, frames = serialize(t, serializers=("dask",))
    assert header["serializer"] == "dask" and header["sub-header"]["device"] == "cpu"
    assert torch.equal(deserialize(header, frames), t)


@pytest.mark.gpu
def test_cuda_tensors_serialise_and_coarse_learner_runs_on_the_gpu(canonical, ppo_ns):
    from distributed.protocol import deserialize, serialize

    clusters.register_torch_serializer()
    t = torch.arange(6, device="cuda")
    header, frames = serialize(t, serializers=("dask",))
    assert deserialize(header, frames).device.type == "cuda"
    single, _ = _run(canonical, ppo_ns, "single")
    ns, _ = _run(canonical, ppo_ns, "coarse", actors=2, device="cuda")
    for key, value in _weights(single).items():
        torch.testing.assert_close(_weights(ns)[key].cpu(), value, atol=1e-4, rtol=0)


@pytest.mark.slow
def test_multi_learner_with_two_learners_solves_cartpole(canonical, ppo_ns):
    ns, result = _run(canonical, ppo_ns, "multi_learner", iterations=None, learners=2)
    solved = result.solved_at()
    assert solved is not None and solved[0] <= 150_000, f"final mean return {result.mean_return():.1f}"


def test_fragment_magic_runs_a_distributed_policy(shell, canonical, capsys):
    shell.run_cell(canonical.setup, store_history=False).raise_error()
    shell.user_ns["iterations"] = 1
    shell.run_cell_magic("fragment", "ppo --policy coarse --actors 2 --run --no-progress --no-plot", canonical.body)
    assert "ppo under 'coarse': 1 iterations" in capsys.readouterr().out
    assert len(shell.user_ns["returns"]) > 0 and shell.user_ns["ppo"].last_run.policy == "coarse"


def test_fragment_magic_rejects_bad_parameters_before_running(shell, canonical):
    from IPython.core.error import UsageError

    shell.run_cell(canonical.setup, store_history=False).raise_error()
    with pytest.raises(UsageError, match="which 3 replicas"):
        shell.run_cell_magic("fragment", "ppo --policy coarse --actors 3 --run", canonical.body)
    assert "ppo" not in shell.user_ns and "returns" not in shell.user_ns


def test_a_users_own_policy_runs_on_dask_like_a_builtin(canonical, ppo_ns):
    from fragnb.policies import POLICIES, DistributionPolicy, register

    register(
        DistributionPolicy(
            "actors_with_buffer",
            "a user's own",
            "four actor workers with a quarter of the environments each; learner x 1",
            groups={"env": "actors", "actor": "actors", "buffer": "actors", "learner": "learner", "driver": "learner"},
            replicas={"actors": "actors", "learner": 1},
        )
    )
    try:
        single, _ = _run(canonical, ppo_ns, "single", iterations=1)
        ns, result = _run(canonical, ppo_ns, "actors_with_buffer", iterations=1, actors=4)
        assert result.policy == "actors_with_buffer"
        for key, value in _weights(single).items():
            torch.testing.assert_close(_weights(ns)[key], value, atol=1e-5, rtol=0)
    finally:
        POLICIES.pop("actors_with_buffer")


def _victim(policy: str) -> psutil.Process:
    """The worker process to kill: the newest; under async the learner's (async goes on without an actor)."""
    if policy != "async":
        return max(worker_processes(), key=lambda p: p.pid)
    return psutil.Process(_pid_of_worker_holding("learner"))


def _pid_of_worker_holding(group: str) -> int:
    import os

    from fragnb.plan.script import ReplicaId
    from fragnb.runtime.worker import registry

    held = clusters._EMBEDDED["local"][1].run(
        lambda: (os.getpid(), sorted({ReplicaId.parse(name).group for name in registry.held()})), on_error="ignore"
    )
    return next(got[0] for got in held.values() if isinstance(got, tuple) and group in got[1])


@pytest.mark.parametrize("policy", PARAMS)
def test_a_worker_that_dies_mid_run_is_an_error_naming_its_replica_within_10_s(canonical, ppo_ns, monkeypatch, policy):
    killed = []

    def kill_a_worker(self, *args, **kwargs):
        if not killed:
            victim = _victim(policy)
            victim.kill()  # as the kernel's OOM killer would
            killed.append(time.monotonic())

    monkeypatch.setattr(live.LiveProgress, "update", kill_a_worker)
    clusters.shutdown()  # a fresh cluster has exactly the workers the run uses
    ns = ppo_ns(200)
    with pytest.raises(
        ClusterError,
        match=r"lost the worker of replicas? \w+\[\d\](, \w+\[\d\])* on tls://127.0.0.1:\d+ during the run",
    ) as info:
        run(capture(canonical.body, ns, name="ppo"), policy, progress=False, plot=False, restarts=0, **PARAMS[policy])
    assert "the state of its replicas is gone with it" in str(info.value)  # what happened, then what the run does
    assert info.value.__notes__[0].startswith("The run stops: ")
    assert killed and time.monotonic() - killed[0] < 10
    assert "stats" not in ns
    wait_for_no_workers()


@pytest.mark.parametrize("delay", [0.0, 0.02])
def test_async_goes_on_without_an_actor_whose_worker_died_losing_only_its_trajectory_in_flight(
    canonical, ppo_ns, monkeypatch, delay
):
    import threading

    clusters.shutdown()
    killed, shown = [], []
    update = live.LiveProgress.update

    def kill_an_actor(self, *args, **kwargs):
        shown.append(1)
        if len(shown) == 3:
            victim = psutil.Process(_pid_of_worker_holding("actors"))
            threading.Timer(delay, lambda: (victim.kill(), killed.append(victim.pid))).start()
        update(self, *args, **kwargs)

    monkeypatch.setattr(live.LiveProgress, "update", kill_an_actor)
    ns, result = _run(canonical, ppo_ns, "async", iterations=12, actors=2)
    assert killed and result.iterations == 12 and result.lost_trajectories == 1, str(result)
    assert len(result.lost_workers) == 1 and re.match(
        r"lost the worker of replica actors\[\d\] .*went on with the other actors", result.lost_workers[0]
    )
    assert "went on" in str(result) and "stats" in ns and len(ns["returns"]) > 0
    assert (
        result.env_steps >= 12 * 32 * 32 / 2
    )  # the learner's 12 iterations took 2 trajectories each, 16 environments each


def test_a_stop_condition_ends_every_policy_after_the_same_iteration_as_plain_python(canonical, ppo_ns):
    def solved_enough(result):
        return result.mean_return() >= 30  # reached during iteration 4 of notebook 01's loop

    single, first = _run(canonical, ppo_ns, "single", iterations=30, until=solved_enough)
    assert 1 < first.iterations < 30 and first.stopped
    for policy in ("coarse", "fine"):
        ns, result = _run(canonical, ppo_ns, policy, iterations=30, actors=2, until=solved_enough)
        assert result.iterations == first.iterations and result.stopped == first.stopped, policy
        assert ns["it"] == single["it"] and ns["returns"] == single["returns"] and result.returns == first.returns, (
            policy
        )
        for key, value in _weights(single).items():
            torch.testing.assert_close(_weights(ns)[key], value, atol=1e-5, rtol=0, msg=f"{policy}: {key}")


def test_an_interrupt_sent_to_the_kernels_process_group_leaves_the_workers_alive(canonical, ppo_ns):
    import os
    import signal

    _run(canonical, ppo_ns, "coarse", iterations=1, actors=2)
    workers = worker_processes()
    for p in workers:
        os.kill(p.pid, signal.SIGINT)  # what JupyterLab's interrupt does to every process of the kernel's group
    time.sleep(1.0)
    assert all(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in workers)
    start = time.monotonic()
    _, result = _run(canonical, ppo_ns, "coarse", iterations=1, actors=2)
    assert result.iterations == 1 and time.monotonic() - start < 60


@pytest.mark.parametrize("policy, delay", [("coarse", 0.01), ("coarse", 0.03), ("fine", 0.02), ("async", 0.02)])
def test_a_worker_killed_at_any_moment_is_named_within_10_s(canonical, ppo_ns, monkeypatch, policy, delay):
    """Killed a little after an iteration ends: mid-rollout, mid-update or mid-broadcast, by chance. One policy
    per walk (in step, split in step, free); the test above kills a worker of every policy at a fixed moment."""
    import threading

    killed = []

    def kill_later(self, *args, **kwargs):
        if not killed and not getattr(live, "_timer", None):
            victim = _victim(policy)

            def kill():
                victim.kill()
                killed.append(time.monotonic())

            live._timer = threading.Timer(delay, kill)
            live._timer.start()

    monkeypatch.setattr(live.LiveProgress, "update", kill_later)
    monkeypatch.setattr(live, "_timer", None, raising=False)
    clusters.shutdown()
    ns = ppo_ns(400)
    with pytest.raises(ClusterError, match=r"lost the worker of replicas? \w+\[\d\]"):
        run(capture(canonical.body, ns, name="ppo"), policy, progress=False, plot=False, restarts=0, **PARAMS[policy])
    assert killed and time.monotonic() - killed[0] < 10
    wait_for_no_workers()


def test_timeline_shows_the_actors_waiting_while_the_learner_updates(canonical, ppo_ns):
    _, result = _run(canonical, ppo_ns, "coarse", iterations=3, actors=2)
    rows = {r for r, *_ in result.intervals}
    assert rows == {"actors[0]", "actors[1]", "learner[0]"}
    updates = [(a, b) for r, label, kind, a, b in result.intervals if label == "learner" and kind == "busy"]
    waits = [(a, b) for r, label, kind, a, b in result.intervals if r == "actors[0]" and kind == "wait"]
    assert len(updates) >= 3 and all(0 <= a <= b <= result.seconds + 1e-6 for a, b in updates)

    # Each update but the last (after which the actors are done) happens while actor 0 waits for the new
    # weights (it may still be sending its progress as the update starts).
    def waiting(a, b):
        return sum(max(0.0, min(b, wb) - max(a, wa)) for wa, wb in waits) / (b - a)

    assert all(waiting(a, b) > 0.8 for a, b in updates[:-1]), (updates, waits)
    fig = result.timeline()
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["actors[0]", "actors[1]", "learner[0]"]
    assert result.messages > 0 and result.transfer_bytes > 0
    # the same timeline as a Chrome trace (Perfetto): a process per group, a thread per replica
    trace = json.loads(json.dumps(result.trace(None)))
    named = {(e["name"], e["args"]["name"]) for e in trace["traceEvents"] if e["ph"] == "M"}
    assert named == {
        ("process_name", "actors"),
        ("process_name", "learner"),
        ("thread_name", "actors[0]"),
        ("thread_name", "actors[1]"),
        ("thread_name", "learner[0]"),
    }
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(slices) == len(result.intervals) and {e["cat"] for e in slices} == {"busy", "wait"}
    learner = [
        t for e in slices if e["name"] == "learner" and e["cat"] == "busy" for t in (e["ts"], e["ts"] + e["dur"])
    ]
    assert learner == pytest.approx([t * 1e6 for a, b in updates for t in (a, b)], abs=1.0)  # microseconds
    assert result.idle() == pytest.approx({g: 1 - share for g, share in result.busy().items()})
    assert 0.3 < result.idle()["actors"] < 1.0  # the actors wait for every update


def test_prints_in_the_cell_reach_the_notebook_from_the_workers(canonical, ppo_ns, capsys):
    ns = ppo_ns(2)
    run(
        capture(canonical.body + '\n    print("finished iteration", it)', ns, name="ppo"),
        "coarse",
        actors=2,
        progress=False,
        plot=False,
    )
    deadline, out = time.monotonic() + 10, ""
    while "finished iteration 1" not in out and time.monotonic() < deadline:
        time.sleep(0.2)
        out += capsys.readouterr().out
    assert "finished iteration 0" in out and "finished iteration 1" in out


def test_the_embedded_cluster_serves_the_dask_dashboard_on_loopback_and_a_run_prints_its_link_unless_asked_not_to(
    canonical, ppo_ns, capsys
):
    import re
    import urllib.error
    import urllib.request

    _run(canonical, ppo_ns, "coarse", iterations=1, actors=2)  # progress=False: no link
    assert "Dask dashboard" not in capsys.readouterr().out
    run(capture(canonical.body, ppo_ns(1), name="ppo"), "coarse", actors=2, progress=True, plot=False)
    link = re.search(
        r"Dask dashboard \(workers, task stream\): (http://127\.0\.0\.1:(\d+)/status)", capsys.readouterr().out
    )
    assert link and urllib.request.urlopen(link.group(1), timeout=10).status == 200
    serving = [
        c
        for c in psutil.Process().net_connections("tcp")
        if c.status == psutil.CONN_LISTEN and c.laddr.port == int(link.group(2))
    ]
    assert serving and all(c.laddr.ip == "127.0.0.1" for c in serving)

    # asked for none: the cluster is replaced by one whose scheduler serves only Dask's health checks, on loopback
    run(capture(canonical.body, ppo_ns(1), name="ppo"), "coarse", actors=2, progress=True, plot=False, dashboard=False)
    assert "Dask dashboard" not in capsys.readouterr().out
    port = clusters._EMBEDDED["local"][1].scheduler_info()["services"]["dashboard"]
    with pytest.raises(urllib.error.HTTPError, match="404"):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=10)
    listening = [c.laddr for c in psutil.Process().net_connections("tcp") if c.status == psutil.CONN_LISTEN]
    assert (
        listening and all(addr.ip == "127.0.0.1" for addr in listening) and all(addr.port != 8787 for addr in listening)
    )


@pytest.mark.parametrize("policy", PARAMS)
def test_every_socket_a_run_listens_on_is_on_loopback(canonical, ppo_ns, monkeypatch, policy):
    from fragnb.runtime.attempt import Attempt as _Run

    listening = set()
    poll = _Run.poll

    def look(
        self, *args, **kwargs
    ):  # while the run is watched: the channels, the collectives' store, gloo, the dashboard
        for p in [psutil.Process(), *worker_processes()]:
            try:
                listening.update(
                    (p.pid, c.laddr.ip, c.laddr.port)
                    for c in p.net_connections("tcp")
                    if c.status == psutil.CONN_LISTEN
                )
            except psutil.Error:
                pass
        return poll(self, *args, **kwargs)

    monkeypatch.setattr(_Run, "poll", look)
    _run(canonical, ppo_ns, policy, iterations=2, **PARAMS[policy])
    assert listening and all(ip in ("127.0.0.1", "::1") for _, ip, _ in listening), sorted(listening)


def test_the_embedded_cluster_refuses_clients_without_its_certificates(canonical, ppo_ns):
    _run(canonical, ppo_ns, "coarse", iterations=1, actors=2)
    address = clusters._EMBEDDED["local"][1].scheduler.address
    assert address.startswith("tls://127.0.0.1:")
    # another user of the machine: in plain TCP, and over TLS with a certificate of their own making
    attempts = {
        "tcp": f"Client({address.replace('tls://', 'tcp://')!r}, timeout='5s')",
        "own certificate": f"Client({address!r}, timeout='5s', security=Security.temporary())",
    }
    for what, connect in attempts.items():
        code = f"from distributed import Client\\nfrom distributed.security import Security\\n{connect}\\nprint('CONNECTED')"
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert done.returncode != 0 and "CONNECTED" not in done.stdout, what


@pytest.mark.parametrize(
    "check, says",
    [
        (True, "cannot be copied"),  # the safety net copies the objects first
        (False, "cannot be sent to the workers of group 'actors'"),  # without it, packing them for the workers
    ],
)
def test_a_component_that_cannot_travel_is_named_before_any_worker_starts(canonical, ppo_ns, check, says):
    import threading

    from fragnb import FragmentError

    clusters.shutdown()
    ns = ppo_ns(1)
    ns["buffer"].lock = threading.Lock()  # a lock cannot be pickled
    with pytest.raises(
        FragmentError,
        match=rf"`buffer` \(RolloutBuffer\) {says}: `buffer.lock` \(a lock: TypeError: cannot pickle '_thread.lock' object\)",
    ) as info:
        run(capture(canonical.body, ns, name="ppo"), "coarse", actors=2, progress=False, plot=False, check=check)
    assert "buffer.add(" in str(info.value) and info.value.lineno is not None
    assert not worker_processes() and "local" not in clusters._EMBEDDED


@pytest.mark.parametrize("policy", ["coarse", "fine", "multi_learner"])
def test_a_run_that_loses_a_worker_resumes_from_its_checkpoint_with_the_uninterrupted_weights(
    canonical, ppo_ns, monkeypatch, policy
):
    reference = {"multi_learner": ("multi_learner", PARAMS["multi_learner"])}.get(policy, ("single", {}))
    uninterrupted, _ = _run(canonical, ppo_ns, reference[0], iterations=7, **reference[1])
    clusters.shutdown()  # a fresh cluster has exactly the workers the run uses: the one killed holds a replica
    # By the time the notebook shows iteration 5, every replica's checkpoint after iteration 4 is in the notebook.
    killed = kill_a_worker_when_shown(monkeypatch, 5)
    ns, result = _run(canonical, ppo_ns, policy, iterations=7, checkpoint_every=2, **PARAMS[policy])
    assert killed and len(result.lost_workers) == 1 and "lost the worker of replica" in result.lost_workers[0]
    assert "resumed from the checkpoint after iteration 4" in str(result), str(result)
    assert result.iterations == 7 and result.env_steps == 7 * 32 * 32 and result.checkpoint_every == 2
    assert result.checkpoint_bytes > 0 and result.checkpoint_seconds > 0
    for key, value in _weights(uninterrupted).items():
        torch.testing.assert_close(_weights(ns)[key], value, atol=1e-5, rtol=0, msg=f"{policy}: {key}")
    assert ns["returns"] == uninterrupted["returns"] and ns["it"] == uninterrupted["it"]


def test_a_run_on_dask_worker_processes_resumes_on_the_worker_its_nanny_starts_again(canonical, ppo_ns, monkeypatch):
    uninterrupted, _ = _run(canonical, ppo_ns, "single", iterations=7)
    # The newest worker process must be one of the nannies': no embedded cluster of an earlier test (or
    # one a `%load_ext` started in the background) may fork one during this test (CI killed such a one).
    clusters.shutdown()
    with dask_processes() as address:
        killed = kill_a_worker_when_shown(monkeypatch, 5)  # the newest process: one of the nannies' workers
        ns, result = _run(canonical, ppo_ns, "coarse", iterations=7, checkpoint_every=2, actors=2, cluster=address)
        assert killed and "resumed from the checkpoint after iteration 4" in str(result), str(result)
        assert len(result.lost_workers) == 1, result.lost_workers  # the restart must not crash a survivor (drop_run)
        for key, value in _weights(uninterrupted).items():
            torch.testing.assert_close(_weights(ns)[key], value, atol=1e-5, rtol=0)
        assert ns["returns"] == uninterrupted["returns"]


def test_a_run_that_cannot_resume_leaves_the_notebook_at_its_last_checkpoint(canonical, ppo_ns, monkeypatch):
    at_4, _ = _run(canonical, ppo_ns, "single", iterations=4)
    clusters.shutdown()
    killed = kill_a_worker_when_shown(monkeypatch, 5)
    ns = ppo_ns(7)
    with pytest.raises(ClusterError, match="lost the worker") as info:
        run(
            capture(canonical.body, ns, name="ppo"),
            "coarse",
            progress=False,
            plot=False,
            restarts=0,
            checkpoint_every=2,
            actors=2,
        )
    assert killed and "the notebook now holds the state after iteration 4" in "\n".join(info.value.__notes__).lower()
    assert ns["it"] == at_4["it"] == 3 and ns["returns"] == at_4["returns"]
    for key, value in _weights(at_4).items():
        torch.testing.assert_close(_weights(ns)[key], value, atol=1e-5, rtol=0)
    wait_for_no_workers()


PRINT_ONCE = '''
import torch

import fragnb
from fragnb.algos.ppo import ActorCritic, PPOActor, PPOConfig, PPOLearner, RolloutBuffer
from fragnb.envs import CartPole

CELL = """
obs = env.reset()
for it in range(2):
    for step in range(config.num_steps):
        action, logprob, value = actor.act(obs)
        next_obs, reward, terminated, truncated, info = env.step(action)
        buffer.add(obs, action, logprob, value, reward, terminated | truncated)
        obs = next_obs
    stats = learner.update(buffer.batch(actor.value(obs)))
    print("PRINTED iteration", it)
"""

if __name__ == "__main__":
    torch.manual_seed(0)
    config = PPOConfig(num_envs=4, num_steps=8, hidden=16)
    policy = ActorCritic(4, 2, hidden=16)
    ns = {"torch": torch, "config": config, "env": CartPole(num_envs=4, seed=0), "actor": PPOActor(policy, 4, seed=0),
          "buffer": RolloutBuffer(4, 8, (4,), config.gamma, config.gae_lambda), "learner": PPOLearner(policy, config, seed=0)}
    fragnb.run(fragnb.capture(CELL, ns), "{policy}", actors=2, progress=False, plot=False, dashboard=False)
    fragnb.shutdown()
'''


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["coarse", "fine"])
def test_a_print_in_a_distributed_cell_appears_once_in_a_terminal(policy, tmp_path):
    # The workers of fragnb's own cluster write to the terminal the script runs in: a print must come
    # from the client alone, not from the worker as well.
    script = tmp_path / "print_once.py"
    script.write_text(PRINT_ONCE.replace("{policy}", policy))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in (done.stdout + done.stderr).splitlines() if "PRINTED" in line]
    assert lines == ["PRINTED iteration 0", "PRINTED iteration 1"], lines
