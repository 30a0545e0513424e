"""Hosts on addresses of their own, on this machine: a Dask scheduler and worker hosts, each in a Linux network
namespace (``ip netns``) with one veth link to a bridge, as machines on a switch. No loopback joins them: a
worker reaches the scheduler and its peers only at their 10.213.0.x addresses, and cutting a host's link
(``ip link set ... down``) cuts it off as a pulled cable would, without ending a process.

Needs root and the ``ip`` command; :func:`why_not` says what is missing (the tests that use it skip, naming it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

NET = "10.213.0"  # a /24 no machine of this project's uses; the bridge (the notebook's side) is .1
BRIDGE = "fnb-br"
SCHEDULER = f"tcp://{NET}.10:8786"
DASK = str(Path(sys.executable).with_name("dask"))


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def why_not() -> str | None:
    """Why namespaced hosts cannot be made here, or None."""
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2) to make network namespaces"
    if os.geteuid() != 0:
        return "making network namespaces needs root"
    taken = [
        line.split()[1] for line in _ip("-4", "-o", "addr", check=False).stdout.splitlines() if f"inet {NET}." in line
    ]
    if set(taken) - {BRIDGE}:  # (the bridge itself is what a killed earlier session left: removed at the start)
        return f"{NET}.0/24 is already in use on this machine"
    probe = _ip("netns", "add", "fnb-probe", check=False)
    _ip("netns", "del", "fnb-probe", check=False)
    if probe.returncode != 0:
        return f"cannot make a network namespace: {probe.stderr.strip()}"
    return None


def host_address(i: int) -> str:
    """Host ``i``'s address: 0 is the scheduler's, 1.. the worker hosts'."""
    return f"{NET}.{10 + i}"


def link(i: int) -> str:
    """The bridge's end of host ``i``'s link: set it down to cut the host off."""
    return f"fnb-v{i}"


def _kill(i: int) -> None:
    """End every process in host ``i``'s namespace, and wait until they are gone."""
    deadline = time.monotonic() + 30
    while pids := _ip("netns", "pids", f"fnb-h{i}", check=False).stdout.split():
        for pid in pids:
            try:
                os.kill(int(pid), 9)
            except ProcessLookupError:
                pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"processes {pids} in namespace fnb-h{i} did not end")
        time.sleep(0.1)


def _down(n: int) -> None:
    for i in range(n):
        _kill(i)
        _ip("link", "del", link(i), check=False)  # and its peer in the namespace
        _ip("netns", "del", f"fnb-h{i}", check=False)
    _ip("link", "del", BRIDGE, check=False)


def _up(n: int) -> None:
    _ip("link", "add", BRIDGE, "type", "bridge")
    _ip("addr", "add", f"{NET}.1/24", "dev", BRIDGE)
    _ip("link", "set", BRIDGE, "up")
    for i in range(n):
        ns = f"fnb-h{i}"
        _ip("netns", "add", ns)
        _ip("link", "add", link(i), "type", "veth", "peer", "name", "eth0", "netns", ns)
        _ip("link", "set", link(i), "master", BRIDGE)
        _ip("link", "set", link(i), "up")
        for args in (("addr", "add", f"{host_address(i)}/24", "dev", "eth0"), ("link", "set", "eth0", "up")):
            _ip("netns", "exec", ns, "ip", *args)
        _ip("netns", "exec", ns, "ip", "link", "set", "lo", "up")


class Hosts:
    """A scheduler host and ``hosts`` worker hosts of ``per_host`` single-threaded worker processes each."""

    def __init__(self, hosts: int, per_host: int, logs: Path):
        self.hosts, self.per_host, self.logs = hosts, per_host, logs
        self.procs: dict[int, subprocess.Popen] = {}

    def _start(self, i: int, *command: str) -> None:
        out = open(self.logs / f"host{i}.log", "ab")  # noqa: SIM115 - the process keeps it
        self.procs[i] = subprocess.Popen(
            ["ip", "netns", "exec", f"fnb-h{i}", *command], stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )

    def start_workers(self, i: int) -> None:
        self._start(
            i, DASK, "worker", SCHEDULER, "--host", host_address(i), "--nthreads", "1",
            "--nworkers", str(self.per_host), "--no-dashboard",
            "--dashboard-address", f"{host_address(i)}:0",  # its health server: on every interface otherwise
        )  # fmt: skip

    def pids(self, i: int) -> list[int]:
        return [int(p) for p in _ip("netns", "pids", f"fnb-h{i}", check=False).stdout.split()]

    def restart(self, i: int) -> None:
        """Host ``i`` with its link up and fresh workers, as after a repaired cable and a reboot."""
        _ip("link", "set", link(i), "up")
        _kill(i)
        self.procs[i].wait(30)
        self.start_workers(i)

    def cut(self, i: int) -> None:
        _ip("link", "set", link(i), "down")


def wait_for_workers(count: int, timeout: float = 120) -> None:
    from distributed import Client

    with Client(SCHEDULER, timeout="30s", set_as_default=False) as client:
        deadline = time.monotonic() + timeout
        while len(client.scheduler_info(n_workers=-1)["workers"]) != count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{count} workers did not register at {SCHEDULER} within {timeout} s")
            time.sleep(0.2)


@contextmanager
def hosts(worker_hosts: int, per_host: int, logs: Path):
    """The scheduler's host (0) and worker hosts 1..``worker_hosts``, up and registered; all removed after."""
    n = worker_hosts + 1
    _down(n)  # what a killed earlier session left
    _up(n)
    made = Hosts(worker_hosts, per_host, logs)
    try:
        made._start(0, DASK, "scheduler", "--host", host_address(0), "--port", "8786", "--no-dashboard")
        for i in range(1, n):
            made.start_workers(i)
        wait_for_workers(worker_hosts * per_host)
        yield made
    finally:
        _down(n)
        for proc in made.procs.values():
            proc.wait(30)
