"""The engine's decisions as pure functions: no cluster, no network, no thread.

Routing values between replicas, choosing a decoupled learner's trajectories, message tags, the
safety net's comparison, control-flow normalisation, the weight syncs and the gradient average, each on small
hand-made inputs whose right answer is known.
"""

import ast
import math

import numpy as np
import pytest
import torch

from fragnb import capture
from fragnb.algos.ppo import SMALL_LOOP, small_setup
from fragnb.components import Episode
from fragnb.graph.normalize import Normalizer
from fragnb.plan.keys import RecordKey, WeightsKey, kind_of, record_key, weights_key
from fragnb.plan.program import DrivenLoop
from fragnb.plan.script import ReplicaId, Script, Weights, peers
from fragnb.policies.modes import Lockstep
from fragnb.policies.operators import Operator
from fragnb.runtime.check import difference
from fragnb.runtime.net.collectives import average
from fragnb.runtime.net.weights import SYNCS, AllReduce, Broadcast, VersionedPull, tag_of
from fragnb.runtime.worker import machine as d
from fragnb.runtime.worker.edges import combine

SHARDED = {"obs": "sharded", "step": "replicated"}


# -- replica names ----------------------------------------------------------------------------
def test_a_replica_name_reads_back_as_the_value_it_was_written_from():
    for rid in (ReplicaId("actors", 0), ReplicaId("policy", 11), ReplicaId("a[b", 3)):
        assert ReplicaId.parse(str(rid)) == rid
    assert peers("learner", 2) == ["learner[0]", "learner[1]"]
    key = weights_key("learner", "policy")
    assert (key.component, key.attribute) == ("learner", "policy") and key == "weights:learner:policy"


def test_an_exported_key_says_its_kind_by_its_type_not_by_its_text():
    assert [kind_of(k) for k in (weights_key("agent", ""), record_key("L12"), "obs")] == [
        "weights",
        "record",
        "variable",
    ]
    assert kind_of("weights:learner:policy") == "variable"  # a plain string is a variable's name, whatever it reads
    import pickle

    for key in (weights_key("learner", "policy"), record_key(6)):  # they keep their type across workers
        assert type(pickle.loads(pickle.dumps(key))) is type(key) and isinstance(key, (WeightsKey, RecordKey))


