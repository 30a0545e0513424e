"""Predictions of a placement's throughput: the model's arithmetic on made-up profiles (no cluster),
and the profile it takes, measured on notebook 01's loop."""

import pytest
import torch

import fragnb
from fragnb.predict.model import PRESETS, Cluster, predict, scaling
from fragnb.predict.profile import Profile, profile

#: notebook 01's fragments; every step-loop fragment's time is all batch (it halves with half the envs)
SECONDS = {
    "env@cell": 0.0,
    "driver@cell": 0.0,
    "actor@step": 0.2,
    "env@step": 0.2,
    "buffer@step": 0.0,
    "driver@step": 0.0,
    "actor@it": 0.0,
    "buffer@it": 0.0,
    "learner": 0.4,
}
IDEAL = Cluster("ideal", 1, 8, latency_s=0.0, message_s=0.0, bandwidth=1e30)


def _profile(half=None, edge_bytes=None):
    return Profile(
        SECONDS,
        env_steps=1024,
        vector_steps=32,
        updates=12,
        weight_bytes=1000,
        edge_bytes=edge_bytes or {},
        half=half if half is not None else {f: s / 2 for f, s in SECONDS.items()},
    )


@pytest.fixture
def graph(canonical, ppo_ns):
    return fragnb.capture(canonical.body, ppo_ns(1), name="ppo")


def test_a_fragment_splits_into_what_each_call_costs_and_what_the_batch_adds():
    p = Profile({"a": 1.0, "b": 1.0}, 1, 1, 0, 0, half={"a": 0.5, "b": 1.0})
    assert p.per_call_and_batch("a") == (0.0, 1.0) and p.per_call_and_batch("b") == (1.0, 0.0)
    assert Profile({"a": 1.0}, 1, 1, 0, 0).per_call_and_batch("a") == (0.0, 1.0)  # no half run: all batch


def test_without_communication_coarse_shares_the_rollout_and_not_the_learner(graph):
    single = predict(graph.place("single"), _profile(), IDEAL)
    assert single.seconds_per_iteration == pytest.approx(0.8) and single.env_steps_per_s == pytest.approx(1024 / 0.8)
    coarse = predict(graph.place("coarse", actors=2), _profile(), IDEAL)
    assert coarse.seconds_per_iteration == pytest.approx(0.2 + 0.4)  # rollout halved, learner whole
    assert "'learner'" in coarse.bottleneck.split(":")[0] and coarse.busy["learner"] == pytest.approx(0.4 / 0.6)
    fixed = _profile(half=dict(SECONDS))  # every call costs the same whatever its batch: nothing to share
    assert predict(graph.place("coarse", actors=2), fixed, IDEAL).seconds_per_iteration == pytest.approx(0.8)


def test_replicas_beyond_the_cores_take_turns(graph):
    two_cores = Cluster("two", 1, 2, latency_s=0.0, message_s=0.0, bandwidth=1e30)
    fixed = _profile(half=dict(SECONDS))
    assert predict(graph.place("coarse", actors=4), fixed, two_cores).seconds_per_iteration == pytest.approx(
        2 * 0.4 + 0.4
    )


def test_a_driven_loop_pays_its_handoffs_every_step_and_coarse_once_an_iteration(graph):
    slow = Cluster("slow links", 1, 8, latency_s=1e-3, message_s=0.0, bandwidth=1e30)
    coarse = predict(graph.place("coarse", actors=2), _profile(), slow).seconds_per_iteration
    fine = predict(graph.place("fine", actors=2), _profile(), slow).seconds_per_iteration
    assert coarse == pytest.approx(0.6 + 2e-3)  # trajectories to the learner, weights back
    # observations in, rewards back, actions out: three waits a step, 32 steps
    assert fine == pytest.approx(0.1 + 0.2 + 0.4 + 3 * 32 * 1e-3)


