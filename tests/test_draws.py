"""Global random draws: found at their line, and the guarantee a run can give stated before it starts.

Pure decisions (which statements draw, what depends on them, exact or statistical) need no cluster;
the runs at the end check that the announced guarantee is what the run delivers.
"""

import pytest
import torch

import fragnb
from corpus.compare import compare_namespaces
from corpus.components import CategoricalActor, CategoricalPolicy, GlobalSamplingActor, PGLearner, ShufflingLearner
from fragnb.envs import CartPole
from fragnb.runtime.draws import find_draws, refuse_inexact

CELL = """
obs = env.reset()
for it in range(3):
    steps_obs, steps_act, steps_rew = [], [], []
    for t in range(4):
        action, logp = actor.act(obs)
        steps_obs.append(obs)
        obs, reward, terminated, truncated, info = env.step(action)
        steps_act.append(action)
        steps_rew.append(reward)
    stats = learner.update(torch.stack(steps_obs), torch.stack(steps_act), torch.stack(steps_rew))
"""


def _namespace(actor_cls=GlobalSamplingActor, learner_cls=PGLearner, num_envs=4):
    torch.manual_seed(0)
    policy = CategoricalPolicy(4, 2)
    return {
        "env": CartPole(num_envs=num_envs, seed=0),
        "actor": actor_cls(policy, num_envs),
        "learner": learner_cls(policy),
        "torch": torch,
    }


def test_draws_are_found_at_the_line_that_makes_them_and_the_notebook_generators_are_untouched():
    graph = fragnb.capture(CELL, _namespace())
    before = torch.get_rng_state()
    draws = find_draws(graph)
    assert torch.equal(before, torch.get_rng_state())
    assert [graph.statements[i].lineno for i in draws.statements] == [6]
    assert draws.statements[next(iter(draws.statements))] == ("torch",)
    assert draws.lines(graph.place("coarse", actors=2)) == [
        "line 6 (`action, logp = actor.act(obs)`) draws from torch's global generator in 'actors' x2"
    ]
    assert {"action", "logp", "obs", "stats", "learner", "actor", "env"} <= draws.tainted(graph)


def test_streams_make_no_draws_and_one_drawing_replica_is_still_exact():
    assert not find_draws(fragnb.capture(CELL, _namespace(CategoricalActor)))
    graph = fragnb.capture(CELL, _namespace())
    draws = find_draws(graph)
    assert draws.exact(graph.place("coarse", actors=1)) and not draws.exact(graph.place("coarse", actors=2))
    shuffling = fragnb.capture(CELL, _namespace(CategoricalActor, ShufflingLearner))
    assert find_draws(shuffling).exact(shuffling.place("coarse", actors=2))  # only the one learner draws


def test_exact_refuses_a_statistical_run_naming_the_draw_and_the_streams():
    graph = fragnb.capture(CELL, _namespace())
    with pytest.raises(
        fragnb.FragmentError, match=r"^line 6: the exact guarantee was asked for.*streams.sample\(dist\)"
    ):
        refuse_inexact(graph.place("coarse", actors=2), find_draws(graph), exact=True)


def test_exact_refuses_naming_the_draws_that_cause_it_at_the_replica_count_asked():
    """The safety net checks 8 actors as 4, and a learner's one replica draws plain Python's numbers: the refusal
    names the actors' draw, at 8, and not the learner's (both were named before, at 4)."""
    from fragnb.runtime.check import check

    graph = fragnb.capture(CELL, _namespace(GlobalSamplingActor, ShufflingLearner, num_envs=8))
    assert len(find_draws(graph).statements) == 2  # the actor's sampling and the learner's shuffle
    with pytest.raises(fragnb.FragmentError) as refused:
        check(graph.place("coarse", actors=8), exact=True)
    said = str(refused.value).split(": replicas cannot")[0]
    assert said.endswith("line 6 (`action, logp = actor.act(obs)`) draws from torch's global generator in 'actors' x8")
    assert "'learner'" not in said


@pytest.mark.slow
def test_global_sampling_under_coarse_is_announced_statistical_checked_and_trains(capfd):
    ns = _namespace()
    weights = {k: v.clone() for k, v in ns["learner"].policy.state_dict().items()}
    graph = fragnb.capture(CELL, ns)
    with pytest.raises(fragnb.FragmentError, match="line 6: the exact guarantee was asked for"):
        fragnb.run(graph, "coarse", actors=2, progress=False, plot=False, exact=True)
    assert all(torch.equal(weights[k], v) for k, v in ns["learner"].policy.state_dict().items())  # refused: untouched
    result = fragnb.run(graph, "coarse", actors=2, progress=False, plot=False)
    assert result.guarantee == "statistical" and "line 6" in result.draws[0]
    assert "fragnb: statistical run: line 6" in capfd.readouterr().err
    assert ns["it"] == 2 and len(ns["steps_act"]) == 4 and ns["steps_act"][0].shape == (4,)
    assert any(not torch.equal(weights[k], v) for k, v in ns["learner"].policy.state_dict().items())


@pytest.mark.slow
def test_a_learners_global_shuffle_under_coarse_is_exact():
    plain = _namespace(CategoricalActor, ShufflingLearner)
    exec(CELL, plain)
    ns = _namespace(CategoricalActor, ShufflingLearner)
    result = fragnb.run(fragnb.capture(CELL, ns), "coarse", actors=2, progress=False, plot=False, exact=True)
    assert result.guarantee == "exact"
    compare_namespaces(plain, ns, CELL)
