"""Loops as the field writes them (tests/corpus/field.py): ``single`` runs each as plain Python does,
and capture finds the roles from the ecosystem's types."""

import re

import pytest
import torch
from IPython.core.error import UsageError

import fragnb
from corpus.compare import compare_namespaces
from corpus.field import FIELD, FIELD_BY_NAME
from corpus.objects import OBJECTS
from fragnb.plan.script import Script


def _plain(loop):
    ns = loop.namespace()
    exec(compile(loop.cell, "<cell>", "exec"), ns)
    return ns


@pytest.mark.parametrize("loop", FIELD, ids=[loop.name for loop in FIELD])
def test_field_loop_under_single_leaves_the_plain_namespace(loop):
    plain = _plain(loop)
    ns = loop.namespace()
    graph = fragnb.capture(loop.cell, ns, name=loop.name)
    fragnb.run(graph, "single", progress=False, plot=False)
    compare_namespaces(plain, ns, loop.cell)
    assert graph.dot  # it draws


#: What 2 replicas of each field loop give: the namespace of plain Python (exact), a run that says it
#: is statistical and trains, or a refusal before any worker starts that names the true cause.
UNDER_TWO_REPLICAS = [
    ("cleanrl_ppo", "coarse", "statistical"),
    ("cleanrl_ppo", "fine", "exact"),  # inference runs once: the one replica draws plain Python's numbers
    # the actors run the step loop over their storage writes, the learner its `global_step += ...` and the
    # episode log: each its own copy of `for step in ...`, the storage travelling as the trajectory
    ("cleanrl_ppo", "async", "statistical"),
    ("ppo_continuous", "coarse", "statistical"),
    ("ppo_continuous", "fine", "exact"),
    ("a2c", "coarse", r"`entropies\[0\]` carries an autograd graph from group 'actors' to 'learner'"),
    ("a2c", "fine", "exact"),
    # epsilon-greedy on gathered greedy actions runs once, in the driver; the replay deque, sampled every
    # step, stays with the learner (a placement note says so)
    ("cleanrl_dqn", "coarse", "exact"),
    ("cleanrl_dqn", "fine", "exact"),
    ("vector_reinforce", "coarse", "statistical"),  # sampling and dropout in both actors
    ("vector_reinforce", "fine", "exact"),
    # torch.arange(args.num_envs) indexes a replica's 2 Q-rows: refused before any worker, naming the line
    ("q_lambda", "coarse", r"line 9: under 'coarse' the cell raises where plain Python does not.*steps 2 of the 4"),
    ("q_lambda", "fine", "exact"),  # the rollout's draws and the indexing run once, in the one inference replica
    # the optimisers stepped through `for group, opt in optimizers.items()` do not come back into the dict: the
    # safety net compares what the cell only reads too, and refuses rather than leave Adam's state behind
    ("optimiser_dict", "fine", r"`optimizers` differs: optimizers\['actor'\]\['state'\]"),
    (
        "dqn_tutorial",
        "coarse",
        r"`env` \(gymnasium.wrappers.TimeLimit\).*one environment, stepped episode by episode.*SyncVectorEnv",
    ),
    (
        "reinforce",
        "fine",
        r"`env` \(gymnasium.wrappers.TimeLimit\).*one environment, stepped episode by episode.*SyncVectorEnv",
    ),
]


def _weights(ns):
    return {
        f"{name}.{k}": v.clone()
        for name, net in ns.items()
        if isinstance(net, torch.nn.Module)
        for k, v in net.state_dict().items()
    }


