"""Logs where the field reads them (issue 69): a loop's TensorBoard writer and logger are sinks. Under a
distributed policy the replicas keep their calls and the notebook makes them on its own objects, once each,
in plain Python's order; the safety net's rehearsals make none. Read back with TensorBoard's own reader."""

import io
import logging
import pathlib
import time

import pytest

import fragnb
from corpus.compare import compare_namespaces
from fragnb.sinks import Call, Held, Quiet, built_in_cell, kind_of, perform

tensorboard = pytest.importorskip("torch.utils.tensorboard", reason="TensorBoard is fragnb[tracking]'s")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402


def _cleanrl(logdir: str):
    """CleanRL's PPO loop (tests/corpus/field.py, sampling on streams: exact under coarse), logging as
    CleanRL writes it: its real SummaryWriter built in the setup, and a logger line each iteration."""
    from test_field_loops import _exact_cleanrl

    from corpus.loops import _loop

    loop = _exact_cleanrl()
    setup = loop.setup.replace(
        "writer = []  # stands in for TensorBoard's SummaryWriter: (tag, value, step)",
        f"from torch.utils.tensorboard import SummaryWriter\nimport logging\nwriter = SummaryWriter({logdir!r})\n"
        "log = logging.getLogger('cleanrl')",
    )
    cell = loop.cell.replace("writer.append((", "writer.add_scalar(*(").replace(
        "    if args.anneal_lr:",
        "    log.warning('iteration %d, global_step %d', iteration, global_step)\n    if args.anneal_lr:",
        1,
    )
    assert "SummaryWriter(" in setup and "writer.add_scalar(*(" in cell and "log.warning" in cell
    return _loop("cleanrl_logged", setup, cell)


def _scalars(logdir) -> list[tuple[str, int, float]]:
    """What TensorBoard reads from ``logdir``: (tag, step, value) of every scalar, tag by tag in file order."""
    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    acc.Reload()
    return [(tag, e.step, e.value) for tag in sorted(acc.Tags()["scalars"]) for e in acc.Scalars(tag)]


def _run(loop, policy, logdir, caplog, **params):
    ns = loop.namespace()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="cleanrl"):
        result = fragnb.run(fragnb.capture(loop.cell, ns, name=loop.name), policy, progress=False, plot=False, **params)
    ns["writer"].close()
    lines = [r.getMessage() for r in caplog.records if r.name == "cleanrl"]
    return ns, result, _scalars(logdir), lines


@pytest.mark.parametrize("actors", [2, 4])
def test_cleanrls_summarywriter_under_coarse_writes_plain_pythons_scalars_once_in_order(tmp_path, caplog, actors):
    loop = _cleanrl(str(tmp_path / "single"))
    plain_ns, _, plain, plain_lines = _run(loop, "single", tmp_path / "single", caplog)
    assert plain and any(tag == "charts/episodic_return" for tag, _, _ in plain)
    loop = _cleanrl(str(tmp_path / "coarse"))
    ns, result, scalars, lines = _run(loop, "coarse", tmp_path / "coarse", caplog, actors=actors, exact=True)
    assert result.guarantee == "exact"
    assert scalars == plain  # same tags, steps and values, in the same order: nothing from the dry runs
    assert lines == plain_lines and len(lines) == result.iterations  # the logger: once per iteration
    for name in ("writer", "log"):  # each run's own (another log directory); the rest is plain Python's
        plain_ns.pop(name), ns.pop(name)
    compare_namespaces(plain_ns, ns, loop.cell)


def test_data_parallel_writes_replica_0s_scalars_as_plain_pythons_single_run_would(tmp_path, caplog):
    loop = _cleanrl(str(tmp_path / "single"))
    _, _, plain, _ = _run(loop, "single", tmp_path / "single", caplog)
    loop = _cleanrl(str(tmp_path / "dp"))
    _, result, scalars, lines = _run(loop, "data_parallel", tmp_path / "dp", caplog, replicas=2)
    assert [(t, s) for t, s, _ in scalars if t.startswith("losses")] == [
        (t, s) for t, s, _ in plain if t.startswith("losses")
    ]  # one replica's run: plain Python's tags at plain Python's steps
    assert len(lines) == result.iterations