def test_decoupled_groups_run_side_by_side(graph):
    sync = predict(graph.place("coarse", actors=2), _profile(), IDEAL).seconds_per_iteration
    free = predict(graph.place("async", actors=2), _profile(), IDEAL)
    assert (
        free.seconds_per_iteration == pytest.approx(0.4) and free.seconds_per_iteration < sync
    )  # the learner's 0.4 s, the actors' 0.2 s beside it
    # bounded at staleness 0 (AReaL's η = 0) the actors wait for the newest weights: the sides take turns
    turns = predict(graph.place("async", actors=2, max_staleness=0), _profile(), IDEAL)
    assert turns.seconds_per_iteration == pytest.approx(0.6)


@pytest.mark.parametrize("bound, seconds", [(0, 0.6), (1, 0.4), (2, 0.4)])
def test_a_relaxed_weights_edge_is_priced_with_the_actors_wait_removed_within_its_bound(graph, bound, seconds):
    # coarse's actors (0.2 s) and learner (0.4 s) take turns; with the weights pulled within a bound of 1 or more
    # the actors act while the learner updates, as async's do; at 0 the run, and its price, are coarse's
    relaxed = graph.place("coarse", actors=2, edges={"policy": ("versioned pull", bound)})
    assert predict(relaxed, _profile(), IDEAL).seconds_per_iteration == pytest.approx(seconds)
    coarse = predict(graph.place("coarse", actors=2), _profile(), IDEAL).seconds_per_iteration
    assert (seconds == pytest.approx(coarse)) == (bound == 0)


def test_a_gpu_speeds_up_the_learner_and_data_parallel_replicas_pay_an_all_reduce_per_update(graph):
    gpus = Cluster("gpus", 1, 8, gpus=1, latency_s=0.0, message_s=0.0, bandwidth=1e30, gpu_speed=4.0)
    assert predict(graph.place("coarse", actors=2), _profile(), gpus).seconds_per_iteration == pytest.approx(0.2 + 0.1)
    links = Cluster("links", 1, 8, latency_s=1e-3, message_s=0.0, bandwidth=1e30)
    two = predict(graph.place("multi_learner", learners=2), _profile(), links).seconds_per_iteration
    assert two == pytest.approx(0.4 + 12 * 2 * 1e-3)  # half of everything; 12 all-reduces of 2 steps each


def test_every_preset_predicts_and_says_it_is_a_prediction(graph):
    for name in PRESETS:
        p = predict(graph.place("fine", actors=4), _profile(), name)
        assert p.env_steps_per_s > 0 and str(p).startswith("predicted for fine (envs x4, learner x1) on ")


def test_the_profile_measures_a_copy_and_leaves_the_notebook_as_it_was(graph):
    before = {k: v.clone() for k, v in graph.namespace["policy"].state_dict().items()}
    state = torch.get_rng_state()
    prof = profile(graph, iterations=2)
    assert prof.vector_steps == 32 and prof.env_steps == 1024 and prof.updates > 0 and prof.weight_bytes > 0
    assert prof.optimizers == 1  # PPO's one Adam
    assert prof.seconds.keys() >= {"actor@step", "env@step", "learner"} and prof.half is not None
    assert all(torch.equal(before[k], v) for k, v in graph.namespace["policy"].state_dict().items())
    assert torch.equal(torch.get_rng_state(), state)


