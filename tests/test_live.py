import pytest

from fragnb.ui import live


class _Handle:
    def __init__(self, log):
        self.log = log

    def update(self, obj):
        self.log.append(("update", type(obj).__name__))


@pytest.fixture
def displays(monkeypatch):
    log = []

    def fake_display(obj, display_id=False):
        log.append(("display", type(obj).__name__))
        return _Handle(log)

    monkeypatch.setattr(live, "in_notebook", lambda: True)
    monkeypatch.setattr("IPython.display.display", fake_display)
    return log


def test_live_curve_uses_one_display_handle_and_updates_it(displays):
    progress = live.LiveProgress(total=3, title="t", progress=False, plot=True, plot_every=0.0)
    for i in range(3):
        progress.update([(100 * i, float(i))], env_steps=100 * i)
    progress.close([(300, 3.0)])
    assert displays[0] == ("display", "Image")
    assert displays[1:] == [("update", "Image")] * 3


def test_plot_and_progress_can_be_switched_off(displays):
    progress = live.LiveProgress(total=3, progress=False, plot=False)
    progress.update([(1, 1.0)], env_steps=1)
    progress.close([(1, 1.0)])
    assert progress.bar is None and displays == []


def test_progress_bar_counts_iterations_and_shows_the_return(capsys, monkeypatch):
    monkeypatch.setattr(live.sys.stderr, "isatty", lambda: True)  # a terminal: the bar
    progress = live.LiveProgress(total=2, title="ppo", progress=True, plot=False)
    progress.update([(10, 20.0), (20, 30.0)], env_steps=20)
    assert progress.bar.n == 1 and progress.bar.postfix == "env_steps=20, return=25.0"
    progress.close([])


def test_written_to_a_log_the_progress_is_a_line_every_few_seconds_and_one_at_the_end(capsys, monkeypatch):
    """A batch job's log (stderr a file or a pipe, no notebook): lines, not a bar redrawn in place."""
    now = [100.0]
    monkeypatch.setattr(live.time, "perf_counter", lambda: now[0])
    progress = live.LiveProgress(total=3, title="ppo (coarse)", progress=True, plot=False)
    assert progress.bar is None
    progress.update([(10, 20.0)], env_steps=10)  # the first at once
    now[0] += live.LINE_EVERY_S / 2
    progress.update([(10, 20.0), (20, 30.0)], env_steps=20)  # too soon for another
    now[0] += live.LINE_EVERY_S / 2
    progress.update([(10, 20.0), (20, 30.0)], env_steps=30)
    progress.close([(10, 20.0), (20, 30.0)])
    assert capsys.readouterr().err.splitlines() == [
        "fragnb: ppo (coarse): iteration 1 of 3, env_steps=10, return=20.0, 0 s",
        "fragnb: ppo (coarse): iteration 3 of 3, env_steps=30, return=25.0, 10 s",
        "fragnb: ppo (coarse): iteration 3 of 3, episodes=2, return=25.0, 10 s",
    ]


def test_learning_curve_plots_returns_and_their_rolling_mean():
    fig = live.learning_curve([(i * 10, float(i)) for i in range(30)], "t")
    lines = fig.axes[0].get_lines()
    assert len(lines) == 2 and len(lines[1].get_ydata()) == 30
    assert lines[1].get_ydata()[-1] == pytest.approx(sum(range(10, 30)) / 20)


def test_decoupled_runs_show_staleness_below_the_curve_and_on_the_bar(monkeypatch):
    monkeypatch.setattr(live.sys.stderr, "isatty", lambda: True)  # a terminal: the bar
    fig = live.learning_curve([(10, 1.0), (20, 2.0)], "t", staleness=[0.0, 0.5, 1.0])
    assert len(fig.axes) == 2 and list(fig.axes[1].get_lines()[0].get_ydata()) == [0.0, 0.5, 1.0]
    progress = live.LiveProgress(total=2, title="ppo", progress=True, plot=False)
    progress.update([(10, 20.0)], env_steps=10, staleness=[0.5])
    assert progress.bar.postfix == "env_steps=10, return=20.0, staleness=0.50"
    progress.close([])


def test_figures_show_themselves_in_a_notebook_without_pyplot():
    from IPython.core.formatters import PNGFormatter

    from fragnb.ui.live import learning_curve, timeline

    for fig in (learning_curve([(10, 1.0), (20, 2.0)], "t"), timeline([("main", "env@step", "busy", 0.0, 1.0)], "t")):
        assert PNGFormatter()(fig).startswith(b"\x89PNG")


