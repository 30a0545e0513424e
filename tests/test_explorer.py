"""The policy explorer: its controls offer what `place` accepts, its drawing follows them, and its
Run and Stop buttons run the loop in a thread and end it at an iteration boundary."""

import sys
import time

import pytest
import torch
from IPython.core.error import UsageError

from conftest import wait_for_no_workers
from fragnb import capture, explore, policies
from fragnb.ui.live import dashboard
from fragnb.widgets import Explorer
from fragnb.widgets.composing import policy_source

pytestmark = pytest.mark.needs_dot


@pytest.fixture
def graph(canonical, ppo_ns):
    def make(iterations=200):
        return capture(canonical.body, ppo_ns(iterations), name="ppo")

    return make


def _options(x: Explorer) -> dict:
    return {c.description: c.options for c in x.controls.children}


def test_controls_offer_only_the_parameters_and_values_the_policy_accepts(graph):
    x = explore(graph(), "coarse")
    assert _options(x) == {
        "actors": (1, 2, 4, 8, 16),
        "device": ("auto", "cpu") + (("cuda",) if torch.cuda.is_available() else ()),
    }
    x.select("srl", actors=8)
    options = _options(x)
    assert set(options) == {"actors", "policy workers", "ring", "max staleness", "device"}
    assert options["ring"] == (1, 2, 4)  # 8 actor workers x ring must split 32 environments
    x.controls.children[0].value = 16  # actors
    assert _options(x)["ring"] == (1, 2) and x.params["ring"] == 2
    x.select("single")
    assert x.controls.children == ()


def test_the_drawing_follows_the_policy_and_says_what_it_trades(graph):
    x = explore(graph(), "coarse", actors=2)
    coarse = x.drawing.value
    assert coarse.startswith("<svg") and "actors" in coarse and "envs" not in coarse
    assert "gather" in x.traffic.value and "predicted per iteration" in x.traffic.value
    x.policy.value = "fine"
    assert "envs" in x.drawing.value and "scatter" in x.traffic.value
    assert "SEED RL" in x.summary.value and "Trade-off" in x.summary.value
    assert x.redraw_seconds < 5  # measured, not asserted tightly: see benchmarks/explorer.py


def test_a_broadcast_row_says_it_is_the_drawn_copy_to_each_replica(graph):
    # The drawing labels a broadcast with one copy's size, the table with all that moves: each says which.
    import re

    from fragnb import measure
    from fragnb.widgets.placing import traffic_table

    g = graph()
    placed = g.place("coarse", actors=2, device="cpu").measured(measure(g))
    drawn = re.search(r"broadcast: policy weights \((\d+ kB)/iteration\)", str(placed)).group(1)
    assert f"(2 &times; {drawn})" in traffic_table(placed)
    assert "&times;" not in traffic_table(g.place("coarse", actors=1, device="cpu").measured(measure(g)))


def test_a_policy_that_cannot_place_the_loop_says_why_and_offers_no_run(graph):
    g = graph()
    policies.register(
        policies.DistributionPolicy(
            "needs_envs_only", "a test", "asks for a role the loop lacks", required_roles=("nonexistent",)
        )
    )
    try:
        x = explore(g)
        assert "needs_envs_only" in x.policy.options  # user-registered policies are offered too
        x.policy.value = "needs_envs_only"
        assert "fragnb-error" in x.drawing.value and "nonexistent" in x.drawing.value and x.run_button.disabled
    finally:
        policies.POLICIES.pop("needs_envs_only")


def test_comparison_shows_both_placements_and_their_communication(graph):
    x = explore(graph())
    x.left.value, x.right.value = "coarse", "multi_learner"
    assert x.left_drawing.value.startswith("<svg") and x.right_drawing.value.startswith("<svg")
    table = x.comparison.value
    assert "actors x2, learner x1" in table and "replicas x2" in table and "all-reduce" in table and "kB" in table


