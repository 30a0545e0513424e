"""On a GPU: Dask-CUDA, `gpu_only` on the device, NCCL and GPU learners, run once and measured.

One prepared script for a machine with an NVIDIA GPU. Each step runs in a process of its own under
a time limit (a step that hangs costs its limit, not the rest), and a summary table ends the run:

1. `gpu_only` on CartPole at 4,096 and 65,536 environments on the device: env steps/s, time to solve
   (mean return of the last 20 episodes >= 475, start-up included), and the weights after two
   iterations against `single` on the same device;
2. `cluster="cuda"` (a LocalCUDACluster): its start-up time, `coarse` with the learner on the GPU
   against `single` on that device, and `coarse` x4 against x2 to the bit (each replica's rows computed on
   the whole batch's shape, on the device too);
3. `multi_learner` over NCCL, with two GPUs or more (with one it says so and skips);
4. `srl` with its policy workers on the GPU: inference batch and env steps/s;
5. a checkpoint resume with device tensors: a worker killed mid-run under `coarse` with a GPU
   learner, the run resumed from its checkpoint, the weights against the uninterrupted run's;
6. the suite's GPU tests (`pytest -m gpu`);
7. torch.compile on the fused step's parts (environment step, policy forward) on the device;
8. `data_parallel` on a loop as the field writes it (CleanRL-style PPO, its `device` on the GPU), 2
   replicas: env steps/s, and whether the replicas' networks agree at the end.

    python benchmarks/gpu.py                          # on the GPU machine (README: On GPUs)
    python benchmarks/gpu.py --device cpu --small     # every step here, on the CPU, small: to try the script
    python benchmarks/gpu.py --only resume,pytest     # some steps

The packages it needs beyond the machine's own CUDA torch are listed in benchmarks/gpu_wheels.txt
(benchmarks/gpu_wheels.sh fetches them as wheels for a machine without network). Without a CUDA
device (and without --device cpu) it says so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "01_first_fragment_graph.ipynb"
SOLVED = 475.0


def _cell():
    from fragnb.notebook import load_canonical

    cell = load_canonical(NOTEBOOK)
    assert "PPOConfig()" in cell.setup, "notebook 01's set-up changed: update namespace()"
    return cell


def namespace(cell, iterations: int, num_envs: int | None = None, device: str | None = None) -> dict:
    """Notebook 01's objects (``num_envs`` environments if given), set to run ``iterations`` iterations;
    with ``device`` every component moved there (``single`` on the device)."""
    from fragnb.components import Component

    setup = cell.setup if num_envs is None else cell.setup.replace("PPOConfig()", f"PPOConfig(num_envs={num_envs})")
    ns: dict = {}
    exec(setup, ns)
    ns["iterations"] = iterations
    if device is not None:
        for value in [v for v in ns.values() if isinstance(v, Component)]:
            value.to(device)
    return ns


def weights(ns: dict) -> torch.Tensor:
    return torch.cat([p.detach().cpu().flatten() for p in ns["learner"].policy.parameters()])


def _diff(a: dict, b: dict) -> float:
    return (weights(a) - weights(b)).abs().max().item()


def _row(step: str, what: str, value: str, ok: bool | None = None) -> dict:
    return {"step": step, "what": what, "value": value, "ok": ok}


# -- the steps -------------------------------------------------------------------------------------
def step_gpu_only(args) -> list[dict]:
    from fragnb import capture, run

    cell, rows = _cell(), []
    for n in (256, 1024) if args.small else (4096, 65536):
        reference = namespace(cell, 2, n, device=args.device)
        run(capture(cell.body, reference, name="ppo"), "single", progress=False, plot=False)
        ns = namespace(cell, 2, n)
        run(capture(cell.body, ns, name="ppo"), "gpu_only", progress=False, plot=False, device=args.device)
        diff = _diff(ns, reference)
        rows.append(
            _row(
                "gpu_only",
                f"{n:,} envs: weights vs single on the device after 2 iterations",
                f"{diff:.1e}",
                diff < 1e-3,
            )
        )
        ns = namespace(cell, args.solve_iterations, n)
        start = time.perf_counter()
        result = run(
            capture(cell.body, ns, name="ppo"),
            "gpu_only",
            progress=False,
            plot=False,
            device=args.device,
            until=lambda r: r.mean_return() >= SOLVED,
        )
        wall = time.perf_counter() - start
        solved = result.stopped.startswith("the stop condition")
        rows.append(_row("gpu_only", f"{n:,} envs: env steps/s", f"{result.env_steps_per_s:,.0f}"))
        rows.append(
            _row(
                "gpu_only",
                f"{n:,} envs: time to solve, start-up included",
                f"{wall:.1f} s ({result.env_steps:,} steps)"
                if solved
                else f"not solved in {result.iterations} iterations ({wall:.1f} s)",
                solved,
            )
        )
    return rows


def step_cuda_cluster(args) -> list[dict]:
    from fragnb import capture, run

    cell = _cell()
    cluster = "cuda" if args.device == "cuda" else "local"
    reference = namespace(cell, 2, device=args.device)
    run(capture(cell.body, reference, name="ppo"), "single", progress=False, plot=False)
    timings, runs = [], {}
    for actors in (2, 2, 4):  # the first run starts the cluster, the second finds it warm; x4 against x2
        ns = namespace(cell, 2)
        start = time.perf_counter()
        run(
            capture(cell.body, ns, name="ppo"),
            "coarse",
            cluster=cluster,
            device=args.device,
            actors=actors,
            progress=False,
            plot=False,
        )
        timings.append(time.perf_counter() - start)
        runs[actors] = ns
    diff, counts = _diff(runs[2], reference), _diff(runs[4], runs[2])
    return [
        _row(
            "cuda cluster",
            f"cluster={cluster!r}: start-up (first run minus a warm one)",
            f"{timings[0] - timings[1]:.1f} s",
        ),
        _row("cuda cluster", "coarse, learner on the GPU: weights vs single on the device", f"{diff:.1e}", diff < 1e-3),
        _row(
            "cuda cluster",
            "coarse x4 vs x2 on the device: weights to the bit (fragnb.rows)",
            f"{counts:.1e}",
            counts == 0,
        ),
    ]


def step_nccl(args) -> list[dict]:
    from fragnb import capture, run

    gpus = torch.cuda.device_count() if args.device == "cuda" else 2  # on the CPU: gloo, two processes
    if gpus < 2:
        return [_row("multi_learner", "NCCL all-reduce", "skipped: one GPU (NCCL needs one device per learner)", None)]
    cell = _cell()
    ns = namespace(cell, 3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = run(
            capture(cell.body, ns, name="ppo"),
            "multi_learner",
            learners=2,
            device=args.device,
            cluster="cuda" if args.device == "cuda" else None,
            progress=False,
            plot=False,
        )
    agree = not any("disagree" in str(w.message) for w in caught)
    backend = "NCCL" if args.device == "cuda" else "gloo"
    return [
        _row("multi_learner", f"2 learners over {backend}: env steps/s", f"{result.env_steps_per_s:,.0f}"),
        _row("multi_learner", "the learners' weights agree after 3 iterations", "yes" if agree else "NO", agree),
    ]


def step_srl(args) -> list[dict]:
    from fragnb import capture, run

    cell, rows = _cell(), []
    n = 256 if args.small else 4096
    for policy_workers in (1, 2):
        ns = namespace(cell, 4, n)
        result = run(
            capture(cell.body, ns, name="ppo"),
            "srl",
            actors=2,
            ring=2,
            policy_workers=policy_workers,
            device=args.device,
            progress=False,
            plot=False,
        )
        rows.append(
            _row(
                "srl",
                f"{n:,} envs, 2 actors x ring 2, {policy_workers} policy worker(s) on the device",
                f"{result.env_steps_per_s:,.0f} env steps/s, inference batch {result.inference_batch}",
            )
        )
    return rows


def step_resume(args) -> list[dict]:
    import psutil

    from fragnb import capture, run
    from fragnb.runtime.cluster import clusters
    from fragnb.ui.live import LiveProgress

    cell = _cell()
    params = {"actors": 2, "device": args.device, "checkpoint_every": 2, "plot": False}
    whole = namespace(cell, 6)
    run(capture(cell.body, whole, name="ppo"), "coarse", progress=False, **params)
    killed: list[int] = []

    class KillAfterThree(LiveProgress):  # the notebook's view of the run: it hears of each iteration
        def update(self, *a, **kw):
            super().update(*a, **kw)
            if self.iterations == 3 and not killed:
                client = next(c for _, c, _ in clusters._EMBEDDED.values())
                pid = sorted(client.run(os.getpid).values())[0]
                psutil.Process(pid).kill()  # as the kernel's OOM killer would
                killed.append(pid)

    ns = namespace(cell, 6)
    result = run(
        capture(cell.body, ns, name="ppo"), "coarse", progress=KillAfterThree(progress=False, plot=False), **params
    )
    diff = _diff(ns, whole)
    resumed = bool(killed) and bool(result.lost_workers)
    return [
        _row(
            "resume",
            "a worker killed after iteration 3: resumed from a checkpoint",
            "; ".join(result.lost_workers) or "not resumed",
            resumed,
        ),
        _row("resume", "weights vs the uninterrupted run", f"{diff:.1e}", diff < 1e-5),
    ]


def step_pytest(args) -> list[dict]:
    # On the CPU (trying the script) a quick file stands in for the GPU tests, which would skip there.
    which = ["-m", "gpu", str(ROOT / "tests")] if args.device == "cuda" else [str(ROOT / "tests" / "test_envs.py")]
    # -o addopts=: the project's options name nbval, which that machine need not have
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", *which],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    last = (done.stdout.strip().splitlines() or ["no output"])[-1]
    return [
        _row(
            "gpu tests", "pytest " + " ".join(w.replace(str(ROOT) + "/", "") for w in which), last, done.returncode == 0
        )
    ]


def step_compile(args) -> list[dict]:
    import contextlib
    import io

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from architectures import compare_compiled

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        compare_compiled((256, 1024) if args.small else (4096, 65536), args.device)
    return [
        _row("compile", "torch.compile on the fused step's parts (eager vs compiled)", line.strip())
        for line in out.getvalue().splitlines()
        if line.strip()
    ]


def step_data_parallel(args) -> list[dict]:
    from fragnb import capture, run

    sys.path.insert(0, str(ROOT / "tests"))
    from corpus.field import FIELD_BY_NAME

    loop = FIELD_BY_NAME["cleanrl_ppo"]
    steps = 2048 if args.small else 65536
    setup = loop.setup.replace('device = torch.device("cpu")', f'device = torch.device("{args.device}")')
    setup = setup.replace("total_timesteps: int = 192", f"total_timesteps: int = {steps}")
    ns: dict = {}
    exec(compile(setup, "<setup>", "exec"), ns)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = run(
            capture(loop.cell, ns, name="cleanrl_ppo"),
            "data_parallel",
            replicas=2,
            device=args.device,
            progress=False,
            plot=False,
        )
    agree = not any("differs between" in str(w.message) for w in caught)
    return [
        _row(
            "data_parallel",
            f"CleanRL-style PPO on {args.device}, 2 replicas: env steps/s",
            f"{result.env_steps_per_s:,.0f}",
        ),
        _row("data_parallel", "the replicas' networks agree at the end", "yes" if agree else "NO", agree),
    ]


STEPS = {  # name -> (function, seconds it may take on one H200): 9.75 minutes at most, inside one 10-minute device command
    "gpu_only": (step_gpu_only, 120),
    "cuda_cluster": (step_cuda_cluster, 90),
    "nccl": (step_nccl, 45),
    "srl": (step_srl, 75),
    "resume": (step_resume, 90),
    "pytest": (step_pytest, 60),
    "compile": (step_compile, 60),
    "data_parallel": (step_data_parallel, 45),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--device", default="cuda", choices=("cuda", "cpu"), help="cpu runs the same steps without a GPU (to try them)"
    )
    parser.add_argument("--small", action="store_true", help="small sizes (to try the script)")
    parser.add_argument("--step", choices=list(STEPS), help="run one step in this process and print its rows as JSON")
    parser.add_argument(
        "--only", default=",".join(STEPS), help="the steps to run, comma-separated (default: all, in order)"
    )
    parser.add_argument(
        "--solve-iterations", type=int, default=40, help="most iterations gpu_only gets to solve CartPole"
    )
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every step's time limit (a slower machine)")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device here: nothing to measure (run this on a GPU machine, or pass --device cpu to try it)")
        return 0
    if args.step:
        torch.set_num_threads(1)
        rows = STEPS[args.step][0](args)
        import fragnb

        fragnb.shutdown()
        print("ROWS " + json.dumps(rows))
        return 0
    name = torch.cuda.get_device_name(0) if args.device == "cuda" else "CPU"
    print(f"{name} x{torch.cuda.device_count() if args.device == 'cuda' else 0}, torch {torch.__version__}", flush=True)
    rows = []
    for step, (_, limit) in ((name, STEPS[name]) for name in args.only.split(",")):
        command = [
            sys.executable,
            __file__,
            "--step",
            step,
            "--device",
            args.device,
            "--solve-iterations",
            str(args.solve_iterations),
        ]
        command += ["--small"] if args.small else []
        start = time.perf_counter()
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=limit * args.scale, cwd=ROOT)
            found = [line for line in done.stdout.splitlines() if line.startswith("ROWS ")]
            got = (
                json.loads(found[-1][5:])
                if found
                else [_row(step, "failed", (done.stderr.strip().splitlines() or ["no output"])[-1][:160], False)]
            )
        except subprocess.TimeoutExpired:
            got = [_row(step, "timed out", f"after {limit * args.scale:.0f} s", False)]
        for r in got:
            r["seconds"] = time.perf_counter() - start
        rows += got
        for r in got:
            print(f"  {r['step']:<13} {r['what']:<70} {r['value']}", flush=True)
    print("\n| step | what | measured | ok |\n|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['step']} | {r['what']} | {r['value']} | {'' if r['ok'] is None else ('yes' if r['ok'] else 'NO')} |"
        )
    return 0 if all(r["ok"] is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