def test_a_distributed_run_shows_each_groups_idle_share_as_it_goes(capsys):
    from fragnb.runtime.attempt import Tally as _Progress
    from fragnb.runtime.worker.report import Progress, plain_order

    shown = []

    class View:
        def update(self, curve, env_steps, staleness=(), seconds=None, idle=None):
            shown.append(idle)

    progress = _Progress(View(), ["actors[0]", "actors[1]", "learner[0]"], plain_order)
    # actors work 1 s and wait 3 s each; the learner works 3 s and waits 1 s
    for name, busy, waited in [("actors[0]", 1.0, 3.0), ("actors[1]", 1.0, 3.0), ("learner[0]", 3.0, 1.0)]:
        progress.add(Progress(name, 1, [], 10, {"rollout": busy}, [], waited))
    assert shown == [pytest.approx({"actors": 0.75, "learner": 0.25})]  # once: when every replica finished

    bar = live.LiveProgress(total=1, title="t", progress=True, plot=False)
    bar.update([], env_steps=10, idle=shown[0])
    bar.close([])
    assert "idle=actors 75% learner 25%" in capsys.readouterr().err
    fig = live.dashboard([(1, 1.0)], "t", [(1.0, 10.0)], {"rollout": 1.0}, idle=shown[0])
    assert "idle: actors 75 %, learner 25 %" in fig.axes[-1].get_xlabel()


def test_iterations_shown_at_once_draw_no_spike_of_env_steps_per_second(monkeypatch):
    clock = iter([0.0, 1.0, 2.0, 2.001, 2.002, 2.003, 3.0])  # the start, then 6 updates: 4 arrive together
    monkeypatch.setattr(live.time, "perf_counter", lambda: next(clock))
    progress = live.LiveProgress(total=6, title="t", progress=False, plot=False)
    for i in range(1, 7):
        progress.update([], env_steps=1000 * i)
    # 4,000 steps over the last second at most; over the last 3 ms alone it read 1,000,000 steps/s
    assert max(rate for _, rate in progress.rates) <= 4000


def test_a_distributed_runs_live_shares_are_its_results_the_slowest_replica_per_fragment():
    from fragnb.runtime.attempt import Tally
    from fragnb.runtime.worker.report import Progress, plain_order

    shown = []

    class View:
        def update(self, curve, env_steps, staleness=(), seconds=None, idle=None):
            shown.append(seconds)

    tally = Tally(View(), ["actors[0]", "actors[1]", "learner[0]"], plain_order)
    for name, seconds in [
        ("actors[0]", {"env@step": 1.0}),
        ("actors[1]", {"env@step": 2.0}),
        ("learner[0]", {"learner": 1.5}),
    ]:
        tally.add(Progress(name, 1, [], 10, seconds, [], 0.0))
    # as RunResult.of_replicas counts a replicated fragment: its slowest replica's seconds (summed, 3.0 against
    # the learner's 1.5, the panel showed shares the summary printed under it did not)
    assert shown == [{"env@step": 2.0, "learner": 1.5}]