def test_the_profile_times_the_loop_on_one_thread_as_runs_and_workers_run_it(graph, monkeypatch):
    """A profile taken on all of a busy machine's cores timed a small network's update several times slower than
    the runs it predicts, which take one thread; the caller's setting is put back."""
    import sys

    from fragnb.runtime.local import torch_threads

    # the modules (fragnb.predict.profile and fragnb.runtime.measure are also the names of their functions)
    profiling, measuring = sys.modules["fragnb.predict.profile"], sys.modules["fragnb.runtime.measure"]

    seen = []

    def spying(function):
        def spy(*args, **kwargs):
            seen.append((function.__name__, torch.get_num_threads()))
            return function(*args, **kwargs)

        return spy

    monkeypatch.setattr(profiling, "_timed", spying(profiling._timed))
    monkeypatch.setattr(measuring, "exec_cell", spying(measuring.exec_cell))
    with torch_threads(2):
        profile(graph, iterations=2)
        assert torch.get_num_threads() == 2
        profile(graph, iterations=2, threads=None)
    assert seen == [("exec_cell", 1), ("_timed", 1), ("_timed", 1), ("exec_cell", 1), ("_timed", 2), ("_timed", 2)]


def test_more_replicas_bring_their_environments_the_learner_trains_on_all_of_them(graph):
    coarse = graph.place("coarse", actors=2)
    two = predict(coarse, _profile(), IDEAL)
    eight = predict(coarse, _profile(), IDEAL, replicas=8)
    assert eight.replicas == {"actors": 8, "learner": 1} and two.replicas == {"actors": 2, "learner": 1}
    # each actor still rolls out 1/2 of the profiled batch (0.2 s); the learner trains on 4 times the data
    assert eight.seconds_per_iteration == pytest.approx(0.2 + 4 * 0.4)
    assert eight.env_steps_per_s == pytest.approx(4 * 1024 / 1.8)


def test_a_gpu_shortens_only_the_batch_not_what_every_call_costs(graph):
    gpus = Cluster("gpus", 1, 8, gpus=1, latency_s=0.0, message_s=0.0, bandwidth=1e30, gpu_speed=4.0)
    fixed = _profile(half=dict(SECONDS))  # all per-call cost: nothing for a GPU to shorten
    assert predict(graph.place("coarse", actors=2), fixed, gpus).seconds_per_iteration == pytest.approx(0.4 + 0.4)


def test_communication_is_named_as_the_bottleneck_when_it_takes_most_of_the_iteration(graph):
    slow = Cluster("slow links", 1, 8, latency_s=10e-3, message_s=0.0, bandwidth=1e30)
    p = predict(graph.place("fine", actors=2), _profile(), slow)
    assert p.communication == pytest.approx(3 * 32 * 10e-3 / p.seconds_per_iteration)
    assert p.bottleneck.startswith(
        "the bottleneck is communication: 58% of the iteration passes values"
    )  # 0.96 of 1.66 s


def test_a_scaling_sweep_says_where_each_policy_stops_gaining_and_whether_fine_overtakes_coarse(graph):
    sweep = scaling(graph, _profile(), IDEAL, policies=("coarse", "fine"), counts=(1, 2, 4, 8))
    assert [p.replicas["actors"] for p in sweep.curves["coarse"]] == [1, 2, 4, 8]
    # each actor rolls out 0.2 s; the learner trains 0.2 s per replica: 512/0.4, 1024/0.6, 2048/1.0, 4096/1.8 steps/s
    assert sweep.stops_gaining("coarse") is None and sweep.stops_gaining("coarse", gain=1.2) == 4
    assert sweep.overtakes("fine", "coarse") is None  # without links fine = coarse's work, never more
    assert any(line.startswith("fine does not overtake coarse up to 8") for line in sweep.findings())
    import matplotlib

    matplotlib.use("Agg")
    ax = sweep.plot(measured={"coarse": {2: 1000.0}})
    assert any("measured" in t.get_text() for t in ax.get_legend().get_texts())


def test_a_placement_predicts_itself_from_its_loops_profile(graph):
    with pytest.raises(
        ValueError,
        match=r"no profile of 'ppo' to predict from: profile the loop first: "
        r"p = fragnb.profile\(ppo\); placement.predict\(cluster, profile=p\)",
    ):
        graph.place("coarse", actors=2).predict("laptop")
    costs = fragnb.profile(graph)
    p = graph.place("coarse", actors=2).predict("laptop", profile=costs)
    assert str(p).startswith("predicted for coarse (actors x2, learner x1) on a laptop")
    assert not hasattr(graph, "costs")  # the profile is passed, not kept on the graph
    with pytest.raises(ValueError, match="no profile of 'ppo'"):
        graph.place("coarse", actors=2).predict("laptop")
    with pytest.raises(ValueError, match="no cluster preset 'moon': the presets are 'here', 'laptop'"):
        graph.place("coarse", actors=2).predict("moon", profile=costs)


