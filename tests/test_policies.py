"""Placement is a pure function of graph + parameters: no cluster needed."""

import pytest
import torch

from fragnb import capture
from fragnb.policies import POLICIES, DistributionPolicy, register


@pytest.fixture
def graph(canonical, ppo_ns):
    return capture(canonical.body, ppo_ns(), name="ppo")


def _ops(placement):
    return {(e.src, e.dst): e.operator for e in placement.edges if e.operator != "local"}


def test_coarse_replicates_the_actor_side_and_gathers_trajectories(graph):
    p = graph.place("coarse", actors=2)
    assert p.groups == {"actors": (2, "cpu"), "learner": (1, "cpu")}
    assert p.fragments["learner"].group == "learner" and p.fragments["env@step"].replicas == 2
    assert _ops(p) == {
        ("buffer@it", "learner"): "gather",
        ("env@step", "driver@step"): "gather",
        ("learner", "actor@step"): "broadcast",
        ("learner", "actor@it"): "broadcast",
    }


def test_fine_gathers_observations_and_scatters_actions(graph):
    p = graph.place("fine", actors=4)
    assert p.groups == {"envs": (4, "cpu"), "learner": (1, "cpu")}
    ops = _ops(p)
    assert ops[("env@step", "actor@step")] == "gather" and ops[("actor@step", "env@step")] == "scatter"
    assert all(op in ("gather", "scatter") for op in ops.values())


def test_multi_learner_replicates_everything_and_all_reduces(graph):
    p = graph.place("multi_learner", learners=2)
    assert p.groups == {"replicas": (2, "cpu")} and not _ops(p)
    assert "all-reduced" in p.render().source


def test_single_places_everything_in_one_process(graph):
    p = graph.place()
    assert p.groups == {"main": (1, "cpu")} and not _ops(p)


def test_placement_renders_one_cluster_per_group_with_operators(graph):
    source = graph.place("coarse", actors=2).render().source
    assert "subgraph cluster_actors" in source and 'label="actors  x2  (cpu)"' in source
    assert 'label="gather: batch"' in source and 'label="broadcast: policy weights"' in source


@pytest.mark.parametrize(
    "policy, params, error, message",
    [
        ("coarse", {"actors": 0}, ValueError, "actors=0: policy 'coarse' needs a whole number of replicas, 1 or more"),
        (
            "coarse",
            {"actors": 3},
            ValueError,
            r"`env` has num_envs=32, which 3 replicas .* ask for 1, 2, 4, 8, 16 or 32 replicas, or use policy .data_parallel.",
        ),
        ("fine", {"learners": 2}, TypeError, r"policy 'fine' takes \['actors', 'device'\], got \['learners'\]"),
        ("coarse", {"device": "tpu"}, ValueError, "unknown device: 'tpu'"),
        (
            "nope",
            {},
            ValueError,
            r"unknown distribution policy: 'nope' \(must be one of \['async', 'coarse', 'data_parallel', 'fine', 'gpu_only', 'multi_learner', 'single', 'srl'\]\)",
        ),
    ],
)
def test_bad_parameters_fail_before_anything_starts(graph, policy, params, error, message):
    with pytest.raises(error, match=message):
        graph.place(policy, **params)


