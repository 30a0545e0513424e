"""A notebook 01 run in a process of its own, for tests/test_storage.py: ``kill`` starts it writing checkpoints
and SIGKILLs its own process (the kernel) once the one after iteration 3 is on disk; ``resume`` goes on from
them in a new process; ``whole`` runs it uninterrupted. The last two save the weights, returns and counter.

    python tests/killed_run.py kill|resume|whole POLICY CHECKPOINT_DIR OUT.pt REPO
"""

import os
import signal
import sys
import threading
import time
from pathlib import Path

import torch

import fragnb
from fragnb.notebook import load_canonical

nb = load_canonical(Path(sys.argv[5]) / "notebooks" / "01_first_fragment_graph.ipynb")


def watch(directory: str, at: int) -> None:
    """SIGKILL this process once the checkpoint after iteration `at` is on disk: the kernel dies mid-run."""

    def kept() -> list[int]:
        names = os.listdir(directory) if os.path.isdir(directory) else []
        return [int(n[11:20]) for n in names if n.startswith("checkpoint-") and n.endswith(".fragnb")]

    while not any(i >= at for i in kept()):
        time.sleep(0.005)
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    step, policy, directory, out = sys.argv[1:5]
    ns = nb.namespace()
    ns["iterations"] = 10
    graph = fragnb.capture(nb.body, ns, name="ppo")
    params = {"actors": 2} if policy == "coarse" else {"replicas": 2}
    options = dict(progress=False, plot=False, checkpoint_every=1)
    if step == "kill":
        threading.Thread(target=watch, args=(directory, 3), daemon=True).start()
        fragnb.run(graph, policy, checkpoint_dir=directory, **options, **params)
        print("the run ended before it was killed")
        sys.exit(3)
    result = fragnb.run(graph, policy, resume=directory if step == "resume" else None, **options, **params)
    torch.save(
        {
            "weights": ns["policy"].state_dict(),
            "returns": list(ns["returns"]),
            "it": ns["it"],
            "iterations": result.iterations,
            "resumed_from": result.resumed_from,
        },
        out,
    )
