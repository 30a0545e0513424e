import inspect
import textwrap

import pytest
import torch

import fragnb
from fragnb import FragmentError, capture
from fragnb.algos.ppo import ActorCritic, PPOActor
from fragnb.envs import CartPole
from fragnb.plan.script import Script


def test_ppo_cell_gives_role_fragments_per_loop(canonical, ppo_ns):
    g = capture(canonical.body, ppo_ns(), name="ppo")
    assert [(f.name, f.role) for f in g.fragments] == [
        ("env@cell", "env"),
        ("driver@cell", "driver"),
        ("actor@step", "actor"),
        ("env@step", "env"),
        ("buffer@step", "buffer"),
        ("driver@step", "driver"),
        ("actor@it", "actor"),
        ("buffer@it", "buffer"),
        ("learner", "learner"),
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
    g = capture(
        textwrap.dedent("""\
        lengths = []
        for it in range(3):
            obs, reward, terminated, truncated, info = env.step(torch.zeros(2, dtype=torch.int64))
            lengths.append(len(info["episode_returns"]))
            print(it)
        """),
        ns,
    )
    roles = {s.lineno: s.role for s in g.statements}
    assert roles == {1: "driver", 3: "env", 4: "driver", 5: "driver"}


def test_plain_statements_run_with_the_role_that_needs_their_values():
    ns = {"env": CartPole(num_envs=2), "actor": PPOActor(torch.nn.Linear(1, 1), 2), "torch": torch}
    g = capture(
        textwrap.dedent("""\
        obs = env.reset()
        for it in range(3):
            scaled = obs * 2
            action, logprob, value = actor.act(scaled)
            obs, reward, terminated, truncated, info = env.step(action)
            for value in range(2):
                print(value)
        """),
        ns,
    )
    roles = {s.lineno: s.role for s in g.statements}
    # `value` of line 6 is the loop's own, not actor.act's: line 7 stays bookkeeping
    assert roles == {1: "env", 3: "actor", 4: "actor", 5: "env", 7: "driver"}


def test_nested_calls_and_if_blocks_of_several_roles_are_split_with_the_condition_evaluated_once(canonical, ppo_ns):
    cell = canonical.body.replace(
        "last_value = actor.value(obs)\n    batch = buffer.batch(last_value)",
        "if it >= 0:\n        batch = buffer.batch(actor.value(obs))\n        for k in range(1):\n            print(k)",
    )
    g = capture(cell, ppo_ns())
    split = [(s.lineno, s.role, s.source.splitlines()[-1].strip()) for s in g.statements if s.lineno >= 10]
    assert split[:3] == [
        (10, "actor", "_fragnb_1 = it >= 0"),
        (11, "actor", "_fragnb_2 = actor.value(obs)"),
        (11, "buffer", "batch = buffer.batch(_fragnb_2)"),
    ]
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
        for it in range(2):  # noqa: B007 (the loop variable names the fragment: env@it)
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
        ("for it in range(3):\n    return 1\n", "syntax error: 'return' outside function", 2),
        (GOOD_HEAD + "    env.step(actoin)\n", "`actoin` is not defined", 3),
        (GOOD_HEAD + "    env.step(action)\n    action = obs\n", "`action` is read before it is assigned", 3),
        (GOOD_HEAD + "    CartPole.step(obs)\n", "`CartPole` is a component class, not an instance", 3),
    ],
)
def test_cells_plain_python_would_not_run_raise_fragment_error_naming_problem_and_line(cell, message, lineno):
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


# What plain Python runs but no distributed policy can split: `single` runs it, others refuse naming the line.
ROLLOUT = GOOD_HEAD + "    obs = env.step(actor.act(obs)[0])[0]\n"
LIMITS = [
    ("obs = env.reset()\n", "the cell has no loop", None),
    ("x = 0\nfor it in range(3):\n    x += 1\n", "the loop calls no component", 2),
    (ROLLOUT + "    def f():\n        pass\n", "a function definition is not supported", 4),
    (ROLLOUT + "    class A:\n        pass\n", "a class definition is not supported", 4),
    (
        ROLLOUT + "    for k in range(2):\n        action = actor.act(obs)[0]\n"
        "        obs = env.step(action)[0]\n        if k:\n            break\n",
        "this `break` is not supported.*inner loop",
        8,
    ),
    (ROLLOUT + "    break\n", "this `break` is not supported", 4),
    (ROLLOUT + "    if it:\n        env.reset()\n    else:\n        continue\n", "this `continue` is not supported", 7),
    (ROLLOUT + "    try:\n        env.reset()\n    except Exception:\n        pass\n", "`try` is not supported", 4),
    (ROLLOUT + "    with open('/dev/null') as f:\n        env.reset()\n", "this `with` is not supported", 4),
    (ROLLOUT + "    global total\n", "`global` is not supported", 4),
    (ROLLOUT + "    env.reset()\nfor j in range(2):\n    env.reset()\n", "2 top-level loops", 5),
    (
        ROLLOUT + "    obs = env.step(actor.act(obs)[0] if it else obs.argmax(1))[0]\n",
        "components of different roles",
        4,
    ),
    (ROLLOUT + "    while it > 5:\n        env.reset()\n", "a `while` loop inside the training loop", 4),
    (ROLLOUT + "    env.reset()\nelse:\n    pass\n", "`for ... else`", 2),
]


