"""Choosing each edge (fragnb.policies.relaxing): a placement's crossing edges named as the drawing names them,
the operators each may take, a relaxed edge's run, and what is refused before anything starts."""

import dataclasses

import pytest
import torch
from IPython.core.error import UsageError

import fragnb
from fragnb.graph import FragmentGraph
from fragnb.plan.script import Script
from fragnb.policies.modes import Averaged, Decoupled, Lockstep


@pytest.fixture
def ppo(canonical, ppo_ns):
    def make(iterations=2):
        ns = ppo_ns(iterations)
        return fragnb.capture(canonical.body, ns, name="ppo"), ns

    return make


def _operator(placement, kind):
    return next(t.operator for t in placement.transfers if t.kind == kind)


def test_each_crossing_edge_offers_its_operators_by_the_name_the_drawing_gives_it(ppo):
    graph, _ = ppo()
    coarse = graph.place("coarse", actors=2)
    assert coarse.labels == ["info", "batch", "policy weights", "policy"]
    assert coarse.operators("batch") == ("gather", "sample stream")
    assert coarse.operators("policy") == coarse.operators("policy weights") == ("broadcast", "versioned pull")
    # a relaxed edge is drawn with its operator, and the run's transfer is the one drawn
    relaxed = graph.place("coarse", actors=2, edges={"policy": ("versioned pull", 2)})
    dot = relaxed.render().source
    assert "versioned pull: policy weights" in dot and "broadcast: policy weights" not in dot
    assert "gather: batch" in dot  # the edge left alone keeps its operator
    assert _operator(relaxed, "state") == "versioned pull" and _operator(relaxed, "data") == "gather"
    assert isinstance(relaxed.policy.mode, Decoupled) and relaxed.params["max_staleness"] == 2
    assert relaxed.relaxed == ((("learner", "actors", "state"), ("versioned pull", 2)),)
    # a bound of 0, trajectories gathered: the same synchronous walk
    assert isinstance(graph.place("coarse", actors=2, edges={"policy": ("versioned pull", 0)}).policy.mode, Lockstep)


def test_an_operator_is_one_type_whose_name_reads_as_before_and_which_says_what_it_is(ppo):
    from fragnb.policies import Operator

    graph, _ = ppo()
    for policy, params in (("coarse", {"actors": 2}), ("async", {"actors": 2}), ("multi_learner", {"learners": 2})):
        placement = graph.place(policy, **params)
        assert all(isinstance(e.operator, Operator) for e in placement.edges)
        assert all(isinstance(t.operator, Operator) for t in placement.transfers)
    assert Operator.GATHER == "gather" and f"{Operator.VERSIONED_PULL}: policy" == "versioned pull: policy"
    assert [o for o in Operator if o.to_each] == ["broadcast", "versioned pull"]
    assert [o for o in Operator if o.bounded] == ["versioned pull", "sample stream"]
    assert [o for o in Operator if not o.crosses] == ["local"]
    assert Operator.named("stream") is Operator.SAMPLE_STREAM and Operator.named("versioned_pull").bounded
    assert Operator.named("all-reduce") is Operator.ALL_REDUCE and Operator.named("teleport") == "teleport"
    with pytest.raises(ValueError, match=r"may go by 'gather' or 'sample stream'"):  # quoted as names
        graph.place("coarse", actors=2, edges={"batch": "teleport"})


def test_a_bound_chosen_for_a_policy_that_runs_free_already_is_its_runs_bound(ppo):
    graph, _ = ppo()
    assert (
        graph.place("async", actors=2, max_staleness=2, edges={"policy": ("versioned pull", 3)}).params["max_staleness"]
        == 3
    )
    # a versioned pull without a bound keeps the policy's own
    assert graph.place("async", actors=2, max_staleness=2, edges={"batch": "gather"}).params["max_staleness"] == 2
    kept = graph.place("async", actors=2, max_staleness=2, edges={"policy": "versioned pull"})
    assert kept.params["max_staleness"] == 2 and kept.relaxed == (
        (("learner", "actors", "state"), ("versioned pull", 2)),
    )


