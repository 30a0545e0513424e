"""Clusters: where distributed policies run, and how torch tensors travel between workers.

``None``/``"local"`` is an embedded ``distributed.LocalCluster`` on 127.0.0.1 (processes, one thread
and one torch thread each), reused by every run in this kernel and closed at exit. It can start in
the background before the first run asks for it (:func:`warm`: the magic does so when the extension
loads and when a cell is captured for a distributed policy), its workers are forked from a process
that has already imported torch and fragnb, and Dask's own clocks run slower in it (:data:`QUIET`);
``"cuda"`` a
``dask_cuda.LocalCUDACluster`` (one worker per GPU); a ``"tcp://host:port"`` address or a
``distributed.Client`` an existing cluster, which fragnb never closes.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
import threading
import time

import dask
import torch
from distributed import Client, LocalCluster
from distributed.diagnostics.plugin import WorkerPlugin
from distributed.protocol import dask_deserialize, dask_serialize
from distributed.security import Security

from ...errors import ClusterError
from .budget import limit, threads
from .guard import refuse_unguarded
from .probe import ProbeError, check_scheduler, serves_page

__all__ = [
    "ClusterError",
    "connect",
    "warm",
    "QUIET",
    "local_workers",
    "shutdown",
    "workers",
    "named",
    "dashboard",
    "remote_addresses",
    "register_torch_serializer",
]


def register_torch_serializer() -> None:
    """Serialise torch tensors through CPU memory, restoring the device on arrival when it exists.

    Dask's own torch serializer calls ``.numpy()``, which fails for CUDA tensors.
    """
    dask_serialize.dispatch(torch.Tensor)  # let Dask's lazy torch registration run first, then override it

    @dask_serialize.register(torch.Tensor)
    def _serialize(t: torch.Tensor):
        cpu = t.detach().to("cpu").contiguous()
        header = {
            "device": str(t.device),
            "dtype": str(cpu.dtype).removeprefix("torch."),
            "shape": list(cpu.shape),
            "requires_grad": t.requires_grad,
        }
        return header, [cpu.view(-1).view(torch.uint8).numpy().tobytes() if cpu.numel() else b""]

    @dask_deserialize.register(torch.Tensor)
    def _deserialize(header, frames):
        dtype = getattr(torch, header["dtype"])
        t = (
            torch.frombuffer(bytearray(frames[0]), dtype=torch.uint8).view(dtype)
            if frames[0]
            else torch.empty(0, dtype=dtype)
        )
        t = t.reshape(header["shape"])
        device = header["device"]
        if device.startswith("cuda") and torch.cuda.is_available():
            t = t.to(device)
        return t.requires_grad_(header["requires_grad"])


class TorchSerializer(WorkerPlugin):
    """Registers :func:`register_torch_serializer` in every worker."""

    name = "fragnb-torch-serializer"

    def setup(self, worker):
        register_torch_serializer()


class IgnoreInterrupts(WorkerPlugin):
    """Workers of fragnb's own clusters ignore SIGINT. JupyterLab interrupts a kernel by signalling
    its whole process group, workers included: they would die, and with them the run that the
    interrupt should only stop after its current iteration (or the next run, if none was running)."""

    name = "fragnb-ignore-interrupts"

    def setup(self, worker):
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():  # where a worker process runs its event loop
            signal.signal(signal.SIGINT, signal.SIG_IGN)


_EMBEDDED: dict[str, tuple[LocalCluster, Client, bool]] = {}  # kind -> cluster, client, serves the dashboard
_REMOTE: dict[str, Client] = {}  # scheduler address -> this kernel's client of it (the cluster is not ours)
_START = threading.Lock()  # held while fragnb's own cluster starts or grows, in the background or not
_WARMING: list[threading.Thread] = []  # the background start, while it runs
_FORKSERVER: list[bool] = []  # whether fragnb started multiprocessing's forkserver in this process

#: Dask's clocks in fragnb's own clusters. By default every Dask server ticks every 20 ms, and the
#: scheduler and the nannies run in the kernel's process: an idle cluster of 3 workers took 19 % of
#: a core here (the kernel 6 %, each worker 4 %), and `single` ran 1.1-1.4x slower in a kernel whose
#: cluster was up; with these, 3 %. Work stealing moves tasks between workers, and fragnb pins every
#: task to its replica's worker; Dask's statistical profiler samples task threads every 10 ms
#: (:mod:`~fragnb.runtime.cluster.dask_profiler`), and fragnb's timelines say where a replica's time goes.
QUIET = {
    "distributed.admin.tick.interval": "500ms",
    "distributed.admin.system-monitor.interval": "1s",
    "distributed.worker.memory.monitor-interval": "1s",
    "distributed.scheduler.work-stealing": False,
    "distributed.worker.profile.enabled": False,
    # Workers are forked from one process that has imported torch and fragnb (multiprocessing's
    # forkserver, which Dask supports), not spawned as fresh interpreters that import them again: a
    # worker is up, torch and all, in about 0.1 s instead of 1-3 s, and shares those pages with its
    # siblings. The forkserver itself is a fresh interpreter (never the kernel, whose threads and CUDA
    # state a fork would copy), started once per kernel with the environment Dask gives workers.
    "distributed.worker.multiprocessing-method": "forkserver",
    # Dask starts workers with MALLOC_TRIM_THRESHOLD_=65536 so that they hand freed memory back to the
    # OS. Setting it turns off glibc's dynamic mmap threshold: every tensor over 128 KiB is then mapped
    # and unmapped again, page faults and all. A small transformer's update ran 1.6x slower in a worker
    # than in the notebook (55 ms against 34 ms; the same 55 ms in a plain process given the variable),
    # and every fragment of a GRPO loop 2-3x slower. fragnb's workers keep glibc's defaults.
    "distributed.nanny.pre-spawn-environ": {
        k: v for k, v in dask.config.get("distributed.nanny.pre-spawn-environ").items() if k != "MALLOC_TRIM_THRESHOLD_"
    },
}
#: What the workers' forkserver imports once, for every worker it forks.
PRELOAD = [
    "distributed",
    "fragnb",
    "fragnb.runtime.worker.entry",  # and what it imports: the replica, its walkers, the registry
    "torch._dynamo",
]  # torch.optim imports _dynamo: 3 s


def warm(cluster=None, workers: int = 2, dashboard: bool = True) -> None:
    """Start (or grow to ``workers``, within :func:`local_workers`) fragnb's own local cluster in a
    background thread, so that a later run finds it up; returns at once. The magic calls it as it
    captures a cell it is to run under a distributed policy, with the workers that run needs; loading
    the extension calls it only where ``FRAGNB_WARM=1`` (a kernel that only captures and draws starts
    no worker: a class of thirty on one server pays for no idle ones). Other clusters (``"cuda"``,
    remote ones) are left alone, as is a kernel with ``FRAGNB_WARM=0`` in its environment. A run that
    needs the cluster meanwhile waits for this start instead of starting another; if it fails, the run
    starts one itself and says why."""
    if not (cluster is None or cluster == "local") or os.environ.get("FRAGNB_WARM", "1") == "0":
        return
    workers = min(workers, local_workers())
    up = _EMBEDDED.get("local")
    if up is not None and up[2] == dashboard and len(up[1].scheduler_info().get("workers", {})) >= workers:
        return
    if any(t.is_alive() for t in _WARMING):
        return

    def start():
        try:
            with _starting("local", quiet=True):
                _embedded("local", workers, dashboard, progress=False)
        except Exception as e:  # the run that needs it starts it again in the foreground, and fails there if it must
            logging.getLogger("fragnb").info("starting the local cluster in the background failed: %s", e)

    thread = threading.Thread(target=start, name="fragnb-warm", daemon=True)
    _WARMING[:] = [thread]
    thread.start()


@contextlib.contextmanager
def _starting(kind: str, quiet: bool = False):
    """Hold the start lock for ``kind``'s cluster; a caller that waits for a background start says so."""
    if kind != "local":
        yield
        return
    if not _START.acquire(blocking=False):
        if not quiet:
            print("fragnb: waiting for the Dask cluster starting in the background", file=sys.stderr, flush=True)
        _START.acquire()
    try:
        yield
    finally:
        _START.release()


