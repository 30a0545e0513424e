"""Every entry point checks its arguments before anything runs (:mod:`fragnb.arguments`): a value of the
wrong type or out of range is an ``ArgumentError`` naming the function, the argument and what it takes,
and the notebook's namespace is left as it was. No cluster: every refusal comes before one would start."""

from __future__ import annotations

import inspect
import threading
from dataclasses import fields

import pytest

import fragnb
from fragnb.algos.ppo import SMALL_LOOP, small_setup
from fragnb.errors import ArgumentError
from fragnb.predict import PRESETS, Cluster
from fragnb.predict.cluster import _ACCEPTS as CLUSTER_ACCEPTS
from fragnb.predict.model import ACCEPTS as PREDICT_ACCEPTS
from fragnb.predict.model import predict
from fragnb.predict.profile import ACCEPTS as PROFILE_ACCEPTS
from fragnb.predict.profile import Profile
from fragnb.runtime.pipeline import ACCEPTS as RUN_ACCEPTS
from fragnb.runtime.pipeline import OPTIONS, run_placement
from fragnb.seeds import ACCEPTS as SWEEP_ACCEPTS


@pytest.fixture
def graph():
    return fragnb.capture(SMALL_LOOP, small_setup(seed=0), name="ppo")


PROFILE = Profile({"learner": 0.01}, env_steps=32, vector_steps=8, updates=1, weight_bytes=100)

RUN_CASES = [
    ("policy", {"policy": {"coarse": 2}}, "policy={'coarse': 2} is not accepted: give a policy's name"),
    ("until", {"until": 5}, "run(): until=5 is not accepted: give a function of the run so far"),
    ("stop", {"stop": True}, "run(): stop=True is not accepted: give a threading.Event"),
    ("threads", {"threads": "2"}, "run(): threads='2' is not accepted: give a whole number, 1 or more, or None"),
    ("threads", {"threads": 0}, "run(): threads=0 is not accepted"),
    ("restarts", {"policy": "coarse", "actors": 2, "restarts": -1}, "run(): restarts=-1 is not accepted"),
    ("check", {"check": "no"}, "run(): check='no' is not accepted: give True or False"),
    ("exact", {"exact": 1}, "run(): exact=1 is not accepted: give True or False"),
    ("progress", {"progress": "bar"}, "run(): progress='bar' is not accepted: give True or False or a LiveProgress"),
    ("plot", {"plot": None}, "run(): plot=None is not accepted"),
    ("dashboard", {"dashboard": "yes"}, "run(): dashboard='yes' is not accepted"),
    ("checkpoint_every", {"checkpoint_every": 2.5}, "run(): checkpoint_every=2.5 is not accepted"),
    ("record", {"record": 3}, "run(): record=3 is not accepted: give a fragment's name, a list of them"),
    ("cluster", {"policy": "coarse", "actors": 2, "cluster": 5}, "run(): cluster=5 is not accepted"),
    ("actors", {"policy": "coarse", "actors": "2"}, "actors='2': policy 'coarse' needs a whole number of replicas"),
]


@pytest.mark.parametrize("argument, kwargs, message", RUN_CASES, ids=[f"{c[0]}={c[1][c[0]]!r}" for c in RUN_CASES])
def test_run_refuses_a_bad_argument_before_the_loop_runs(graph, argument, kwargs, message):
    before = dict(graph.namespace)
    with pytest.raises(ArgumentError, match=message.replace("(", r"\(").replace(")", r"\)")) as refused:
        fragnb.run(graph, **{"progress": False, "plot": False, **kwargs})
    assert argument in str(refused.value)
    assert graph.namespace.keys() == before.keys(), "the loop ran before the argument was refused"
    assert isinstance(refused.value, TypeError) and isinstance(refused.value, ValueError)


def test_run_placement_takes_runs_options_and_no_others(graph):
    with pytest.raises(TypeError, match=r"run\(\) takes the options \[.*\], not \['progres'\]"):
        run_placement(graph.place("single"), progres=False)


