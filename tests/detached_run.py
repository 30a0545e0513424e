"""A notebook 01 run handed to a cluster by a process of its own, for tests/test_detached.py: ``detach`` checks
and plans it, hands it to the scheduler at ADDRESS (its checkpoints and result in DIR) and SIGKILLs its own
process (the kernel) as soon as the run is handed over.

    python tests/detached_run.py detach ADDRESS DIR ITERATIONS REPO
"""

import os
import signal
import sys
from pathlib import Path

import fragnb
from fragnb.notebook import load_canonical

if __name__ == "__main__":
    step, address, directory, iterations, repo = sys.argv[1:6]
    nb = load_canonical(Path(repo) / "notebooks" / "01_first_fragment_graph.ipynb")
    ns = nb.namespace()
    ns["iterations"] = int(iterations)
    graph = fragnb.capture(nb.body, ns, name="ppo")
    handed = fragnb.run(
        graph,
        "coarse",
        address,
        actors=2,
        progress=False,
        plot=False,
        checkpoint_every=1,
        checkpoint_dir=directory,
        detach=True,
    )
    print(repr(handed), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # the kernel dies; the run goes on without it