@pytest.mark.parametrize("name,policy,expect", UNDER_TWO_REPLICAS, ids=[f"{n}-{p}" for n, p, _ in UNDER_TWO_REPLICAS])
def test_field_loop_under_two_replicas_is_exact_statistical_or_refused_with_the_cause(name, policy, expect):
    loop = FIELD_BY_NAME[name]
    plain = _plain(loop)
    ns = loop.namespace()
    before = _weights(ns)
    graph = fragnb.capture(loop.cell, ns, name=loop.name)
    if expect not in ("exact", "statistical"):
        with pytest.raises(fragnb.FragmentError, match=expect):
            fragnb.run(graph, policy, actors=2, progress=False, plot=False)
        return
    result = fragnb.run(graph, policy, actors=2, progress=False, plot=False)
    assert result.guarantee == expect
    alone = fragnb.run(
        fragnb.capture(loop.cell, loop.namespace(), name=loop.name), "single", progress=False, plot=False
    )
    if policy == "async":  # the actors step ahead of the learner, by the bound at most
        assert alone.env_steps < result.env_steps <= 2 * alone.env_steps
        assert result.staleness and max(max(ages) for ages in result.staleness) <= 1  # max_staleness's default
    else:
        assert result.env_steps == alone.env_steps > 0  # each replica counts the steps of its share
    if expect == "exact":
        compare_namespaces(plain, ns, loop.cell)
    else:
        assert any("draws from torch's global generator in 'actors' x2" in d for d in result.draws)
        after = _weights(ns)
        assert after.keys() == before.keys() and any(not torch.equal(before[k], after[k]) for k in before)  # it trained
        for var in ("obs", "actions", "logprobs", "rewards"):  # storage joined along the environments' axis
            if isinstance(plain.get(var), torch.Tensor):
                assert ns[var].shape == plain[var].shape


def _exact_cleanrl():
    """CleanRL's loop with the one sampling line swapped for per-environment streams (and the setup
    line that makes them)."""
    from corpus.field import CLEANRL_PPO_CELL, CLEANRL_PPO_SETUP
    from corpus.loops import _loop

    setup = (
        CLEANRL_PPO_SETUP.replace("action = probs.sample()", "action = streams.sample(probs)")
        .replace(
            "    agent = Agent(envs).to(device)\n",
            "    agent = Agent(envs).to(device)\n    streams = EnvStreams(args.seed, torch.arange(args.num_envs), 'action')\n",
        )
        .replace("import random\n", "import random\n    from fragnb.streams import EnvStreams\n")
    )
    assert "streams.sample(probs)" in setup and "EnvStreams(args.seed" in setup
    return _loop("cleanrl_exact", setup, CLEANRL_PPO_CELL)


@pytest.mark.parametrize("policy", ["coarse", "fine"])
def test_cleanrl_with_its_sampling_line_on_streams_is_exact_under_two_replicas(policy):
    loop = _exact_cleanrl()
    plain = _plain(loop)
    ns = loop.namespace()
    result = fragnb.run(
        fragnb.capture(loop.cell, ns, name=loop.name), policy, actors=2, progress=False, plot=False, exact=True
    )
    assert result.guarantee == "exact"
    compare_namespaces(plain, ns, loop.cell)
    # the streams the agent's method drew from came back advanced, each replica's environments from it
    assert torch.equal(ns["streams"].counters, plain["streams"].counters) and int(ns["streams"].counters[0]) > 0
    # and the notebook's class still reads the notebook's globals (the safety net's threads once left the
    # methods of the payload's copy on it: a next run would not have found `streams`)
    assert type(ns["agent"]).get_action_and_value.__globals__ is ns


def test_the_dry_runs_on_copies_leave_the_streams_a_notebook_class_draws_from_as_they_were():
    # The magic measures each edge with a dry iteration on copies before it runs; the copies share the
    # notebook's classes, whose methods draw from the notebook's `streams`: the run after it was not exact
    loop = _exact_cleanrl()
    ns = loop.namespace()
    graph = fragnb.capture(loop.cell, ns, name=loop.name)
    before = ns["streams"].counters.clone()
    fragnb.measure(graph)
    fragnb.profile(graph, iterations=1)
    assert torch.equal(ns["streams"].counters, before)


def test_the_magic_runs_cleanrl_on_streams_as_exactly_as_fragnb_run(shell):
    loop = _exact_cleanrl()
    plain = {"__name__": "__main__"}  # the module IPython's classes belong to, as the shell's will
    exec(compile(loop.setup, "<setup>", "exec"), plain)
    exec(compile(loop.cell, "<cell>", "exec"), plain)
    shell.run_cell(loop.setup, store_history=False).raise_error()
    shell.run_cell_magic("fragment", "x --policy coarse --actors 2 --exact --run --no-progress --no-plot", loop.cell)
    assert shell.user_ns["x"].last_run.guarantee == "exact"
    compare_namespaces(plain, {k: v for k, v in shell.user_ns.items() if k in plain}, loop.cell)