@pytest.mark.parametrize("cell, message, lineno", LIMITS)
def test_cells_plain_python_runs_run_under_single_and_distributed_policies_refuse_naming_the_line(
    cell, message, lineno
):
    def namespace():
        return {"env": CartPole(num_envs=2, seed=0), "actor": PPOActor(ActorCritic(4, 2), 2), "torch": torch}

    ns, plain = namespace(), namespace()
    g = capture(cell, ns)
    with pytest.raises(FragmentError, match=message) as info:
        Script.of(g.place("fine"))  # everything a run decides before a worker starts
    assert info.value.lineno == lineno and "`single` runs it as plain Python" in str(info.value)
    if lineno is not None:
        assert str(info.value).startswith(f"line {lineno}: ")
    fragnb.run(g, "single", progress=False)
    exec(cell, plain)
    assert ns["env"].vector_steps == plain["env"].vector_steps
    assert {k for k in ns if not k.startswith("__")} == {k for k in plain if not k.startswith("__")}
    for name in ("obs", "it", "x", "k"):
        if name in plain:
            assert type(ns[name]) is type(plain[name])
            assert (
                torch.equal(ns[name], plain[name]) if isinstance(plain[name], torch.Tensor) else ns[name] == plain[name]
            )


class _Trainer:
    """An agent whose training loop is its own method, as object-oriented tutorials write it."""

    def __init__(self, env):
        self.env = env

    def train(self, iterations, scale=2):
        for _ in range(iterations):
            self.env.step(torch.zeros(scale, dtype=torch.long))
        return self.env.vector_steps

    def train_until(self, iterations):
        for it in range(iterations):
            self.env.step(torch.zeros(2, dtype=torch.long))
            if it == 1:
                return it  # a return inside the loop: not a cell's shape

    def train_private(self, iterations):
        self.__done = 0  # `self._Trainer__done` inside the class only: not a cell's shape
        for _ in range(iterations):
            self.env.step(torch.zeros(2, dtype=torch.long))
            self.__done += 1
        return self.__done


def test_a_loop_inside_a_method_the_cell_calls_is_read_from_the_method_at_its_own_lines():
    """Issue 71: `steps = trainer.train(3)` was refused under every distributed policy as "the cell has no
    loop". Capture reads the method's body (self as `trainer`, the parameters bound, the return assigned),
    each statement at its line in the method's source; `single` is plain Python; a policy that splits the
    loop names the attributes it calls through and data_parallel."""
    trainer, plain = _Trainer(CartPole(num_envs=2, seed=0)), _Trainer(CartPole(num_envs=2, seed=0))
    g = capture("steps = trainer.train(3)\n", {"trainer": trainer, "torch": torch})
    lines, first = inspect.getsourcelines(_Trainer.train)
    assert g.read_from == f"_Trainer.train, lines {first}-{first + len(lines) - 1} of {__file__}"
    assert g.source.splitlines()[first].strip() == "for _ in range(iterations):"  # the method's own line
    assert g.source.splitlines()[first - 1] == "iterations = 3; scale = 2"  # on the `def` line
    assert g.loops[0].lineno == first + 1
    with pytest.raises(FragmentError) as info:
        Script.of(g.place("fine"))
    message = str(info.value)
    assert info.value.lineno == first + 2 and "`trainer.env`, an environment" in message, message
    assert "'data_parallel'" in message and f"read from _Trainer.train, lines {first}" in message, message
    fragnb.run(g, "single", progress=False)
    assert g.namespace["steps"] == plain.train(3) == 3  # plain Python: the method's loop ran, its return assigned


def test_a_methods_variables_stay_its_own_where_the_notebook_has_its_own_of_the_same_names():
    """Plain Python keeps a method's variables inside the call: read as the cell, they are capture's
    temporaries, and one whose name the notebook holds is renamed, so the notebook's value stays."""
    trainer = _Trainer(CartPole(num_envs=2, seed=0))
    ns = {"trainer": trainer, "torch": torch, "iterations": "mine", "_": None}
    g = capture("steps = trainer.train(iterations=2)\n", ns)
    assert "_fragnb_m_iterations = 2; scale = 2" in g.source
    fragnb.run(g, "single", progress=False)
    assert ns["steps"] == 2 and ns["iterations"] == "mine" and "scale" not in ns


