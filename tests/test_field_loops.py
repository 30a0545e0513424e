"""Loops as the field writes them (tests/corpus/field.py): ``single`` runs each as plain Python does,
and capture finds the roles from the ecosystem's types."""

import pytest

import fragnb
from corpus.compare import compare_namespaces
from corpus.field import FIELD, FIELD_BY_NAME


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


@pytest.mark.parametrize("loop", FIELD, ids=[loop.name for loop in FIELD])
def test_field_loop_is_refused_by_distributed_policies_before_any_worker_naming_the_plain_objects(loop):
    graph = fragnb.capture(loop.cell, loop.namespace(), name=loop.name)
    with pytest.raises(fragnb.FragmentError, match="plain objects|not supported|no component"):
        graph.place("coarse", actors=2)


def test_cleanrl_ppo_roles_come_from_types_and_dataflow():
    loop = FIELD_BY_NAME["cleanrl_ppo"]
    ns = loop.namespace()
    graph = fragnb.capture(loop.cell, ns, name=loop.name)
    assert graph.components == {"optimizer": "learner", "agent": "learner", "envs": "env"}
    role = {s.source.strip(): s.role for s in graph.statements}
    assert role["next_obs, reward, terminations, truncations, infos = envs.step(action.cpu().numpy())"] == "env"
    assert role["with torch.no_grad():\n    action, logprob, _, value = agent.get_action_and_value(next_obs)"] == "actor"
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
    ns = {"env": CartPole(num_envs=4, seed=0), "actor": GraphActor(policy, 4), "learner": LogProbLearner(policy), "torch": torch}
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    graph = fragnb.capture(AUTOGRAD_CELL, ns, name="reinforce_graph")
    fragnb.run(graph, "single", progress=False, plot=False)  # plain Python trains
    assert any(not torch.equal(before[k], v) for k, v in policy.state_dict().items())
    with pytest.raises(fragnb.FragmentError, match=r"^line 6: `logp` carries an autograd graph from group 'actors' to 'learner'.*Recompute it on the learner's side"):
        fragnb.run(graph, "coarse", actors=2, progress=False, plot=False, check=check)
