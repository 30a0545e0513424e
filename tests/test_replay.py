"""Debugging a fragment where it failed: a distributed run that raised in the cell's code on a worker,
replayed in the kernel (`fragnb.debug()`, `%fragment_debug`) so that the debugger opens in the user's
frame with the replica's own values."""

import types

import pytest
import torch

import fragnb
from fragnb.policies.modes import Decoupled, Lockstep
from fragnb.runtime import replay

FAILING = "    last_value = actor.value(obs)\n"
# At its third iteration (after the safety net's two), an actor replica indexes past its 16 of the 32 environments.
PROBE = FAILING + "    if it == 2:\n        probe = float(actor.value(obs)[20])\n"


def _failing_run(canonical, ppo_ns, **params):
    ns = ppo_ns(4)
    graph = fragnb.capture(canonical.body.replace(FAILING, PROBE), ns, name="probe")
    with pytest.raises(IndexError) as failed:
        fragnb.run(graph, "coarse", actors=2, progress=False, plot=False, **params)
    return ns, failed.value


def _frames(tb):
    out = []
    while tb is not None:
        out.append(tb)
        tb = tb.tb_next
    return out


@pytest.mark.parametrize("checkpoint_every", [1, 0])
def test_a_replicas_failure_replays_in_the_kernel_where_the_debugger_sees_its_own_values(
    canonical, ppo_ns, checkpoint_every
):
    ns, error = _failing_run(canonical, ppo_ns, checkpoint_every=checkpoint_every)
    assert "replica 0 of 'actors'" in error.__notes__[0] and "fragnb.debug()" in error.__notes__[-1]
    assert "obs" not in ns  # a failed run leaves the notebook as it was before it
    weights = {k: v.clone() for k, v in ns["learner"].policy.state_dict().items()}
    with pytest.raises(IndexError) as again:
        fragnb.debug()
    assert str(again.value) == str(error)
    start = "the checkpoint after iteration 2" if checkpoint_every else "the beginning of the run"
    assert f"replayed in this kernel from {start}" in again.value.__notes__[-1]
    frames = _frames(again.value.__traceback__)
    cell = [f for f in frames if f.tb_frame.f_code.co_filename.startswith("<fragment ")]
    # the traceback goes from fragnb.debug() straight into the cell: the walker's frames are cut
    files = [f.tb_frame.f_code.co_filename for f in frames]
    assert cell and files[frames.index(cell[0]) - 1].endswith("fragnb/runtime/replay.py")
    assert not any("runtime/worker" in f or f.endswith("threads.py") for f in files)
    where = frames[-1].tb_frame  # where %debug and pdb.pm() open: the user's statement, the replica's values
    assert where.f_code.co_filename == "<fragment probe>" and frames[-1].tb_lineno == 12
    assert where.f_globals["it"] == 2 and tuple(where.f_globals["obs"].shape) == (16, 4)  # its own half
    # the replay leaves the notebook as the failed run did
    assert "obs" not in ns and all(torch.equal(v, weights[k]) for k, v in ns["learner"].policy.state_dict().items())


def test_the_magic_replays_it_too_and_without_a_failed_run_both_say_so(shell, canonical, ppo_ns):
    replay._LAST.clear()
    with pytest.raises(RuntimeError, match="no failed run to replay in this kernel"):
        fragnb.debug()
    with pytest.raises(RuntimeError, match="no failed run to replay in this kernel"):
        shell.run_line_magic("fragment_debug", "")
    _failing_run(canonical, ppo_ns)
    with pytest.raises(IndexError, match="index 20 is out of bounds"):
        shell.run_line_magic("fragment_debug", "")


def test_a_run_its_mode_cannot_replay_says_why_and_is_not_kept():
    kept = replay.Failure(types.SimpleNamespace(script=types.SimpleNamespace(mode=Lockstep())), None, ValueError())
    replay._LAST["failure"] = kept
    error = ValueError("diverged")
    replay.keep(types.SimpleNamespace(script=types.SimpleNamespace(mode=Decoupled())), None, error)
    assert replay.last() is None  # an older failure is not replayed in its place
    assert "cannot replay this run in the kernel: what its learner takes depends on when" in error.__notes__[0]