def test_a_cell_that_builds_its_writer_is_refused_before_anything_runs_naming_the_line(tmp_path):
    loop = _cleanrl(str(tmp_path / "x"))
    cell = f"writer = SummaryWriter({str(tmp_path / 'in_cell')!r})\n" + loop.cell
    ns = loop.namespace()
    graph = fragnb.capture(cell, ns, name="built")
    with pytest.raises(fragnb.FragmentError, match=r"line 1.*`writer` is a logger the cell builds itself.*setup"):
        fragnb.run(graph, "coarse", actors=2, progress=False, plot=False)
    assert not (tmp_path / "in_cell").exists()  # refused before the safety net made one


def test_sinks_are_known_by_type_and_a_rehearsal_holds_a_quiet_one(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path))
    with open(tmp_path / "log.txt", "w") as out, open(tmp_path / "log.txt") as read:
        found = [
            kind_of(x) for x in (writer, logging.getLogger("x"), logging, out, read, io.StringIO(), [], SummaryWriter)
        ]
        assert found == ["tensorboard", "logging", "logging", "file", None, None, None, None]
    writer.close()
    quiet = Quiet("tensorboard", "writer")
    assert quiet.add_scalar("a", 1.0, 0) is None and quiet == Quiet("tensorboard", "writer")
    with pytest.raises(AttributeError, match="`writer.log_dir`.*kept on the notebook's side"):
        Held("tensorboard", "writer").log_dir  # noqa: B018


def test_calls_from_each_replica_are_ordered_by_place_step_and_replica_and_replicated_ones_made_once():
    made = []

    class Sink:
        def add_scalar(self, *args):
            made.append(args)

    def call(where, step, index, seq, line, *args):
        return Call((where, step, index, seq), line, "add_scalar", args, {})

    per_replica = {
        ("actors", 1): {"w": [call((1, 0, 0), 0, 1, 1, 5, "it", 0), call((1, 0, 0), 2, 1, 2, 9, "ret", 1.0)]},
        ("actors", 0): {"w": [call((1, 0, 0), 0, 0, 1, 5, "it", 0), call((1, 0, 0), 2, 0, 2, 9, "ret", 0.0)]},
        ("learner", 0): {"w": [call((1, 0, 1), 0, 0, 1, 12, "loss", 0.5)]},
    }
    assert perform({"w": Sink()}, per_replica, frozenset({9, 12})) == 4
    assert made == [("it", 0), ("ret", 0.0), ("ret", 1.0), ("loss", 0.5)]


def test_built_in_cell_finds_the_writer_a_cell_makes_by_what_the_callee_is():
    import ast
    from types import SimpleNamespace

    from torch.utils.tensorboard import SummaryWriter

    def statements(src):
        return [SimpleNamespace(node=n) for n in ast.parse(src).body]

    ns = {"SummaryWriter": SummaryWriter, "Writer": SummaryWriter, "logging": logging}
    assert built_in_cell(statements("x = 1\nw = Writer('runs')"), ns) == ("w", "Writer", 2)
    assert built_in_cell(statements("f = open('log.txt', 'a')"), ns) == ("f", "open", 1)
    assert built_in_cell(statements("f = open('config.txt')\nlog = logging.getLogger('x')"), ns) == (
        "log",
        "logging.getLogger",
        2,
    )
    assert built_in_cell(statements("w = list()"), ns) is None


#: fragnb's PPO loop (tests/corpus/loops.py) logging each finished episode inside its step loop and the
#: learner's value loss after each update: {episode} and {loss} are the two logging lines.
LOGGED_PPO = """
obs = env.reset()
global_step = 0
for it in range(iterations):
    for step in range(config.num_steps):
        action, logprob, value = actor.act(obs)
        next_obs, reward, terminated, truncated, info = env.step(action)
        buffer.add(obs, action, logprob, value, reward, terminated | truncated)
        obs = next_obs
        global_step += config.num_envs
        for r in info["episode_returns"]:
            {episode}
    batch = buffer.batch(actor.value(obs))
    v = learner.update(batch)["value_loss"]
    {loss}
"""


def _logged_ppo(name: str, start: str, iterations: int, episode: str, loss: str):
    """LOGGED_PPO with its logging lines, after PPO_SETUP with ``start`` (what builds the sink)."""
    from corpus.loops import PPO_SETUP, _loop

    setup = PPO_SETUP.replace("iterations = 2", f"iterations = {iterations}\n    {start}")
    return _loop(name, setup, LOGGED_PPO.format(episode=episode, loss=loss))


def _ppo(logdir: str, iterations: int):
    """The loop logging to a SummaryWriter built in the setup."""
    start = f"from torch.utils.tensorboard import SummaryWriter\n    writer = SummaryWriter({logdir!r})"
    episode = 'writer.add_scalar("charts/episodic_return", r, global_step)'
    return _logged_ppo(
        "ppo_logged", start, iterations, episode, 'writer.add_scalar("losses/value_loss", v, global_step)'
    )