def test_a_run_reports_each_groups_measured_busy_share_beside_the_predicted_one():
    from fragnb.runtime.result import RunResult

    r = RunResult(
        "ppo",
        "coarse",
        intervals=[
            ("actors[0]", "actor@step", "busy", 0.0, 3.0),
            ("actors[0]", "waits for learner", "wait", 3.0, 4.0),
            ("actors[1]", "actor@step", "busy", 0.0, 1.0),
            ("actors[1]", "waits for learner", "wait", 1.0, 4.0),
            ("learner[0]", "waits for actors", "wait", 0.0, 3.0),
            ("learner[0]", "learner", "busy", 3.0, 4.0),
        ],
    )
    assert r.busy() == {"actors": pytest.approx(0.5), "learner": pytest.approx(0.25)}
    assert RunResult("ppo", "single").busy() == {}


def test_calibrating_fragnbs_cluster_measures_its_links_and_cores():
    from fragnb.predict.calibrate import calibrate
    from fragnb.runtime.cluster import clusters

    clusters.shutdown()  # a fresh cluster of fragnb's: two workers
    try:
        here = calibrate(rounds=40)
    finally:
        clusters.shutdown()
    assert here.name.startswith("measured: 2 workers, ") and here.workers == 1
    from fragnb.runtime.cluster.budget import limit

    assert 0.2 <= here.cores <= min(2.0, limit().cores)  # at most the two workers, and the machine's cores
    assert 0 < here.latency_s < 0.05 and 0 <= here.message_s < 0.05 and here.bandwidth > 1e6
    assert here.iteration_s > 0 and 0 <= here.spread < 1  # the runtime's cost scaled to this cluster; a range


def test_calibration_never_counts_more_cores_than_the_machines_have():
    from fragnb.predict.calibrate import side_by_side

    # Four workers on one 2-core machine, the run alone slowed by a neighbour: each looks as fast beside
    # the others as alone. Counted 2.85 cores' worth before the cap (benchmarks/predict.py, 2026-12-05).
    assert side_by_side(0.09, [0.08, 0.085, 0.1, 0.12], {"box": 2.0}) == 2.0
    assert side_by_side(0.08, [0.16, 0.16, 0.16, 0.16], {"box": 2.0}) == pytest.approx(2.0)
    assert side_by_side(0.08, [0.16, 0.16], {"box": 4.0}) == pytest.approx(1.0)  # took turns: one core's worth
    assert side_by_side(0.08, [0.08, 0.08], {"a": 1.0, "b": 1.0}) == 2.0  # two machines of one core each
    assert side_by_side(0.08, [0.08] * 3, {"box": 0.5}) == 0.5  # a container's quota of half a core


# -- invariants the model cannot break, on made-up profiles and every preset -------------------------
PLACEMENTS = [
    ("single", {}),
    ("gpu_only", {}),
    ("coarse", {"actors": 1}),
    ("coarse", {"actors": 2}),
    ("coarse", {"actors": 8}),
    ("fine", {"actors": 1}),
    ("fine", {"actors": 4}),
    ("multi_learner", {"learners": 2}),
    ("data_parallel", {"replicas": 3}),
    ("async", {"actors": 1}),
    ("async", {"actors": 4}),
    ("srl", {"actors": 4}),
]
CPU_CLUSTERS = [IDEAL, PRESETS["here"], PRESETS["laptop"], Cluster("one core", 1, 1, iteration_s=1e-3, step_s=50e-6)]