def test_async_is_coarse_with_both_edges_relaxed(ppo):
    """The same placement and the same plan: the same run (test_decoupled shows async at bound 0 is coarse)."""
    graph, _ = ppo()
    built_in = graph.place("async", actors=2, max_staleness=1)
    relaxed = graph.place("coarse", actors=2, edges={"batch": "stream", "policy": ("versioned pull", 1)})
    assert relaxed.transfers == built_in.transfers and relaxed.edges == built_in.edges
    assert relaxed.fragments == built_in.fragments and type(relaxed.policy.mode) is type(built_in.policy.mode)
    a, b = Script.of(built_in), Script.of(relaxed)
    assert (a.transfers, a.max_staleness, a.groups, a.leader) == (b.transfers, b.max_staleness, b.groups, b.leader)
    assert [(s.group, s.statements) for s in a.program.segments] == [
        (s.group, s.statements) for s in b.program.segments
    ]


def test_a_coarse_gather_switched_to_a_sample_stream_changes_the_walk_and_the_drawing(ppo):
    """What the placement draws is what runs: an edge given a stream is placed to run free (the Script's walk
    changes with the drawing); a placement forged to draw a stream its mode walks in step is refused before
    anything runs, not moved as a gather."""
    graph, _ = ppo()
    coarse = graph.place("coarse", actors=2)
    streamed = coarse.with_operator("actors", "learner", "data", "sample stream")
    assert _operator(streamed, "data") == "sample stream" and _operator(coarse, "data") == "gather"
    assert (Script.of(coarse).mode.walker(), Script.of(streamed).mode.walker()) == ("lockstep", "free")
    assert "sample stream" in streamed.render().source and "sample stream" not in coarse.render().source
    forged = dataclasses.replace(
        coarse,
        transfers=tuple(
            dataclasses.replace(t, operator="sample stream") if t.kind == "data" else t for t in coarse.transfers
        ),
    )
    with pytest.raises(
        ValueError, match=r"'coarse' walks its replicas in step, and cannot move actors -> learner: sample"
    ):
        Script.of(forged)


@pytest.mark.parametrize(
    "edges, message",
    [
        (
            {"critic": "stream"},
            r"no edge of 'coarse' crossing between groups carries 'critic'; its crossing edges carry "
            r"'info', 'batch' \(actors -> learner, gather: may go by gather or sample stream\); 'policy weights'",
        ),
        ({"batch": "broadcast"}, r"actors -> learner: gather \(info, batch\) may go by 'gather' or 'sample stream'"),
        ({"policy": ("versioned pull", -1)}, "a bound is a whole number of versions, 0 or more"),
        ({"policy": ("broadcast", 2)}, "only a versioned pull or a stream takes a bound"),
        ({"batch": ("stream", 1), "policy": ("versioned pull", 2)}, r"one staleness bound.*\(here \[1, 2\]\)"),
        ("policy", "give a dict of LABEL -> OPERATOR"),
    ],
)
def test_what_does_not_apply_to_an_edge_is_refused_listing_what_does(ppo, edges, message):
    graph, _ = ppo()
    with pytest.raises(ValueError, match=message):
        graph.place("coarse", actors=2, edges=edges)


def test_a_relaxed_edge_the_loop_cannot_run_is_refused_before_anything_starts(ppo):
    graph, _ = ppo()
    # fine's environments need the learner's actions every step: streamed, they would wait for them anyway
    streamed = graph.place("fine", actors=2, edges={"obs": "stream"})
    with pytest.raises(fragnb.FragmentError, match=r"^line 6: under 'fine' the envs run free of the learner"):
        Script.of(streamed)  # what fragnb.run plans before any worker starts
    # a mode whose replicas average their gradients meets at every update: no bound, no stream
    with pytest.raises(ValueError, match="replicas meet at every update: its edges take a bound of 0 and no stream"):
        Averaged().relaxed(1, False)
    assert Averaged().relaxed(0, False) == Averaged()