def test_each_placement_shows_its_predicted_throughput_and_bottleneck_on_the_chosen_preset(graph):
    g = graph()
    x = explore(g, "coarse", actors=2)
    assert x.profile is not None and not hasattr(g, "costs")  # profiled once, when it opened; kept by the explorer
    here = x.prediction.value
    assert "<b>Predicted</b> (a model, not a measurement) on this machine (2 cores)" in here and "env steps/s" in here
    p = g.place("coarse", actors=2).predict("here", profile=x.profile)
    assert f"{p.env_steps_per_s:,.0f}" in here and "env steps/s" in here
    if p.high > p.low:  # the profile's iterations strayed: the range it gives
        assert f"({p.low:,.0f}-{p.high:,.0f}) env steps/s" in here
    assert "The iteration's terms: work: actors " in here and "runtime " in here
    assert "kB" in x.traffic.value and "not measured" not in x.traffic.value  # its placements carry the profile's bytes
    assert explore(g, "coarse", actors=2, profile=x.profile).profile is x.profile  # a profile given: none taken again
    x.preset.value = "64-gpu cluster"
    assert "on 8 nodes of 8 GPUs, 1,024 cores" in x.prediction.value and "bottleneck" in x.prediction.value
    x.left.value, x.right.value = "coarse", "fine"
    assert x.comparison.value.count("on 8 nodes of 8 GPUs") == 2 and "predicted bottleneck" in x.comparison.value
    x.show_scaling()
    assert bytes(x.scaling_plot.value).startswith(b"\x89PNG")
    x.preset.value = "laptop"  # another preset's plot is drawn on request, not shown stale
    assert bytes(x.scaling_plot.value) == b"" and x.scaling_plot.layout.display == "none"


def test_your_own_policy_is_composed_shown_as_code_and_registered(graph):
    x = explore(graph())
    x.own_name.value = "learner_side_buffer"
    x.own_groups["buffer"].value = "learner"
    code = x.own_code.value
    assert "register(DistributionPolicy(" in code and "&#x27;buffer&#x27;: &#x27;learner&#x27;" in code
    try:
        policy = x.register()
        assert policies.POLICIES["learner_side_buffer"] is policy and x.policy.value == "learner_side_buffer"
        assert "learner_side_buffer" in x.left.options
        placement = x.graph.place(policy, actors=2)
        assert placement.fragments["buffer@step"].group == "learner"
        # the code shown registers the same policy
        ns = {}
        exec(policy_source(policy), ns)
        assert policies.POLICIES["learner_side_buffer"] == policy
    finally:
        policies.POLICIES.pop("learner_side_buffer", None)


def _plain_weights(canonical, ppo_ns, iterations):
    ns = ppo_ns(iterations)
    exec(canonical.body, ns)
    return ns["learner"].policy.state_dict()


@pytest.mark.parametrize("policy", ["single", "coarse"])
def test_run_leaves_the_kernel_free_and_stop_ends_at_an_iteration_boundary(canonical, ppo_ns, graph, policy):
    g = graph(200)
    x = explore(g, policy, actors=2)
    started = time.monotonic()
    x.run()
    assert time.monotonic() - started < 3.0 and x.running and not x.stop_button.disabled  # the cell returned at once
    deadline = time.monotonic() + 120
    while x.bar.value < 2 and time.monotonic() < deadline and x.running:
        time.sleep(0.05)
    if policy != "single":
        assert "Dask dashboard" in x.link.value  # shown while the run lasts
    x.stop()
    assert x.wait(120) and x.error is None, x.error
    result = x.result
    assert result.stopped.startswith("interrupted") and 2 <= result.iterations < 200
    assert bytes(x.plot.value).startswith(b"\x89PNG") and "stopped" in x.status.value and not x.run_button.disabled
    assert "Against the prediction: " in x.status.value and "measured (" in x.status.value  # what ran beside the model
    assert g.namespace["it"] == result.iterations - 1
    plain = _plain_weights(canonical, ppo_ns, result.iterations)
    for key, value in g.namespace["learner"].policy.state_dict().items():
        assert torch.equal(value, plain[key]), key
    if policy != "single":
        assert x.link.value == ""  # its cluster is gone
        wait_for_no_workers()  # Stop closed the embedded cluster


def test_a_failed_run_shows_its_error_in_the_explorer(graph):
    x = explore(graph(2), "coarse", "tcp://127.0.0.1:9", actors=2)
    x.run()
    assert x.wait(60)
    assert x.result is None and "ClusterError" in x.status.value and "127.0.0.1:9" in x.status.value
    assert not x.run_button.disabled
    assert x.debug_button.layout.display == "none"  # nothing of the cell's code to replay


def test_debug_here_replays_a_replicas_failure_for_percent_debug(canonical, ppo_ns):
    from test_replay import FAILING, PROBE

    x = explore(capture(canonical.body.replace(FAILING, PROBE), ppo_ns(5), name="probe"), "coarse", actors=2)
    x.run()
    assert x.wait(120) and "environment 20 diverged" in x.status.value
    assert x.debug_button.layout.display == ""
    x.debug_button.click()
    assert "replayed in this kernel from the" in x.status.value and "%debug</code> in a cell" in x.status.value
    frame = sys.last_traceback
    while frame.tb_next is not None:
        frame = frame.tb_next
    # where %debug opens: replica 1's environments, at the iteration its run failed
    assert frame.tb_frame.f_globals["it"] == 3 and frame.tb_frame.f_globals["env"].env_ids.tolist() == list(
        range(16, 32)
    )
    x.run_button.click()  # a new run hides the button until it fails in turn
    assert x.debug_button.layout.display == "none"
    assert x.wait(120)