@pytest.mark.parametrize(
    "policy,params", [("async", {"actors": 2}), ("srl", {"actors": 2, "policy_workers": 1, "ring": 2})]
)
def test_async_and_srl_log_the_learners_iterations_in_order_once_each(tmp_path, policy, params):
    """Statistical runs (the actors act on older weights): the learner's value loss at plain Python's steps,
    once per update; the actors' episodes in step order, none from a dry run."""
    tags = []
    for name, kw in (("single", {}), (policy, params)):
        loop = _ppo(str(tmp_path / name), 6)
        ns = loop.namespace()
        result = fragnb.run(fragnb.capture(loop.cell, ns, name=loop.name), name, progress=False, plot=False, **kw)
        ns["writer"].close()
        scalars = _scalars(tmp_path / name)
        tags.append({t: [s for tag, s, _ in scalars if tag == t] for t in {tag for tag, _, _ in scalars}})
    plain, distributed = tags
    assert result.guarantee == "statistical" and distributed["losses/value_loss"] == plain["losses/value_loss"]
    returns = distributed["charts/episodic_return"]
    assert returns and returns == sorted(returns) and returns[-1] <= plain["losses/value_loss"][-1]


def test_a_run_restarted_from_its_checkpoint_logs_each_step_once(tmp_path, monkeypatch):
    from conftest import kill_a_worker_when_shown
    from fragnb.runtime.cluster import clusters

    loop = _ppo(str(tmp_path / "single"), 12)
    ns = loop.namespace()
    fragnb.run(fragnb.capture(loop.cell, ns, name=loop.name), "single", progress=False, plot=False)
    ns["writer"].close()
    plain = _scalars(tmp_path / "single")
    assert sum(tag == "charts/episodic_return" for tag, _, _ in plain) > 12  # episodes of several iterations
    clusters.shutdown()  # the newest worker process must be this run's
    killed = kill_a_worker_when_shown(monkeypatch, 5)
    loop = _ppo(str(tmp_path / "coarse"), 12)
    ns = loop.namespace()
    result = fragnb.run(
        fragnb.capture(loop.cell, ns, name=loop.name), "coarse", actors=2, checkpoint_every=2, plot=False
    )
    ns["writer"].close()
    assert killed and result.lost_workers, str(result)
    assert _scalars(tmp_path / "coarse") == plain  # the iterations replayed after the restart logged nothing twice


def test_a_failed_run_logs_what_every_replica_finished_and_its_replay_in_the_kernel_logs_nothing(tmp_path):
    """A bug only replica 1 meets (environment 3 of 4), at iteration 3, as notebook 05's drill: the notebook
    made calls of iterations every replica finished and it was told of (progress is told at most every so
    often: the rest are lost with the failed run's replicas), none of the failed one; fragnb.debug() replays
    the run in the kernel and adds none."""
    loop = _ppo(str(tmp_path / "failing"), 5)
    probe = "    assert not (it == 3 and bool((env.env_ids == 3).any())), 'environment 3 diverged'\n"
    cell = loop.cell.replace("    batch = buffer.batch(", probe + "    batch = buffer.batch(", 1)
    assert probe in cell
    ns = loop.namespace()
    with pytest.raises(AssertionError, match="environment 3 diverged"):
        fragnb.run(fragnb.capture(cell, ns, name="probe"), "coarse", actors=2, progress=False, plot=False)
    ns["writer"].flush()
    logged = _scalars(tmp_path / "failing")
    # iterations 0 to 2 at most (64 env steps each): nothing from iteration 3, which replica 0 finished alone
    assert all(step <= 3 * 64 for _, step, _ in logged)
    assert len([tag for tag, _, _ in logged if tag == "losses/value_loss"]) <= 3
    with pytest.raises(AssertionError, match="environment 3 diverged"):
        fragnb.debug()
    ns["writer"].close()
    assert _scalars(tmp_path / "failing") == logged  # the replay made no call


