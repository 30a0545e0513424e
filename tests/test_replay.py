"""Debugging a fragment where it failed: a distributed run that raised in the cell's code on a worker,
replayed in the kernel (`fragnb.debug()`, `%fragment_debug`) so that the debugger opens in the user's
frame with the replica's own values."""

import types

import pytest
import torch
from IPython.core.error import UsageError

import fragnb
from fragnb.policies.modes import Decoupled, Lockstep
from fragnb.runtime import check, replay

FAILING = "    last_value = actor.value(obs)\n"
# A bug only one replica meets: at iteration 3 (after the safety net's two), environment 20 "diverges"; of two
# replicas sharing the 32 environments, replica 1 steps it (plain Python meets it too, at the same iteration).
PROBE = FAILING + "    assert not (it == 3 and bool((env.env_ids == 20).any())), 'environment 20 diverged'\n"


def _failing_run(canonical, ppo_ns, policy="coarse", **params):
    ns = ppo_ns(5)
    graph = fragnb.capture(canonical.body.replace(FAILING, PROBE), ns, name="probe")
    with pytest.raises(AssertionError) as failed:
        fragnb.run(graph, policy, actors=2, progress=False, plot=False, **params)
    return ns, failed.value


def _frames(tb):
    out = []
    while tb is not None:
        out.append(tb)
        tb = tb.tb_next
    return out


@pytest.mark.parametrize(
    "policy, group, checkpoint_every", [("coarse", "actors", 1), ("coarse", "actors", 0), ("fine", "envs", 1)]
)
def test_a_replicas_failure_replays_in_the_kernel_where_the_debugger_sees_its_own_values(
    canonical, ppo_ns, policy, group, checkpoint_every
):
    ns, error = _failing_run(canonical, ppo_ns, policy, checkpoint_every=checkpoint_every)
    assert f"replica 1 of {group!r}" in error.__notes__[0] and "fragnb.debug()" in error.__notes__[-1]
    assert "obs" not in ns  # a failed run leaves the notebook as it was before it
    weights = {k: v.clone() for k, v in ns["learner"].policy.state_dict().items()}
    with pytest.raises(AssertionError) as again:
        fragnb.debug()
    assert str(again.value) == str(error)
    start = "the checkpoint after iteration 3" if checkpoint_every else "the beginning of the run"
    assert f"replayed in this kernel from {start}" in again.value.__notes__[-1]
    frames = _frames(again.value.__traceback__)
    cell = [f for f in frames if f.tb_frame.f_code.co_filename.startswith("<fragment ")]
    # the traceback goes from fragnb.debug() straight into the cell: the walker's frames are cut
    files = [f.tb_frame.f_code.co_filename for f in frames]
    assert cell and files[frames.index(cell[0]) - 1].endswith("fragnb/runtime/replay.py")
    assert not any("runtime/worker" in f or f.endswith("threads.py") for f in files)
    where = frames[-1].tb_frame  # where %debug and pdb.pm() open: the user's statement, the replica's values
    assert where.f_code.co_filename == "<fragment probe>"
    assert f"line {frames[-1].tb_lineno}, in replica 1" in error.__notes__[0]  # the cell line the run named
    # the iteration, and what only replica 1 holds: environments 16 to 31
    assert where.f_globals["it"] == 3 and where.f_globals["env"].env_ids.tolist() == list(range(16, 32))
    # the replay leaves the notebook as the failed run did
    assert "obs" not in ns and all(torch.equal(v, weights[k]) for k, v in ns["learner"].policy.state_dict().items())


def test_a_statistical_runs_failure_replays_with_the_replicas_own_draws(canonical, ppo_ns):
    # the actors draw from torch's global generator: each replica its own numbers, seeded from the run's seed and
    # its name. Those are in the plan, so the replay draws them again: the message carries replica 1's sum.
    noisy = (
        FAILING
        + "    noise = torch.rand(len(obs))\n"
        + PROBE.removeprefix(FAILING).replace(
            "'environment 20 diverged'", "f'environment 20 diverged, noise {float(noise.sum())!r}'"
        )
    )
    ns = ppo_ns(5)
    ns["torch"] = torch
    graph = fragnb.capture(canonical.body.replace(FAILING, noisy), ns, name="noisy")
    with pytest.raises(AssertionError, match="environment 20 diverged, noise") as failed:
        fragnb.run(graph, "coarse", actors=2, progress=False, plot=False, checkpoint_every=2)
    with pytest.raises(AssertionError) as again:
        fragnb.debug()
    assert str(again.value) == str(failed.value)  # the same draws, to the last bit of their sum
    assert "from the checkpoint after iteration 2" in again.value.__notes__[-1]


