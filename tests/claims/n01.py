"""Notebook 01's sentences that state what its run measured or computed, and how the run checks each (see
`claims/__init__.py`)."""

from claims import Asserted, Explained, Shown

CLAIMS = [
    (
        "see PPO learn CartPole",
        Explained("a learning goal of the notebook, what a student will be able to do, not a result"),
    ),
    (
        "The actor and the learner share one network, `policy`",
        Explained("how the components cell builds them: one policy object handed to both, by construction"),
    ),
    ("capturing never executes the loop, and the namespace is untouched", Asserted("'returns' not in dir()")),
    ("then the role of each of the nine fragments", Asserted("[f.role for f in ppo.fragments] ==")),
    (
        "and where the lines that call no component went",
        Asserted("[role_of(ppo, line) for line in ('obs = next_obs', 'returns = []', 'returns.extend')] =="),
    ),
    (
        "Afterwards the notebook looks exactly as if you had run the cell as plain Python",
        Asserted("ran == iterations - 1 and 'stats' in dir()"),
    ),
    (
        "and `fragnb.run` leaves the notebook as plain Python would",
        Asserted("ran == iterations - 1 and 'stats' in dir()"),
    ),
    (
        "an RL curve can move a lot with it",
        Explained("a general fact of RL practice that motivates the sweep, not a result of this run"),
    ),
    (
        "on a worker of the cluster, side by side",
        Asserted("not sweep.failed and len(sweep.runs) == 4"),
    ),
    (
        "the sweep's seed 0 runs the setup above with `seed = 0` and the same loop",
        Explained("the prediction's question: what the next cell runs, by construction of %%setup"),
    ),
    (
        "(a) the same, episode for episode (b) close, but not equal",
        Explained("the options of a prediction; the run's answer is compared and asserted below"),
    ),
    (
        "The figure shows each seed faintly and their mean with a 95 % bootstrap band",
        Shown("%%fragment seeds --seeds 0-3"),
    ),
    (
        "Each run is what plain Python does after the setup with its seed",
        Asserted("seed0.values['returns'] == returns"),
    ),
    ("so the sweep's seed 0 is that run, episode for episode", Asserted("seed0.values['returns'] == returns")),
    (
        "1 for the loop captured again with the new components",
        Explained("a rubric line: what an answer must contain to earn the points"),
    ),
    (
        "1 for the one-seed answer, from seed 0 of both settings",
        Explained("a rubric line: what an answer must contain to earn the points"),
    ),
    ("The graph keeps its 9 fragments and its edges", Asserted("shape(again) == shape(ppo)")),
    (
        "What changes is the size of what flows",
        Explained("follows from the configuration by construction: 16 environments, 64 steps per iteration"),
    ),
    (
        "Next, expect acting and stepping: each runs 32 times per iteration",
        Explained(
            "an expectation reasoned from how often each fragment runs; the cell below ranks the run's own times"
        ),
    ),
    (
        "an iteration can at most shrink to the update's share of it",
        Shown("so at most {total / unsplit:.1f}x faster with any number of actors"),
    ),
    ("A `driver` fragment of the iteration loop", Asserted("role_of(with_seen, 'seen =') == 'driver'")),
    ("every run finished, which it checks", Asserted("not grid.failed and all(")),
]
