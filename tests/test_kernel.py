"""A real Jupyter kernel, interrupted the way JupyterLab interrupts it (SIGINT to its process group)."""

import time

import pytest

from conftest import NOTEBOOK_01

pytestmark = pytest.mark.slow


@pytest.fixture
def kernel():
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3")
    yield km, kc
    _execute(kc, "import fragnb; fragnb.shutdown()")
    kc.stop_channels()
    km.shutdown_kernel(now=True)


def _execute(kc, code: str, until=None, timeout: float = 180, answers: list[str] | None = None) -> str:
    """Run ``code`` in the kernel; its output (and errors) as text. ``until(text)`` is called on the output so far.
    ``answers``: what to type at each prompt the code asks for (``%debug``'s ``ipdb>``, as a user types in
    JupyterLab's box), then ``q``."""
    import queue

    msg_id = kc.execute(code, allow_stdin=answers is not None)
    out, answers, deadline = [], list(answers or ()), time.monotonic() + timeout
    while True:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the kernel did not finish {code!r} within {timeout} s: {''.join(out)[-2000:]}")
        try:
            request = kc.get_stdin_msg(timeout=0.05)
            if request["msg_type"] == "input_request":
                kc.input(answers.pop(0) if answers else "q")
        except queue.Empty:
            pass
        try:
            msg = kc.get_iopub_msg(timeout=0.2)
        except queue.Empty:
            continue
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream":
            out.append(content["text"])
            if until:
                until("".join(out))
        elif kind == "error":
            out.append(f"ERROR {content['ename']}: {content['evalue']}")
        elif kind == "status" and content["execution_state"] == "idle":
            return "".join(out)


def test_interrupting_the_kernel_ends_a_distributed_run_after_its_iteration_and_the_workers_live_on(kernel):
    km, kc = kernel
    setup = _execute(
        kc,
        f"""
import fragnb
from fragnb.notebook import load_canonical
cell = load_canonical({str(NOTEBOOK_01)!r})
ns = cell.namespace()
ns["iterations"] = 1000
graph = fragnb.capture(cell.body + '\\n    print("iteration", it)', ns, name="ppo")  # prints reach the notebook
""",
    )
    assert "ERROR" not in setup, setup
    interrupted = []

    def interrupt_once_running(text):
        if not interrupted and "iteration 1" in text:  # the loop runs on the workers
            km.interrupt_kernel()
            interrupted.append(time.monotonic())

    out = _execute(
        kc,
        'r = fragnb.run(graph, "coarse", actors=2, progress=False, plot=False); print("STOPPED", r.iterations, r.stopped)',
        until=interrupt_once_running,
    )
    assert interrupted and "ERROR" not in out, out
    assert "STOPPED" in out and "interrupted: stopped after iteration" in out and time.monotonic() - interrupted[0] < 10
    assert 0 < int(out.split("STOPPED ")[1].split()[0]) < 1000
    assert _execute(kc, "print(ns['it'] + 1 == r.iterations)").strip() == "True"
    again = _execute(
        kc, 'ns["iterations"] = 2; print(fragnb.run(graph, "coarse", actors=2, progress=False, plot=False).iterations)'
    )
    assert again.strip().endswith("2"), again  # the same workers serve the next run


def test_a_distributed_run_after_reset_starts_its_workers(kernel):
    # `%reset -f` deletes __main__.__spec__, which multiprocessing's spawn reads when Dask's nannies
    # start worker processes: that was "Nanny failed to start"
    _, kc = kernel
    code = f"""
import fragnb
from fragnb.notebook import load_canonical
cell = load_canonical({str(NOTEBOOK_01)!r})
ns = cell.namespace()
ns["iterations"] = 1
print("DONE", fragnb.run(fragnb.capture(cell.body, ns, name="ppo"), "coarse", actors=2, progress=False, plot=False).iterations)
fragnb.shutdown()
"""
    assert "DONE 1" in _execute(kc, code)
    _execute(kc, "%reset -f")
    out = _execute(kc, code)
    assert "DONE 1" in out and "ERROR" not in out, out


PROBE_SETUP = f"""
import fragnb
from fragnb.notebook import load_canonical
cell = load_canonical({str(NOTEBOOK_01)!r})
ns = cell.namespace()
ns["iterations"] = 5
body = cell.body.replace("    last_value = actor.value(obs)\\n", "    last_value = actor.value(obs)\\n"
    "    assert not (it == 3 and bool((env.env_ids == 20).any())), 'environment 20 diverged'\\n")
graph = fragnb.capture(body, ns, name="probe")
"""


@pytest.mark.parametrize(
    "fail, replay",
    [
        ('fragnb.run(graph, "coarse", actors=2, progress=False, plot=False)', "fragnb.debug()"),
        # the explorer's Run, then its "Debug here" (what its click calls) instead of a cell
        pytest.param(
            'x = fragnb.explore(graph, "coarse", actors=2)\nx.run()\nx.wait(120)\nprint(x.status.value)',
            "x.debug()\nprint(x.status.value)",
            marks=pytest.mark.needs_dot,
        ),
    ],
    ids=["fragnb.debug", "debug-here"],
)
def test_debug_after_a_replay_opens_in_the_failing_replicas_frame_in_a_real_kernel(kernel, fail, replay):
    _, kc = kernel
    failed = _execute(kc, PROBE_SETUP + fail)
    assert "AssertionError: environment 20 diverged" in failed, failed
    replayed = _execute(kc, replay)
    assert "AssertionError: environment 20 diverged" in replayed, replayed
    # what a user types at the ipdb> prompt: where, the iteration, what only replica 1 holds
    session = _execute(kc, "%debug", answers=["p it", "p env.env_ids.tolist()", "q"])
    assert "<fragment probe>" in session and "\n3\n" in session, session
    assert str(list(range(16, 32))) in session, session
