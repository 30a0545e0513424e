"""Notebook 04's sentences that state what its run measured or computed, and how the run checks each (see
`claims/__init__.py`)."""

from claims import Asserted, Explained, Shown  # noqa: F401

CLAIMS = [
    (
        "32 environments split into 1, 2, 4, 8 or 16 actors, never 3",
        Asserted("choices(ppo, 'coarse', 'actors') == [1, 2, 4, 8, 16]"),
    ),
    (
        "**Run** starts the chosen DP in a thread of the kernel",
        Explained("what the explorer's Run button does, by its design; the cell below uses it"),
    ),
    (
        "`select` does what the controls do, `current()` says what they show",
        Explained("describes the explorer's Python interface, no fact of the run"),
    ),
    (
        "Here we start `coarse` with 2 actors and press Stop",
        Explained("says what the next cell does: an instruction, not a result"),
    ),
    (
        "the notebook's variables are those of the last whole iteration",
        Asserted("it == explorer.result.iterations - 1"),
    ),
    (
        "The table below measures those sizes once",
        Explained("describes what the table's cell computes, not what it found"),
    ),
    ("`single` moves nothing: it is one process", Asserted("moved['single'] == 0")),
    ("`coarse` and `async` move the same things", Asserted("moved['coarse'] == moved['async']")),
    (
        "`fine` moves observations and actions *every step*: less in bytes here",
        Asserted("moved['fine'] < moved['coarse']"),
    ),
    (
        "`multi_learner`, `data_parallel` and `gpu_only` cross no edge at all",
        Asserted("{name for name, n in crossing.items() if n == 0} == {"),
    ),
    (
        "check that the weights equal those of a `single` run with the same seed",
        Explained("an instruction of the exercise, checked in its solution"),
    ),
    (
        "1 for a prediction written before looking",
        Explained("a rubric line: what an answer must contain to earn the points"),
    ),
    ("only rings of 1 or 2 remain", Asserted("choices(ppo, 'srl', 'ring', actors=16) == [1, 2]")),
    ("They weigh less than `batch`", Asserted("sum((n for _, n in mine.traffic())) < moved['coarse']")),
    (
        "The cell builds the same policy in code, places it, runs two iterations and checks the weights",
        Asserted("torch.equal(weights['buffer_with_learner'], weights['single'])"),
    ),
    (
        "A slow network punishes messages more than bytes",
        Explained("reasoning about a hypothetical cluster the exercise describes, not this run"),
    ),
    (
        "The learner's GPU serves both equally",
        Explained("reasoning about a hypothetical cluster the exercise describes, not this run"),
    ),
]