def _random_profiles(n: int = 6):
    import random

    rng = random.Random(7)
    for _ in range(n):
        seconds = {f: rng.choice([0.0, rng.uniform(1e-4, 0.5)]) for f in SECONDS}
        half = {f: t * rng.uniform(0.5, 1.0) for f, t in seconds.items()}  # from all batch to all per-call
        yield Profile(seconds, 1024, 32, rng.randint(1, 40), 36_000, {}, half)


def _placements(graph):
    for policy, params in PLACEMENTS:
        yield graph.place(policy, **params)


def test_no_placement_is_predicted_faster_than_amdahls_bound(graph):
    """The model's walk itself, before predict() floors it: Amdahl's bound from single's split on the
    cores given is the fewest seconds an iteration can take."""
    from fragnb.predict.model import _Model

    for prof in _random_profiles():
        for placement in _placements(graph):
            for cluster in [*CPU_CLUSTERS, PRESETS["8-gpu node"]]:
                for replicas in (None, 4, 64):
                    model = _Model(placement, prof, cluster, replicas)
                    walked, bound = model.iteration()[0], model.bound()
                    assert walked >= bound * (1 - 1e-9), (placement.policy.name, cluster.name, replicas, walked, bound)


def test_one_replica_of_a_synchronous_placement_is_never_predicted_faster_than_single(graph):
    for prof in _random_profiles():
        for cluster in CPU_CLUSTERS:
            single = predict(graph.place("single"), prof, cluster).seconds_per_iteration
            for policy, params in [("gpu_only", {}), ("coarse", {"actors": 1}), ("fine", {"actors": 1})]:
                p = predict(graph.place(policy, **params), prof, cluster)
                assert p.seconds_per_iteration >= single * (1 - 1e-9), (policy, cluster.name)


def test_more_replicas_never_step_faster_than_the_cores_allow(graph):
    """However many replicas, an iteration steps at most the cores' worth of what `single` would step
    on the same batch: one process stepping it all, every call paid once (more replicas bring their
    environments, so the batch grows with them and per-call costs are shared over more of it)."""
    from fragnb.predict.model import _Model

    for prof in _random_profiles():
        inside = _Model(graph.place("single"), prof, IDEAL).iterated()
        fragments = {graph.fragment_of(st).name for st in graph.statements if st.index in inside}
        for cluster in CPU_CLUSTERS:
            for placement in _placements(graph):
                for replicas in (None, 2, 16, 256):
                    p = predict(placement, prof, cluster, replicas)
                    scale = p.env_steps_per_s * p.seconds_per_iteration / prof.env_steps
                    alone = sum(a + scale * b for a, b in map(prof.per_call_and_batch, fragments))
                    fastest = scale * prof.env_steps / alone * max(1.0, cluster.total_cores)
                    assert p.env_steps_per_s <= fastest * (1 + 1e-9), (placement.policy.name, cluster.name, replicas)


def test_past_the_cores_more_actors_splitting_one_batch_are_never_predicted_faster(graph):
    """Notebook 10's exercise: with the batch split among the actors (not grown), an actor added once they
    outnumber the cores shortens nothing (they take turns, and each pays its calls), so no actor count
    from the cores' on is predicted faster than the one before it; fractional cores, as calibrate()
    measures them, and bytes on the edges included."""
    import dataclasses
    import random

    rng = random.Random(11)
    edge_bytes = {(e.src, e.dst, e.kind): rng.randint(0, 200_000) for e in graph.edges}
    clusters = [
        *CPU_CLUSTERS,
        Cluster("0.9 cores' worth", 1, 0.9),
        Cluster("1.6 cores' worth", 1, 1.6, iteration_s=2e-3),
    ]
    for prof in (dataclasses.replace(p, edge_bytes=edge_bytes) for p in _random_profiles()):
        for cluster in clusters:
            counts = [n for n in (1, 2, 4, 8, 16, 32) if n >= cluster.total_cores]
            rates = [predict(graph.place("coarse", actors=n), prof, cluster).env_steps_per_s for n in counts]
            assert all(b <= a * (1 + 1e-9) for a, b in zip(rates, rates[1:])), (cluster.name, rates)


