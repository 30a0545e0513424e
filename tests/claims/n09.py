"""Notebook 09's sentences that state what its run measured or computed, and how the run checks each (see
`claims/__init__.py`)."""

from claims import Asserted, Explained, Shown  # noqa: F401

CLAIMS = [
    (
        "After this notebook you can (1) run such a loop under `%%fragment` unchanged",
        Explained("the notebook's goals, what a student learns, no result"),
    ),
    (
        "The setup's stateful half is in `fresh_start()`, so that runs can be compared from the same start",
        Explained("describes how the setup cell is written"),
    ),
    (
        "The run's summary above says *no episode returns recorded* all the same",
        Asserted("episodic and (not cleanrl"),
    ),
    (
        "The drawing above is what fragnb **inferred**, from types, never from names",
        Explained("how fragnb's role inference works, by its design"),
    ),
    (
        "`envs` (a `SyncVectorEnv` of 4) is **sharded**: each actor replica gets a `SyncVectorEnv` of 2",
        Explained(
            "what coarse does to a vector environment by design; quiz question 1 computes a share from the placement"
        ),
    ),
    (
        "`agent` is acted with by the actors and trained by the learner: its **weights** go to the actors",
        Explained("the placement's state edge, by construction of a learner-owned network"),
    ),
    (
        "CleanRL's loop, unchanged (its actions still drawn with `probs.sample()` from torch's global generator), "
        "will run (a) exact",
        Explained("a prediction's options, asked before the run"),
    ),
    (
        "the cell after it runs the loop under `single` and then under `fine`, each from the same start",
        Explained("an instruction saying what the next cell does"),
    ),
    (
        "so the same unchanged cell is **exact**, as the cell above asserts",
        Asserted("cleanrl_fine.guarantee == 'exact'"),
    ),
    (
        "the agent's weights equal single's to the last bit, and TensorBoard reads the same tags, values and steps",
        Asserted("torch.equal(single_weights[k], v) for k, v in agent"),
    ),
    (
        "the agent's weights equal single's to the last bit, and TensorBoard reads the same tags, values and steps",
        Asserted("logged() == single_logged"),
    ),
    (
        "`fine` x2's crosses sit on `single`'s circles (the same scalars, as asserted above)",
        Asserted("logged() == single_logged"),
    ),
    (
        "`coarse` x2's dots are other episodes (a statistical run: the same algorithm with other random numbers)",
        Asserted("statistical.guarantee == 'statistical' and statistical.env_steps == args.total_timesteps"),
    ),
    (
        "`probs.sample()` is the line no placement can reproduce with 2 actors",
        Asserted("statistical.guarantee == 'statistical' and statistical.env_steps == args.total_timesteps"),
    ),
    (
        "an actor replica holding environments 2 and 3 draws exactly what those environments draw in the whole batch",
        Asserted("exact.guarantee == 'exact'"),
    ),
    (
        "a distributed run of such a loop can only be **statistical**, the same algorithm with other random numbers",
        Asserted("statistical.guarantee == 'statistical' and isinstance(refused_exact, fragnb.FragmentError)"),
    ),
    (
        "`fragnb.run(..., exact=True)` (`--exact`) refuses instead",
        Asserted("isinstance(refused_exact, fragnb.FragmentError)"),
    ),
    (
        "**Make it exact with one line.** The actor's per-environment streams",
        Asserted("returns == single_returns"),
    ),
    (
        "Swap that line, and `coarse` leaves exactly what `single` leaves",
        Asserted("torch.equal(single_weights[k], v) for k, v in policy"),
    ),
    (
        "Below, such a loop over a Gymnasium vector environment of 4 (2 updates of 8 steps each)",
        Explained("describes the loop's code, its sizes as written"),
    ),
    ("Under `single` it runs as plain Python runs it, and the policy's weights change", Asserted("changed")),
    (
        "This loop will (a) run exact; (b) run statistical",
        Explained("a prediction's options, asked before the run"),
    ),
    (
        "The run was refused, naming its line: a tensor that carries an autograd graph to another worker group",
        Asserted("isinstance(refusal, fragnb.FragmentError) and 'autograd graph' in str(refusal)"),
    ),
    (
        "1 for running the global-sampling actor under `fine` with 2 environment workers",
        Explained("the rubric: what earns the exercise's points"),
    ),
    (
        "One replica draws every number, in plain Python's order, starting from the notebook's generator state",
        Asserted("fine.guarantee == 'exact'"),
    ),
    ("With one actor, `coarse` is exact too: one replica draws", Asserted("one.guarantee == 'exact'")),
    ("**The same answer at four and eight actors** (3 points).", Explained("an exercise's title")),
    (
        "`StreamAgent` made CleanRL's loop exact under `coarse` with 2 actors.",
        Asserted("exact.guarantee == 'exact'"),
    ),
    (
        "Start each run with `fresh_start(StreamAgent, run_name=..., num_envs=8)`",
        Explained("an exercise's instruction, not a fact of this run"),
    ),
    (
        "1 for the three runs from `fresh_start(StreamAgent, num_envs=8)` and every tensor equal",
        Explained("the rubric: what earns the exercise's points"),
    ),
    (
        "1 for the pairs, read from TensorBoard or `logged()`: each exact run on the run it repeats",
        Explained("the rubric: what earns the exercise's points"),
    ),
    (
        "**2.** Exact at both counts: every environment draws its actions from its own stream",
        Asserted("at.guarantee == 'exact' and bits and (logged() == single8_logged)"),
    ),
    (
        "With CleanRL's own `Agent`, `exact=True` refuses the run before any worker starts: line 14",
        Asserted("refused8 is not None and 'line 14' in str(refused8)"),
    ),
    (
        "**3.** `fine_x2` sits on `single` and `streams_coarse_x2` on `streams_single`",
        Asserted(
            "episodes('single') == episodes('fine_x2') and episodes('streams_single') == episodes('streams_coarse_x2')"
        ),
    ),
    (
        "`coarse_x2` is apart: a statistical run, plain Python's algorithm with other random numbers",
        Asserted("episodes('single') != episodes('coarse_x2')"),
    ),
    (
        "The new tag arrives once per iteration under `coarse` too, with `single`'s values",
        Asserted(
            "len(advantages_logged['coarse']) == args.num_iterations and advantages_logged['coarse'] == advantages_logged['single']"
        ),
    ),
]
