"""Distribution policies on a GPU: the sync invariant and env steps/s, every DP in one run.

Sized to finish in under 8 minutes on one H200. For each DP it runs notebook 01's cell with a GPU
learner group (`device="cuda"`) and compares the learner's weights after a few iterations with a
`single` run on the CPU (same seed), printing the largest difference (GPU arithmetic rounds
differently, so a small one is expected; a wrong value flowing across a device boundary is large
or an error), then env steps/s with 256 and 4096 environments. `multi_learner` needs one GPU per
learner (NCCL refuses two ranks on one device) and is skipped with fewer than two. Then the decoupled
and fused architectures: `gpu_only` (environments on the GPU too) at 4096 and 16384 environments,
env steps/s and time to solve CartPole; `srl` with its policy workers and trainer on the GPU; and
torch.compile on the fused step's parts (environment step, policy forward) on the device.

    .venv/bin/python benchmarks/gpu.py [--iterations 4] [--device cpu] [--solve-iterations 40]

Without a CUDA device it says so and exits 0.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

import fragnb
from fragnb import capture, run
from fragnb.notebook import load_canonical

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "01_first_fragment_graph.ipynb"


def namespace(cell, iterations: int, num_envs: int | None = None) -> dict:
    """Notebook 01's objects (``num_envs`` environments if given), set to run ``iterations`` iterations."""
    setup = cell.setup if num_envs is None else cell.setup.replace("PPOConfig()", f"PPOConfig(num_envs={num_envs})")
    ns: dict = {}
    exec(setup, ns)
    ns["iterations"] = iterations
    return ns


def weights(ns: dict) -> torch.Tensor:
    return torch.cat([p.detach().cpu().flatten() for p in ns["learner"].policy.parameters()])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=4)
    parser.add_argument("--device", default="cuda", help="cpu runs the same script without a GPU (to try it)")
    parser.add_argument("--solve-iterations", type=int, default=40, help="most iterations gpu_only gets to solve CartPole")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device here: nothing to measure (run this on a GPU machine)")
        return 0
    gpus = torch.cuda.device_count() if args.device == "cuda" else 0
    cell = load_canonical(NOTEBOOK)
    dps = {"coarse": {"actors": 2}, "fine": {"actors": 2}}
    if gpus >= 2:
        dps["multi_learner"] = {"learners": 2}
    print(f"{torch.cuda.get_device_name(0) if gpus else 'CPU'} x{gpus}, torch {torch.__version__}")

    assert "PPOConfig()" in cell.setup, "notebook 01's set-up changed: update namespace()"
    reference = namespace(cell, args.iterations)
    run(capture(cell.body, reference, name="ppo"), "single", progress=False, plot=False)
    print(f"\n1. the sync invariant after {args.iterations} iterations (largest weight difference to single on the CPU)")
    ok = True
    for policy, params in dps.items():
        ns = namespace(cell, args.iterations)
        run(capture(cell.body, ns, name="ppo"), policy, progress=False, plot=False, device=args.device, check=False, **params)
        diff = (weights(ns) - weights(reference)).abs().max().item()
        ok &= diff < 1e-3
        print(f"   {policy:<14} {diff:.2e}  {'ok' if diff < 1e-3 else 'DIFFERS'}")

    print("\n2. env steps/s with a GPU learner")
    for num_envs in (256, 4096):
        for policy, params in {"single": {}, **dps}.items():
            ns = namespace(cell, args.iterations, num_envs)
            kwargs = {} if policy == "single" else {"device": args.device, "check": False, **params}
            result = run(capture(cell.body, ns, name="ppo"), policy, progress=False, plot=False, **kwargs)
            print(f"   {num_envs:>5} envs  {policy:<14} {result.env_steps_per_s:>12,.0f} env steps/s")

    print("\n3. gpu_only (every fragment on one device) and srl (policy workers and trainer on the GPU)")
    for num_envs in (4096, 16384):
        ns = namespace(cell, args.solve_iterations, num_envs)
        result = run(capture(cell.body, ns, name="ppo"), "gpu_only", progress=False, plot=False, device=args.device,
                     until=lambda r: r.mean_return() >= 475)
        solved = result.solved_at()
        print(f"   {num_envs:>5} envs  gpu_only       {result.env_steps_per_s:>12,.0f} env steps/s  "
              + (f"solved after {solved[0]:,} steps, {solved[1]:.1f} s" if solved else f"not solved in {result.iterations} iterations"))
    for policy_workers in (1, 2):
        ns = namespace(cell, args.iterations * 2, 4096)
        result = run(capture(cell.body, ns, name="ppo"), "srl", progress=False, plot=False, device=args.device,
                     actors=2, ring=2, policy_workers=policy_workers)
        print(f"   4096 envs  srl 2 actors x ring 2, {policy_workers} policy worker(s) on the GPU  {result.env_steps_per_s:>12,.0f} env steps/s"
              f"  inference batch {result.inference_batch}")

    from architectures import compare_compiled  # this folder is on the path when the script runs

    print("\n4. torch.compile on the fused step's parts on the device: eager vs compiled, per call")
    compare_compiled((4096, 16384), args.device)
    fragnb.shutdown()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
