"""Notebook 08's sentences that state what its run measured or computed, and how the run checks each (see
`claims/__init__.py`)."""

from claims import Asserted, Explained, Shown  # noqa: F401

CLAIMS = [
    (
        "DQN on CartPole often climbs and then collapses",
        Explained("what the field reports of DQN on CartPole; whether this run did, the cell above prints"),
    ),
    (
        "Once the agent balances well, the replay buffer",
        Explained("the mechanism: what a buffer of the last transitions holds once episodes are long"),
    ),
    ("What the field does about it", Explained("remedies from the literature, not measured here")),
    (
        "A DQN that sees fewer environment steps",
        Explained("why fewer transitions cost return; how many this run inserted, the cell prints"),
    ),
    ("keeps every transition in a *replay buffer*", Explained("DQN's definition, not this run")),
    (
        "After this notebook you can (1) write DQN's training loop",
        Explained("the learning goals: what a student can do afterwards"),
    ),
    ("`ReplayBuffer` holds the last `buffer_size` transitions", Explained("the components' design, by construction")),
    ("`build()` makes them afresh, so that every run below", Explained("what the cell below does, by construction")),
    (
        "takes one gradient step on $B$ = `batch_size` transitions",
        Explained("a definition of what the learner computes"),
    ),
    (
        "\\qquad h(x) = \\begin{cases} \\tfrac12 x^2 & \\text{if } |x| < 1",
        Explained("a definition of the loss, the learner's code"),
    ),
    ("Adam (`learning_rate`) takes the step after", Explained("a definition of what the learner computes")),
    (
        "The loop stops early once the last 20 episodes average 475",
        Explained("the loop's own condition, its last line"),
    ),
    ("it stops at the `break`, or after the budget", Explained("the loop's own condition, its last line")),
    ("Under `coarse`, the actors and their environments are copied", Explained("the coarse policy's design")),
    ("Two actors each sampling 128 from half the data", Explained("a hypothetical that the last section runs")),
    (
        "It still computes what plain Python computes; check it on a short run",
        Asserted("torch.equal(w_single, w_coarse) and r_single"),
    ),
    ("Distributed DQN systems (Ape-X, R2D2, SEED's R2D2) decouple the two", Explained("papers' designs, not this run")),
    ("so fragnb splits the rollout loop per group", Explained("how fragnb places this loop, by construction")),
    ("with 2 actors will leave (a) `single`'s weights", Explained("a prediction's options; the run below answers it")),
    (
        "Under `coarse` the collect-then-train loop leaves `single`'s weights too (asserted)",
        Asserted("torch.equal(wc_single, wc_coarse)"),
    ),
    ("The collect-then-train loop makes it a knob of its own", Explained("a definition of the replay ratio")),
    (
        "The sweep trains the collect-then-train loop under `single`",
        Explained("the sweep's settings, its own arguments"),
    ),
    (
        "`fragnb.sweep` runs the eight runs (four ratios, two seeds each) side by side",
        Asserted("len(grid.runs) == 2 * len(ratios)"),
    ),
    ("It records the return reached, the time, and the learner's share", Shown("learner share")),
    (
        "at 1/4 there are eight times as many per environment step as at 1/32 (asserted)",
        Asserted("replay[1 / 4]['updates'] == 8 * replay[1 / 32]['updates']"),
    ),
    (
        "More updates per step squeeze more out of each transition",
        Explained("a general argument, which says what can happen"),
    ),
    (
        "The learner's share is the part that more actors cannot shorten",
        Explained("a general argument, conditional on the share"),
    ),
    (
        "Here $B = 128$, so a ratio of 1/16 replays each transition",
        Explained("arithmetic of the formula above: 128 / 16"),
    ),
    ("Acme bounds it with Reverb's rate limiter", Explained("a paper's and a library's design")),
    ("so the loop's own ratio holds exactly", Asserted("r['ahead'] == 0 and r['per insert'] == 8")),
    (
        "`samples_per_insert=X` lets it, when no trajectory is waiting",
        Explained("the option's definition, fragnb's design"),
    ),
    (
        "Replay is off-policy, so no trajectory is dropped as stale then",
        Explained("the option's definition, fragnb's design"),
    ),
    ("An iteration that samples ahead takes no trajectory", Explained("the option's definition, fragnb's design")),
    (
        "fragnb refuses it before anything runs, naming the line",
        Asserted("refusal is not None and 'global_step' in str(refusal)"),
    ),
    ("the sync runs in every iteration that trains", Explained("by construction: the line reads the loop's own `it`")),
    ("Two actors on environments that cost 300 µs a step", Explained("the runs' settings, the cell's own arguments")),
    ("= 10 x 128 / (10 x 16) = 8 samples per insert", Asserted("r['ahead'] == 0 and r['per insert'] == 8")),
    ("8 samples per insert in every run (asserted)", Asserted("r['ahead'] == 0 and r['per insert'] == 8")),
    (
        "never past 16 samples per transition inserted, and inserted nothing",
        Asserted("r['per insert'] <= 16 and r['inserted'] == (iterations - r['ahead']) * per_iteration"),
    ),
    ("the line under the table says what happened here", Shown("here the bound bought time")),
    ("the cell's last line says how many, and how the return compares", Shown("the same updates learned from")),
    ("The cell above says whether it happened in this run", Shown("it fell after its peak")),
    ("with such a buffer will (a) refuse to run", Explained("a prediction's options; the run below answers it")),
    ("fragnb refused (asserted): before any worker starts", Asserted("refused")),
    ("1 for the ratio with the highest median return", Explained("a rubric line: what an answer must contain")),
    (
        "`DQNConfig(prioritized=True)`, whose `prioritized`, `alpha` and `beta`",
        Asserted("buffer.prioritized and (buffer.alpha, buffer"),
    ),
    ("it joins the buffer's fragment after the update", Asserted("placed.fragments[fragment.name].group ==")),
    ("here new transitions get the largest priority seen", Explained("the ReplayBuffer's design, by construction")),
    (
        "With a costly simulator, environment steps are what you save",
        Explained("advice for a choice, not a fact of the run"),
    ),
    ("With a cheap one, time is what you save", Explained("advice for a choice, not a fact of the run")),
    ("The chunk is a different knob", Explained("a general argument about staleness within a chunk")),
]
