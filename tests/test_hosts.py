"""Hosts on addresses of their own (``tests/hosts.py``): a Dask scheduler and three worker hosts in network
namespaces of their own, joined by a bridge and nothing else. Every policy runs notebook 01's loop there with
its guarantee, the workers' channels and collectives listen on their own host's address only, and a host whose
link is cut mid-run is noticed within 15 s and the run resumes from its checkpoint with the uninterrupted
weights. Skipped, naming why, where namespaces cannot be made (not root, no ``ip``)."""

import time

import hosts as net
import pytest
import torch

from fragnb import capture, run
from fragnb.runtime.attempt import Attempt
from fragnb.runtime.cluster import clusters, silence

_WHY_NOT = net.why_not()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(_WHY_NOT is not None, reason=str(_WHY_NOT))]

WORKER_HOSTS, PER_HOST = 3, 2
PARAMS = {
    "coarse": {"actors": 2},
    "fine": {"actors": 2},
    "multi_learner": {"learners": 2},
    "data_parallel": {"replicas": 2},
    "async": {"actors": 2},
    "srl": {"actors": 2, "policy_workers": 1, "ring": 2},
}
ITERATIONS = 30  # long enough to cut a host after the checkpoint after iteration 4 (0.1 s an iteration here)
GUARANTEES = {"coarse": "exact", "fine": "exact", "multi_learner": "data-parallel", "data_parallel": "data-parallel"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with net.hosts(WORKER_HOSTS, PER_HOST, tmp_path_factory.mktemp("hosts")) as made:
        yield made
        clusters.shutdown()


def _run(canonical, ppo_ns, policy, iterations, **params):
    ns = ppo_ns(iterations)
    result = run(capture(canonical.body, ns, name="ppo"), policy, progress=False, plot=False, **params)
    return ns, result


def _weights(ns):
    return ns["learner"].policy.state_dict()


def _same(ns, reference) -> bool:
    return all(torch.equal(_weights(ns)[k], v) for k, v in _weights(reference).items())


def _listening(cluster) -> set[tuple[int, str]]:
    """(worker host, address) of every TCP socket listening in a worker host's namespace, IPv4 and IPv6, read
    from the kernel's table of that namespace (``/proc/PID/net/tcp`` of a process in it)."""
    import ipaddress

    out = set()
    for i in range(1, WORKER_HOSTS + 1):
        for pid in cluster.pids(i)[:1]:
            for table in ("tcp", "tcp6"):
                try:
                    rows = open(f"/proc/{pid}/net/{table}").read().splitlines()[1:]
                except OSError:
                    continue
                for row in rows:
                    local, state = row.split()[1], row.split()[3]
                    if state == "0A":  # LISTEN
                        raw = bytes.fromhex(local.split(":")[0])
                        # the kernel writes each 32-bit word in the machine's (little-endian) order
                        host = b"".join(raw[k : k + 4][::-1] for k in range(0, len(raw), 4))
                        out.add((i, str(ipaddress.ip_address(host))))
    return out


@pytest.mark.parametrize("policy", PARAMS)
def test_every_policy_runs_on_hosts_of_their_own_with_its_guarantee(cluster, canonical, ppo_ns, monkeypatch, policy):
    listening, poll = set(), Attempt.poll

    def look(self, *args, **kwargs):  # while the run is watched: channels, the collectives' store, gloo
        listening.update(_listening(cluster))
        return poll(self, *args, **kwargs)

    monkeypatch.setattr(Attempt, "poll", look)
    ns, result = _run(canonical, ppo_ns, policy, 2, cluster=net.SCHEDULER, **PARAMS[policy])
    monkeypatch.setattr(Attempt, "poll", poll)
    copies = PARAMS[policy].get("replicas", 1)  # data_parallel: each replica steps the whole cell's environments
    assert result.iterations == 2 and result.env_steps >= 2 * 32 * 32 * copies  # async's actors also run ahead
    assert result.guarantee == GUARANTEES.get(policy, "statistical")
    # A worker listens on its own host's address: never on every interface, never on loopback.
    assert listening and all(ip == net.host_address(i) for i, ip in listening), sorted(listening)
    if policy in ("coarse", "fine"):
        assert _same(ns, _run(canonical, ppo_ns, "single", 2)[0])
    elif policy in GUARANTEES:  # the same run on fragnb's own loopback cluster: the hosts change no value
        assert _same(ns, _run(canonical, ppo_ns, policy, 2, **PARAMS[policy])[0])


@pytest.mark.parametrize(("policy", "victim"), [("coarse", "actors[1]"), ("multi_learner", "replicas[1]")])
def test_a_host_whose_link_is_cut_mid_run_is_noticed_within_15_s_and_the_run_resumes_with_the_uninterrupted_weights(
    cluster, canonical, ppo_ns, monkeypatch, policy, victim
):
    reference = "single" if GUARANTEES[policy] == "exact" else policy
    uninterrupted, _ = _run(
        canonical, ppo_ns, reference, ITERATIONS, **({} if reference == "single" else PARAMS[policy])
    )
    cut, noticed, poll, lost = {}, [], Attempt.poll, silence.Silence.lost

    def watch(self, *args, **kwargs):
        # The notebook holds every replica's checkpoint after iteration 4: cut the victim's host off.
        if not cut and self.saved and self.saved[0] >= 4 and victim in self.slots:
            cut["host"] = int(self.slots[victim].split("//")[1].split(":")[0].rsplit(".", 1)[1]) - 10
            cluster.cut(cut["host"])
            cut["at"] = time.monotonic()
        return poll(self, *args, **kwargs)

    def heard(self, *args, **kwargs):
        quiet = lost(self, *args, **kwargs)
        if quiet and cut and not noticed:
            noticed.append(time.monotonic() - cut["at"])
        return quiet

    monkeypatch.setattr(Attempt, "poll", watch)
    monkeypatch.setattr(silence.Silence, "lost", heard)
    try:
        ns, result = _run(
            canonical, ppo_ns, policy, ITERATIONS, cluster=net.SCHEDULER, checkpoint_every=2, **PARAMS[policy]
        )
    finally:
        if cut:
            cluster.restart(cut["host"])
    print(f"{policy}: host {cut.get('host')} cut; noticed {noticed} s later")
    assert cut and noticed and noticed[0] < 15, (cut, noticed)
    assert len(result.lost_workers) == 1 and "its host's network link is down" in result.lost_workers[0]
    assert "resumed from the checkpoint after iteration" in str(result) and result.iterations == ITERATIONS, str(result)
    assert _same(ns, uninterrupted) and ns["returns"] == uninterrupted["returns"]
    net.wait_for_workers(WORKER_HOSTS * PER_HOST)  # the host is back for the next test