def test_gpu_placement_without_a_gpu_is_refused(graph, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    with pytest.raises(ValueError, match="device='cuda' but this machine has no CUDA GPU"):
        graph.place("coarse", actors=2, device="cuda")
    assert graph.place("coarse", actors=2, device="auto").groups["learner"] == (1, "cpu")


def test_policy_whose_roles_the_graph_lacks_is_refused():
    import torch

    from fragnb.envs import CartPole

    g = capture(
        "for it in range(2):\n    env.step(torch.zeros(2, dtype=torch.int64))\n", {"env": CartPole(2), "torch": torch}
    )
    with pytest.raises(
        ValueError,
        match=r"policy 'coarse' needs fragments of roles \['actor', 'learner'\]; .* has no \['actor', 'learner'\]",
    ):
        g.place("coarse", actors=2)


def test_a_users_own_policy_defined_in_a_cell_places_like_a_builtin(graph):
    mine = register(
        DistributionPolicy(
            "envs_apart",
            "a user's own",
            "environments on N workers; everything else together",
            groups={"env": "envs", "actor": "main", "buffer": "main", "learner": "main", "driver": "main"},
            replicas={"envs": "actors", "main": 1},
        )
    )
    try:
        p = graph.place("envs_apart", actors=2)
        assert p.policy is mine and p.groups == {"envs": (2, "cpu"), "main": (1, "cpu")}
        assert _ops(p)[("actor@step", "env@step")] == "scatter"
    finally:
        POLICIES.pop("envs_apart")


def test_measure_labels_edges_with_bytes_and_leaves_the_namespace_alone(canonical, ppo_ns):
    from fragnb import measure

    ns = ppo_ns()
    before = {k: v.clone() for k, v in ns["learner"].policy.state_dict().items()}
    g = capture(canonical.body, ns, name="ppo")
    unmeasured = repr(g.place("coarse", actors=2))
    sizes = measure(g)
    # obs, action, logprob, value, advantages, returns (int64 actions: 8 bytes); rewards, dones, last value (for V-trace)
    batch = 32 * 32 * (4 + 5) * 4 + 32 * 32 * 4 + 32 * 32 * 2 * 4 + 32 * 4
    assert sizes[("buffer@it", "learner", "data")] == batch
    assert sizes[("env@step", "actor@step", "data")] == 64 * 16 * 4 * 4  # obs, every step of the rollout
    assert "returns" not in ns and ns["env"].vector_steps == 0
    assert all(torch.equal(before[k], v) for k, v in ns["learner"].policy.state_dict().items())
    # the sizes are handed on, not written onto the graph: the same place gives the same placement as before
    assert repr(g.place("coarse", actors=2)) == unmeasured and "kB/iteration" not in unmeasured
    placed = g.place("coarse", actors=2).measured(sizes)
    edge = next(e for e in placed.edges if e.operator == "gather" and e.dst == "learner")
    assert edge.label == "gather: batch (49 kB/iteration)"
    assert "buffer@it -> learner [data]: 49 kB" in repr(sizes)
    with pytest.raises(TypeError):
        sizes[("buffer@it", "learner", "data")] = 0  # read-only: what was measured stays so


def test_a_malformed_policy_is_refused_where_it_is_defined():
    with pytest.raises(ValueError, match=r"\['driver'\] have none"):
        DistributionPolicy(
            "no_driver", "", "", groups={"env": "a", "actor": "a", "buffer": "a", "learner": "a"}, replicas={"a": 1}
        )
    with pytest.raises(ValueError, match=r"no count for the worker groups \['buffer'\]"):
        DistributionPolicy(
            "typo",
            "",
            "",
            groups={"env": "a", "actor": "a", "buffer": "buffer", "learner": "a", "driver": "a"},
            replicas={"a": 1},
        )


def test_a_replicated_driver_beside_a_single_learner_is_refused(graph):
    # its bookkeeping (`returns.extend`) would run once per actor and interleave the episodes out of order
    policy = DistributionPolicy(
        "driver_with_actors",
        "",
        "",
        groups={**POLICIES["coarse"].groups, "driver": "actors"},
        replicas={"actors": "actors", "learner": 1},
    )
    with pytest.raises(ValueError, match=r"driver's statements in 'actors' x2 but \['learner'\] x1"):
        graph.place(policy, actors=2)
    assert graph.place(policy, actors=1).exact


def test_traffic_predicts_the_bytes_a_run_moves(canonical, ppo_ns):
    from fragnb import measure

    g = capture(canonical.body, ppo_ns(), name="ppo")
    measured = measure(g)
    p = g.place("coarse", actors=2).measured(measured)
    sizes = {(e.src, e.dst): size for e, size in p.traffic()}
    weights = sum(t.numel() * t.element_size() for t in g.namespace["policy"].state_dict().values())
    # the weights go whole to each of the 2 actors, once although two fragments of theirs read them
    assert [size for (src, dst), size in sizes.items() if src == "learner"] == [2 * weights]
    assert set(sizes) == {("learner", "actor@step"), ("buffer@it", "learner"), ("env@step", "driver@step")}
    assert sizes[("buffer@it", "learner")] == measured[("buffer@it", "learner", "data")]