def connect(cluster=None, workers: int = 1, dashboard: bool = True) -> tuple[Client, bool]:
    """A client for ``cluster`` with at least ``workers`` workers where fragnb can add them; fragnb's
    own clusters serve Dask's dashboard or not as ``dashboard`` says (one started the other way is
    replaced).

    Returns the client and whether fragnb owns (and may close) its cluster.
    """
    if cluster is None or cluster == "local" or cluster == "cuda":
        kind = cluster or "local"
        refuse_unguarded()  # its workers would import the script again and start the run again
        with _starting(kind):
            return _embedded(kind, workers, dashboard), True
    if isinstance(cluster, Client):
        _prepare(cluster)
        return cluster, False
    if isinstance(cluster, str) and cluster.startswith(("tcp://", "tls://")):
        client = _REMOTE.get(cluster)
        if client is not None and client.status == "running":
            return client, False  # one client per scheduler for the kernel's life, not one per run
        security = Security()  # tls://: the certificates in Dask's configuration (distributed.comm.tls.*)
        if cluster.startswith("tls://") and not (security.tls_ca_file and security.tls_client_cert):
            raise ClusterError(
                f"{cluster} speaks TLS, and Dask's configuration names no certificates: set "
                "distributed.comm.tls.ca-file, .client.cert and .client.key (e.g. with dask.config.set), "
                "or connect a distributed.Client with a distributed.Security yourself and pass it "
                "(cluster=client, or --cluster NAME of that variable)"
            )
        context = security.get_connection_args("client").get("ssl_context") if cluster.startswith("tls://") else None
        try:
            check_scheduler(cluster, context=context)  # a Client would wait forever at, say, a Jupyter server's port
        except ProbeError as e:
            raise ClusterError(f"{e}; or use cluster='local'") from None
        try:
            client = Client(cluster, timeout="10s", set_as_default=False, security=security)
        except OSError as e:
            raise ClusterError(
                f"could not reach a Dask scheduler at {cluster} within 10 s ({e}); "
                "start one with `dask scheduler`, or use cluster='local'"
            ) from e
        _prepare(client)
        _REMOTE[cluster] = client
        return client, False
    raise ClusterError(
        f"unknown cluster: {cluster!r} (must be None, 'local', 'cuda', a 'tcp://host:port' or 'tls://host:port' "
        "scheduler address, or a distributed.Client)"
    )


