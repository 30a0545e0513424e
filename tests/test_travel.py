"""Values that cannot travel between workers are named before any worker starts: the variable, the
cell line and the part of it that blocks; a notebook's own classes travel by value."""

import threading

import pytest
import torch

import fragnb
from conftest import worker_processes
from corpus.compare import compare_namespaces
from corpus.loops import BY_NAME
from fragnb import FragmentError
from fragnb.runtime.cluster import clusters
from fragnb.runtime.net import channels
from fragnb.runtime.worker.travel import blocker, described

LOOP = BY_NAME["pendulum_continuous"]  # REINFORCE on the torch-batched Pendulum, user-style storage


def namespace(extra: str = "") -> dict:
    """The loop's setup run as a notebook runs it (``__name__ == "__main__"``), then ``extra``."""
    ns = {"__name__": "__main__"}
    exec(compile(LOOP.setup + extra, "<setup>", "exec"), ns)
    return ns


def cell(*replacements: tuple[str, str]) -> str:
    text = LOOP.cell
    for old, new in replacements:
        assert old in text, old
        text = text.replace(old, new)
    return text


def run(source: str, ns: dict, **kwargs):
    return fragnb.run(fragnb.capture(source, ns, name="g"), "coarse", actors=2, progress=False, plot=False, **kwargs)


def test_blocker_finds_the_innermost_part_that_does_not_pickle():
    class Log:
        def __init__(self):
            self.rows, self.lock = [1, 2], threading.Lock()

    found = blocker({"stats": {"loss": 1.0}, "log": Log()}, channels.dumps, "info")
    assert found[0] == "info['log'].lock" and "cannot pickle '_thread.lock' object" in described(found)
    ns = {"__name__": "__main__"}  # a notebook's function is pickled by value, with the globals it reads
    exec("import threading\nLOCK = threading.Lock()\ndef act(x):\n    with LOCK:\n        return x\n", ns)
    found = blocker(ns["act"], __import__("cloudpickle").dumps, "act")
    assert found[0] == "act.__globals__['LOCK']", found
    assert blocker({"fine": torch.ones(2)}, channels.dumps, "x") is None


def test_a_value_that_cannot_cross_groups_is_named_before_any_worker_starts():
    clusters.shutdown()
    extra = """
class LazyActor(GaussianActor):
    def act(self, obs):
        action, logprob = super().act(obs)
        return action, (x for x in [logprob])
actor = LazyActor(policy, num_envs=num_envs, seed=0)
logs = []
"""
    ns = namespace(extra)
    source = cell(("rew_buf.append(reward)", "rew_buf.append(reward)\n        logs.append(logprob)"))
    with pytest.raises(
        FragmentError,
        match=r"`logprob` cannot travel from group 'actors' to 'learner': `logprob` \(a generator: "
        r"TypeError: cannot pickle 'generator' object\)",
    ) as info:
        run(source, ns)
    assert info.value.lineno is not None and "action, logprob = actor.act(obs)" in str(info.value)
    assert not worker_processes() and "local" not in clusters._EMBEDDED
    assert ns["logs"] == [] and "obs" not in ns  # nothing ran: the namespace is as it was


@pytest.mark.parametrize("check", [True, False], ids=["safety net", "on the workers"])
def test_a_variable_that_cannot_come_back_to_the_notebook_is_named(check):
    clusters.shutdown()
    ns = namespace("\nimport threading\n")
    source = cell(
        (
            "rew_buf.append(reward)",
            "rew_buf.append(reward)\n        held = {'reward': reward, 'lock': threading.Lock()}",
        )
    )
    with pytest.raises(
        FragmentError,
        match=r"`held` cannot come back from learner\[0\] to the notebook: `held\['lock'\]` "
        r"\(a lock: TypeError: cannot pickle '_thread.lock' object\)",
    ):
        run(source, ns, check=check)
    if check:
        assert not worker_processes()


def test_a_trained_tensor_two_groups_hold_is_refused_at_placement():
    ns = namespace("\nscale = torch.nn.Parameter(torch.ones(1))\nactor.scale = learner.scale = scale\n")
    source = cell(
        (
            "action, logprob = actor.act(obs)",
            "action, logprob = actor.act(obs)\n        action = action * actor.scale.detach()",
        ),
        ("loss = learner.update(", "learner.scale\n    loss = learner.update("),
    )
    graph = fragnb.capture(source, ns, name="g")
    with pytest.raises(
        FragmentError,
        match=r"`learner.scale` \(group 'learner'\) and `actor.scale` \(group 'actors'\) are one "
        r"trained tensor: .* Hold it inside a network both use",
    ):
        fragnb.policies.placing.place(graph, "coarse", actors=2)
    fragnb.policies.placing.place(graph, "fine", actors=1)  # one group holds both: nothing to send


def test_a_notebooks_own_class_travels_between_workers_by_value():
    extra = """
from collections import namedtuple
Act = namedtuple("Act", "action logprob")
class NamedActor(GaussianActor):
    def act(self, obs):
        return Act(*super().act(obs))
actor = NamedActor(policy, num_envs=num_envs, seed=0)
outs = []
"""
    source = cell(
        (
            "action, logprob = actor.act(obs)",
            "out = actor.act(obs)\n        action = out.action\n        outs.append(out)",
        )
    )
    plain = namespace(extra)
    exec(compile(source, "<cell>", "exec"), plain)
    ns = namespace(extra)
    assert ns["Act"].__module__ == "__main__"  # no worker can import it by name
    run(source, ns)
    compare_namespaces(plain, ns, source)
    assert type(ns["outs"][0]).__name__ == "Act" and len(ns["outs"]) == len(plain["outs"])


@pytest.mark.parametrize("policy, home", [("coarse", "actors"), ("fine", "envs")])
def test_reading_a_sharded_components_attribute_in_another_group_is_refused_naming_the_fix(policy, home):
    source = cell(("torch.stack(act_buf), returns)", "torch.stack(act_buf), returns / env.num_envs)"))
    graph = fragnb.capture(source, namespace(), name="g")
    with pytest.raises(
        FragmentError,
        match=rf"`env.num_envs` is read in group 'learner', and `env` lives in group '{home}' "
        r"\(x2, each replica holding a share of it\): no copy of it is there. Read it into "
        r"a notebook value in an earlier cell \(`num_envs = env.num_envs`\)",
    ) as info:
        fragnb.policies.placing.place(graph, policy, actors=2)
    assert "returns / env.num_envs" in info.value.line
