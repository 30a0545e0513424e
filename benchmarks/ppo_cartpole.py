"""PPO on CartPole: plain Python vs `%%fragment --run` (single policy), side by side, three seeds.

Runs notebook 01's canonical cell both ways for each seed, in alternating order, and prints
time-to-solve (mean return of the last 20 episodes >= 475) and env steps/s with their ratios
(fragment / plain; the target is <= 1.02 for time and >= 0.98 for throughput).

Then it runs the same cell under each distributed policy on the embedded cluster (one run per
seed) and prints the median time-to-solve next to `single`'s: the loop's time, workers already
started (the first distributed run also pays for starting them, printed as set-up).

Then, if Stable-Baselines3 is installed (``pip install 'fragnb[bench]'``), it times SB3's PPO with
RL Zoo's tuned CartPole-v1 hyperparameters to the same criterion on the same seeds, and prints the
ratio of the median times to solve (SB3 / fragnb single; the target is >= 6).

    .venv/bin/python benchmarks/ppo_cartpole.py [--seeds 0 1 2] [--repeats 2] [--no-dps]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from fragnb import capture, run
from fragnb.notebook import load_canonical
from fragnb.runtime import first_solved

try:
    import stable_baselines3
except ImportError:  # an optional dependency: the `bench` extra
    stable_baselines3 = None

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "01_first_fragment_graph.ipynb"


def plain(cell, seed: int) -> dict:
    ns = cell.namespace(seed)
    code = compile(cell.body, "<plain>", "exec")
    start = time.perf_counter()
    exec(code, ns)
    seconds = time.perf_counter() - start
    return _measure(ns, start, seconds)


def fragment(cell, seed: int) -> dict:
    ns = cell.namespace(seed)
    graph = capture(cell.body, ns, name=cell.name)
    start = time.perf_counter()
    run(graph, progress=True, plot=False)  # what `%%fragment NAME --run` does outside a notebook
    seconds = time.perf_counter() - start
    return _measure(ns, start, seconds)


def _measure(ns: dict, start: float, seconds: float) -> dict:
    env = ns["env"]
    episodes = sorted(env.episodes, key=lambda e: (e.step, e.env_id))
    i = first_solved([e.ret for e in episodes])
    return {
        "seconds": seconds,
        "steps_per_s": env.env_steps / seconds,
        "solve_steps": None if i is None else episodes[i].step * env.num_envs,
        "solve_s": None if i is None else episodes[i].time - start,
        "weights": torch.cat([p.flatten() for p in ns["learner"].policy.parameters()]),
    }


#: The distributed policies compared with `single`, with two workers where they take a count.
DPS = {"coarse": {"actors": 2}, "fine": {"actors": 2}, "multi_learner": {"learners": 2}}


def distributed(cell, seed: int, policy: str, **params) -> dict:
    ns = cell.namespace(seed)
    start = time.perf_counter()
    result = run(
        capture(cell.body, ns, name=cell.name),
        policy,
        progress=False,
        plot=False,
        until=lambda r: r.mean_return() >= 475,
        **params,
    )  # no need to train on once solved
    solved = result.solved_at()
    return {
        "solve_s": solved[1] if solved else None,
        "solve_steps": solved[0] if solved else None,
        "setup_s": time.perf_counter() - start - result.seconds - result.check_seconds,
        "steps_per_s": result.env_steps_per_s,
    }


def compare_dps(cell, seeds: list[int], single_s: float) -> None:
    print(
        f"\ntime-to-solve under each distribution policy (loop time, median over seeds {seeds}; single: {single_s:.2f} s)"
    )
    print(f"{'policy':<27} {'solve s':>8} {'vs single':>9} {'solved at':>10} {'steps/s':>9} {'set-up s':>9}")
    for policy, params in DPS.items():
        ms = [distributed(cell, seed, policy, **params) for seed in seeds]
        solve = statistics.median(m["solve_s"] if m["solve_s"] is not None else float("inf") for m in ms)
        steps = statistics.median(m["solve_steps"] or 0 for m in ms)
        name = f"{policy} ({', '.join(f'{k}={v}' for k, v in params.items())})"
        print(
            f"{name:<27} {solve:>8.2f} {solve / single_s:>8.2f}x {steps:>10,.0f} {statistics.median(m['steps_per_s'] for m in ms):>9,.0f} "
            f"{max(m['setup_s'] for m in ms):>9.1f}"
        )
    import fragnb

    fragnb.shutdown()


def _median(measurements: list[dict]) -> dict:
    """The run with the median total time (its solve time and throughput come with it)."""
    return sorted(measurements, key=lambda m: m["seconds"])[len(measurements) // 2]


#: RL Zoo's tuned PPO hyperparameters for CartPole-v1 (rl-baselines3-zoo, hyperparams/ppo.yml);
#: ``lin_x`` schedules decay linearly from x to 0 over ``n_timesteps``.
SB3_ZOO = dict(
    n_envs=8,
    n_timesteps=100_000,
    n_steps=32,
    batch_size=256,
    gae_lambda=0.8,
    gamma=0.98,
    n_epochs=20,
    ent_coef=0.0,
    learning_rate=1e-3,
    clip_range=0.2,
)


def sb3(seed: int) -> dict:
    """Time SB3's PPO (RL Zoo settings) until the mean return of the last 20 episodes reaches 475."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    class StopWhenSolved(BaseCallback):
        def _on_training_start(self) -> None:
            self.returns, self.solved = [], None

        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:  # Monitor's record of an episode that ended in this step
                    self.returns.append(info["episode"]["r"])
                    if first_solved(self.returns[-20:]) is not None:
                        self.solved = (self.num_timesteps, time.perf_counter())
                        return False
            return True

    z = SB3_ZOO
    env = make_vec_env("CartPole-v1", n_envs=z["n_envs"], seed=seed)
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=z["n_steps"],
        batch_size=z["batch_size"],
        gae_lambda=z["gae_lambda"],
        gamma=z["gamma"],
        n_epochs=z["n_epochs"],
        ent_coef=z["ent_coef"],
        learning_rate=lambda left: left * z["learning_rate"],
        clip_range=lambda left: left * z["clip_range"],
        seed=seed,
        device="cpu",
    )
    callback = StopWhenSolved()
    start = time.perf_counter()
    model.learn(total_timesteps=z["n_timesteps"], callback=callback)
    steps, end = callback.solved or (None, None)
    return {"solve_steps": steps, "solve_s": None if end is None else end - start}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--repeats", type=int, default=3, help="runs of each mode per seed, alternating order; the median counts"
    )
    parser.add_argument("--no-dps", action="store_true", help="skip the distributed policies")
    args = parser.parse_args()
    cell = load_canonical(NOTEBOOK)
    torch.set_num_threads(1)  # two modes measured alike, no thread contention noise

    rows, ok = [], True
    for seed in args.seeds:
        runs = {"plain": [], "fragment": []}
        for r in range(args.repeats):
            order = ("plain", "fragment") if r % 2 == 0 else ("fragment", "plain")
            for mode in order:
                runs[mode].append((plain if mode == "plain" else fragment)(cell, seed))
        p, f = _median(runs["plain"]), _median(runs["fragment"])
        same = torch.equal(p["weights"], f["weights"]) and p["solve_steps"] == f["solve_steps"]
        solved = p["solve_steps"] is not None and p["solve_steps"] <= 150_000
        ok &= same and solved
        rows.append((seed, p, f, same))

    print(
        f"\n{'seed':>4} {'solved at':>10} {'plain solve s':>14} {'frag solve s':>13} {'ratio':>6} "
        f"{'plain steps/s':>14} {'frag steps/s':>13} {'ratio':>6}  same result"
    )
    for seed, p, f, same in rows:
        solve_ratio = f["solve_s"] / p["solve_s"] if p["solve_s"] else float("nan")
        print(
            f"{seed:>4} {str(p['solve_steps']):>10} {p['solve_s'] or float('nan'):>14.2f} {f['solve_s'] or float('nan'):>13.2f} "
            f"{solve_ratio:>6.3f} {p['steps_per_s']:>14,.0f} {f['steps_per_s']:>13,.0f} {f['steps_per_s'] / p['steps_per_s']:>6.3f}  {same}"
        )
    time_ratio = statistics.mean(f["seconds"] / p["seconds"] for _, p, f, _ in rows)
    solve_ratio = statistics.mean(f["solve_s"] / p["solve_s"] for _, p, f, _ in rows if p["solve_s"])
    print(f"\nmean ratio fragment/plain: time-to-solve {solve_ratio:.3f}, total time {time_ratio:.3f} (target <= 1.02)")
    print(
        "every seed solved within 150k steps with identical results"
        if ok
        else "FAILED: a seed did not solve or results differ"
    )
    ours = statistics.median(f["solve_s"] if f["solve_s"] is not None else float("inf") for _, _, f, _ in rows)
    if not args.no_dps:
        compare_dps(cell, args.seeds, ours)

    if stable_baselines3 is None:
        print("\nStable-Baselines3 is not installed (pip install 'fragnb[bench]'): skipping the SB3 comparison")
        return 0 if ok else 1
    print(
        f"\nStable-Baselines3 {stable_baselines3.__version__} PPO, RL Zoo's CartPole-v1 settings "
        f"({SB3_ZOO['n_envs']} envs x {SB3_ZOO['n_steps']} steps, {SB3_ZOO['n_epochs']} epochs, 1 torch thread)"
    )
    theirs = []
    for seed in args.seeds:
        m = sb3(seed)
        theirs.append(m["solve_s"] if m["solve_s"] is not None else float("inf"))
        print(f"{seed:>4} solved at {str(m['solve_steps']):>8} env steps in {theirs[-1]:.2f} s")
    sb3_median = statistics.median(theirs)
    print(
        f"\nmedian time-to-solve: fragnb single {ours:.2f} s, SB3 {sb3_median:.2f} s: "
        f"fragnb is {sb3_median / ours:.1f}x faster (target >= 6)"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
