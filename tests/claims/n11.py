"""Notebook 11's sentences that state what its run measured or computed, and how the run checks each (see
`claims/__init__.py`)."""

from claims import Asserted, Explained, Shown  # noqa: F401

CLAIMS = [
    (
        "Most distributed RL built in 2026 trains language models",
        Explained("the field's state and the systems' own descriptions, not this run"),
    ),
    (
        "**verl** runs generation and training *colocated* in one pool of GPUs",
        Explained("what verl, OpenRLHF, NeMo-RL, TRL and AReaL are designed to do, not this run"),
    ),
    (
        "Here a 100k-parameter character-level transformer learns 2-digit addition",
        Asserted("last > first and after > before"),
    ),
    ("**Goals.** After this notebook you can", Explained("the learning goals, what a student will be able to do")),
    ("That is all it takes for fragnb to capture", Explained("how the task is written for fragnb, by construction")),
    (
        "The reward gives partial credit: the share of answer positions right",
        Asserted("rewards_demo[0] == 1.0 and 0 < rewards_demo[1] < 1"),
    ),
    ("A completion of any tokens gets a reward in [0, 1], never an exception", Asserted("rewards_demo[3] == 0.0")),
    (
        "so that a run is the same however the rows are split across rollout workers",
        Asserted("eta0_is_colocated and weight_gap == 0"),
    ),
    (
        "Each iteration samples a group of 8 completions of each prompt",
        Explained("describes the grpo cell's loop and build's group of 8, by construction"),
    ),
    ("Train it here, colocated:", Explained("an instruction to run the next cell")),
    (
        "The same cell, under four placements, from two seeds each",
        Explained("describes the setup the next cell builds, by construction"),
    ),
    (
        "| `single` | verl's colocated engine (HybridEngine)",
        Explained("maps each placement to the field's names by their designs, not a measurement"),
    ),
    (
        "Each run reports **tokens sampled per second**",
        Explained("defines the columns the next cell prints"),
    ),
    (
        "what holds on any machine (the staleness bound) is asserted",
        Asserted("table['async, η=1']['staleness'][1] <= 1 and table['async, η=4']['staleness'][1] <= 4"),
    ),
    (
        "fragnb hands the trainer no trajectory more than η versions old, however busy the machine",
        Asserted("table['async, η=1']['staleness'][1] <= 1"),
    ),
    (
        "How many batches are exactly η versions old, and how much time the overlap saves, depend on the machine",
        Explained("says which quantities are not guaranteed, no value of this run"),
    ),
    (
        "**Predict.** Before you run the next cell: it trains seed 0 again",
        Explained("a question asked before the run, answered by its compare line"),
    ),
    (
        "(a) the colocated run's, all 20 rewards, and its weights to the bit",
        Explained("the options of a prediction, not statements of the run"),
    ),
    (
        "so the run is the colocated one, reward for reward and weight for weight",
        Asserted("eta0_is_colocated and weight_gap == 0"),
    ),
    (
        "the cell says whether its advice matched the ratios measured here",
        Shown("said == seen_side"),
    ),
    (
        "reports reaching 100 to 400 training steps 2.35-2.67x sooner than colocated synchronous training",
        Explained("what verl's fully async recipe page reports for its own runs, not this run"),
    ),
    (
        "The same measurements (idle ratios, staleness, tokens/s) answer the same questions there",
        Explained("how the measurements carry over to GPUs, no value of this run"),
    ),
    (
        "Rebuild with `lr=3e-3` and run 40 iterations of 32 prompts",
        Explained("an exercise's instruction to the student"),
    ),
    (
        'Build with `reward="exact"` (1 for the right sum, else 0)',
        Explained("an exercise's instruction and a definition"),
    ),
    (
        "Before training, sample one batch and count the groups",
        Explained("an exercise's instruction to the student"),
    ),
    (
        "**1** (3 points): 1 for code that rebuilds with `lr=3e-3`",
        Explained("the rubric: what earns an exercise's points"),
    ),
    (
        "**2** (3 points): 1 for code that samples one batch",
        Explained("the rubric: what earns an exercise's points"),
    ),
    (
        "**3** (3 points): 1 for reading both bounds' s/iteration",
        Explained("the rubric: what earns an exercise's points"),
    ),
    ("**1.** The accuracy falls below the warm-up's", Asserted("accuracy(policy, env) < start")),
    (
        "A group whose rewards are all equal has advantage 0 for every completion",
        Explained("follows from the advantage's formula, by construction"),
    ),
    (
        "With the exact reward a group is flat whenever its 8 completions are all wrong",
        Shown("of groups have 8 equal rewards"),
    ),
    (
        "asserts that the exact reward leaves more of them",
        Asserted("flat['exact'] > flat['partial']"),
    ),
    (
        "With one trainer, η=1 already lets the rollout workers generate the next batch",
        Explained("what the bound allows by design, not a measurement"),
    ),
    (
        "Where the trainer then hardly waits (its idle ratio in the table), the trainer sets the pace",
        Shown('here η=4 was", "faster" if faster else "no faster"'),
    ),
    (
        "Where the machine has fewer cores than the three workers and the notebook",
        Shown("cores ran its"),
    ),
]