def test_a_bound_of_0_is_coarse_value_for_value(ppo):
    (graph, coarse), (relaxed_graph, relaxed) = ppo(3), ppo(3)
    fragnb.run(graph, "coarse", actors=2, progress=False, plot=False)
    result = fragnb.run(
        relaxed_graph, "coarse", actors=2, progress=False, plot=False, edges={"policy": ("versioned pull", 0)}
    )
    assert result.guarantee == "exact" and result.moved == {"learner -> actors: versioned pull (policy weights)": 4}
    for key, value in coarse["learner"].policy.state_dict().items():
        assert torch.equal(relaxed["learner"].policy.state_dict()[key], value), key


def test_a_relaxed_weights_edge_is_announced_statistical_stays_within_its_bound_and_learns(ppo, capsys):
    graph, ns = ppo(12)
    result = fragnb.run(graph, "coarse", actors=2, progress=False, plot=False, edges={"policy": ("versioned pull", 2)})
    assert "statistical run: the actors act on weights up to 2 versions older" in capsys.readouterr().err
    assert result.guarantee == "statistical" and len(result.staleness) == result.iterations == 12
    ages = [a for per in result.staleness for a in per]
    # one trajectory of each actor per update (gathered), never staler; none dropped: the actors wait for weights
    # within the bound rather than produce what the learner would refuse
    assert len(ages) == 24 and max(ages) <= 2 and result.dropped == 0
    first, last = sum(result.returns[:20]) / 20, result.mean_return(20)
    assert last >= 2 * first, (first, last)  # it learns: CartPole's returns at least double in 12 updates
    assert ns["learner"].updates == 12
    with pytest.raises(fragnb.FragmentError, match="the exact guarantee was asked for, but under 'coarse' the actors"):
        fragnb.run(graph, "coarse", actors=2, exact=True, edges={"policy": ("versioned pull", 2)})


def test_the_magic_takes_an_edge(shell, canonical, ppo_ns, monkeypatch):
    placed, place = [], FragmentGraph.place
    monkeypatch.setattr(FragmentGraph, "place", lambda g, p, **kw: placed.append(place(g, p, **kw)) or placed[-1])
    shell.user_ns.update(ppo_ns(2))
    shell.run_cell_magic(
        "fragment", "ppo --policy coarse --actors 2 -q --edge 'policy=versioned pull:2'", canonical.body
    )
    assert placed[-1].relaxed == ((("learner", "actors", "state"), ("versioned pull", 2)),)
    with pytest.raises(UsageError, match="the bound after ':' is a whole number of versions"):
        shell.run_cell_magic("fragment", "ppo --policy coarse --actors 2 --edge policy=stream:x", canonical.body)
    with pytest.raises(UsageError, match="the explorer does not choose edges yet"):
        shell.run_cell_magic("fragment", "ppo --policy coarse --actors 2 --explore --edge batch=stream", canonical.body)


def test_each_edge_reports_how_long_its_receivers_waited_for_its_senders():
    from types import SimpleNamespace

    from fragnb.policies.transfers import Transfer
    from fragnb.runtime.result import _edge_waits
    from fragnb.runtime.worker.report import Finals

    transfers = (
        Transfer("actors", "learner", "data", ("batch",), "gather"),
        Transfer("learner", "actors", "state", ("policy weights",), "broadcast"),
    )
    learner = [("waits for actors", "wait", 0.0, 2.0), ("learner", "busy", 2.0, 3.0)]
    finals = {
        "learner[0]": Finals({}, {}, intervals=learner),
        "actors[0]": Finals(
            {}, {}, intervals=[("waits for learner", "wait", 0.0, 1.0), ("actor@step", "busy", 1.0, 2.0)]
        ),
        "actors[1]": Finals({}, {}, intervals=[("waits for learner", "wait", 0.0, 3.0)]),
    }
    assert _edge_waits(SimpleNamespace(transfers=transfers), finals) == {
        "actors -> learner: gather (batch)": 2.0,  # the learner's wait for the actors
        "learner -> actors: broadcast (policy weights)": 2.0,  # the actors' waits for the learner, on the mean
    }
