import textwrap

import pytest
import torch

import fragnb
from fragnb import FragmentError, capture
from fragnb.algos.ppo import PPOActor
from fragnb.envs import CartPole


def test_ppo_cell_gives_role_fragments_per_loop(canonical, ppo_ns):
    g = capture(canonical.body, ppo_ns(), name="ppo")
    assert [(f.name, f.role) for f in g.fragments] == [
        ("env@cell", "env"), ("driver@cell", "driver"), ("actor@step", "actor"), ("env@step", "env"), ("buffer@step", "buffer"),
        ("driver@step", "driver"), ("actor@it", "actor"), ("buffer@it", "buffer"), ("learner", "learner"),
    ]
    assert [loop.var for loop in g.loops] == ["it", "step"]
    assert g.loops[1].parent is g.loops[0]
    assert g.components == {"env": "env", "actor": "actor", "buffer": "buffer", "learner": "learner"}


def test_edges_carry_the_variables_that_cross_fragments(canonical, ppo_ns):
    g = capture(canonical.body, ppo_ns())
    data = {(e.src, e.dst): e.variables for e in g.edges if e.kind == "data"}
    assert data[("actor@step", "env@step")] == ("action",)
    assert data[("actor@step", "buffer@step")] == ("action", "logprob", "value")
    assert data[("env@step", "actor@step")] == ("obs",)  # loop-carried
    assert data[("buffer@it", "learner")] == ("batch",)
    assert ("learner", "actor@step") not in data


def test_shared_buffer_and_policy_network_become_state_edges(canonical, ppo_ns):
    g = capture(canonical.body, ppo_ns())
    state = {(e.src, e.dst): e.variables for e in g.edges if e.kind == "state"}
    assert state[("buffer@step", "buffer@it")] == ("buffer state",)
    assert state[("learner", "actor@step")] == ("policy weights",)  # learner -> actor, the update direction


def test_no_weight_edge_when_actor_and_learner_hold_different_networks(canonical, ppo_ns):
    ns = ppo_ns()
    ns["actor"] = PPOActor(type(ns["policy"])(4, 2), num_envs=ns["config"].num_envs)
    g = capture(canonical.body, ns)
    assert not [e for e in g.edges if "weights" in e.label]


def test_role_comes_from_the_component_type_not_the_variable_name():
    ns = {"learner": CartPole(num_envs=2), "torch": torch}
    g = capture("for it in range(3):\n    out = learner.step(torch.zeros(2, dtype=torch.int64))\n", ns)
    assert [f.role for f in g.fragments] == ["env"]


def test_bookkeeping_no_component_needs_runs_with_the_driver():
    ns = {"env": CartPole(num_envs=2), "torch": torch}
    g = capture(textwrap.dedent("""\
        lengths = []
        for it in range(3):
            obs, reward, terminated, truncated, info = env.step(torch.zeros(2, dtype=torch.int64))
            lengths.append(len(info["episode_returns"]))
            print(it)
        """), ns)
    roles = {s.lineno: s.role for s in g.statements}
    assert roles == {1: "driver", 3: "env", 4: "driver", 5: "driver"}


def test_plain_statements_run_with_the_role_that_needs_their_values():
    ns = {"env": CartPole(num_envs=2), "actor": PPOActor(torch.nn.Linear(1, 1), 2), "torch": torch}
    g = capture(textwrap.dedent("""\
        obs = env.reset()
        for it in range(3):
            scaled = obs * 2
            action, logprob, value = actor.act(scaled)
            obs, reward, terminated, truncated, info = env.step(action)
            for value in range(2):
                print(value)
        """), ns)
    roles = {s.lineno: s.role for s in g.statements}
    # `value` of line 6 is the loop's own, not actor.act's: line 7 stays bookkeeping
    assert roles == {1: "env", 3: "actor", 4: "actor", 5: "env", 7: "driver"}


def test_nested_calls_and_if_blocks_of_several_roles_are_split_with_the_condition_evaluated_once(canonical, ppo_ns):
    cell = canonical.body.replace("last_value = actor.value(obs)\n    batch = buffer.batch(last_value)",
                                  "if it >= 0:\n        batch = buffer.batch(actor.value(obs))\n        for k in range(1):\n            print(k)")
    g = capture(cell, ppo_ns())
    split = [(s.lineno, s.role, s.source.splitlines()[-1].strip()) for s in g.statements if s.lineno >= 10]
    assert split[:3] == [(10, "actor", "_fragnb_1 = it >= 0"), (11, "actor", "_fragnb_2 = actor.value(obs)"),
                         (11, "buffer", "batch = buffer.batch(_fragnb_2)")]
    assert g.temps == {"_fragnb_1": "it >= 0", "_fragnb_2": "actor.value(obs)"}