@pytest.mark.parametrize("method, steps", [("train_until", 1), ("train_private", 3)])
def test_a_loop_inside_a_method_capture_cannot_read_as_a_cell_is_refused_naming_the_method_and_its_loop(method, steps):
    """A method that returns from inside its loop, or uses a private `self.__x` (mangled inside its class only),
    is not a cell's shape: the refusal names the method and where its loop is (it said "the cell has no loop"
    or "the loop calls no component", false to the user); `single` runs it as plain Python."""
    trainer = _Trainer(CartPole(num_envs=2, seed=0))
    g = capture(f"steps = trainer.{method}(3)\n", {"trainer": trainer, "torch": torch})
    assert g.read_from is None
    lines, first = inspect.getsourcelines(getattr(_Trainer, method))
    loop_line = first + next(i for i, line in enumerate(lines) if line.strip().startswith("for "))
    for policy, params in (("fine", {}), ("data_parallel", {"learners": 2})):
        with pytest.raises(FragmentError) as info:
            Script.of(g.place(policy, **params))
        message = str(info.value)
        assert info.value.lineno == 1, message
        assert f"inside `_Trainer.{method}` ({__file__}, line {loop_line})" in message, message
        assert "`single` runs it as plain Python" in message and "no component" not in message, message
    fragnb.run(g, "single", progress=False)
    assert g.namespace["steps"] == steps


def test_fragment_error_renders_as_one_message_in_ipython():
    err = FragmentError("`x` is not defined", 3, "    y = x")
    assert err._render_traceback_() == ["FragmentError: line 3: `x` is not defined\n    3 | y = x"]


def test_fragnb_exports_the_contract():
    # the stable user-facing names: adding one is a decision, not a side effect of an import in fragnb/__init__.py
    assert fragnb.__all__ == [
        "capture",
        "measure",
        "profile",
        "run",
        "sweep",
        "Setup",
        "SweepResult",
        "explore",
        "debug",
        "runs",
        "attach",
        "load_run",
        "SavedRun",
        "shutdown",
        "FragmentGraph",
        "FragmentError",
        "RunResult",
        "components",
        "envs",
        "algos",
        "policies",
        "streams",
    ]
    assert all(hasattr(fragnb, name) for name in fragnb.__all__)
    assert callable(fragnb.capture) and callable(fragnb.run) and issubclass(fragnb.FragmentError, ValueError)


def test_a_block_that_assigns_before_it_reads_reads_only_what_comes_from_outside():
    # CleanRL's learning-rate annealing: `frac` is assigned, then read, inside one `if` block.
    cell = (
        "obs = env.reset()\nfor it in range(3):\n    if anneal:\n        frac = 1.0 - it / 3\n        lr = frac * 2.5e-4\n"
        "    action = actor.act(obs)[0]\n    obs = env.step(action)[0]\n"
    )
    ns = {"env": CartPole(num_envs=2), "actor": PPOActor(ActorCritic(4, 2), 2), "anneal": True}
    graph = capture(cell, ns)
    block = next(s for s in graph.statements if s.lineno == 3)
    assert block.reads == {"anneal", "it"} and block.writes == {"frac", "lr"}
    assert not graph.limits


def test_a_mode_context_around_several_roles_is_entered_around_each_statement():
    cell = (
        "obs = env.reset()\nfor it in range(2):\n    with torch.no_grad():\n        action = actor.act(obs)[0]\n"
        "        obs = env.step(action)[0]\n"
    )
    ns = {"env": CartPole(num_envs=2), "actor": PPOActor(ActorCritic(4, 2), 2), "torch": torch}
    graph = capture(cell, ns)
    assert [(s.role, s.source) for s in graph.statements if s.loop] == [
        ("actor", "with torch.no_grad():\n    action = actor.act(obs)[0]"),
        ("env", "with torch.no_grad():\n    obs = env.step(action)[0]"),
    ]
    assert not graph.limits


def test_an_error_at_a_line_of_the_cell_quotes_that_line():
    source = "obs = env.reset()\nfor it in range(3):\n    y = x\n"
    err = FragmentError.in_source("`x` is not defined", 3, source)
    assert str(err) == "line 3: `x` is not defined\n    3 | y = x" and (err.lineno, err.line) == (3, "y = x")
    assert str(FragmentError.in_source("no line", None, source)) == "no line"
    assert FragmentError.in_source("past the end", 9, source).line is None  # a line the cell lacks: nothing quoted
