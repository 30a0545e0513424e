"""fragnb.runtime.net.shm: the all-reduce of replicas on one machine through shared memory, against gloo's, bit for
bit; a lost peer ends the wait with a named error; nothing is left in /dev/shm."""

import multiprocessing
import os
import pickle
import socket
import time
import uuid

import pytest
import torch

from fragnb.runtime.net import collectives, shm

pytestmark = pytest.mark.skipif(not shm.available(), reason="no /dev/shm")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tensors(rank: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(rank)
    return [
        torch.randn(3, generator=g, dtype=torch.float64),
        torch.randn(10_000, generator=g),  # a small network's gradients
        torch.randn(7, 5, generator=g),
    ]


def _both(rank: int, world: int, run: str, address: str, out) -> None:
    """In a process of its own: each tensor all-reduced through gloo and through shared memory, and broadcast."""
    torch.set_num_threads(1)
    collectives.join(run, rank, world, address, "gloo", shared=run)
    try:
        group = collectives.group_of(run)
        assert isinstance(group, shm.SharedMemory)
        results = []
        for t in _tensors(rank):
            a, b = t.clone(), t.clone()
            collectives.Gloo().all_reduce(a)
            group.all_reduce(b)
            results.append((a, b))
        c = torch.full((4,), float(rank))
        group.broadcast(c, 1)
        # Pickled here, by value: a tensor put on the queue as it is goes by a file descriptor that the parent
        # fetches from this process, which may have exited by then (a fresh-clone CI failed so).
        out.put(pickle.dumps((rank, results, c)))
    finally:
        collectives.leave(run)


def test_a_shared_memory_all_reduce_is_gloos_to_the_bit_and_leaves_nothing():
    ctx = multiprocessing.get_context("fork")
    run, out = f"test-{uuid.uuid4().hex[:8]}", ctx.Queue()
    address = f"tcp://127.0.0.1:{_port()}"
    procs = [ctx.Process(target=_both, args=(r, 2, run, address, out)) for r in range(2)]
    for p in procs:
        p.start()
    got = dict((rank, (results, c)) for rank, results, c in (pickle.loads(out.get(timeout=120)) for _ in procs))
    for p in procs:
        p.join(30)
    for rank in (0, 1):
        results, broadcast = got[rank]
        for (through_gloo, through_shm), t0, t1 in zip(results, _tensors(0), _tensors(1)):
            assert torch.equal(through_gloo, through_shm)  # the same sum, to the last bit
            assert torch.equal(through_shm, t0 + t1)
        assert torch.equal(broadcast, torch.full((4,), 1.0))  # replica 1's
    assert not shm.path_of(run).exists()  # replica 0 removed it on leaving


def _waits(run: str) -> None:
    group = shm.SharedMemory(run, 0, 2, timeout_s=10)
    try:
        group.all_reduce(torch.ones(3))
    except RuntimeError as e:
        os._exit(0 if "replica 1's process" in str(e) and "is gone" in str(e) else 2)
    os._exit(1)


def _dies(run: str) -> None:
    shm.SharedMemory(run, 1, 2, timeout_s=10)
    os._exit(0)  # joined, then gone before the all-reduce


def test_a_lost_peer_ends_the_wait_with_a_named_error_and_the_file_is_removed_after():
    ctx = multiprocessing.get_context("fork")
    run = f"test-{uuid.uuid4().hex[:8]}"
    waiting = ctx.Process(target=_waits, args=(run,))
    waiting.start()
    dying = ctx.Process(target=_dies, args=(run,))
    dying.start()
    dying.join(30)
    waiting.join(30)
    if waiting.is_alive():  # a hang: what this test guards against
        waiting.kill()
    assert waiting.exitcode == 0, "the wait ended with the named error"
    assert shm.remove(run) and not shm.path_of(run).exists()  # what a failed run's kernel removes (Attempt.abort)


def test_an_aborted_run_ends_the_wait():
    run = f"test-{uuid.uuid4().hex[:8]}"
    group = shm.SharedMemory(run, 0, 2, timeout_s=10)
    try:
        start = time.perf_counter()
        shm.abort(run)
        with pytest.raises(RuntimeError, match="the run was aborted"):
            group.all_reduce(torch.ones(3))
        assert time.perf_counter() - start < 5
    finally:
        group.close()
    assert not shm.path_of(run).exists()


def test_a_file_every_replica_of_which_is_dead_is_swept_and_a_live_ones_kept(tmp_path, monkeypatch):
    """A run killed with its notebook (kill -9 of the kernel: its workers end with it) removes nothing; the next
    group made on the machine removes such a file, by the process ids its replicas stamped in it."""
    import subprocess

    monkeypatch.setattr(shm, "_DIR", tmp_path)
    gone = subprocess.Popen(["true"])
    gone.wait()

    def made(name: str, pids: list[int]) -> None:
        world = len(pids)
        with open(tmp_path / f"fragnb-{name}", "wb") as f:
            f.truncate(shm._LINE * (world + 1) + 2 * world * shm.CAPACITY)
            for rank, pid in enumerate(pids):
                f.seek((rank + 1) * shm._LINE + 8)
                f.write(pid.to_bytes(8, "little"))

    made("killed-replicas", [gone.pid, gone.pid])
    made("running-replicas", [gone.pid, os.getpid()])  # one replica still alive: its run goes on
    made("new-replicas", [0, 0])  # made, and no replica has stamped it yet
    assert shm.sweep() == ["fragnb-killed-replicas"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fragnb-new-replicas", "fragnb-running-replicas"]
    group = shm.SharedMemory("next", 0, 1)  # a new group sweeps first
    group.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fragnb-new-replicas", "fragnb-running-replicas"]


def test_replicas_on_one_machine_all_reduce_through_it_and_no_run_leaves_its_file(canonical, ppo_ns, monkeypatch):
    from fragnb import capture, run
    from fragnb.ui import live

    seen, update = [], live.LiveProgress.update

    def look(self, *args, **kwargs):  # in the notebook, while the replicas run
        seen.append(sorted(p.name for p in shm._DIR.glob("fragnb-*")))
        update(self, *args, **kwargs)

    monkeypatch.setattr(live.LiveProgress, "update", look)
    run(capture(canonical.body, ppo_ns(3), name="ppo"), "multi_learner", learners=2, progress=False, plot=False)
    assert seen and all(len(names) == 1 for names in seen), seen  # the run's one group of replicas
    assert not list(shm._DIR.glob("fragnb-*"))
    # a run that fails on a replica leaves none either (its workers' files are removed from here)
    broken = canonical.body.replace(
        "    stats = learner.update(batch)", "    stats = learner.update(batch)\n    assert it < 1, 'planted'"
    )
    assert broken != canonical.body
    with pytest.raises(AssertionError, match="planted"):
        run(capture(broken, ppo_ns(3), name="broken"), "multi_learner", learners=2, progress=False, plot=False)
    assert not list(shm._DIR.glob("fragnb-*"))


@pytest.mark.parametrize("optimisers", [1, 2])
def test_every_replica_applies_the_mean_of_the_replicas_gradients_to_the_bit_in_one_meeting_or_two(optimisers):
    """data_parallel's rounds (collectives._round): with one optimiser its gradients ride in the header's
    all-reduce, with two they follow it; either way each step applies exactly (g0 + g1) / 2, and a replica
    whose iteration stepped fewer times takes part in the other's last steps (settle) and ends equal."""
    import threading

    from fragnb.runtime.net import collectives

    meeting, out, errors = collectives.Rendezvous(2), {}, []
    torch.manual_seed(0)
    start = [torch.nn.Linear(3, 2).state_dict() for _ in range(optimisers)]  # equal networks, as data_parallel starts

    def networks() -> list[torch.nn.Linear]:
        nets = [torch.nn.Linear(3, 2) for _ in range(optimisers)]
        for net, state in zip(nets, start):
            net.load_state_dict(state)
        return nets

    def replica(rank: int) -> None:
        try:
            nets = networks()
            opts = [torch.optim.SGD(net.parameters(), lr=0.5) for net in nets]
            member = collectives.attach(collectives.InProcess(rank, meeting), [], opts)
            grads = []
            data = torch.Generator().manual_seed(100 + rank)  # each replica its own data (threads: its own generator)
            for _ in range(3 if rank == 0 else 2):  # replica 1's episode was shorter: one step fewer
                for net, opt in zip(nets, opts):
                    opt.zero_grad()
                    net(torch.randn(4, 3, generator=data)).pow(2).sum().backward()
                    grads.append([p.grad.clone() for p in net.parameters()])
                    opt.step()
            collectives.settle(member)
            out[rank] = (grads, [p.detach().clone() for net in nets for p in net.parameters()])
        except BaseException as e:  # noqa: BLE001  (reported below)
            errors.append(e)
            meeting.abort()

    threads = [threading.Thread(target=replica, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    (g0, params0), (g1, params1) = out[0], out[1]
    assert all(torch.equal(a, b) for a, b in zip(params0, params1))  # equal networks, shadowed step included
    nets = networks()  # by hand: plain SGD on the mean, and replica 0's lone last steps on its own gradients
    opts = [torch.optim.SGD(net.parameters(), lr=0.5) for net in nets]
    for k, mine in enumerate(g0):
        theirs = g1[k] if k < len(g1) else mine
        for p, a, b in zip(nets[k % optimisers].parameters(), mine, theirs):
            p.grad = (a + b) / 2 if k < len(g1) else a
        opts[k % optimisers].step()
    assert all(torch.equal(a, b.detach()) for a, b in zip(params0, [p for net in nets for p in net.parameters()]))