def test_dot_source_is_stable_and_draws_clusters_and_roles(canonical, ppo_ns):
    first, second = capture(canonical.body, ppo_ns(), name="ppo").dot, capture(canonical.body, ppo_ns(), name="ppo").dot
    assert first == second
    assert "subgraph cluster_it" in first and "subgraph cluster_step" in first
    assert '"actor@step" -> "env@step" [label=action]' in first
    assert "style=dashed" in first and "#fcbba1" in first  # state edges; learner colour


def test_capture_from_a_function_uses_its_globals_and_closure():
    env = CartPole(num_envs=2)

    def loop():
        obs = env.reset()
        for it in range(2):
            obs, *_ = env.step(torch.zeros(2, dtype=torch.int64))

    g = capture(loop)
    assert [f.name for f in g.fragments] == ["env@cell", "env@it"]


# -- bad input: a clear error naming the problem and the line, namespace untouched -------------
GOOD_HEAD = "obs = env.reset()\nfor it in range(3):\n"


@pytest.mark.parametrize(
    "cell, message, lineno",
    [
        ("for it in range(3)\n    pass\n", "syntax error", 1),
        ("\n   \n# only a comment\n", "the cell is empty", None),
        ("obs = env.reset()\n", "the cell has no loop", None),
        ("x = 0\nfor it in range(3):\n    x += 1\n", "the loop calls no component", 2),
        (GOOD_HEAD + "    env.step(actoin)\n", "`actoin` is not defined", 3),
        (GOOD_HEAD + "    env.step(action)\n    action = obs\n", "`action` is read before it is assigned", 3),
        (GOOD_HEAD + "    CartPole.step(obs)\n", "`CartPole` is a component class, not an instance", 3),
        (GOOD_HEAD + "    def f():\n        pass\n", "a function definition is not supported", 3),
        (GOOD_HEAD + "    class A:\n        pass\n", "a class definition is not supported", 3),
        (GOOD_HEAD + "    for k in range(2):\n        if k:\n            break\n", "this `break` is not supported.*inner loop", 5),
        (GOOD_HEAD + "    break\n", "this `break` is not supported", 3),
        (GOOD_HEAD + "    if it:\n        env.reset()\n    else:\n        continue\n", "this `continue` is not supported", 6),
        (GOOD_HEAD + "    try:\n        env.reset()\n    except Exception:\n        pass\n", "`try` is not supported", 3),
        (GOOD_HEAD + "    with open('x') as f:\n        env.reset()\n", "`with` is not supported", 3),
        (GOOD_HEAD + "    global obs\n", "`global` is not supported", 3),
        (GOOD_HEAD + "    env.reset()\nfor j in range(2):\n    env.reset()\n", "2 top-level loops", 4),
        (GOOD_HEAD + "    obs = env.step(actor.act(obs) if it else obs)\n", "components of different roles", 3),
        (GOOD_HEAD + "    while it:\n        env.reset()\n", "a `while` loop inside the training loop", 3),
        (GOOD_HEAD + "    env.reset()\nelse:\n    pass\n", "`for ... else`", 2),
    ],
)
def test_bad_cells_raise_fragment_error_naming_problem_and_line(cell, message, lineno):
    env = CartPole(num_envs=2)
    ns = {"env": env, "actor": PPOActor(torch.nn.Linear(1, 1), 2), "CartPole": CartPole}
    before = dict(ns)
    with pytest.raises(FragmentError, match=message) as info:
        capture(cell, ns)
    assert info.value.lineno == lineno
    if lineno is not None:
        assert str(info.value).startswith(f"line {lineno}: ")
        assert info.value.line == cell.splitlines()[lineno - 1].strip()
    assert ns == before and env.vector_steps == 0  # nothing ran, nothing bound


def test_fragment_error_renders_as_one_message_in_ipython():
    err = FragmentError("`x` is not defined", 3, "    y = x")
    assert err._render_traceback_() == ["FragmentError: line 3: `x` is not defined\n    3 | y = x"]


def test_fragnb_exports_the_contract():
    assert callable(fragnb.capture) and callable(fragnb.run) and issubclass(fragnb.FragmentError, ValueError)
