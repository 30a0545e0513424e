"""Seeds side by side: each run of a sweep leaves what plain Python leaves after the setup with its
seed (and its settings) and the loop; a grid's names are checked before anything starts; a failed
run is reported with its seed and the others kept; a stop ends every run at an iteration boundary."""

import ast
import os
import threading
import types

import psutil
import pytest
from IPython.core.error import UsageError

import fragnb
from corpus.compare import assert_same
from corpus.field import FIELD_BY_NAME
from fragnb.runtime.cluster import clusters
from fragnb.setups import Setup, configurations, seeds_from
from fragnb.stats import band, confidence_interval, iqm

CLEANRL = FIELD_BY_NAME["cleanrl_ppo"]
#: CleanRL's setup with the one line a sweep needs changed: the seed comes from the sweep.
CLEANRL_SETUP = CLEANRL.setup.replace("args = Args()", "args = Args(seed=seed)")


def _without_seed(source: str) -> str:
    """Notebook 01's setup without its ``seed = 0`` line: a sweep defines ``seed``."""
    tree = ast.parse(source)
    tree.body = [n for n in tree.body if not (isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "seed")]
    return ast.unparse(tree)


@pytest.fixture
def notebook_setup(canonical):
    return Setup("nb01", source=_without_seed(canonical.setup) + "\niterations = 2\n")


def _plain(setup: Setup, cell: str, seed: int, settings=None) -> dict:
    ns = setup.namespace(seed, settings)
    exec(compile(cell, "<cell>", "exec"), ns)
    return ns


def _same_as_plain(run, plain: dict) -> None:
    """Every value the run brought back is plain Python's, and every name plain Python leaves came back
    (or is named as one that cannot travel)."""
    for name, value in run.values.items():
        assert_same(plain[name], value, name)
    left = {n for n, v in plain.items() if not n.startswith("__") and not isinstance(v, types.ModuleType)}
    assert left == set(run.values) | set(run.unreturned), left ^ (set(run.values) | set(run.unreturned))


# -- pure parts ------------------------------------------------------------------------------------------
def test_seeds_and_grids_are_read_as_written():
    assert seeds_from("0-3") == [0, 1, 2, 3] and seeds_from("1,5,9") == [1, 5, 9] and seeds_from("4") == [4]
    for bad in ("", "a-b", "1,1"):
        with pytest.raises(ValueError, match="--seeds"):
            seeds_from(bad)
    assert configurations(None) == [{}]
    assert configurations({"a.b": [1, 2], "c": ["x"]}) == [{"a.b": 1, "c": "x"}, {"a.b": 2, "c": "x"}]


def test_the_table_statistics_are_the_fields_iqm_and_a_bootstrap_interval_of_the_mean():
    assert iqm([1, 2, 3, 4, 100, -100, 5, 6]) == pytest.approx(3.5)  # the middle half: 2, 3, 4, 5
    low, high = confidence_interval([10.0, 12.0, 11.0, 13.0, 9.0])
    assert low < 11.0 < high and 9.0 <= low and high <= 13.0
    assert confidence_interval([5.0]) == (5.0, 5.0)
    xs, mean, low, high = band([[(0, 0.0), (100, 10.0)], [(0, 2.0), (50, 4.0), (80, 6.0)]], points=3)
    assert xs == [0, 40, 80] and mean == [1.0, 1.0, 3.0]  # each run's last report at or before the point
    assert all(lo <= m <= hi for lo, m, hi in zip(low, mean, high))


def test_a_setting_is_assigned_where_the_setup_binds_its_name_so_what_follows_uses_it():
    setup = Setup("s", source="class A:\n    lr = 1.0\nargs = A()\nderived = args.lr * 2\n")
    ns = setup.namespace(0, {"args.lr": 5.0})
    assert ns["args"].lr == 5.0 and ns["derived"] == 10.0
    with pytest.raises(KeyError, match="args.nope.*has no `nope`"):
        setup.namespace(0, {"args.nope": 1})
    with pytest.raises(KeyError, match="defines no `cfg`"):
        setup.namespace(0, {"cfg.lr": 1})