def test_logs_make_an_iterations_calls_once_every_replica_finished_it_and_the_rest_at_the_end():
    from fragnb.sinks import Logs

    made = []

    class Sink:
        def log(self, *args):
            made.append(args)

    def call(where, index, *args):
        return Call((where, 0, index, 0), 3, "log", args, {})

    logs = Logs({"w": Sink()}, frozenset({3}), loop=1)
    before, it0, it1, after = (
        call((0,), 0, "before"),
        call((1, 0, 0), 0, "it0"),
        call((1, 1, 0), 0, "it1"),
        call((2,), 0, "end"),
    )
    logs.add(("learner", 0), {"w": [before, it0]})
    logs.add(("actors", 1), {"w": [call((1, 0, 0), 1, "it0 actor 1")]})
    assert made == []
    logs.upto(1)  # every replica finished iteration 0
    assert made == [("before",), ("it0",), ("it0 actor 1",)]
    logs.add(("learner", 0), {"w": [it1]})
    # the end: every call each replica kept, those made already among them (a restart reports them again)
    logs.begin()  # a restart: iteration 1's call, reported and not made, comes again from the new attempt
    logs.add(("learner", 0), {"w": [before, it0, it1]})
    said = logs.end({("learner", 0): {"w": [before, it0, it1, after]}, ("actors", 1): {"w": []}})
    assert said.startswith("5 calls on `w`")
    # a detached run's conductor holds the components alone: the notebook that attaches makes the calls
    conductor = Logs({}, frozenset(), loop=1)
    conductor.add(("learner", 0), {"w": [before, it0]})
    conductor.upto(1)
    assert conductor.end({("learner", 0): {"w": [before, it0]}}) == "" and len(made) == 5
    assert made[3:] == [("it1",), ("end",)]


def _wandb_history(run_dir, wait_s: float = 60.0) -> list[dict]:
    """The history rows of an offline W&B run, read from its run file with W&B's own record definitions
    (W&B 0.31 ships no Python reader of offline runs): the file is a LevelDB-style log of ``Record``s. Read once
    the run's ``exit`` record is there: W&B's service writes the file in 32 KiB blocks and, on a busy machine,
    after ``run.finish()`` has returned, so an early read found a small run's file without a row: 3 of 4 runs of
    these tests failed so with two CPU-bound processes beside them (``--busy=2``), none of 4 with the wait."""
    deadline = time.monotonic() + wait_s
    while True:
        rows, kinds = _wandb_records(run_dir)
        if "exit" in kinds or time.monotonic() > deadline:
            return rows
        time.sleep(0.2)


def _wandb_records(run_dir) -> tuple[list[dict], list[str]]:
    """The history rows of an offline W&B run's file as written so far, and the kinds of all its records."""
    import json
    import struct

    from wandb.proto import wandb_internal_pb2 as pb

    data = next(pathlib.Path(run_dir).glob("run-*.wandb")).read_bytes()
    kinds = []
    rows, chunks, at, block = [], [], 7, 32768  # a 7-byte header (":W&B", magic, version), then 32 KiB blocks
    while at + 7 <= len(data):
        if block - at % block < 7:  # a block's tail too short for a record header is padding
            at += block - at % block
            continue
        length, kind = struct.unpack("<HB", data[at + 4 : at + 7])
        if at + 7 + length > len(data):  # a record still being written
            break
        chunks.append(data[at + 7 : at + 7 + length])
        at += 7 + length
        if kind in (1, 4):  # a whole record, or the last piece of one
            record = pb.Record()
            record.ParseFromString(b"".join(chunks))
            chunks = []
            kinds.append(record.WhichOneof("record_type"))
            if kinds[-1] == "history":
                row = {
                    item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item
                }
                rows.append({k: v for k, v in row.items() if k not in ("_timestamp", "_runtime")})  # the clock's
    return rows, kinds


def _tracked(tmp_path, tool: str, iterations: int = 5):
    """The loop logging to W&B (offline, nothing leaves the machine) or MLflow (a local file store), set up as
    their quickstarts do."""
    start = {
        "wandb": f"import wandb\n    run = wandb.init(project='fragnb', dir={str(tmp_path)!r}, mode='offline')",
        "mlflow": f"import mlflow\n    mlflow.set_tracking_uri({'file:' + str(tmp_path / 'mlruns')!r})\n    run = mlflow.start_run()",
    }[tool]
    episode, loss = {
        "wandb": ("wandb.log({'charts/episodic_return': r}, step=global_step)", "wandb.log({'losses/value_loss': v})"),
        "mlflow": (
            "mlflow.log_metric('episodic_return', r, step=global_step)",
            "mlflow.log_metric('value_loss', v, step=global_step)",
        ),
    }[tool]
    return _logged_ppo(f"ppo_{tool}", start, iterations, episode, loss)