# -- routing ----------------------------------------------------------------------------------
@pytest.mark.parametrize("count,other", [(2, 4), (4, 2), (3, 6), (6, 3), (4, 4), (1, 3)])
def test_overlap_pairs_each_replica_with_those_holding_its_environments(count, other):
    envs = 12
    mine = lambda i, n: set(range(i * envs // n, (i + 1) * envs // n))  # noqa: E731 contiguous even shares
    for i in range(count):
        expected = [j for j in range(other) if mine(i, count) & mine(j, other)]
        assert d.overlap(i, count, other) == expected


def test_values_are_routed_only_when_both_groups_are_replicated_divide_and_every_value_is_split():
    x = Operator.EXCHANGE
    assert d.routed(x, 2, 4, ["obs"], SHARDED, 16)
    assert not d.routed(x, 1, 4, ["obs"], SHARDED, 16)  # one sender: everyone hears it
    assert not d.routed(x, 2, 3, ["obs"], SHARDED, 18)  # neither count divides the other
    assert not d.routed(x, 2, 4, ["obs", "step"], SHARDED, 16)  # a replicated value goes to everyone
    assert not d.routed(x, 2, 4, [weights_key("learner", "policy")], SHARDED, 16)  # weights travel whole
    assert not d.routed(x, 2, 4, ["obs"], SHARDED, None)  # no environment axis to split along
    assert d.routed(x, 4, 2, ["unknown"], SHARDED, 16)  # a value no kind is known for counts as sharded
    assert d.routed(Operator.INFERENCE_STREAM, 4, 2, ["obs"], SHARDED, 16)  # srl's actor and policy workers
    # only those are routed: what a transfer's operator says, not the counts, decides
    for other in (Operator.GATHER, Operator.SCATTER, Operator.BROADCAST, Operator.SAMPLE_STREAM, Operator.LOCAL):
        assert not d.routed(other, 2, 4, ["obs"], SHARDED, 16), other


def test_partners_are_the_overlapping_replicas_when_routed_and_all_of_them_otherwise():
    x = Operator.EXCHANGE
    assert d.partners(x, 1, 2, 4, ["obs"], SHARDED, 16) == [2, 3]
    assert d.partners(x, 3, 4, 2, ["obs"], SHARDED, 16) == [1]
    assert d.partners(x, 0, 2, 4, ["step"], SHARDED, 16) == [0, 1, 2, 3]
    assert d.partners(Operator.LOCAL, 0, 2, 2, ["obs"], SHARDED, 16) == [0, 1]  # inside one group


def test_each_replica_cuts_exactly_its_own_environments_out_of_what_its_partners_sent():
    envs = 12
    whole = torch.arange(envs)
    for senders, receivers in [(2, 4), (4, 2), (1, 3), (3, 1), (3, 6), (2, 2)]:
        sent = list(whole.chunk(senders))
        for i in range(receivers):
            # the operator a mode gives an edge between these counts (fragnb.policies.modes.Mode.operator)
            moved = Lockstep().operator("data", ("a", senders), ("b", receivers), None)
            got = [sent[j] for j in d.partners(moved, i, receivers, senders, ["obs"], SHARDED, envs)]
            index, count, num_envs = d.share(moved, i, receivers, senders, ["obs"], SHARDED, envs)
            mine = combine("obs", got, index=index, count=count, num_envs=num_envs)
            assert torch.equal(mine, whole.chunk(receivers)[i]), (senders, receivers, i)


def test_storage_with_the_environments_second_joins_along_the_axis_plain_pythons_shape_says():
    steps_first = torch.arange(4 * 8 * 3).reshape(4, 8, 3)  # (num_steps, num_envs, obs) as CleanRL preallocates it
    parts = list(steps_first.chunk(4, dim=1))  # four replicas of 2 environments each
    assert torch.equal(combine("obs", parts, full=(4, 8, 3)), steps_first)
    assert torch.equal(combine("obs", parts[:2], full=(4, 8, 3)), steps_first[:, :4])  # an even share of it
    assert torch.equal(combine("obs", [p[0] for p in parts], full=(8, 3)), steps_first[0])  # environments first
    assert torch.equal(combine("obs", parts), torch.cat(parts))  # shape unknown (--no-check): the leading axis
    # A batch each replica sampled (128 x obs 4, with 4 environments each) makes up no tensor of plain
    # Python's shape along any axis: joined along the leading one, for the safety net to tell apart.
    assert combine("batch", [torch.zeros(128, 4)] * 2, full=(128, 4)).shape == (256, 4)


# -- trajectory selection ---------------------------------------------------------------------
def test_the_learner_takes_the_earliest_arrival_and_only_fresh_ones_train_it():
    waiting = [d.Arrival(7, "actors[1]", 3, 2), d.Arrival(5, "actors[0]", 4, 3), d.Arrival(9, "actors[2]", 3, 3)]
    assert d.earliest(waiting).replica == "actors[0]"
    assert d.fresh(4, 3, max_staleness=1) and d.fresh(4, 4, max_staleness=0)
    assert not d.fresh(4, 2, max_staleness=1)


def test_an_iterations_trajectories_are_ordered_by_replica_not_by_arrival():
    chosen = [("actors[2]", 5, 4), ("actors[0]", 6, 4), ("actors[0]", 5, 3), ("actors[10]", 1, 1)]
    ordered = d.in_replica_order(chosen, lambda name: ReplicaId.parse(name).index)
    assert [c[0] for c in ordered] == ["actors[0]", "actors[0]", "actors[2]", "actors[10]"]
    assert ordered[0][1] == 5  # the same replica's earlier iteration first


def test_tags_say_which_segment_iteration_and_version_they_carry():
    tag = d.stamped(d.segment_tag(3), 17, 15)
    assert d.is_segment(tag) and not d.is_news(tag)
    assert (d.iteration_of(tag), d.version_of(tag)) == (17, 15)
    assert d.iteration_of(d.stamped("segment:0", 4)) == 4
    assert d.is_news(d.news_tag(8)) and d.iteration_of(d.news_tag(8)) == 8


# -- the safety net's comparison --------------------------------------------------------------
def test_difference_names_the_first_place_two_values_differ():
    assert difference({"a": [1.0, torch.ones(3)]}, {"a": [1.0, torch.ones(3)]}, "x") is None
    assert difference(torch.ones(3), torch.ones(3) + 1e-7, "t") is None  # rounding in the last bits
    assert "largest difference" in difference(torch.ones(3), torch.ones(3) * 1.1, "t")
    assert difference([1, 2], [1, 2, 3], "l") == "l has 2 items in plain Python, 3 here"
    assert difference({"a": 1}, {"b": 1}, "d").startswith("d has keys")
    assert "x['k'][1]" in difference({"k": [0, 1]}, {"k": [0, 2]}, "x")
    assert "shape" in difference(torch.zeros(2), torch.zeros(3), "t")
    assert difference(torch.tensor([1, 2]), torch.tensor([1, 3]), "i") == "i holds other values"
    assert difference(1.0, 1.0 + 1e-9, "f") is None and difference(math.nan, math.nan, "f") is None
    # numpy's float32 scalars as floats are (CleanRL's explained_var: rounding of a split batch's values)
    assert difference(np.float32(0.013771594), np.float32(0.013771832), "v") is None
    assert (
        difference(np.float32(0.5), np.float32(0.6), "v")
        == "v is np.float32(0.5) in plain Python, np.float32(0.6) here"
    )
    assert difference(1, 1.0, "n").startswith("n is a int")


def test_difference_ignores_when_an_episode_ended_and_compares_networks_by_their_weights():
    assert difference(Episode(0, 10.0, 5, 5, time=1.0), Episode(0, 10.0, 5, 5, time=2.0), "e") is None
    assert difference(Episode(0, 10.0, 5, 5, time=1.0), Episode(0, 11.0, 5, 5, time=1.0), "e") is not None
    a, b = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    b.load_state_dict(a.state_dict())
    assert difference(a, b, "net") is None
    with torch.no_grad():
        b.bias += 1
    assert "net['bias']" in difference(a, b, "net")


# -- normalisation of control flow ------------------------------------------------------------
def _normalized(source: str, roles: dict[str, str] | None = None) -> tuple[str, Normalizer]:
    roles = roles or {}

    def role_of_call(call: ast.Call):
        root = call.func
        while isinstance(root, ast.Attribute):
            root = root.value
        return roles.get(root.id) if isinstance(root, ast.Name) else None

    normalizer = Normalizer(role_of_call)
    body = normalizer.body(normalizer.control_flow(ast.parse(source).body))
    return ast.unparse(ast.fix_missing_locations(ast.Module(body, []))), normalizer


def _run(source: str, **ns) -> dict:
    exec(source, ns)
    return {k: v for k, v in ns.items() if k != "__builtins__" and not k.startswith("_fragnb_")}


def test_continue_and_break_become_guards_and_a_stop_flag_that_compute_what_the_loop_did():
    source = (
        "seen = []\n"
        "for i in range(10):\n"
        "    if i % 3 == 0:\n"
        "        continue\n"
        "    seen.append(i)\n"
        "    if i > 6:\n"
        "        break\n"
    )
    rewritten, n = _normalized(source)
    assert "continue" not in rewritten and "break" not in rewritten and len(n.stop_flags) == 1
    # the driver checks stop flags before each iteration; do so here as plain Python
    flag = n.stop_flags[0]
    driven = rewritten.replace("for i in range(10):", f"for i in range(10):\n    if globals().get({flag!r}): break", 1)
    assert _run(driven)["seen"] == _run(source)["seen"] == [1, 2, 4, 5, 7]


def test_a_top_level_while_becomes_the_iteration_loop_with_a_stop_flag():
    rewritten, n = _normalized("k = 0\nwhile k < 4:\n    k += 1\n")
    assert "while" not in rewritten and n.stop_flags
    flag = n.stop_flags[0]
    driven = rewritten.replace("iter(int, 1):", f"iter(int, 1):\n    if globals()[{flag!r}]: break", 1)
    assert _run(driven)["k"] == 4


def test_a_call_of_one_role_nested_in_another_roles_call_is_hoisted_before_it_in_order():
    rewritten, n = _normalized("batch = buffer.batch(actor.value(obs))", {"buffer": "buffer", "actor": "actor"})
    first, second = rewritten.splitlines()
    assert first.endswith("= actor.value(obs)") and second.startswith("batch = buffer.batch(_fragnb_")
    assert list(n.temps.values()) == ["actor.value(obs)"]


def test_an_if_of_two_roles_is_split_per_statement_on_a_condition_evaluated_once():
    source = "if ready():\n    a = actor.act(x)\n    b = learner.update(a)\nelse:\n    a = 0\n"
    rewritten, _ = _normalized(source, {"actor": "actor", "learner": "learner"})
    assert rewritten.count("ready()") == 1 and rewritten.count("if ") == 3


# -- the weight syncs (a fake link: messages "arrive" while the replica idles) ----------------------------
class _Link:
    def __init__(self, name="actors[0]", arriving=()):
        self.name, self.sent, self.boxes, self.arriving, self.idles = name, [], {}, list(arriving), 0

    def send_to(self, peers, tag, value):
        self.sent.append((tuple(peers), tag, value))

    def recv(self, peer, tag):
        got_tag, value = self.boxes[peer].pop(0)
        assert got_tag == tag
        return value

    def find(self, peer, match):
        box = self.boxes.setdefault(peer, [])
        i = next((i for i, (t, _) in enumerate(box) if match(t)), None)
        return None if i is None else box.pop(i)

    def idle(self, peer):
        self.idles += 1
        assert self.arriving, "waited for a version that never comes"
        self.boxes.setdefault(peer, []).append(self.arriving.pop(0))


def test_a_versioned_pull_takes_the_newest_arrived_and_waits_only_below_the_bound():
    link = _Link(arriving=[(tag_of("3", 4), "w4")])
    sync = VersionedPull(link, "3", ["learner[0]"], ["actors[0]"])
    assert sync.latest(min_version=-2) == (0, []) and link.idles == 0  # its own weights are new enough
    link.boxes["learner[0]"] = [(tag_of("3", 1), "w1"), (tag_of("3", 2), "w2"), (tag_of("9", 7), "other segment")]
    assert sync.latest(min_version=0) == (2, ["w2"]) and link.idles == 0  # the newest, older ones skipped
    assert sync.latest(min_version=2) == (2, []) and sync.loads == 1  # nothing newer: it keeps what it holds
    assert sync.latest(min_version=3) == (4, ["w4"]) and link.idles == 1  # waits for one at least that new
    assert link.boxes["learner[0]"] == [(tag_of("9", 7), "other segment")]


def test_a_versioned_pull_is_published_once_and_a_broadcast_by_every_owner():
    for name, sent in (("learner[0]", 1), ("learner[1]", 0)):
        link = _Link(name=name)
        VersionedPull(link, "3", ["learner[0]", "learner[1]"], ["actors[0]", "actors[1]"]).publish(5, "w")
        assert len(link.sent) == sent
        link = _Link(name=name)
        Broadcast(link, "3", ["learner[0]", "learner[1]"], ["actors[0]", "actors[1]"]).publish(5, "w")
        assert link.sent == [(("actors[0]", "actors[1]"), tag_of("3", 5), "w")]


def test_a_broadcast_waits_for_exactly_the_walks_version_from_every_owner():
    link = _Link()
    link.boxes = {"learner[0]": [(tag_of("3", 2), "a")], "learner[1]": [(tag_of("3", 2), "b")]}
    sync = Broadcast(link, "3", ["learner[0]", "learner[1]"], ["actors[0]"])
    assert sync.latest(min_version=2) == (2, ["a", "b"]) and sync.loads == 1
    link.boxes = {"learner[0]": [(tag_of("3", 3), "a")]}
    with pytest.raises(AssertionError):  # a version other than the walk's is a bug, not a race
        sync.latest(min_version=4)


def test_every_operator_that_moves_weights_has_a_sync():
    assert set(SYNCS) == {"broadcast", "versioned pull", "all-reduce"}


# -- the gradient average ---------------------------------------------------------------------
def test_average_leaves_every_replica_the_mean_gradient_in_its_own_shapes():
    replicas = [[torch.full((2, 3), float(r)), torch.full((4,), 10.0 * r)] for r in range(3)]
    total = sum(torch.cat([g.reshape(-1) for g in grads]) for grads in replicas)  # what all-reduce sums across them
    for grads in replicas:
        average(grads, AllReduce(3, lambda flat: flat.copy_(total)))
        assert torch.equal(grads[0], torch.full((2, 3), 1.0)) and torch.equal(grads[1], torch.full((4,), 10.0))


# -- what a segment receives (the walker applies it) --------------------------------------------
def test_a_fine_step_receives_obs_once_and_reads_it_twice():
    latest = {"obs": ("envs", 3)}  # the environments wrote `obs` three times so far
    received: dict = {}
    first, got, loaded = d.segment_inputs("actors", {"obs"}, {"actor"}, set(), [], latest, received, {})
    assert first == [("envs", "obs", "obs")] and got == {("actors", "obs"): ("envs", 3)} and loaded == {}
    received.update(got)  # the actor side acts with obs, then stores it: the second read receives nothing
    again, got, _ = d.segment_inputs("actors", {"obs"}, {"buffer"}, set(), [], latest, received, {})
    assert again == [] and got == {}
    latest["obs"] = ("envs", 4)  # the next step's observations
    assert d.segment_inputs("actors", {"obs"}, {"actor"}, set(), [], latest, received, {})[0] == [
        ("envs", "obs", "obs")
    ]


def _walked(script, iterations: int) -> list[tuple[str, list]]:
    """What each segment of ``script`` receives, in the order a walk in step runs them: the driven loops
    ``iterations`` times each (machine.Holdings alone, no replica)."""
    held, out = d.Holdings(script.weights), []

    def walk(items):
        for item in items:
            if isinstance(item, DrivenLoop):
                for _ in range(iterations):
                    walk(item.body)
            else:
                out.append((item.group, [(sender, str(key)) for sender, key, _ in held.inputs(item)]))
                held.ran(item)

    walk(script.program.items)
    return out


def test_a_walks_holdings_say_what_each_segment_receives_iteration_after_iteration():
    graph = capture(SMALL_LOOP, small_setup(seed=0), name="ppo")
    walked = _walked(Script.of(graph.place("coarse", actors=2)), 3)
    learner = [got for group, got in walked if group == "learner" and ("actors", "batch") in got]
    assert len(learner) == 3  # the batch, every iteration, once
    weights = [got for group, got in walked if group == "actors" and any(k.startswith("weights:") for _, k in got)]
    assert len(weights) == 2  # the learner's weights, once per new version: none before its first update
    assert all(("learner", "weights:learner:policy") in got for got in weights)
    # a group holds what it received until the sender writes it again: nothing arrives twice per version
    assert all(len(got) == len(set(got)) for _, got in walked)


def test_weights_are_loaded_once_per_version_and_only_by_the_group_that_uses_them():
    w = Weights(weights_key("learner", "net"), "learner", "learner", weights_key("actor", "net"), "actors", "actor")
    latest = {w.source: ("learner", 2)}
    out, _, loaded = d.segment_inputs("actors", set(), {"actor"}, set(), [w], latest, {}, {})
    assert out == [("learner", "weights:learner:net", "weights:actor:net")] and loaded == {
        ("actors", "weights:actor:net"): 2
    }
    assert d.segment_inputs("actors", set(), {"actor"}, set(), [w], latest, {}, loaded)[0] == []
    assert (
        d.segment_inputs("actors", set(), {"buffer"}, set(), [w], latest, {}, {})[0] == []
    )  # the segment holds no copy
    assert d.segment_inputs("envs", set(), {"actor"}, set(), [w], latest, {}, {})[0] == []  # another group's copy


def test_a_value_the_segment_writes_itself_is_not_received():
    assert d.segment_inputs("learner", {"loss"}, set(), set(), [], {"loss": ("learner", 1)}, {}, {})[0] == []


# -- trajectory selection -----------------------------------------------------------------------
def test_a_stale_trajectory_is_dropped_and_a_fresh_one_taken_in_arrival_order():
    waiting = [d.Arrival(7, "actors[1]", 4, 3), d.Arrival(5, "actors[0]", 2, 1)]
    take = d.next_trajectory(waiting, learner_version=3, max_staleness=1)
    assert take.arrival == waiting[1] and not take.usable  # the earliest arrival, 2 versions old: dropped
    assert d.next_trajectory(waiting, learner_version=3, max_staleness=2).usable
    assert d.next_trajectory([], learner_version=3, max_staleness=1) == (
        None,
        False,
    )  # nothing waits: the learner waits


def test_a_round_is_as_fresh_as_its_oldest_trajectory():
    assert d.round_is_fresh(5, [5, 4], max_staleness=1) and not d.round_is_fresh(5, [5, 3], max_staleness=1)


def test_actors_run_ahead_at_most_the_bound_and_the_survivors_of_a_lost_actor_make_up_for_it():
    assert d.pace(iterations=8, count=4, gone=0) == 8
    assert d.pace(iterations=8, count=4, gone=1) == 6  # three actors deliver the learner's four trajectories
    assert d.oldest_version(pace_now=8, max_staleness=2) == 6


# -- where replicas go, and which a run can lose ----------------------------------------------
def test_nine_replicas_on_eight_slots_fold_the_actors_and_keep_the_learner_alone():
    from fragnb.runtime.slots import slots, tasks

    groups = {"actors": 8, "learner": 1}
    assert len(tasks(groups, {}, False)) == 9  # a task each where there is room
    threads = {f"tcp://w{k}:1": 1 for k in range(8)}
    planned, where = slots(groups, {}, False, threads)
    # 8 actors in tasks of equal size (2 each: 7 tasks of 1 or 2 would leave one thread twice as busy); the learner alone
    assert planned == [
        ["actors[0]", "actors[4]"],
        ["actors[1]", "actors[5]"],
        ["actors[2]", "actors[6]"],
        ["actors[3]", "actors[7]"],
        ["learner[0]"],
    ]
    assert len(set(where.values())) == 5 and where["actors[0]"] == where["actors[4]"] != where["learner[0]"]


def test_a_process_group_needs_a_process_per_replica_and_says_so():
    from fragnb.errors import ClusterError
    from fragnb.runtime.slots import slots

    with pytest.raises(
        ClusterError, match="3 replica programs each need a worker thread of their own.*one per process"
    ):
        slots({"learner": 3}, {}, True, {"tcp://a:1": 4, "tcp://b:1": 4})
    with pytest.raises(ClusterError, match="the cluster has no workers"):
        slots({"learner": 1}, {}, False, {})


def test_async_goes_on_without_a_lost_actor_but_not_without_all_of_them_or_the_learner():
    from fragnb.policies.modes import Decoupled, Lockstep

    groups = {"actors": 2, "learner": 1}
    assert Decoupled().goes_on_without(["actors[0]"], [], groups, "learner[0]")
    assert not Decoupled().goes_on_without(["actors[1]"], ["actors[0]"], groups, "learner[0]")  # none left
    assert not Decoupled().goes_on_without(["learner[0]"], [], groups, "learner[0]")
    assert not Lockstep().goes_on_without(["actors[0]"], [], groups, "learner[0]")  # a synchronous run
    srl = {"actors": 2, "policy": 1, "learner": 1}  # actor and policy workers wait for each other every step
    assert not Decoupled().goes_on_without(["actors[0]"], [], srl, "learner[0]")


# -- what replicas tell the notebook ------------------------------------------------------------
def test_a_progress_event_survives_the_event_log_as_its_type():
    from fragnb.runtime.worker.report import Checkpointed, Progress, event_of

    sent = Progress("actors[0]", 3, [[1.5, 0, 64, 21.0]], 64, {"actor": 0.25}, [1, 0])
    wire = {**sent.wire(), "worker": "tcp://127.0.0.1:1"}  # Dask's event log adds keys of its own
    assert event_of(wire) == sent
    assert event_of(Checkpointed("learner[0]", 10, 4096).wire()) == Checkpointed("learner[0]", 10, 4096)


def test_a_first_interrupt_asks_for_the_end_of_the_iteration_and_a_second_aborts(capsys):
    from fragnb.runtime.worker.stops import Interrupts

    interrupts = Interrupts()
    interrupts.interrupt()
    assert interrupts.stop.is_set() and "interrupt again to abort" in capsys.readouterr().err
    with pytest.raises(KeyboardInterrupt):
        interrupts.interrupt()


def test_an_event_stream_asks_once_for_the_end_of_the_work_and_a_second_interrupt_aborts(capsys):
    import threading

    from fragnb.runtime.events import EventStream

    class Client:  # the event log of a client, without a cluster
        def subscribe_topic(self, topic, handler):
            self.handler = handler

        def unsubscribe_topic(self, topic):
            self.handler = None

    def rounds(*outcomes):  # each round of watching: True (the work ended), or an exception it raised
        it = iter(outcomes)

        def step():
            got = next(it)
            if isinstance(got, BaseException):
                raise got
            return got

        return step

    client, asked = Client(), []
    with EventStream(client, "t") as stream:
        stream.watch(rounds(False, KeyboardInterrupt(), False, True), lambda: asked.append(1))
        assert asked == [1] and stream.interrupted and "interrupt again to abort" in capsys.readouterr().err
        client.handler((0.0, "late"))  # Dask hands (time, message)
        got = []
        stream.drain(got.append)  # no wait: the events already here
        assert got == ["late"]
    assert client.handler is None
    stop, asked = threading.Event(), []
    stop.set()  # the explorer's Stop: asked for once, and not an interrupt
    stream = EventStream(client, "t")
    stream.watch(rounds(False, False, True), lambda: asked.append(1), stop)
    assert asked == [1] and not stream.interrupted
    with pytest.raises(KeyboardInterrupt):  # once asked, a Ctrl-C aborts
        stream.watch(rounds(KeyboardInterrupt()), lambda: None, stop)


# -- plan and capture (script, generators) ------------------------------------------------------
def test_the_notebook_generators_go_to_the_one_drawing_group_when_it_has_one_replica():
    from fragnb.runtime.draws import notebook_group

    counts = {"actors": 2, "learner": 1}
    assert notebook_group(counts, {"learner"}, "learner") == "learner"  # a learner's minibatch shuffle: exact
    assert notebook_group({"envs": 1, "learner": 1}, {"envs"}, "learner") == "envs"  # the only one, if not the driver's
    assert notebook_group(counts, set(), "learner") is None  # the cell draws nowhere: every replica seeds its own
    assert notebook_group(counts, {"actors"}, "learner") is None  # each actor samples: a statistical run
    assert notebook_group({"envs": 1, "learner": 1}, {"envs", "learner"}, "learner") is None  # two groups draw


def test_draws_not_looked_for_give_the_notebook_generators_to_the_driver_s_group_of_one_replica():
    from fragnb.runtime.draws import notebook_group

    assert notebook_group({"actors": 4, "learner": 1}, None, "learner") == "learner"
    assert notebook_group({"replicas": 2}, None, "replicas") is None  # multi_learner: no replica is plain Python's


def test_a_checkpoint_waits_for_its_iterations_and_by_default_for_time_enough_to_cost_at_most_its_share():
    from fragnb.runtime.worker.rulings import checkpoint_due

    assert not checkpoint_due(1, (0, 0.0, 0.0), 2, None, 100.0)  # 1 of 2 iterations
    assert checkpoint_due(2, (0, 0.0, 5.0), 2, None, 0.1)  # exactly every 2, whatever it costs
    assert not checkpoint_due(10, (0, 0.0, 5.0), 0, None, 100.0)  # 0: never
    kept = (10, 100.0, 0.1)  # the last: after iteration 10, ending at t=100 s, 0.1 s to keep
    assert not checkpoint_due(20, kept, 10, 0.05, 101.9)  # 10 iterations, but 0.1 s is more than 5 % of 1.9 s
    assert checkpoint_due(20, kept, 10, 0.05, 102.0)  # 5 % of 2 s
    assert not checkpoint_due(19, kept, 10, 0.05, 500.0)  # time enough, iterations not


def test_the_leader_rules_each_iteration_from_every_replica_s_news_in_plain_python_s_order():
    """The iteration loop's rulings as a sequence, without a cluster: a stop condition asked with every episode
    so far in plain Python's order (by env step, then environment, whichever replica reported it), checkpoints
    every 2 iterations counted from the last one kept, none once the run ends or with no notebook to fetch them,
    and a stop the user asked for before any condition (shown failing with the episodes kept in arrival order)."""
    from fragnb.runtime.worker.report import plain_order
    from fragnb.runtime.worker.rulings import Ruling

    asked_with = []

    def until(returns, iteration, steps):
        asked_with.append([r for _, r in returns])
        return [r for _, r in returns] == [10.0, 20.0, 10.0]

    ruling = Ruling(until, plain_order, every=2, share=None)
    ruling.starting(0, now=0.0)
    # episodes: [wall time, env id, env steps, return]; replica 0's episode ended first on the wall clock
    first = [[[1.0, 0, 64, 10.0]], 64], [[[5.0, 2, 32, 20.0]], 96]
    assert ruling.rule(False, list(first), 1, now=1.0) == ("", False)  # 1 of 2 iterations: no checkpoint
    assert asked_with == [[20.0, 10.0]]  # env step 32 before 64, not the replicas' order
    assert ruling.rule(False, [([], 128), ([], 128)], 2, now=2.0) == ("", True)  # the second iteration: keep one
    ruling.checkpointed(2, now=2.1, cost=0.1)
    assert not ruling.due(3, now=9.0) and ruling.due(4, now=9.0)  # counted from the checkpoint kept
    why, keep = ruling.rule(False, [([[9.0, 1, 16, 10.0]], 160), ([], 160)], 4, now=9.0)
    assert (why, keep) == ("the stop condition held after iteration 4", False)  # steps 16, 32, 64: it ends
    assert ruling.rule(True, [([], 0)], 5, now=10.0)[0] == "interrupted: stopped after iteration 5, as asked"

    # without a stop condition the leader rules ahead of the last collective round; the others hear it
    ahead = Ruling(None, plain_order, every=1, share=None)
    assert ahead.ahead(True, False, 1, now=0.0) == (False, True) and ahead.ahead(False, True, 1, now=0.0) == (
        False,
        False,
    )
    assert ahead.ahead(True, True, 1, now=0.0) == (True, False)  # stopping: no checkpoint
    assert Ruling(until, plain_order, 2, None).ahead(True, False, 2, now=0.0) is None  # needs every replica's news
    assert not Ruling(None, plain_order, 1, None, fetched=False).due(5, now=100.0)  # a replay keeps none


def test_a_learner_samples_ahead_of_insertion_only_within_the_bound():
    """Reverb's SampleToInsertRatio, the learner's side: drawing the next iteration's samples must keep the
    samples per transition inserted within samples_per_insert; with nothing inserted it waits."""
    assert d.may_sample_ahead(sampled=640, inserted=160, next_samples=640, samples_per_insert=8)  # 1280 <= 1280
    assert not d.may_sample_ahead(sampled=641, inserted=160, next_samples=640, samples_per_insert=8)
    assert not d.may_sample_ahead(sampled=0, inserted=0, next_samples=1, samples_per_insert=100)


def test_every_way_of_running_a_cell_declares_the_driver_that_instrumented_code_calls():
    from fragnb.plan.instrument import Driver
    from fragnb.runtime.draws import Watching
    from fragnb.runtime.local import Dry, _Driver
    from fragnb.runtime.measure import _DrySizes
    from fragnb.runtime.worker.replica import Replica, ReplicaState

    for driver in (_Driver, Dry, _DrySizes, Watching, ReplicaState, Replica):
        assert Driver in driver.__mro__, driver
        assert all(callable(getattr(driver, m)) for m in ("timer", "iterate", "done", "stepped"))


def test_a_replicas_ledger_counts_from_its_start_scales_by_its_count_and_a_checkpoint_keeps_its_counts():
    """The notebook's single run and a replica count episodes and env steps with one Ledger: from where the
    run began, a replica's episodes at the env steps of its whole batch (count replicas), and a replica
    resumed from a checkpoint goes on counting where it stopped."""
    import pickle

    from fragnb.envs import CartPole
    from fragnb.runtime.worker.ledger import Ledger
    from fragnb.runtime.worker.replica import Replica

    def steps(env, n):
        for _ in range(n):
            env.step(torch.zeros(env.num_envs, dtype=torch.int64))

    env = CartPole(num_envs=4, seed=0, max_episode_steps=10)
    env.reset()
    steps(env, 10)  # before the run: not reported, not counted
    before = len(env.episodes)
    rep = Replica("actors", 1, 2, "cpu", {"env": env}, {})
    rep.ledger = Ledger.start(rep.envs(), rep.count)
    steps(env, 10)
    rep.stepped(6)  # a plain vector environment's step
    episodes, taken = rep.report()
    assert taken == 40 + 6 and [ep for ep, _ in episodes] == env.episodes[before:] != []
    # what the notebook's single run reports of an episode (ep.step * num_envs - steps0), for the 2 replicas' batch
    assert [s for _, s in episodes] == [(ep.step * 4 - 40) * 2 for ep, _ in episodes]
    assert rep.report() == ([], 46)  # each episode once

    resumed = Replica("actors", 1, 2, "cpu", {}, {})
    resumed.set_state(pickle.loads(pickle.dumps(rep.get_state())))  # as a checkpoint travels
    assert resumed.ledger == rep.ledger
    env = resumed.ns["env"]
    steps(env, 10)
    episodes, taken = resumed.report()
    assert taken == 80 + 6 and [ep for ep, _ in episodes] == env.episodes[rep.ledger.seen["env"] :] != []
    assert [s for _, s in episodes] == [(ep.step * 4 - 40) * 2 for ep, _ in episodes]