def remote_addresses() -> list[str]:
    """The schedulers this kernel holds a client of, by address."""
    return list(_REMOTE)


def named(value: str | None, namespace: dict):
    """A cluster as a user writes it (``--cluster``, the explorer's box): ``None``, ``"local"``, ``"cuda"``
    and addresses as they are; any other word names a ``distributed.Client`` held in ``namespace``."""
    if value is None or "://" in value or value in ("local", "cuda"):
        return value
    held = namespace.get(value)
    if not isinstance(held, Client):
        raise ClusterError(
            f"--cluster {value}: no variable of that name holds a distributed.Client; use local, cuda, "
            "tcp://host:port, tls://host:port or the name of a Client"
        )
    return held


def dashboard(client: Client) -> str | None:
    """The link to the cluster's Dask dashboard (task stream, worker CPU and memory), if it serves one: as Dask's
    configuration writes it. (A scheduler lists its HTTP port as "dashboard" even when that serves only health
    checks: fragnb knows about its own clusters, and asks others.)"""
    try:
        port = client.scheduler_info().get("services", {}).get("dashboard")
        if not port:
            return None
        link = client.dashboard_link
        own = next((served for _, c, served in _EMBEDDED.values() if c is client), None)
        if own is not None:
            return link if own else None
        # asked at the scheduler's host: the link may be a browser's (`/proxy/{port}/status`, jupyter-server-proxy)
        return link if serves_page(client.scheduler.address.split("://")[-1].rsplit(":", 1)[0], port) else None
    except Exception:  # no dashboard there, or a scheduler that does not say
        return None