class _Frames(live.LiveProgress):
    """A live view that keeps every dashboard it draws."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.frames = []

    def show_figure(self, fig):
        self.frames.append(fig)


def _shares(fig) -> list[float]:
    return [bar.get_width() for bar in fig.axes[-1].patches]


def test_the_dashboards_last_frame_is_the_finished_runs_result(displays):
    from fragnb.runtime.result import RunResult

    view = _Frames(total=2, title="t", progress=False, plot=True, plot_every=0.0)
    view.update([(10, 1.0)], env_steps=10, seconds={"env@step": 3.0, "learner": 1.0})  # a share as it went: 75 %
    view.close([(10, 1.0)])
    curve = [(10, 1.0, 0.5), (30, 3.0, 1.5)]
    result = RunResult(
        "g", "coarse", 2, 2.0, env_steps=40, fragment_seconds={"env@step": 1.0, "learner": 1.0}, curve=curve
    )
    view.finished(result)
    last = view.frames[-1]
    assert _shares(view.frames[-2]) == [25.0, 75.0] and _shares(last) == [50.0, 50.0]  # the result's shares
    assert 20.0 in [line.get_ydata()[0] for line in last.axes[-2].get_lines()]  # its env steps/s, 40 in 2 s, dashed
    assert list(last.axes[0].get_lines()[0].get_ydata()) == [1.0, 3.0]  # its episodes


def test_a_run_ends_its_live_view_on_the_result_it_returns(canonical, ppo_ns, displays):
    import fragnb

    view = _Frames(progress=False, plot=True, plot_every=1e9)  # draws at the end only: close, then finished
    result = fragnb.run(fragnb.capture(canonical.body, ppo_ns(2), name="ppo"), progress=view)
    total = sum(result.fragment_seconds.values())
    assert view.seconds == result.fragment_seconds and view.mean_rate == result.env_steps_per_s
    assert _shares(view.frames[-1]) == [100 * s / total for s in sorted(result.fragment_seconds.values())]


def test_a_replica_tells_the_notebook_its_progress_at_most_every_tenth_of_a_second_and_where_it_ended(monkeypatch):
    """An event per iteration cost a loop of a millisecond an iteration half its speed (the notebook's
    process relays them): a replica gathers what it finished and tells it at most every REPORT_EVERY_S, and
    the notebook's view ends as it did with one event per iteration."""
    from types import SimpleNamespace

    from fragnb.runtime.attempt import Tally
    from fragnb.runtime.worker import walker as w
    from fragnb.runtime.worker.report import event_of, plain_order

    clock = [0.0]
    monkeypatch.setattr(w.time, "perf_counter", lambda: clock[0])
    sent = []
    replica = w.Walker.__new__(w.Walker)  # what progress() and report() read of a walker, no cluster
    replica.name, replica.events, replica.clock, replica.ticks = "replicas[0]", sent.append, 0.0, []
    replica.unreported, replica.reported_at, replica.steps_now = ([], []), -float("inf"), 0
    replica.rep = SimpleNamespace(seconds={"loop": 0.0}, waited=0.0, ns={})  # a namespace without loggers
    replica.told = {}
    replica.collect = lambda: (
        [[clock[0], 0, 10 * replica.iterations, 1.0]] if replica.iterations % 7 == 0 else [],
        10 * replica.iterations,
    )
    replica.staleness_now = lambda: [replica.iterations % 3]
    for i in range(1, 1001):  # 1,000 iterations of a millisecond each
        clock[0] += 0.001
        replica.iterations = i
        replica.progress()
    replica.report()  # after the last iteration (Walker.walk)
    assert len(sent) <= 12  # a second of iterations: the first at once, then one a tenth of a second, the last

    shown = []

    class View:
        def update(self, curve, env_steps, staleness=(), seconds=None, idle=None):
            shown.append((len(curve), env_steps))

    tally = Tally(View(), ["replicas[0]"], plain_order)
    for msg in sent:
        tally.add(event_of(msg))
    assert tally.done == {"replicas[0]": 1000} and len(shown) == 1000  # the bar counts every iteration
    assert shown[-1] == (1000 // 7, 10_000) and len(tally.episodes) == 1000 // 7  # no episode lost
    assert tally.staleness == [i % 3 for i in range(1, 1001)]  # each iteration's, as before


def test_a_view_slow_to_show_loses_none_of_the_runs_first_events_nor_its_checkpoints(canonical, ppo_ns):
    """Dask keeps no event logged before the notebook subscribes to the run's topic. The notebook used to
    subscribe once the view was showing, after the replicas had started: on a busy machine (CI with two
    busy processes beside it) a run lost its first iterations' progress and checkpoint events, so the bar
    jumped, the curve lacked its first episodes, and a run that then lost its worker had no checkpoint to
    resume from. Here the view takes longer to show than the whole run takes."""
    import time

    import fragnb

    class SlowView(live.LiveProgress):
        def started(self, total, title):
            time.sleep(6.0)  # a kernel busy drawing, on a busy machine
            return super().started(total, title)

        def close(self, curve):
            self.curve = list(curve)
            super().close(curve)

    ns = ppo_ns(4)
    view = SlowView(progress=False, plot=False)
    result = fragnb.run(
        fragnb.capture(canonical.body, ns, name="ppo"), "coarse", actors=2, checkpoint_every=2, progress=view
    )
    assert view.iterations == 4 and len(view.curve) == len(ns["returns"]) > 0  # every iteration, every episode
    assert result.checkpoint_bytes > 0  # the notebook fetched the replicas' checkpoints


def test_a_caveat_is_said_once_per_notebook_cell_run_and_by_every_run_elsewhere(monkeypatch, capsys):
    """A cell that runs nine runs said each caveat nine times above its table (notebook 03: 42 times)."""
    from fragnb import text

    cell = [("kernel", 7)]
    monkeypatch.setattr(text, "_cell_run", lambda: cell[0])
    monkeypatch.setattr(text, "_said", [None, set()])
    for _ in range(3):
        text.caveat("statistical run: line 6 draws")
        text.caveat("the safety net is off")
    cell[0] = ("kernel", 8)  # the next cell run says it again
    text.caveat("statistical run: line 6 draws")
    assert capsys.readouterr().err.splitlines() == [
        "fragnb: statistical run: line 6 draws",
        "fragnb: the safety net is off",
        "fragnb: statistical run: line 6 draws",
    ]
    cell[0] = None  # a script, a terminal: every run says its own
    text.caveat("the safety net is off")
    text.caveat("the safety net is off")
    assert capsys.readouterr().err.count("fragnb: the safety net is off") == 2


def test_each_execute_request_is_a_cell_run_of_its_own_even_where_the_frontend_stores_no_history(monkeypatch):
    """nbval (and any kernel client that executes with store_history=False) runs every cell at the same execution
    count: a caveat said in one cell was taken as said in the next, and notebook 03's rendered copy and its nbval
    run disagreed. The execute request's own id tells the cell runs apart."""
    import IPython

    from fragnb import text

    class Shell:  # a kernel's shell, as ipykernel's ZMQInteractiveShell exposes what this reads
        execution_count = 5
        parent_header = {"msg_id": "request-1"}

    Shell.__module__ = "ipykernel.zmqshell"
    shell = Shell()
    monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
    first = text._cell_run()
    shell.parent_header = {"msg_id": "request-2"}  # the next cell, at the same execution count
    assert first != text._cell_run() and first == (id(shell), "request-1")
