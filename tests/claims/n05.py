"""Notebook 05's sentences that state what its run measured or computed, and how the run checks each (see
`claims/__init__.py`)."""

from claims import Asserted, Explained, Shown  # noqa: F401

CLAIMS = [
    (
        "leaves the same weights as on the embedded cluster",
        Asserted("same and trained"),
    ),
    (
        "fragnb uses Dask as its control plane only",
        Explained("fragnb's design: how its runtime uses the scheduler, not a figure of this run"),
    ),
    (
        "`coarse` with 2 actors has 3 replicas",
        Explained("coarse's definition: one replica per actor and one learner, as its placement below prints"),
    ),
    (
        "The next cell does the same from Python, on free ports",
        Explained("an instruction: what the next cell does, not an outcome"),
    ),
    (
        "A client of our own asks the scheduler to wait until both workers have registered",
        Explained("describes what the next cell does; its output lists the workers"),
    ),
    (
        "`--cluster` takes the scheduler's address",
        Explained("how the magic's option is used, an interface"),
    ),
    (
        "*Status* shows the task stream",
        Explained("what Dask's dashboard pages show, a property of Dask"),
    ),
    (
        "Now the same loop on the embedded cluster",
        Explained("describes the run the next cells make and fragnb's LocalCluster by design"),
    ),
    (
        "The cell after next compares every tensor of the two runs' weights",
        Explained("says what the cell checks, not what it finds"),
    ),
    (
        "After the same 8 iterations, its weights compared with the remote run's are:",
        Explained("a prediction's question, whose options follow"),
    ),
    (
        "(a) identical bit for bit (`torch.equal`); (b) within 1e-5",
        Explained("a prediction's options, one of which the run confirms"),
    ),
    (
        "the weights come out **bit for bit** the same",
        Asserted("same and trained"),
    ),
    (
        "`torch.equal`, not merely close.",
        Asserted("same and trained"),
    ),
    (
        "Against plain Python it is the same promise: an exact policy's weights equal plain Python's to the last bit",
        Explained("fragnb's promise, asserted in notebook 2 at 2, 4 and 8 actors (its cell 17 and 20)"),
    ),
    (
        "The same loop, the same answer, wherever it runs",
        Asserted("same and trained"),
    ),
    (
        "`async`, losing an **actor**: the run goes on with the other actor",
        Asserted("len(drill_async.lost_workers) == 1 and drill_async.iterations == iterations"),
    ),
    (
        "A synchronous run keeps every replica's state in the notebook every `checkpoint_every` iterations",
        Explained("fragnb.run's documented defaults (fragnb/runtime/pipeline.py), not a figure of this run"),
    ),
    (
        "now keeping a checkpoint every 2 iterations",
        Explained("the drill's setting, checkpoint_every=2, chosen in the cell"),
    ),
    (
        "the run loses `actors[0]` after the fifth iteration, starts again from its last checkpoint",
        Explained("a prediction's setting: what the drill does, whose outcome the student predicts"),
    ),
    (
        "so the second attempt draws what the first would have: the same weights, the same episodes",
        Asserted("len(drill.lost_workers) == 1 and same and (returns == remote_returns)"),
    ),
    (
        "The run ended normally, with fewer trajectories from the lost actor",
        Asserted("len(drill_async.lost_workers) == 1 and drill_async.iterations == iterations"),
    ),
    (
        "There is nowhere to resume: fragnb waits 30 s for the cluster to replace the worker",
        Explained("fragnb's fixed wait for a replacement worker (fragnb/runtime/recovery.py), by design"),
    ),
    (
        "then stops, and loads the last checkpoint into the notebook",
        Asserted("(kept_it + 1) % 2 == 0 and kept"),
    ),
    (
        "only `actors[1]` steps it, so only it fails",
        Asserted("frame.f_globals['it'] == 3 and 20 in frame.f_globals['env'].env_ids.tolist()"),
    ),
    (
        "Only synchronous policies replay so",
        Explained("fragnb.debug's documented scope, not something this run measures"),
    ),
    (
        "`fragnb.shutdown()` closes fragnb's client of the remote scheduler",
        Explained("what fragnb.shutdown does by design: it closes only what fragnb started"),
    ),
    (
        "A scheduler that ends closes its workers too",
        Explained("Dask's behaviour, given as an aside; the cell stops each process itself"),
    ),
    (
        "their exit status, -9, says they were killed",
        Asserted("all((proc.returncode == -signal.SIGKILL for proc in workers))"),
    ),
    (
        "`wait()` collects each process's exit status.",
        Asserted("all((proc.poll() is not None for proc in [*workers, scheduler]))"),
    ),
    (
        "The check at the end asks the kernel whether any process of the four sessions",
        Asserted("all((session_ended(proc) for proc in [*workers, scheduler]))"),
    ),
    (
        "Run the notebook up to the failure drill (which kills the workers)",
        Explained("an exercise's instruction, not a fact of this run"),
    ),
    (
        "Check against `remote_weights` with `torch.equal` (bit for bit, fragnb's promise",
        Explained("an exercise's instruction, not a fact of this run"),
    ),
    (
        "Their workers need the same versions of torch and fragnb as your kernel",
        Explained("a requirement of pickled code, an instruction of the exercise"),
    ),
    (
        "Only on a network you trust",
        Explained("a security instruction about Dask schedulers"),
    ),
    (
        "With $C$ the seconds one checkpoint costs the run",
        Explained("Young and Daly's model, a formula from the literature"),
    ),
    (
        "`RunResult.checkpoint_seconds` is what all of a run's checkpoints cost together",
        Explained("the definition of a RunResult field, and an instruction"),
    ),
    (
        "**1** (4 points): 1 for the `fine` run on the remote cluster",
        Explained("a rubric line: what earns an exercise's points"),
    ),
    (
        "**3** (4 points): 1 for what `checkpoint_every=0` and `checkpoint_every=1` each change",
        Explained("a rubric line: what earns an exercise's points"),
    ),
    (
        "Five replicas (`envs[0..3]` and `learner[0]`) on four threads",
        Explained("an exercise's solution, not run here: fine's definition with 4 actors and fragnb's packing"),
    ),
    (
        "`fine` leaves `coarse`'s weights bit for bit (`torch.equal`), fragnb's promise for an exact policy",
        Explained("fragnb's promise, asserted in notebook 2 at 2, 4 and 8 actors; an exercise's solution not run here"),
    ),
    (
        "`fragnb.shutdown()` closes only the client",
        Explained("what fragnb.shutdown does by design; an exercise's solution"),
    ),
    (
        "With `checkpoint_every=0` nothing is kept",
        Explained("fragnb's documented restart behaviour; an exercise's solution not run here"),
    ),
    (
        "With `checkpoint_every=1` a restart redoes at most one iteration",
        Explained("follows from the checkpoint interval by construction; an exercise's solution"),
    ),
    (
        "and prints $\\tau$, `checkpoint_every` and the share of the time a few choices lose",
        Shown('print(f"Young-Daly: tau = sqrt(2 C M) = {tau:.1f} s'),
    ),
    (
        "A larger network's checkpoint costs more, and the interval grows with the square root of that cost",
        Explained("follows from the formula tau = sqrt(2 C M), not from this run"),
    ),
    (
        "Rebuild the components, run `%%fragment ppo` (not `--run`) and hand this notebook's 8 iterations of notebook 1's loop to it",
        Explained("an exercise's instruction"),
    ),
    (
        "**4** (4 points): 1 for the run handed over and the kernel restarted before it ended",
        Explained("the rubric of an exercise a student does on a cluster of their own"),
    ),
    (
        "every tensor of `policy` is `torch.equal` to `remote_weights`",
        Explained("an exercise's solution not run here; tests/test_detached.py asserts it for a killed kernel"),
    ),
    (
        "The run's record lives in the scheduler's memory",
        Explained("where fragnb.runtime.detached keeps a run's record, by design; an exercise's solution"),
    ),
]