@pytest.fixture
def wandb_offline(monkeypatch):
    """W&B offline (nothing leaves the machine), its service process ended after the test: a child of this
    process, it would outlive the test, and later tests find no child process of a run left behind."""
    wandb = pytest.importorskip("wandb", reason="W&B is fragnb[tracking]'s")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    yield
    wandb.teardown()


@pytest.mark.parametrize("policy,params", [("coarse", {"actors": 2}), ("fine", {"actors": 2})])
def test_wandb_offline_gets_plain_pythons_history_once_in_order(tmp_path, wandb_offline, policy, params):
    histories = []
    for name, kw in (("single", {}), (policy, params)):
        loop = _tracked(tmp_path / name, "wandb")
        ns = loop.namespace()
        fragnb.run(fragnb.capture(loop.cell, ns, name=loop.name), name, progress=False, plot=False, **kw)
        ns["run"].finish()
        histories.append(_wandb_history(ns["run"].dir.removesuffix("/files")))
    plain, distributed = histories
    assert any("charts/episodic_return" in row for row in plain) and distributed == plain


def test_mlflow_gets_plain_pythons_metrics_once_in_order(tmp_path, monkeypatch):
    pytest.importorskip("mlflow", reason="MLflow is fragnb[tracking]'s")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # the local file store, as its quickstart has it
    from mlflow.tracking import MlflowClient

    metrics = []
    for name, kw in (("single", {}), ("coarse", {"actors": 2})):
        loop = _tracked(tmp_path / name, "mlflow")
        ns = loop.namespace()
        fragnb.run(fragnb.capture(loop.cell, ns, name=loop.name), name, progress=False, plot=False, **kw)
        ns["mlflow"].end_run()
        client = MlflowClient(f"file:{tmp_path / name / 'mlruns'}")
        run_id = ns["run"].info.run_id
        metrics.append(
            {
                k: [(m.step, m.value) for m in client.get_metric_history(run_id, k)]
                for k in ("episodic_return", "value_loss")
            }
        )
    assert metrics[0]["episodic_return"] and metrics[1] == metrics[0]


def test_the_magic_logs_cleanrl_as_fragnb_run_does(tmp_path, shell, caplog):
    plain_loop = _cleanrl(str(tmp_path / "single"))
    _, _, plain, _ = _run(plain_loop, "single", tmp_path / "single", caplog)
    loop = _cleanrl(str(tmp_path / "magic"))
    shell.run_cell(loop.setup, store_history=False).raise_error()
    shell.run_cell_magic("fragment", "x --policy coarse --actors 2 --exact --run --no-progress --no-plot", loop.cell)
    shell.user_ns["writer"].close()
    assert _scalars(tmp_path / "magic") == plain


def test_a_writer_held_inside_an_object_is_refused_naming_it_and_the_way_out(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    loop = _ppo(str(tmp_path / "x"), 2)
    ns = loop.namespace()

    class Logged:  # an agent that keeps its own writer, as object-oriented tutorials do
        def __init__(self, writer):
            self.writer = writer

        def note(self, value, step):
            self.writer.add_scalar("loss", value, step)

    ns["agent"] = Logged(SummaryWriter(str(tmp_path / "inside")))
    cell = loop.cell.replace('writer.add_scalar("losses/value_loss", v, global_step)', "agent.note(v, global_step)")
    assert "agent.note(" in cell
    graph = fragnb.capture(cell, ns, name="inside")
    with pytest.raises(
        fragnb.FragmentError,
        match=r"`agent.writer` \(a SummaryWriter: a tensorboard logger held inside another object.*`writer = agent.writer` in a setup cell",
    ):
        fragnb.run(graph, "coarse", actors=2, progress=False, plot=False)
    ns["agent"].writer.close()


def test_a_remote_clusters_replicas_log_into_the_notebooks_writer(tmp_path, caplog):
    """`dask scheduler` + `dask worker` processes, as a remote cluster: the replicas' calls travel back with their
    progress, and the notebook's writer holds plain Python's scalars, in order (no worker opens the file)."""
    from test_distributed import dask_processes

    plain_loop = _cleanrl(str(tmp_path / "single"))
    _, _, plain, _ = _run(plain_loop, "single", tmp_path / "single", caplog)
    loop = _cleanrl(str(tmp_path / "remote"))
    with dask_processes() as address:
        ns = loop.namespace()
        fragnb.run(
            fragnb.capture(loop.cell, ns, name=loop.name),
            "coarse",
            actors=2,
            exact=True,
            cluster=address,
            progress=False,
            plot=False,
        )
    ns["writer"].close()
    assert _scalars(tmp_path / "remote") == plain
