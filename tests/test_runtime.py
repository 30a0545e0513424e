import linecache
import traceback

import numpy as np
import pytest
import torch

import fragnb
from fragnb import capture, run


def _new_vars(before: dict, after: dict) -> dict:
    return {k: v for k, v in after.items() if k not in before}


def _assert_same_values(a, b):
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b)
    elif isinstance(a, np.ndarray):
        assert np.array_equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _assert_same_values(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _assert_same_values(x, y)
    else:
        assert a == b


def test_single_run_leaves_the_namespace_of_plain_execution(canonical, ppo_ns):
    plain, captured = ppo_ns(3), ppo_ns(3)
    plain_before, captured_before = dict(plain), dict(captured)
    exec(canonical.body, plain)
    result = run(capture(canonical.body, captured, name="ppo"), progress=False, plot=False)

    new_plain, new_captured = _new_vars(plain_before, plain), _new_vars(captured_before, captured)
    assert (
        new_plain.keys()
        == new_captured.keys()
        == {
            "obs",
            "returns",
            "it",
            "step",
            "action",
            "logprob",
            "value",
            "next_obs",
            "reward",
            "terminated",
            "truncated",
            "info",
            "last_value",
            "batch",
            "stats",
        }
    )
    for name in new_plain:
        _assert_same_values(new_plain[name], new_captured[name])
    for key, value in plain["learner"].policy.state_dict().items():
        assert torch.equal(value, captured["learner"].policy.state_dict()[key])
    assert result.iterations == 3
    assert result.env_steps == 3 * 32 * 32


def test_run_result_reports_time_per_fragment_and_throughput(canonical, ppo_ns):
    g = capture(canonical.body, ppo_ns(2), name="ppo")
    result = run(g, progress=False, plot=False)
    assert set(result.fragment_seconds) == {f.name for f in g.fragments}
    assert result.fragment_seconds["learner"] > 0
    assert sum(result.fragment_seconds.values()) <= result.seconds
    assert result.env_steps_per_s > 0
    assert g.last_run is result
    assert "ppo under 'single': 2 iterations" in str(result)


def test_an_error_in_the_loop_points_at_the_cell_line_and_cleans_up():
    env = fragnb.envs.CartPole(num_envs=2)
    ns = {"env": env, "torch": torch}
    cell = "obs = env.reset()\nfor it in range(3):\n    obs, *_ = env.step(torch.zeros(3, dtype=torch.int64))\n"
    g = capture(cell, ns, name="broken")
    with pytest.raises(ValueError, match="2 environments but got 3 actions") as info:
        run(g, progress=False, plot=False)
    frames = [f for f in traceback.extract_tb(info.value.__traceback__) if f.filename == "<fragment broken>"]
    assert frames and frames[-1].lineno == 3 and frames[-1].line.startswith("obs, *_ = env.step")
    assert "__fragnb_run__" not in ns
    assert linecache.getline("<fragment broken>", 3).strip().startswith("obs, *_")


def test_unknown_policy_lists_the_known_ones_before_anything_runs(canonical, ppo_ns):
    ns = ppo_ns()
    g = capture(canonical.body, ns)
    with pytest.raises(
        ValueError,
        match=r"unknown distribution policy: 'nope' \(must be one of \['async', 'coarse', 'data_parallel', 'fine', 'gpu_only', 'multi_learner', 'single', 'srl'\]\)",
    ):
        run(g, "nope")
    assert "returns" not in ns


def test_single_policy_takes_no_cluster_or_parameters(canonical, ppo_ns):
    g = capture(canonical.body, ppo_ns())
    with pytest.raises(ValueError, match="takes no cluster"):
        run(g, cluster="tcp://127.0.0.1:8786")
    with pytest.raises(TypeError, match=r"takes no parameters, got \['actors'\]"):
        run(g, actors=2)


def test_solved_at_finds_the_first_window_reaching_the_threshold():
    from fragnb.runtime import first_solved

    assert first_solved([500.0] * 19) is None
    assert first_solved([0.0] * 5 + [500.0] * 20) == 23  # one 0 left in the window: mean exactly 475
    assert first_solved([0.0] * 5 + [500.0] * 20, threshold=476) == 24
    assert first_solved([480.0] * 20, threshold=475) == 19


def test_keyboard_interrupt_stops_the_run_and_leaves_no_driver_behind():
    class Interrupting(fragnb.envs.CartPole):
        def _step(self, actions):
            if self.vector_steps == 2:
                raise KeyboardInterrupt
            return super()._step(actions)

    ns = {"env": Interrupting(num_envs=2), "torch": torch}
    g = capture(
        "obs = env.reset()\nfor it in range(5):\n    obs, *_ = env.step(torch.zeros(2, dtype=torch.int64))\n", ns
    )
    with pytest.raises(KeyboardInterrupt):
        run(g, progress=True, plot=False)
    assert "__fragnb_run__" not in ns
    assert ns["env"].vector_steps == 2 and ns["it"] == 2  # stopped where plain Python would have


def test_until_stops_after_the_first_iteration_where_it_holds_as_plain_python_would(canonical, ppo_ns):
    plain = ppo_ns(3)
    exec(canonical.body, plain)
    ns = ppo_ns(10)
    result = run(capture(canonical.body, ns, name="ppo"), progress=False, plot=False, until=lambda r: r.iterations >= 3)
    assert result.iterations == 3 and ns["it"] == 2 and "iteration 3" in result.stopped and "stopped" in str(result)
    for key, value in plain["learner"].policy.state_dict().items():
        assert torch.equal(ns["learner"].policy.state_dict()[key], value)
    assert ns["returns"] == plain["returns"]


def test_until_sees_the_curve_so_far(canonical, ppo_ns):
    seen = []

    def enough(r):
        seen.append((r.iterations, len(r.curve), r.env_steps))
        return r.mean_return() >= 15  # random CartPole episodes last about 20 steps: holds early

    result = run(capture(canonical.body, ppo_ns(50), name="ppo"), progress=False, plot=False, until=enough)
    assert result.iterations == len(seen) < 50 and seen[-1][2] == result.env_steps
    assert [i for i, _, _ in seen] == list(range(1, len(seen) + 1)) and seen[-1][1] == len(result.curve)


def test_a_first_ctrl_c_ends_the_run_after_the_current_iteration(canonical, ppo_ns, monkeypatch):
    import os
    import signal

    from fragnb.ui import live

    update = live.LiveProgress.update

    def interrupt_once(self, *args, **kwargs):
        update(self, *args, **kwargs)
        if not getattr(self, "interrupted", False):
            self.interrupted = True
            os.kill(os.getpid(), signal.SIGINT)  # what JupyterLab's interrupt sends the kernel

    monkeypatch.setattr(live.LiveProgress, "update", interrupt_once)
    plain = ppo_ns(1)
    exec(canonical.body, plain)
    ns = ppo_ns(10)
    kernels = signal.getsignal(signal.SIGINT)  # Python's default, or SIG_IGN when started in the background
    result = run(capture(canonical.body, ns, name="ppo"), progress=False, plot=False)
    assert result.iterations == 1 and result.stopped.startswith("interrupted") and ns["it"] == 0
    for key, value in plain["learner"].policy.state_dict().items():
        assert torch.equal(ns["learner"].policy.state_dict()[key], value)
    assert signal.getsignal(signal.SIGINT) is kernels  # the kernel's handler is back