def test_the_runtimes_costs_are_a_term_of_their_own_and_each_terms_share_is_printed(graph):
    busy_runtime = Cluster("runtime", 1, 8, latency_s=0.0, message_s=0.0, bandwidth=1e30, iteration_s=0.01, step_s=1e-3)
    single = predict(graph.place("single"), _profile(), busy_runtime)
    assert "runtime" not in single.terms  # single runs the cell itself: its profile measured all it costs
    coarse = predict(graph.place("coarse", actors=2), _profile(), busy_runtime)
    assert coarse.terms["runtime"] == pytest.approx(2 * 0.01)  # each group's program, once an iteration
    assert sum(coarse.terms.values()) == pytest.approx(coarse.seconds_per_iteration)
    fine = predict(graph.place("fine", actors=2), _profile(), busy_runtime)
    # two programs an iteration; envs, actor and buffer segments walked every one of the 32 steps
    assert fine.terms["runtime"] > 2 * 0.01 + 32 * 1e-3 and sum(fine.terms.values()) == pytest.approx(
        fine.seconds_per_iteration
    )
    text = str(fine)
    assert "[work: " in text and "runtime " in text and "%" in text.split("[")[1]


def test_a_wait_costs_the_loaded_latency_only_where_the_processes_outnumber_the_cores(graph):
    def cluster(cores):
        return Cluster("c", 1, cores, latency_s=1e-4, loaded_latency_s=1e-3, message_s=0.0, bandwidth=1e30)

    # fine x2: three processes (two environment workers, the learner's); 32 steps, three waits each
    crowded = predict(graph.place("fine", actors=2), _profile(), cluster(2))
    roomy = predict(graph.place("fine", actors=2), _profile(), cluster(4))
    assert crowded.terms["passing values"] - roomy.terms["passing values"] == pytest.approx(3 * 32 * (1e-3 - 1e-4))
    # srl's ring replicas are threads: actors=2 with a ring of 2 are two processes of actors, one of policy
    # workers and the trainer's, four processes that fit four cores
    srl = graph.place("srl", actors=2)
    assert (
        predict(srl, _profile(), cluster(4)).terms["passing values"]
        < predict(srl, _profile(), cluster(3)).terms["passing values"]
    )


def test_replicas_that_average_gradients_pay_a_measured_all_reduce_per_optimizer_step(graph):
    c = Cluster("c", 1, 8, latency_s=0.0, message_s=0.0, bandwidth=1e30, collective_s=2e-3)
    two, four = (predict(graph.place("multi_learner", learners=n), _profile(), c) for n in (2, 4))
    assert two.terms["passing values"] == pytest.approx(12 * 2e-3)  # 12 updates, one all-reduce each
    assert four.terms["passing values"] == pytest.approx(12 * 3 * 2e-3)  # a ring of 4: three steps more each way
    from dataclasses import replace

    whole = predict(graph.place("data_parallel", replicas=2), _profile(), c)
    assert whole.terms["passing values"] == pytest.approx(12 * 2e-3)  # one optimiser: its gradients with the header
    two_optimisers = predict(graph.place("data_parallel", replicas=2), replace(_profile(), optimizers=2), c)
    assert two_optimisers.terms["passing values"] == pytest.approx(2 * 12 * 2e-3)  # which one steps, then its gradients
    unmeasured = Cluster("c", 1, 8, latency_s=1e-4, message_s=0.0, bandwidth=1e30)
    assert predict(graph.place("multi_learner", learners=2), _profile(), unmeasured).terms[
        "passing values"
    ] == pytest.approx(12 * 2 * 1e-4)  # a ring of messages: 2 (n - 1) steps