DP_SETUP = """
import gymnasium as gym
import torch
env = gym.make("CartPole-v1")
env.reset(seed=0)  # unseeded, its next resets would draw from the OS's entropy: no run, plain or replayed, repeats
net = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
seen, weights = [], []
"""
DP_CELL = """
for step in range(6):
    obs, _ = env.reset()
    seen.append(obs.tolist())
    weights.append(net.weight.detach().clone())
    loss = net(torch.as_tensor(obs)).pow(2).sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def _data_parallel(cell: str):
    ns: dict = {}
    torch.manual_seed(7)  # the network's initial weights, then the run's seed
    exec(DP_SETUP, ns)
    return ns, fragnb.run(fragnb.capture(cell, ns, name="dp"), "data_parallel", replicas=2, progress=False, plot=False)


def test_a_data_parallel_failure_replays_with_its_all_reduce_among_threads(canonical, ppo_ns):
    # replica 1's own reset at step 3 (its environments are re-seeded: replica 0 keeps the notebook's) is
    # the planted bug's trigger, so only replica 1 meets it
    _, clean = _data_parallel(DP_CELL)
    theirs = clean.replica_values["replicas[1]"]["seen"][3]
    assert theirs != clean.replica_values["replicas[0]"]["seen"][3]
    planted = DP_CELL.replace(
        "    weights.append(net.weight.detach().clone())\n",
        f"    weights.append(net.weight.detach().clone())\n    assert obs.tolist() != {theirs!r}, 'replica 1 diverged'\n",
    )
    with pytest.raises(AssertionError, match="replica 1 diverged") as failed:
        _data_parallel(planted)
    assert "replica 1 of 'replicas'" in failed.value.__notes__[0] and "fragnb.debug()" in failed.value.__notes__[-1]
    with pytest.raises(AssertionError, match="replica 1 diverged") as again:
        fragnb.debug()
    where = _frames(again.value.__traceback__)[-1].tb_frame
    # its own resets (step 3's, the fourth, the trigger), as the run's replica 1 had them
    assert where.f_globals["obs"].tolist() == theirs
    assert where.f_globals["seen"] == clean.replica_values["replicas[1]"]["seen"][:4]
    # and the weights that three steps averaged among the replay's threads made: the run's on gloo, to the bit
    assert torch.equal(where.f_globals["net"].weight, clean.replica_values["replicas[1]"]["weights"][3])


def test_the_magic_replays_it_too_and_without_a_failed_run_both_say_so(shell, canonical, ppo_ns):
    replay._LAST.clear()
    with pytest.raises(RuntimeError, match="no failed run to replay in this kernel"):
        fragnb.debug()
    with pytest.raises(RuntimeError, match="no failed run to replay in this kernel"):
        shell.run_line_magic("fragment_debug", "")
    _failing_run(canonical, ppo_ns)
    with pytest.raises(AssertionError, match="environment 20 diverged"):
        shell.run_line_magic("fragment_debug", "")


def test_a_run_its_mode_cannot_replay_says_why_and_is_not_kept():
    kept = replay.Failure(types.SimpleNamespace(script=types.SimpleNamespace(mode=Lockstep())), None, ValueError())
    replay._LAST["failure"] = kept
    error = ValueError("diverged")
    replay.keep(types.SimpleNamespace(script=types.SimpleNamespace(mode=Decoupled())), None, error)
    assert replay.last() is None  # an older failure is not replayed in its place
    assert "cannot replay this run in the kernel: what its learner takes depends on when" in error.__notes__[0]


def test_an_async_failure_cannot_replay_and_runs_the_statement_again_on_what_it_read(canonical, ppo_ns):
    # a decoupled run is not repeatable: the error ships what the failing statement read, and fragnb.debug() runs
    # that statement once here, on those values: %debug opens in it with replica 1's environments
    _, error = _failing_run(canonical, ppo_ns, "async")
    shipped = error.__notes__[-1]
    assert (
        "cannot replay this run exactly" in shipped
        and "on what actors[1] held when it raised in iteration 3" in shipped
    )
    assert "\n    it = 3" in shipped and "\n    env = <CartPole>" in shipped  # the shipped inputs, shown
    with pytest.raises(AssertionError, match="environment 20 diverged") as again:
        fragnb.debug()
    assert "not a replay of the run" in again.value.__notes__[-1]
    where = _frames(again.value.__traceback__)[-1].tb_frame
    assert where.f_code.co_filename == "<fragment probe>"
    assert where.f_globals["it"] == 3 and where.f_globals["env"].env_ids.tolist() == list(range(16, 32))


NOISE = "    noise = actor.value(obs) + torch.rand(len(obs))\n"  # the actors' own draws


def test_a_recorded_fragment_replays_in_the_kernel_to_its_recorded_outputs(canonical, ppo_ns):
    # a statistical run (each actor draws from torch's global generator) recording the actors' step, the actors'
    # iteration-level statements with that draw, and the learner: each replays here to what the run recorded
    ns = ppo_ns(3)
    ns["torch"] = torch
    graph = fragnb.capture(canonical.body.replace(FAILING, FAILING + NOISE), ns, name="noisy")
    result = fragnb.run(
        graph,
        "coarse",
        actors=2,
        progress=False,
        plot=False,
        record={"actor@step": [1], "actor@it": None, "learner": None},
    )
    assert result.guarantee == "statistical"
    records = result.records
    assert f"{len(records.calls)} calls" in repr(records) and "0 past it" in repr(records)
    for fragment, iteration, replica in [
        ("actor@step", 1, 0),
        ("actor@step", 1, 1),
        ("actor@it", 2, 1),
        ("learner", 2, 0),
    ]:
        recorded = records.outputs(fragment, iteration, replica)
        assert recorded and check.difference(recorded, result.replay(fragment, iteration, replica), "outputs") is None
    # the actors' step ran once per step, each replica on its own environments
    steps = ns["config"].num_steps
    assert len(records.of("actor@step", 1, 1)) == steps
    assert records.inputs("actor@step", 1, 1)[0]["obs"].shape[0] == 16
    # what was recorded is what ran: the learner's last statistics are the notebook's after the run
    assert check.difference(records.outputs("learner", 2, 0)[0]["stats"], ns["stats"], "stats") is None
    with pytest.raises(LookupError, match=r"no record of 'actor@step' at iteration 0 on replica 0; recorded"):
        result.replay("actor@step", 0)


def test_what_to_record_is_checked_before_anything_starts(shell, canonical, ppo_ns):
    graph = fragnb.capture(canonical.body, ppo_ns(2), name="ppo")
    with pytest.raises(
        fragnb.FragmentError, match=r"record='critic': 'ppo' has no fragment of that name; its fragments: \["
    ):
        fragnb.run(graph, "coarse", actors=2, record=["critic"])
    with pytest.raises(ValueError, match=r"give the iterations to record as numbers from 0"):
        fragnb.run(graph, "coarse", actors=2, record={"learner": [-1]})
    with pytest.raises(ValueError, match="a 'single' run computes in this kernel"):
        fragnb.run(graph, record=["learner"])
    with pytest.raises(
        LookupError, match=r"recorded nothing: run it with record=\['learner'\] \(the magic: --record learner\)"
    ):
        fragnb.run(graph, "single", progress=False, plot=False).replay("learner", 0)
    shell.user_ns.update(ppo_ns(2))
    with pytest.raises(UsageError, match="--record needs --run"):
        shell.run_cell_magic("fragment", "ppo --policy coarse --actors 2 --record learner", canonical.body)
    with pytest.raises(UsageError, match="write FRAGMENT, FRAGMENT:ITERATION or FRAGMENT:FIRST-LAST"):
        shell.run_cell_magic("fragment", "ppo --policy coarse --actors 2 --run --record learner:x", canonical.body)


def test_the_magic_records_too(shell, canonical, ppo_ns):
    shell.user_ns.update(ppo_ns(3))
    line = "ppo --policy coarse --actors 2 --run --no-progress --no-plot -q --record learner:1 --record learner:2"
    shell.run_cell_magic("fragment", line, canonical.body)
    result = shell.user_ns["ppo"].last_run
    assert sorted({c.iteration for c in result.records.calls}) == [1, 2]
    assert check.difference(result.records.outputs("learner", 2), result.replay("learner", 2), "learner") is None