def test_every_option_of_run_is_checked():
    """A new keyword of ``run`` is refused unless ACCEPTS says what it takes (else it would go unchecked)."""
    keywords = {n for n, p in inspect.signature(fragnb.run).parameters.items() if p.kind is p.KEYWORD_ONLY}
    assert set(OPTIONS) == keywords
    assert set(RUN_ACCEPTS) == keywords | {"cluster"}


def test_every_parameter_of_profile_predict_and_cluster_is_checked():
    assert set(PROFILE_ACCEPTS) == set(inspect.signature(fragnb.profile).parameters) - {"graph"}
    assert set(PREDICT_ACCEPTS) == set(inspect.signature(predict).parameters) - {"placement"}
    assert set(CLUSTER_ACCEPTS) == {f.name for f in fields(Cluster)}
    sweep = inspect.signature(fragnb.sweep).parameters
    assert set(SWEEP_ACCEPTS) == set(sweep) - {"graph", "setup", "policy", "cluster", "run_options"}


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda g: fragnb.profile(g, iterations=0),
            r"profile\(\): iterations=0 is not accepted: give a whole number, 1 or more",
        ),
        (lambda g: fragnb.profile(g, iterations="3"), r"profile\(\): iterations='3' is not accepted"),
        (lambda g: fragnb.profile(g, threads=-1), r"profile\(\): threads=-1 is not accepted"),
        (
            lambda g: g.place("coarse", actors=2).predict(profile="p"),
            r"predict\(\): profile='p' is not accepted: give a Profile",
        ),
        (lambda g: g.place("coarse", actors=2).predict(5, profile=PROFILE), r"predict\(\): cluster=5 is not accepted"),
        (
            lambda g: g.place("coarse", actors=2).predict("here", -1, profile=PROFILE),
            r"predict\(\): replicas=-1 is not accepted: give a whole number, 1 or more, or None",
        ),
        (lambda g: Cluster("two", 2, cores=0), r"Cluster\(\): cores=0 is not accepted: give a number greater than 0"),
        (lambda g: Cluster("two", 0, 4), r"Cluster\(\): workers=0 is not accepted"),
        (lambda g: Cluster("two", 1, 4, bandwidth=float("inf")), r"Cluster\(\): bandwidth=inf is not accepted"),
        (lambda g: Cluster("two", 1, 4, spread=1.5), r"Cluster\(\): spread=1.5 is not accepted: give a fraction"),
        (lambda g: fragnb.sweep(g, "x = 1", seeds="01"), r"sweep\(\): seeds='01' is not accepted"),
        (lambda g: fragnb.sweep(g, "x = 1", threshold="high"), r"sweep\(\): threshold='high' is not accepted"),
        (lambda g: fragnb.sweep(g, "x = 1", restarts=-1), r"sweep\(\): restarts=-1 is not accepted"),
    ],
)
def test_the_other_entry_points_refuse_a_bad_argument_before_they_run(graph, call, message):
    before = dict(graph.namespace)
    with pytest.raises(ArgumentError, match=message):
        call(graph)
    assert graph.namespace.keys() == before.keys()


def test_a_record_is_looked_up_by_name_and_whole_numbers():
    from fragnb.runtime.records import Records

    records = Records(calls=[], dropped=0, bound=0, graph=None)
    with pytest.raises(
        ArgumentError, match=r"replay\(\): iteration='1' is not accepted: give a whole number, 0 or more"
    ):
        records.of("actor@step", "1")
    with pytest.raises(ArgumentError, match=r"replay\(\): fragment=3 is not accepted"):
        records.replay(3, 0)


def test_good_arguments_pass(graph):
    """The rules refuse only what is wrong: the defaults, Events, None and presets all pass."""
    result = fragnb.run(graph, progress=False, plot=False, stop=threading.Event(), threads=None, until=lambda r: False)
    assert result.iterations == 2
    assert Cluster("two", 2, 2.5, spread=0.2).total_cores == 5
    assert all(predict(graph.place("coarse", actors=2), PROFILE, name).seconds_per_iteration > 0 for name in PRESETS)