def workers(client: Client) -> dict:
    """The cluster's workers now, by address. (``Client.scheduler_info()`` returns a cache that the
    client's periodic refresh may just have replaced by one without workers.)"""
    return client.sync(client.scheduler.identity, n_workers=-1)["workers"]


def local_workers() -> int:
    """How many worker processes fragnb's own cluster starts at most: the class's setting, else 4 per
    core and 1 GiB of free memory each, within the kernel's container (:mod:`.budget`)."""
    return limit().workers


def _embedded(kind: str, count: int, with_dashboard: bool, progress: bool = True) -> Client:
    main = sys.modules.get("__main__")
    if main is not None and not hasattr(main, "__spec__"):
        main.__spec__ = None  # IPython's `%reset` deletes it, and multiprocessing's spawn (Dask's nannies) reads it
    if kind in _EMBEDDED and _EMBEDDED[kind][2] != with_dashboard:
        shutdown(kind)  # asked for (or without) a dashboard unlike the running one
    if kind in _EMBEDDED:
        cluster, client, _ = _EMBEDDED[kind]
        if kind == "local" and len(workers(client)) < count:
            _grow(cluster, client, count, progress=progress)
        return client
    # Dask's scheduler always serves HTTP (health checks), on 8787 of every interface unless told
    # otherwise: a free loopback port, with the bokeh dashboard only when asked for. Mutual TLS with
    # temporary certificates: another user of the machine cannot reach the scheduler, which runs code
    # in this kernel (`run_on_scheduler`), nor the workers.
    opts = {
        "dashboard_address": "127.0.0.1:0",
        "scheduler_kwargs": {"dashboard": with_dashboard},
        "security": Security.temporary(),
    }
    if kind == "cuda":
        cluster = _cuda_cluster(count, opts)
    else:
        # Dask's nanny starts workers with OMP_NUM_THREADS=1: one torch thread each. Kept so: replicas
        # share the machine's cores, and torch's intra-op threads, started from a worker's task thread
        # rather than a main thread, made a learner update 2x slower here, not faster.
        # Dask's dashboard (bokeh) on a free loopback port: a second kernel does not collide on Dask's
        # default 8787, and nothing listens beyond this machine.
        _forkserver()
        budget = limit()
        with dask.config.set(QUIET):  # read as the scheduler and the nannies start; nannies hand it to workers
            cluster = LocalCluster(
                n_workers=0,
                threads_per_worker=threads(budget.workers, budget.cores),
                processes=True,
                host="127.0.0.1",
                silence_logs=logging.CRITICAL,
                **opts,
            )
    # The kernel's default Dask client, unless the notebook made its own: JupyterLab's Dask tab
    # (dask-labextension) finds the dashboard through it ("Auto-detect dashboard URL"), and the
    # notebook's own Dask collections run on these workers, as with any Client made in a notebook.
    client = Client(cluster, set_as_default=with_dashboard and not _a_default_client())
    if kind == "local":
        _grow(cluster, client, count, progress=progress)
    _prepare(client)
    client.register_plugin(IgnoreInterrupts())
    _EMBEDDED[kind] = (cluster, client, with_dashboard)
    return client


def _a_default_client() -> bool:
    from distributed import default_client

    try:
        default_client()
    except ValueError:
        return False
    return True


def _grow(cluster, client: Client, count: int, timeout: float = 120.0, progress: bool = True) -> None:
    """Scale ``cluster`` to ``count`` workers, started side by side; a start that takes more than a
    second shows how many are up (unless ``progress`` is false: a background start shows nothing)."""
    start = time.monotonic()
    with dask.config.set(QUIET):  # the new nannies read it as they start, in the cluster's event loop
        cluster.scale(count)
        up = _wait_for_workers(client, count, start, timeout, progress)
    if up is not None:
        done = f"fragnb: started {count} Dask workers in {time.monotonic() - start:.1f} s"
        print(f"\r{done:<80}", file=sys.stderr, flush=True)  # over the whole of the last progress line


