"""Replicas sharing a worker process as threads: where a group has more replicas than the cluster has
worker threads, and what that must not change (the numbers each replica draws, the weights)."""

import threading

import pytest
import torch

import fragnb
from corpus.compare import compare_namespaces
from corpus.field import FIELD_BY_NAME
from fragnb.errors import ClusterError
from fragnb.runtime import plane
from fragnb.runtime import slots as placing
from fragnb.runtime.check import smaller
from fragnb.runtime.worker.generators import Own, generators, seeded


def _placement(canonical, ppo_ns, policy, **params):
    return fragnb.capture(canonical.body, ppo_ns(1), name="ppo").place(policy, **params)


def _groups(placement):
    return {g: n for g, (n, _) in placement.groups.items()}


def _tasks(placement, capacity):
    return placing.tasks(_groups(placement), placement.colocated, placement.policy.collectives, capacity)


def _slots(placement, workers):
    threads = {w: info["nthreads"] for w, info in workers.items()}
    return placing.slots(_groups(placement), placement.colocated, placement.policy.collectives, threads)


# -- which replicas share a task: pure decisions ----------------------------------------------------
def test_replicas_have_a_task_each_while_the_cluster_has_threads_for_them(canonical, ppo_ns):
    p = _placement(canonical, ppo_ns, "coarse", actors=4)
    assert (
        _tasks(p, 5) == _tasks(p, None) == [["actors[0]"], ["actors[1]"], ["actors[2]"], ["actors[3]"], ["learner[0]"]]
    )


def test_a_group_with_more_replicas_than_threads_shares_them_evenly(canonical, ppo_ns):
    p = _placement(canonical, ppo_ns, "coarse", actors=16)
    tasks = _tasks(p, 8)  # the learner keeps one; 16 actors in at most 7, as evenly as they divide
    assert tasks[-1] == ["learner[0]"] and len(tasks) <= 8
    sizes = [len(t) for t in tasks[:-1]]
    assert sum(sizes) == 16 and max(sizes) - min(sizes) <= 1
    assert tasks[0][:2] == ["actors[0]", f"actors[{len(tasks) - 1}]"]  # replica i with task i mod tasks
    p = _placement(canonical, ppo_ns, "fine", actors=32)
    assert len(_tasks(p, 3)) == 3 and _tasks(p, 3)[-1] == ["learner[0]"]


def test_a_process_group_is_never_folded_and_srl_keeps_its_ring(canonical, ppo_ns):
    p = _placement(canonical, ppo_ns, "multi_learner", learners=4)
    assert len(_tasks(p, 2)) == 4  # one process per rank: slots refuses it on 2 threads
    with pytest.raises(ClusterError, match="4 replica programs each need a worker thread"):
        _slots(p, {"tcp://a:1": {"nthreads": 1}, "tcp://b:1": {"nthreads": 1}})
    p = _placement(canonical, ppo_ns, "srl", actors=2, ring=2)
    assert _tasks(p, 3) == _tasks(p, None)


def test_slots_say_which_replicas_share_a_worker(canonical, ppo_ns):
    p = _placement(canonical, ppo_ns, "coarse", actors=4)
    tasks, slots = _slots(p, {"tcp://a:1": {"nthreads": 1}, "tcp://b:1": {"nthreads": 2}})
    assert len(tasks) == 3 and set(slots) == {"actors[0]", "actors[1]", "actors[2]", "actors[3]", "learner[0]"}
    assert sorted(slots.values()).count("tcp://b:1") == 3  # two tasks on its two threads


def test_every_statement_is_in_one_segment_after_segments_merge(canonical, ppo_ns):
    """Which segments draw from a global generator is read from their statements."""
    from fragnb.plan.program import plan

    for policy, params in [("coarse", {"actors": 2}), ("fine", {"actors": 2}), ("srl", {"actors": 2})]:
        p = _placement(canonical, ppo_ns, policy, **params)
        held = [i for seg in plan(p).segments for i in seg.statements]
        assert sorted(held) == [s.index for s in p.graph.statements], policy


# -- the safety net checks a small count of the same shape ------------------------------------------
def test_the_safety_net_checks_at_most_four_replicas_of_a_group(canonical, ppo_ns):
    small, said = smaller(_placement(canonical, ppo_ns, "coarse", actors=16))
    assert small.groups["actors"][0] == 4 and said == "'actors' with 4 replicas in place of 16"
    assert smaller(_placement(canonical, ppo_ns, "coarse", actors=8))[0].groups["actors"][0] == 4
    p = _placement(canonical, ppo_ns, "fine", actors=4)
    assert smaller(p) == (p, "")


# -- each replica draws its own numbers, whoever shares its process -----------------------------------
def test_replicas_in_threads_draw_what_each_would_draw_alone():
    def alone(name):
        with generators():
            torch.set_rng_state(seeded(7, name)["torch"])
            return [torch.rand(3) for _ in range(50)]

    expected = {name: alone(name) for name in ("a[0]", "a[1]", "a[2]")}
    drawn: dict[str, list] = {}

    def replica(name):
        own = Own(seeded(7, name))
        drawn[name] = []
        for _ in range(50):
            with own.drawing():
                drawn[name].append(torch.rand(3))

    threads = [threading.Thread(target=replica, args=(n,)) for n in expected]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(torch.equal(a, b) for n in expected for a, b in zip(drawn[n], expected[n]))


# -- on a cluster with fewer workers than replicas --------------------------------------------------
def _weights(ns):
    return {
        f"{name}.{k}": v.clone()
        for name, net in ns.items()
        if isinstance(net, torch.nn.Module)
        for k, v in net.state_dict().items()
    }


def test_a_statistical_loop_draws_the_same_numbers_with_replicas_sharing_processes(monkeypatch):
    """REINFORCE as the field writes it samples and drops out from torch's global generator in each
    actor: with its 4 actors in 2 processes it must train to the weights of 4 processes."""
    loop = FIELD_BY_NAME["vector_reinforce"]

    def once():
        ns = loop.namespace()
        result = fragnb.run(
            fragnb.capture(loop.cell, ns, name=loop.name), "coarse", actors=4, progress=False, plot=False
        )
        return result, _weights(ns)

    fragnb.shutdown()
    monkeypatch.setattr(plane, "local_workers", lambda: 3)  # the learner's, and two for the 4 actors
    shared, folded = once()
    assert shared.guarantee == "statistical" and shared.processes == 3
    monkeypatch.undo()
    alone, separate = once()
    assert alone.env_steps == shared.env_steps and alone.processes == 5
    assert folded.keys() == separate.keys() and all(torch.equal(folded[k], separate[k]) for k in folded)


def test_an_exact_loop_with_replicas_sharing_processes_leaves_plain_pythons_namespace(monkeypatch, canonical, ppo_ns):
    plain = ppo_ns(2)
    exec(compile(canonical.body, "<cell>", "exec"), plain)
    fragnb.shutdown()
    monkeypatch.setattr(plane, "local_workers", lambda: 2)
    for policy in ("coarse", "fine"):
        ns = ppo_ns(2)
        result = fragnb.run(
            fragnb.capture(canonical.body, ns, name="ppo"), policy, actors=4, progress=False, plot=False
        )
        assert result.guarantee == "exact" and result.processes == 2 and result.setup_seconds > 0
        compare_namespaces(plain, ns, canonical.body)