def test_notebook_01_builds_seed_0_as_a_sweeps_worker_does_and_leaves_this_process_as_it_was(canonical):
    import torch

    from fragnb.runtime.local import torch_threads

    with torch_threads(2):  # a kernel on two threads: the notebook's setup sets one, as the workers run torch
        ns = canonical.namespace()
        assert torch.get_num_threads() == 2  # that setting was the notebook kernel's, not this process's
    with torch_threads(1):  # as a sweep's worker runs seed 0's setup
        worker = Setup("nb01", source=_without_seed(canonical.setup)).namespace(0)
    for name, tensor in worker["policy"].state_dict().items():  # the orthogonal initialisation's QR included
        assert torch.equal(ns["policy"].state_dict()[name], tensor), name


# -- sweeps on the cluster --------------------------------------------------------------------------------
def test_each_seed_of_a_cleanrl_style_loop_leaves_what_plain_python_leaves_with_that_seed(one_thread):
    result = fragnb.sweep(CLEANRL.cell, CLEANRL_SETUP, seeds=[0, 1], progress=False, plot=False)
    assert not result.failed and [r.seed for r in result.runs] == [0, 1]
    setup = Setup.of(CLEANRL_SETUP)
    for run in result.runs:
        _same_as_plain(run, _plain(setup, CLEANRL.cell, run.seed))
        assert run.values["args"].seed == run.seed
    a, b = (r.values["agent"].critic[0].weight for r in result.runs)
    assert not a.equal(b)  # the seed reached the network's initialisation


def test_a_grid_crossed_with_seeds_runs_every_combination_as_plain_python_does(notebook_setup, canonical, one_thread):
    grid = {"config.learning_rate": [3e-4, 1e-3]}
    result = fragnb.sweep(canonical.body, notebook_setup, seeds=[0, 1], params=grid, progress=False, plot=False)
    assert [(r.seed, r.settings["config.learning_rate"]) for r in result.runs] == [
        (0, 3e-4),
        (1, 3e-4),
        (0, 1e-3),
        (1, 1e-3),
    ]
    for run in result.runs:
        assert run.result.iterations == 2
        _same_as_plain(run, _plain(notebook_setup, canonical.body, run.seed, run.settings))
    rows = result.rows()
    assert [row["configuration"] for row in rows] == ["config.learning_rate=0.0003", "config.learning_rate=0.001"]
    assert all(row["runs"] == 2 for row in rows)
    assert result.best().configuration in {row["configuration"] for row in rows}
    frame = result.to_dataframe()
    assert list(frame.index) == [row["configuration"] for row in rows] and "IQM" in frame.columns
    assert "final return" in str(result) and result.plot() is not None


def test_an_unknown_setting_is_refused_before_anything_starts_naming_it(notebook_setup, canonical, monkeypatch):
    import fragnb.runtime.sweep

    monkeypatch.setattr(fragnb.runtime.sweep, "_side_by_side", lambda *a: pytest.fail("a run started"))
    with pytest.raises(ValueError, match=r"params: 'config\.learnin_rate': `config` has no `learnin_rate`"):
        fragnb.sweep(canonical.body, notebook_setup, seeds=[0], params={"config.learnin_rate": [1e-3]})


def test_a_failed_run_is_reported_with_its_seed_and_the_others_are_kept(notebook_setup, canonical):
    setup = Setup("s", source=notebook_setup.source + "\nif seed == 1:\n    raise RuntimeError('no env for seed 1')\n")
    result = fragnb.sweep(canonical.body, setup, seeds=[0, 1, 2], progress=False, plot=False)
    assert [r.seed for r in result.failed] == [1] and "no env for seed 1" in result.failed[0].error
    assert all(r.result.iterations == 2 for r in result.runs if r.seed != 1)
    assert "seed 1: failed: RuntimeError: no env for seed 1" in str(result)


def test_a_stop_ends_every_run_at_an_iteration_boundary_and_keeps_them(notebook_setup, canonical):
    setup = Setup("s", source=notebook_setup.source.replace("iterations = 2", "iterations = 400"))
    stop = threading.Event()
    threading.Timer(4.0, stop.set).start()
    result = fragnb.sweep(canonical.body, setup, seeds=[0, 1], stop=stop, progress=False, plot=False)
    assert result.stopped.startswith("stopped")
    for run in result.runs:
        assert 0 < run.result.iterations < 400 and run.result.stopped
        assert len(run.values["returns"]) > 0