def test_the_measured_all_reduce_covers_its_own_bytes_and_a_larger_network_pays_the_rest_at_the_bandwidth(graph):
    # collective_s is timed at COLLECTIVE_BYTES (calibrate(): through shared memory on one machine): a network
    # that small adds nothing at the bandwidth, where before it paid its bytes again at loopback's 250 MB/s
    from dataclasses import replace

    from fragnb.predict.cluster import COLLECTIVE_BYTES

    c = Cluster("c", 1, 8, latency_s=0.0, message_s=0.0, bandwidth=1e6, collective_s=1e-4)
    placement = graph.place("multi_learner", learners=2)
    small = predict(placement, _profile(), c)
    assert small.terms["passing values"] == pytest.approx(12 * 1e-4)
    large = predict(placement, replace(_profile(), weight_bytes=COLLECTIVE_BYTES + 10_000), c)
    assert large.terms["passing values"] == pytest.approx(12 * (1e-4 + 2 * 10_000 / 2 / 1e6))


def test_a_decoupled_placement_pays_the_runtime_in_every_replica_on_the_cores(graph):
    """async's iteration is bounded by all the work on the cores, and every replica's program is work
    there too: with a costly runtime, more actors on the same two cores are slower."""
    runtime = Cluster("runtime", 1, 2, latency_s=0.0, message_s=0.0, bandwidth=1e30, iteration_s=0.5)
    two, eight = (predict(graph.place("async", actors=n), _profile(), runtime) for n in (2, 8))
    assert eight.seconds_per_iteration >= 9 * 0.5 / 2  # nine programs' runtime shared by two cores
    assert two.seconds_per_iteration < eight.seconds_per_iteration


def test_a_prediction_states_its_range_from_the_profiles_and_the_clusters_spread(graph):
    spread = Profile(SECONDS, 1024, 32, 12, 1000, {}, {f: s / 2 for f, s in SECONDS.items()}, spread=0.1)
    cluster = Cluster("c", 1, 2, latency_s=1e-3, message_s=1e-4, bandwidth=1e8, iteration_s=1e-3, spread=0.2)
    p = predict(graph.place("fine", actors=2), spread, cluster)
    assert p.low < p.env_steps_per_s < p.high
    assert f"({p.low:,.0f}-{p.high:,.0f})" in str(p)
    exact = predict(graph.place("fine", actors=2), _profile(), IDEAL)
    assert exact.low == pytest.approx(exact.env_steps_per_s) == pytest.approx(exact.high)


def test_a_run_compares_with_its_prediction_and_refines_the_cluster_for_the_next(graph):
    from fragnb.runtime.result import RunResult

    cluster = Cluster("c", 1, 8, latency_s=0.0, message_s=0.0, bandwidth=1e30, iteration_s=0.01)
    p = predict(graph.place("coarse", actors=2), _profile(), cluster)  # 0.6 s of work + 2 x 10 ms
    ran = RunResult(
        "ppo",
        "coarse",
        iterations=4,
        seconds=3.2,
        env_steps=4 * 1024,
        iteration_seconds=[0.9, 0.8, 0.8, 0.8],
        intervals=[("actors[0]", "rollout", "busy", 0.0, 1.0), ("learner[0]", "learner", "busy", 0.0, 2.0)],
    )
    comparison = p.compare(ran)
    assert comparison.measured == pytest.approx(1280) and comparison.error == pytest.approx(
        p.env_steps_per_s / 1280 - 1
    )
    assert set(comparison.busy) == {"actors", "learner"} and "measured" in str(comparison)
    refined = cluster.refined(p, ran)
    again = predict(graph.place("coarse", actors=2), _profile(), refined)
    assert again.seconds_per_iteration == pytest.approx(0.8) and refined.iteration_s == pytest.approx(0.1)
    assert refined.name == "c (refined)"
