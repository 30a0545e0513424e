"""A class on one server: what a kernel may start (its container's cores and memory, the class's
FRAGNB_WORKERS), and several students' kernels running at once on one machine."""

import time

import psutil
import pytest
import torch

import fragnb
from conftest import NOTEBOOK_01
from fragnb.errors import ClusterError
from fragnb.runtime.cluster import budget, clusters

GiB = 2**30


def test_cores_are_the_affinity_within_a_cpu_quota():
    assert budget.cores(8, None, None) == 8
    assert budget.cores(8, -1, 100000) == 8  # cgroup v1's "no quota"
    assert budget.cores(8, 150000, 100000) == 1.5  # a hub's `cpu: {limit: 1.5}`
    assert budget.cores(2, 400000, 100000) == 2  # a quota above the cores it may run on


def test_memory_is_the_machines_free_memory_within_a_containers_limit():
    assert budget.memory(20 * GiB, None, None) == 20 * GiB
    assert budget.memory(20 * GiB, 9223372036854771712, GiB) == 20 * GiB  # cgroup v1's "no limit"
    assert budget.memory(20 * GiB, 2 * GiB, GiB // 2) == 3 * GiB // 2  # mybinder: 2 GB, half used
    assert budget.memory(GiB, 4 * GiB, 0) == GiB


def test_the_worker_limit_is_the_classs_setting_else_the_cores_and_the_memory():
    assert budget.allowed(2, 20 * GiB, None, "X")[0] == 8  # 4 per core
    assert budget.allowed(2, 3 * GiB, None, "X")[0] == 3  # 1 GiB each
    assert budget.allowed(1, GiB // 2, None, "X")[0] == 2  # never fewer than a learner's and the actors'
    assert budget.allowed(0.5, 20 * GiB, None, "X")[0] == 4  # a fractional quota counts as one core
    assert budget.allowed(16, 64 * GiB, "3", "FRAGNB_WORKERS") == (3, "FRAGNB_WORKERS=3")
    for bad in ("0", "two", "-1"):
        with pytest.raises(ValueError, match="FRAGNB_WORKERS=.*positive integer"):
            budget.allowed(2, GiB, bad, "FRAGNB_WORKERS")


@pytest.mark.parametrize("version", [1, 2])
def test_a_containers_limits_are_read_from_its_cgroup(tmp_path, version):
    if version == 2:
        (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
        (tmp_path / "cpu.max").write_text("100000 100000\n")
        (tmp_path / "memory.max").write_text(f"{2 * GiB}\n")
        (tmp_path / "memory.current").write_text(f"{GiB // 4}\n")
    else:
        (tmp_path / "cpu").mkdir()
        (tmp_path / "memory").mkdir()
        (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("100000\n")
        (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
        (tmp_path / "memory" / "memory.limit_in_bytes").write_text(f"{2 * GiB}\n")
        (tmp_path / "memory" / "memory.usage_in_bytes").write_text(f"{GiB // 4}\n")
    assert budget._cgroup(tmp_path) == (100000, 100000, 2 * GiB, GiB // 4)
    (tmp_path / ("cpu.max" if version == 2 else "cpu/cpu.cfs_quota_us")).write_text(
        "max 100000\n" if version == 2 else "-1\n"
    )
    quota, period, *_ = budget._cgroup(tmp_path)
    assert budget.cores(2, quota, period) == 2


def test_a_kernel_below_the_courses_floor_is_told_what_it_has_and_what_the_course_wants():
    assert budget.small(budget.Budget(2, 4 * GiB, 8, "")) is None
    note = budget.small(budget.Budget(1, 1.6 * GiB, 2, "4 per core on 1 cores, within 1.6 GiB free"))
    assert "1 core and 1.6 GiB" in note and "2 cores and 3 GiB" in note and "at most 2 worker processes" in note
    assert budget.small(budget.Budget(4, 2 * GiB, 1, "FRAGNB_WORKERS=1")).count("1 worker process (") == 1


def test_FRAGNB_WORKERS_wins_over_dasks_setting(monkeypatch):
    import dask

    with dask.config.set({"fragnb.workers": 5}):
        monkeypatch.delenv("FRAGNB_WORKERS", raising=False)
        assert budget.limit()[2:] == (5, "Dask's fragnb.workers=5")
        monkeypatch.setenv("FRAGNB_WORKERS", "3")
        assert budget.limit()[2:] == (3, "FRAGNB_WORKERS=3")
        assert clusters.local_workers() == 3


def test_a_process_group_larger_than_the_limit_is_refused_before_any_worker_starts(monkeypatch, canonical, ppo_ns):
    fragnb.shutdown()
    monkeypatch.setenv("FRAGNB_WORKERS", "2")
    monkeypatch.setattr(clusters, "_embedded", lambda *a, **k: pytest.fail("a worker was started"))
    ns = ppo_ns(1)
    graph = fragnb.capture(canonical.body, ns, name="ppo")
    with pytest.raises(ClusterError, match=r"data_parallel's 3 replicas each need a worker process.*FRAGNB_WORKERS=2"):
        fragnb.run(graph, "data_parallel", replicas=3, progress=False, plot=False)


@pytest.mark.parametrize("limit", [2, 1])
def test_a_run_under_FRAGNB_WORKERS_shares_its_processes_and_ends_with_plain_pythons_weights(
    monkeypatch, canonical, ppo_ns, limit
):
    """With 2, the actors' replicas share one process and the learner has its own; with 1 (mybinder's one
    core), the one worker process runs every group's replicas as threads."""
    plain = ppo_ns(2)
    exec(compile(canonical.body, "<cell>", "exec"), plain)
    fragnb.shutdown()
    monkeypatch.setenv("FRAGNB_WORKERS", str(limit))
    for policy in ("coarse", "fine"):
        ns = ppo_ns(2)
        result = fragnb.run(
            fragnb.capture(canonical.body, ns, name="ppo"), policy, actors=4, progress=False, plot=False
        )
        assert result.processes == limit and result.guarantee == "exact"
        # to the bit, as the guarantee says: coarse's actors run the network on 2 rows each where plain Python runs
        # it on 8, and a CPU's matrix kernel may round a row differently by the batch's size (on one CI machine's
        # Xeon, 4e-8 apart, before fragnb.rows computed each share's rows on the whole batch's shape)
        for key, value in plain["policy"].state_dict().items():
            assert torch.equal(value, ns["policy"].state_dict()[key]), (policy, key)
    fragnb.shutdown()


def test_one_worker_process_runs_as_many_threads_as_the_cores_allow_replicas():
    assert budget.threads(2, 8) == 1  # a replica program per process
    assert budget.threads(1, 1) == 4 and budget.threads(1, 0.5) == 4 and budget.threads(1, 2) == 8


# Three students' kernels on one machine, each running notebook 01's loop under `coarse` x2 through the
# magic, and then the same iterations as plain Python: the same weights in each, and nothing left once
# their kernels end.
_STUDENT = """
%load_ext fragnb
import torch, fragnb
from fragnb.notebook import load_canonical
cell = load_canonical({path!r})
get_ipython().user_ns.update(cell.namespace())
iterations = 3
get_ipython().run_cell_magic("fragment", "ppo --policy coarse --actors 2 --run -q --no-progress --no-plot", cell.body)
distributed = {{k: v.clone() for k, v in policy.state_dict().items()}}
plain = cell.namespace()
plain["iterations"] = 3
exec(compile(cell.body, "<cell>", "exec"), plain)
print("SAME", all(torch.equal(v, plain["policy"].state_dict()[k]) for k, v in distributed.items()))
"""


def _tree(pid: int) -> set[int]:
    try:
        root = psutil.Process(pid)
        return {root.pid} | {p.pid for p in root.children(recursive=True)}
    except psutil.NoSuchProcess:
        return set()


@pytest.mark.slow
def test_three_kernels_at_once_each_end_with_plain_pythons_weights_and_leave_nothing_behind():
    from jupyter_client.manager import start_new_kernel

    kernels = [start_new_kernel(kernel_name="python3") for _ in range(3)]
    try:
        ids = [kc.execute(_STUDENT.format(path=str(NOTEBOOK_01))) for _, kc in kernels]  # all three at once
        outputs = []
        for (_, kc), msg_id in zip(kernels, ids):
            out = []
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                msg = kc.get_iopub_msg(timeout=600)
                if msg["parent_header"].get("msg_id") != msg_id:
                    continue
                if msg["msg_type"] == "stream":
                    out.append(msg["content"]["text"])
                elif msg["msg_type"] == "error":
                    out.append(f"ERROR {msg['content']['ename']}: {msg['content']['evalue']}")
                elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                    break
            outputs.append("".join(out))
        trees = [_tree(km.provisioner.process.pid) for km, _ in kernels]
        assert all(len(t) > 2 for t in trees), trees  # each kernel ran its own workers
        for out in outputs:
            assert "SAME True" in out and "ERROR" not in out, out
    finally:
        for km, kc in kernels:  # as JupyterLab's "Shut Down Kernel" does: a request, then a kill after a wait
            kc.stop_channels()
            km.shutdown_kernel()
    deadline = time.monotonic() + 30
    left = set()
    while time.monotonic() < deadline:
        left = {pid for t in trees for pid in t if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"}
        if not left:
            break
        time.sleep(0.5)
    assert not left, [psutil.Process(p).cmdline() for p in left if psutil.pid_exists(p)]


def test_fragnbs_cluster_is_the_kernels_default_client_so_that_jupyterlabs_dask_tab_finds_its_dashboard():
    from distributed import Client, LocalCluster, default_client

    fragnb.shutdown()
    client, _ = clusters.connect(None, 1)
    # what dask-labextension's "Auto-detect dashboard URL" runs in the notebook's kernel
    assert default_client() is client and default_client().dashboard_link.startswith("http://127.0.0.1:")
    fragnb.shutdown()
    with pytest.raises(ValueError):
        default_client()  # closed with its cluster
    with LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as theirs, Client(theirs) as own:
        client, _ = clusters.connect(None, 1)
        assert default_client() is own  # the notebook's own client stays its default
        fragnb.shutdown()


def test_a_quiz_reads_the_values_its_cell_left_not_what_an_exercise_rebound_later(shell):
    from fragnb import course

    course.KEPT.clear()
    shell.run_cell("it = 41\nfrom fragnb.course import keep\nkeep('it')\nit = 42")  # the cell ends with it == 42
    shell.run_cell("it = 7")  # an exercise below rebinds it
    assert course.kept("it") == 42 and shell.user_ns["it"] == 7
    with pytest.raises(LookupError, match="no value of `result` was kept"):
        course.kept("result")