def test_the_magic_runs_a_setup_cell_now_and_its_seeds_side_by_side(shell, canonical):
    shell.run_cell_magic("setup", "nb --seed 3", _without_seed(canonical.setup) + "\niterations = 2\n")
    ns = shell.user_ns
    assert isinstance(ns["nb"], fragnb.Setup) and ns["seed"] == 3
    before = {k: v.clone() for k, v in ns["policy"].state_dict().items()}
    with pytest.raises(UsageError, match="--seeds needs --run"):
        shell.run_cell_magic("fragment", "ppo --seeds 0-1", canonical.body)
    shell.run_cell_magic("fragment", "ppo --seeds 0-1 --run --no-progress --no-plot -q", canonical.body)
    sweep = ns["ppo"].last_sweep
    assert [r.seed for r in sweep.runs] == [0, 1] and not sweep.failed
    # the notebook's namespace is left as it was; each run's values are the sweep's
    assert all(v.equal(before[k]) for k, v in ns["policy"].state_dict().items())
    assert not sweep.runs[0].values["policy"].critic[0].weight.equal(sweep.runs[1].values["policy"].critic[0].weight)


@pytest.mark.slow
def test_a_run_whose_worker_dies_runs_again_from_its_start_and_the_others_go_on(
    notebook_setup, canonical, monkeypatch, one_thread
):
    from fragnb.ui.seeds import SweepView

    # 100 iterations: with 30, a fresh clone's CI once showed the first progress only after both runs had ended,
    # the kill then took finished results, which Dask computed again without the sweep seeing a failure
    setup = Setup("s", source=notebook_setup.source.replace("iterations = 2", "iterations = 100"))
    killed, update = [], SweepView.update

    def kill(self):
        if not killed and any(r.progress for r in self.runs):
            client, _ = clusters.connect(None)
            busy = [w for w, tasks in client.processing().items() if tasks]  # a worker running a run
            victim = psutil.Process(client.run(os.getpid, workers=busy[:1])[busy[0]])
            victim.kill()
            killed.append(victim.pid)
        update(self)

    monkeypatch.setattr(SweepView, "update", kill)
    result = fragnb.sweep(canonical.body, setup, seeds=[0, 1], progress=False, plot=False)
    assert killed and not result.failed
    assert sum(r.restarts for r in result.runs) == 1 and "ran again from its start" in str(result)
    for run in result.runs:
        _same_as_plain(run, _plain(setup, canonical.body, run.seed))


def test_under_a_distributed_policy_the_runs_go_one_after_another_each_as_plain_python(
    notebook_setup, canonical, one_thread
):
    result = fragnb.sweep(
        canonical.body, notebook_setup, seeds=[0, 1], policy="coarse", actors=2, progress=False, plot=False
    )
    assert result.policy == "coarse" and not result.failed
    for run in result.runs:
        assert run.result.policy == "coarse" and run.result.guarantee == "exact"
        _same_as_plain(run, _plain(notebook_setup, canonical.body, run.seed))


def test_a_ctrl_c_ends_every_run_at_an_iteration_boundary_and_keeps_them(
    notebook_setup, canonical, monkeypatch, capsys
):
    import fragnb.runtime.sweep

    setup = Setup("s", source=notebook_setup.source.replace("iterations = 2", "iterations = 400"))
    pauses, pause = [], fragnb.runtime.sweep._pause

    def interrupted_once():
        pauses.append(1)
        if len(pauses) == 15:  # about 3 s in: a first Ctrl-C
            raise KeyboardInterrupt
        pause()

    monkeypatch.setattr(fragnb.runtime.sweep, "_pause", interrupted_once)
    result = fragnb.sweep(canonical.body, setup, seeds=[0, 1], progress=False, plot=False)
    assert result.stopped.startswith("interrupted")
    assert "interrupt again to abort" in capsys.readouterr().err  # what a run's first Ctrl-C says
    assert all(0 < run.result.iterations < 400 and run.result.stopped for run in result.runs)


def test_a_sweep_starts_no_more_workers_than_the_class_allows(notebook_setup, canonical, monkeypatch):
    from fragnb.runtime.cluster import clusters

    asked = []

    def connect(cluster, workers=1, dashboard=True):
        asked.append(workers)
        raise RuntimeError("asked")

    monkeypatch.setattr(clusters, "connect", connect)
    monkeypatch.setenv("FRAGNB_WORKERS", "1")
    with pytest.raises(RuntimeError, match="asked"):
        fragnb.sweep(canonical.body, notebook_setup, seeds=[0, 1, 2, 3], progress=False, plot=False)
    assert asked == [1]