def _wait_for_workers(client: Client, count: int, start: float, timeout: float, progress: bool):
    """Wait until ``count`` workers are up, a progress line a second at most; the last one shown, if any."""
    shown = None  # (workers up, whole seconds waited) of the last line shown
    while (up := len(workers(client))) < count:
        waited = time.monotonic() - start
        if waited > timeout:
            raise ClusterError(
                f"only {up} of {count} Dask workers started within {timeout:.0f} s (memory? see the workers' logs); "
                "ask for fewer replicas"
            )
        if progress and waited > 1.0 and (up, int(waited)) != shown:  # a line a second: a notebook keeps every one
            bar = "#" * (20 * up // count)
            print(
                f"\rfragnb: starting Dask workers [{bar:<20}] {up}/{count} ({waited:.0f} s)",
                end="",
                file=sys.stderr,
                flush=True,
            )
            shown = (up, int(waited))
        time.sleep(0.05)
    return shown


def _forkserver() -> None:
    """Start the workers' forkserver now, importing :data:`PRELOAD` (about 4 s here) while this process
    starts the scheduler. Dask names its own preload list the first time it asks for a forkserver
    context; this one replaces it. The forkserver starts with the environment Dask's nannies give the
    workers they start (``distributed.nanny.pre-spawn-environ``: one OpenMP thread; not its memory trimming, see :data:`QUIET`),
    which they also leave in this process's environment, as Dask's documentation says."""
    import multiprocessing.forkserver

    from distributed.utils import get_mp_context

    with dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"}):
        get_mp_context()
    multiprocessing.forkserver.set_forkserver_preload(PRELOAD)
    _FORKSERVER[:] = [True]  # fragnb started it: shutdown(forkserver=True) stops it
    os.environ.update({k: str(v) for k, v in QUIET["distributed.nanny.pre-spawn-environ"].items()})
    multiprocessing.forkserver.ensure_running()


def _cuda_cluster(count: int, opts: dict):
    if not torch.cuda.is_available():
        raise ClusterError(
            "cluster='cuda' needs a CUDA GPU, and torch sees none here; use cluster='local' (CPU workers)"
        )
    try:
        from dask_cuda import LocalCUDACluster
    except ImportError as e:
        raise ClusterError("cluster='cuda' needs dask-cuda: `pip install 'fragnb[gpu]'`; or use cluster='local'") from e
    # One worker per GPU; a replica holds a worker thread for the whole run, so each worker gets
    # enough threads for every replica (CPU-side replicas then share a GPU worker's process).
    return LocalCUDACluster(ip="127.0.0.1", threads_per_worker=max(1, count), silence_logs=logging.ERROR, **opts)


def _prepare(client: Client) -> None:
    register_torch_serializer()
    client.register_plugin(TorchSerializer())


def shutdown(kind: str | None = None, forkserver: bool = False) -> None:
    """Close fragnb's embedded clusters (all, or one kind); their worker processes end. With no
    ``kind``, also close fragnb's clients of remote schedulers (their clusters keep running). The
    forkserver that forks the workers (idle, torch imported) is kept for the next cluster, which then
    starts in under a second, unless ``forkserver`` (``fragnb.shutdown()`` and the kernel's exit)."""
    for thread in _WARMING:
        thread.join(timeout=120)  # a background start ends before its cluster can be closed
    for k in [kind] if kind else list(_EMBEDDED):
        if k in _EMBEDDED:
            cluster, client, _ = _EMBEDDED.pop(k)
            client.close()
            cluster.close()
    if kind is None:
        while _REMOTE:
            _REMOTE.popitem()[1].close()
    if forkserver and _FORKSERVER and not _EMBEDDED:  # nothing is left to fork: leave no process behind
        import multiprocessing.forkserver

        multiprocessing.forkserver._forkserver._stop()  # CPython's own (tests use it); a later start starts it again
        _FORKSERVER.clear()


atexit.register(shutdown, forkserver=True)
