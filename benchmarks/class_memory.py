"""What one student's kernel costs a shared server: memory (PSS), processes and listening ports, idle
after `%load_ext fragnb` and while the course's notebooks run, as a student runs them (one kernel,
the notebooks one after the other, every cell in order).

    .venv/bin/python benchmarks/class_memory.py [--notebooks 01 02 03] [--env FRAGNB_WORKERS=2 ...]

PSS (proportional set size) counts a page shared by N processes as 1/N in each: what the kernel and
its workers add to the machine, torch's libraries shared with the process they were forked from. A
second student's kernel shares torch's read-only pages with the first (the same files), so the figure
for one kernel alone is the upper end. Target (issue "A class on one server"): at most 350 MiB idle
per student with `%load_ext fragnb` (624 MiB before: 3 workers and their forkserver started at load).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
TARGET_IDLE_MIB = 350
MiB = 2**20


def tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def sample(pid: int) -> tuple[float, int, int]:
    """The kernel's tree now: PSS in MiB, processes, TCP ports listening."""
    pss, procs, ports = 0, 0, set()
    for p in tree(pid):
        try:
            pss += p.memory_full_info().pss
            procs += 1
            ports |= {c.laddr for c in p.net_connections("tcp") if c.status == psutil.CONN_LISTEN}
        except psutil.Error:
            continue
    return pss / MiB, procs, len(ports)


class Watch:
    """The largest sample of the kernel's tree while a notebook runs (one a second), and the CPU seconds
    its processes used (each process's last reading: a worker that ended counts up to its last second)."""

    def __init__(self, pid: int):
        self.pid, self.peak, self.stop = pid, (0.0, 0, 0), threading.Event()
        self.cpu: dict[int, float] = {}
        self.base = self._cpu()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _cpu(self) -> dict[int, float]:
        out = {}
        for p in tree(self.pid):
            try:
                t = p.cpu_times()
                out[p.pid] = t.user + t.system
            except psutil.Error:
                continue
        return out

    def _run(self):
        while not self.stop.wait(1.0):
            now = sample(self.pid)
            self.peak = tuple(max(a, b) for a, b in zip(self.peak, now))
            self.cpu.update(self._cpu())

    def close(self) -> tuple[tuple[float, int, int], float]:
        self.stop.set()
        self.thread.join()
        self.cpu.update(self._cpu())
        return self.peak, sum(v - self.base.get(pid, 0.0) for pid, v in self.cpu.items())


def main() -> None:
    import nbformat
    from nbclient import NotebookClient

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notebooks", nargs="*", default=["01", "02", "03"])
    parser.add_argument("--env", nargs="*", default=[], help="NAME=VALUE for the kernel's environment")
    args = parser.parse_args()
    env = dict(os.environ, **dict(kv.split("=", 1) for kv in args.env))
    paths = [next((ROOT / "notebooks").glob(f"{n}_*.ipynb")) for n in args.notebooks]
    rows, busy = [], []
    os.environ.update(env)  # the kernel inherits this process's environment
    first = nbformat.read(paths[0], as_version=4)
    client = NotebookClient(
        first, kernel_name="python3", timeout=1200, resources={"metadata": {"path": str(ROOT / "notebooks")}}
    )
    with client.setup_kernel():
        pid = client.km.provisioner.process.pid
        load = nbformat.v4.new_code_cell("%load_ext fragnb")
        client.execute_cell(load, 0)
        time.sleep(5)
        rows.append(("idle after %load_ext fragnb", *sample(pid)))
        for path in paths:
            nb = nbformat.read(path, as_version=4)
            client.nb = nb
            watch = Watch(pid)
            begin = time.monotonic()
            for i, cell in enumerate(nb.cells):
                if cell.cell_type == "code":
                    client.execute_cell(cell, i)
            peak, cpu = watch.close()
            wall = time.monotonic() - begin
            rows.append((f"{path.stem[:2]}: peak while it ran", *peak))
            busy.append((path.stem[:2], wall, cpu))
            time.sleep(5)
            rows.append((f"{path.stem[:2]}: idle after it", *sample(pid)))
    print(f"\none student's kernel ({' '.join(args.env) or 'no class settings'}; {os.cpu_count()} cores here)")
    print(f"{'':<40}{'PSS MiB':>9}{'processes':>11}{'ports':>7}")
    for label, pss, procs, ports in rows:
        print(f"{label:<40}{pss:>9.0f}{procs:>11}{ports:>7}")
    print(f"\n{'':<12}{'wall s':>8}{'CPU s':>8}{'cores busy':>12}")
    for name, wall, cpu in busy:
        print(f"{name:<12}{wall:>8.0f}{cpu:>8.0f}{cpu / wall:>12.2f}")
    idle = rows[0][1]
    print(f"idle with %load_ext fragnb: {idle:.0f} MiB (target <= {TARGET_IDLE_MIB} MiB)")
    peak = max(r[1] for r in rows)
    print(f"students per GiB: {1024 / idle:.1f} idle, {1024 / peak:.1f} at the peak of these notebooks")
    cores = max(cpu / wall for _, wall, cpu in busy)
    print(f"cores a student running these notebooks keeps busy: {cores:.2f} at most (a notebook's CPU s / its wall s)")


if __name__ == "__main__":
    sys.exit(main())