def test_a_vector_env_shard_seeds_and_steps_as_its_environments_do_in_the_whole_batch():
    import gymnasium as gym
    import numpy as np

    from fragnb import shards

    def make():
        return gym.vector.SyncVectorEnv(
            [lambda: gym.wrappers.RecordEpisodeStatistics(gym.make("CartPole-v1")) for _ in range(4)]
        )

    whole, split = make(), make()
    parts = [shards.shard(split, i, 2) for i in range(2)]
    assert [p.num_envs for p in parts] == [2, 2] and parts[1].observation_space.shape == (2, 4)
    obs = np.concatenate([p.reset(seed=3)[0] for p in parts])
    assert np.array_equal(obs, whole.reset(seed=3)[0])
    for t in range(40):  # past episode ends: autoreset state travels with each sub-environment
        actions = np.array([t % 2, 1, 0, (t // 3) % 2])
        full = whole.step(actions)
        halves = [p.step(actions[2 * i : 2 * i + 2]) for i, p in enumerate(parts)]
        assert np.array_equal(full[0], np.concatenate([h[0] for h in halves]))
        assert np.array_equal(full[1], np.concatenate([h[1] for h in halves]))
    merged = shards.merge(parts)
    assert merged.num_envs == 4 and "reset" not in vars(merged)
    assert np.array_equal(merged.step(np.zeros(4, dtype=int))[0], whole.step(np.zeros(4, dtype=int))[0])


def test_a_vector_envs_infos_from_two_shards_join_as_the_whole_batch_reports_them():
    import numpy as np

    from fragnb.runtime.worker.edges import gather

    ended = {
        "episode": {"r": np.array([0.0, 12.0]), "_r": np.array([False, True])},
        "_episode": np.array([False, True]),
    }
    joined = gather([{}, ended])
    assert np.array_equal(joined["_episode"], [False, False, False, True])
    assert np.array_equal(joined["episode"]["r"], [0.0, 0.0, 0.0, 12.0]) and joined["episode"]["r"].dtype == np.float64
    assert gather([{}, {}]) == {}


def test_objects_a_distributed_policy_cannot_move_are_refused_naming_the_way_out():
    import gymnasium as gym

    ns = {
        "envs": gym.vector.AsyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2, shared_memory=False),
        "np": __import__("numpy"),
    }
    try:
        graph = fragnb.capture(
            "for it in range(2):\n    out = envs.step(np.zeros(2, dtype=int))\n", ns, name="async_env"
        )
        with pytest.raises(fragnb.FragmentError, match="AsyncVectorEnv.*use gym.vector.SyncVectorEnv"):
            graph.place("coarse", actors=2)
    finally:
        ns["envs"].close()


def test_cleanrl_ppo_roles_come_from_types_and_dataflow():
    loop = FIELD_BY_NAME["cleanrl_ppo"]
    ns = loop.namespace()
    graph = fragnb.capture(loop.cell, ns, name=loop.name)
    assert graph.components == {"optimizer": "learner", "agent": "learner", "envs": "env"}
    role = {s.source.strip(): s.role for s in graph.statements}
    assert role["next_obs, reward, terminations, truncations, infos = envs.step(action.cpu().numpy())"] == "env"
    assert (
        role["with torch.no_grad():\n    action, logprob, _, value = agent.get_action_and_value(next_obs)"] == "actor"
    )
    assert role["loss.backward()"] == "learner"
    assert role["nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)"] == "learner"
    assert role["obs[step] = next_obs"] == "buffer"
    assert {f.role for f in graph.fragments} >= {"env", "actor", "buffer", "learner"}
    assert any(e.kind == "state" and e.variables == ("agent state",) for e in graph.edges)


AUTOGRAD_CELL = """
obs = env.reset()
for it in range(2):
    logps, rewards = [], []
    for t in range(3):
        action, logp = actor.act(obs)
        obs, reward, terminated, truncated, info = env.step(action)
        logps.append(logp)
        rewards.append(reward)
    loss = learner.update(logps, rewards)
"""


@pytest.mark.parametrize("check", [True, False], ids=["safety-net", "no-check"])
def test_an_autograd_graph_crossing_worker_groups_is_refused_naming_the_variable_and_the_fix(check):
    import torch

    from corpus.components import CategoricalPolicy, GraphActor, LogProbLearner
    from fragnb.envs import CartPole

    torch.manual_seed(0)
    policy = CategoricalPolicy(4, 2)
    ns = {
        "env": CartPole(num_envs=4, seed=0),
        "actor": GraphActor(policy, 4),
        "learner": LogProbLearner(policy),
        "torch": torch,
    }
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    graph = fragnb.capture(AUTOGRAD_CELL, ns, name="reinforce_graph")
    fragnb.run(graph, "single", progress=False, plot=False)  # plain Python trains
    assert any(not torch.equal(before[k], v) for k, v in policy.state_dict().items())
    with pytest.raises(
        fragnb.FragmentError,
        match=r"^line 6: `logp` carries an autograd graph from group 'actors' to 'learner'.*Recompute it on the learner's side",
    ):
        fragnb.run(graph, "coarse", actors=2, progress=False, plot=False, check=check)


def test_a_role_is_overridden_in_one_line_by_the_objects_name():
    loop = FIELD_BY_NAME["cleanrl_ppo"]
    ns = loop.namespace()
    cell = loop.cell
    inferred = fragnb.capture(cell, ns, name=loop.name)
    assert "writer" not in inferred.components  # a list: bookkeeping, the driver's
    graph = fragnb.capture(cell, ns, name=loop.name, roles={"envs": "env", "writer": "buffer"})
    assert graph.components["writer"] == "buffer"
    assert any("writer.append" in s.source and s.role == "buffer" for s in graph.statements)
    with pytest.raises(
        ValueError, match=r"role 'critic' for `envs`: a role is one of \['actor', 'buffer', 'env', 'learner'\]"
    ):
        fragnb.capture(cell, ns, name=loop.name, roles={"envs": "critic"})
    with pytest.raises(ValueError, match="no such name in the notebook"):
        fragnb.capture(cell, ns, name=loop.name, roles={"nothing": "actor"})


def test_the_magic_takes_roles_as_name_equals_role(shell):
    loop = FIELD_BY_NAME["cleanrl_ppo"]
    shell.user_ns.update(loop.namespace())
    shell.run_cell_magic("fragment", "byo --quiet --role writer=buffer", loop.cell)
    assert shell.user_ns["byo"].components["writer"] == "buffer"
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match="--role takes NAME=ROLE"):
        shell.run_cell_magic("fragment", "byo --quiet --role writer", loop.cell)
    with pytest.raises(UsageError, match="a role is one of"):
        shell.run_cell_magic("fragment", "byo --quiet --role writer=critic", loop.cell)


def test_values_read_from_a_clock_are_no_difference_to_the_safety_net():
    """CleanRL logs steps per second from time.time(): never the same twice, so not compared."""
    import time

    loop = FIELD_BY_NAME["cleanrl_ppo"]
    cell = loop.cell + (
        '    print("SPS:", int(global_step / (time.time() - start_time)))\n'
        '    writer.append(("charts/SPS", int(global_step / (time.time() - start_time)), global_step))\n'
    )
    ns = {**loop.namespace(), "start_time": time.time() - 1e-3}
    result = fragnb.run(fragnb.capture(cell, ns, name=loop.name), "fine", actors=2, progress=False, plot=False)
    assert result.guarantee == "exact"
    assert [step for tag, _, step in ns["writer"] if tag == "charts/SPS"] == [64, 128, 192]


# -- one path: the magic places, measures, checks and runs a field loop as fragnb.run does ------------------
@pytest.mark.parametrize(
    "name,policy,expect",
    [
        ("cleanrl_ppo", "coarse", "statistical"),  # measuring sizes every edge first, as the drawing shows them
        ("ppo_continuous", "fine", "exact"),
        ("dqn_tutorial", "coarse", "one environment, stepped episode by episode: use policy 'data_parallel'"),
    ],
)
def test_the_magic_runs_or_refuses_a_field_loop_as_fragnb_run_does(shell, name, policy, expect, capsys):
    loop = FIELD_BY_NAME[name]
    shell.run_cell(loop.setup, store_history=False).raise_error()
    line = f"{name} --policy {policy} --actors 2 --run --no-progress --no-plot --no-dashboard"
    if expect not in ("exact", "statistical"):
        with pytest.raises(UsageError, match=expect):
            shell.run_cell_magic("fragment", line, loop.cell)
        return
    shell.run_cell_magic("fragment", line, loop.cell)  # draws the placement (its edges measured), then runs
    assert shell.user_ns[name].last_run.guarantee == expect
    assert f"Placement of '{name}' under '{policy}'" in capsys.readouterr().out


def test_what_cannot_be_copied_for_the_dry_run_is_refused_by_name_through_the_magic(shell):
    loop = FIELD_BY_NAME["vector_reinforce"]
    shell.run_cell(loop.setup, store_history=False).raise_error()
    shell.run_cell("import threading\npolicy.lock = threading.Lock()", store_history=False).raise_error()
    with pytest.raises(fragnb.FragmentError, match=r"`policy` \(Sequential\) cannot be copied: `policy.lock`") as e:
        shell.run_cell_magic("fragment", "loop --policy coarse --actors 2", loop.cell)
    assert e.value.lineno is not None  # the line that first uses it


def test_measure_sizes_what_it_can_and_leaves_a_gymnasium_envs_state_unmeasured():
    loop = FIELD_BY_NAME["dqn_tutorial"]
    graph = fragnb.capture(loop.cell, loop.namespace(), name=loop.name)
    sizes = fragnb.measure(graph)  # the env's state has no state_dict: unmeasured, not a crash
    state = [(e.src, e.dst, e.kind) for e in graph.edges if e.kind == "state" and "env" in " ".join(e.variables)]
    assert state and all(key not in sizes for key in state)
    assert any(n > 0 for n in sizes.values())


def test_measuring_a_loop_leaves_the_notebooks_global_generators_as_they_were():
    """The magic measures a loop on copies before it draws and runs it; the copies hold the objects, not
    torch's and NumPy's global generators, which the loop's `probs.sample()` and `np.random.shuffle` move."""
    import random

    import numpy as np

    from fragnb.runtime import measure
    from fragnb.runtime.worker.generators import moved, states

    loop = FIELD_BY_NAME["cleanrl_ppo"]
    graph = fragnb.capture(loop.cell, loop.namespace(), name=loop.name)
    before = states()
    measure(graph)
    assert moved(before, states()) == []
    assert torch.rand(1).item() == torch.rand(1, generator=torch.Generator().set_state(before["torch"])).item()
    assert np.random.get_state()[1][0] == before["numpy"][1][0] and random.getstate() == before["random"]


def test_field_loop_through_the_magic_under_fine_leaves_plain_pythons_namespace(shell):
    """CleanRL's own ppo.py was silently different under `fine` through `%%fragment ... --run`, never
    through fragnb.run: the drawing's measurement had moved the notebook's global generators."""
    loop = FIELD_BY_NAME["cleanrl_ppo"]
    plain = _plain(loop)
    ns = loop.namespace()
    shell.user_ns.update(ns)
    shell.run_cell_magic("fragment", "ppo --policy fine --actors 2 --run --no-progress --no-plot", loop.cell)
    assert shell.user_ns.pop("ppo").last_run.guarantee == "exact"
    compare_namespaces(plain, {k: shell.user_ns[k] for k in plain if k in shell.user_ns}, loop.cell)


def test_a_dry_run_on_copies_calls_the_notebooks_functions_on_the_copies():
    """The REINFORCE tutorial's select_action() and finish_episode() read `policy` from the notebook's
    globals while the cell appends to `policy.rewards`: on copies they must read the copied `policy` (they
    read the notebook's, finish_episode() found no rewards, and the magic's measurement raised
    `torch.cat(): expected a non-empty list` before data_parallel ran), and leave the notebook's alone."""
    from fragnb.runtime import measure

    loop = FIELD_BY_NAME["reinforce_functions"]
    ns = loop.namespace()
    before = {k: v.clone() for k, v in ns["policy"].state_dict().items()}
    measure(fragnb.capture(loop.cell, ns, name=loop.name))
    assert ns["policy"].saved_log_probs == [] and ns["policy"].rewards == []
    assert all(torch.equal(before[k], v) for k, v in ns["policy"].state_dict().items())


def test_a_vector_env_the_replicas_cannot_split_is_refused_at_the_loops_line_naming_its_setting():
    """CleanRL's dqn.py makes one environment (`args.num_envs = 1`): coarse and fine refuse it as a
    FragmentError at the line that uses `envs`, naming the setting, the counts that divide it and
    data_parallel (it was a bare ValueError)."""
    loop = FIELD_BY_NAME["cleanrl_dqn"]
    ns = loop.namespace()
    setup = loop.setup.replace("num_envs: int = 4", "num_envs: int = 1")
    exec(compile(setup, "<setup>", "exec"), ns)
    graph = fragnb.capture(loop.cell, ns, name=loop.name)
    for policy in ("coarse", "fine"):
        with pytest.raises(
            fragnb.FragmentError, match=r"line \d+: `envs` has num_envs=1.*`args.num_envs`.*data_parallel"
        ):
            graph.place(policy, actors=2)


#: What each object-style loop (tests/corpus/objects.py) gives under a policy that splits the loop, and under
#: two data_parallel replicas: a run, or a refusal before any worker starts whose text names the cause.
OBJECT_STYLES = {
    # placed only here: a loop in an agent's method runs under data_parallel in test_data_parallel.py (the magic)
    "agent_method": {
        "split": "through an object's attributes (`agent.env`, an environment, line 49",
        "data_parallel": "places",
    },
    "agent_in_cell": {
        "split": "`wrapped_env` (gymnasium.wrappers.RecordEpisodeStatistics), which a distributed policy cannot move",
        "data_parallel": "`REINFORCE(...)` makes one (its `__init__` builds a torch.optim.AdamW) inside the cell",
    },
    "old_reset": {
        "split": "it is one environment, stepped episode by episode: use policy 'data_parallel'",
        "data_parallel": None,
    },
}


@pytest.mark.parametrize("loop", OBJECTS, ids=[loop.name for loop in OBJECTS])
def test_object_style_loops_are_plain_python_under_single_and_run_or_refuse_naming_the_cause_elsewhere(loop):
    """Issue 71: a loop in an agent's method, an agent built inside the cell, an older gym-style environment:
    `single` leaves plain Python's namespace (the agent's state included); the policies that split the loop
    refuse before a worker starts naming what they cannot carry, and data_parallel x2 runs (each replica its
    own episodes) or refuses naming the line that builds the optimiser. Never a raw error."""
    plain = _plain(loop)
    ns = loop.namespace()
    graph = fragnb.capture(loop.cell, ns, name=loop.name)
    fragnb.run(graph, "single", progress=False, plot=False)
    compare_namespaces(plain, ns, loop.cell)
    expect = OBJECT_STYLES[loop.name]
    for policy, params in (("coarse", {"actors": 2}), ("fine", {}), ("async", {"actors": 2})):
        with pytest.raises(fragnb.FragmentError) as info:
            Script.of(graph.place(policy, **params))
        assert expect["split"] in str(info.value) and info.value.lineno is not None, str(info.value)
    graph = fragnb.capture(loop.cell, loop.namespace(), name=loop.name)
    if expect["data_parallel"] == "places":
        Script.of(graph.place("data_parallel", replicas=2))
        return
    if expect["data_parallel"] is not None:
        with pytest.raises(fragnb.FragmentError, match=re.escape(expect["data_parallel"])):
            graph.place("data_parallel", replicas=2)
        return
    result = fragnb.run(graph, "data_parallel", replicas=2, progress=False, plot=False)
    first, second = (result.replica_values[r] for r in ("replicas[0]", "replicas[1]"))
    assert result.guarantee == "data-parallel" and first != second  # each replica its own episodes