def test_the_magic_shows_the_explorer(shell, canonical, monkeypatch):
    shown = []
    monkeypatch.setattr("fragnb.ui.magics.display", shown.append)
    shell.run_cell(canonical.setup)
    shell.run_cell_magic("fragment", "ppo --explore --policy fine --actors 4", canonical.body)
    (x,) = shown
    assert isinstance(x, Explorer) and x.policy.value == "fine" and x.params["actors"] == 4
    with pytest.raises(UsageError, match="--explore has its own Run button"):
        shell.run_cell_magic("fragment", "ppo --explore --run", canonical.body)


def test_the_live_dashboard_shows_speed_and_time_split():
    fig = dashboard(
        [(10, 1.0), (20, 2.0)], "t", rates=[(0.5, 100.0), (1.0, 120.0)], seconds={"env@step": 2.0, "learner": 1.0}
    )
    assert len(fig.axes) == 3
    speed, split = fig.axes[1:]
    assert list(speed.get_lines()[0].get_ydata()) == [100.0, 120.0]
    assert [t.get_text() for t in split.get_yticklabels()] == ["learner", "env@step"]


def test_run_seeds_runs_the_notebooks_setup_per_seed_and_shows_the_band_and_table(canonical, graph):
    import ast

    from fragnb import Setup

    g = graph(2)
    x = explore(g)
    x.run_seeds()
    assert x.wait(60) and "%%setup" in x.status.value and x.sweep is None  # no setup cell yet: says what to do
    tree = ast.parse(canonical.setup)
    tree.body = [n for n in tree.body if not (isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "seed")]
    g.namespace["ppo_setup"] = Setup("ppo_setup", source=ast.unparse(tree) + "\niterations = 2\n")
    x.seeds.value = 2
    x.run_seeds()
    assert x.wait(120) and x.error is None, x.error
    assert [r.seed for r in x.sweep.runs] == [0, 1] and not x.sweep.failed
    assert bytes(x.plot.value).startswith(b"\x89PNG") and x.bar.value == 2 and x.bar.description == "runs"
    assert "final return" in x.status.value and not x.seeds_button.disabled


def test_each_crossing_edge_may_be_relaxed_and_the_drawing_and_the_run_follow(graph):
    x = explore(graph(3), "coarse", actors=2)
    edges = {c.description: c for c in x.edges.children if c is not x.bound}
    assert set(edges) == {"actors → learner", "learner → actors"}
    assert edges["learner → actors"].options == ("broadcast", "versioned pull")
    assert x.bound.layout.display == "none"  # nothing relaxed: no bound to choose
    edges["learner → actors"].value = "versioned pull"
    x.bound.value = 2
    assert x.bound.layout.display == ""
    policy, params = x.current()
    assert params["edges"] == {"policy weights": ("versioned pull", 2)}
    assert "versioned pull" in x.drawing.value and "versioned pull" in x.traffic.value
    x.run()
    assert x.wait(120) and x.result is not None
    assert x.result.guarantee == "statistical" and max(a for per in x.result.staleness for a in per) <= 2
    # each crossing edge with what it cost its receivers, and the staleness the relaxed one brought
    assert set(x.result.edge_waits) == {
        "actors -> learner: gather (info, batch)",
        "learner -> actors: versioned pull (policy weights)",
    }
    assert "learner -&gt; actors: versioned pull (policy weights): its receivers waited" in x.status.value
    assert "staleness: mean" in x.status.value
    # explore(..., edges=...) starts from them; another policy offers its own edges
    y = explore(graph(3), "coarse", actors=2, edges={"batch": "stream", "policy": ("versioned pull", 1)})
    assert y.current()[1]["edges"] == {"info": ("sample stream", 1), "policy weights": ("versioned pull", 1)}
    y.select("async", actors=2)  # its edges are relaxed already: its own max staleness is the bound
    assert y.bound.layout.display == "none" and "edges" not in y.current()[1]
    y.select("fine", actors=2)
    assert {c.description for c in y.edges.children if c is not y.bound} == {"envs → learner"}
    assert "edges" not in y.current()[1]
