"""Notebook 03's sentences that state what its run measured or computed, and how the run checks each (see
`claims/__init__.py`)."""

from claims import Asserted, Explained, Shown  # noqa: F401

CLAIMS = [
    # the introduction and the placements
    ("After this notebook you can say (1) why a synchronous DP", Explained("the learning goals, no fact of the run")),
    (
        "| DP | mirrors | what runs where |",
        Explained("which published systems each policy mirrors: their papers' designs"),
    ),
    (
        "`async` places the fragments exactly as `coarse` does",
        Asserted("{n: f.group for n, f in placed.fragments.items()} =="),
    ),
    (
        "the trajectories become a **sample stream** that the learner reads in arrival order",
        Explained("what async's edges are by the policy's definition (its placement is drawn above)"),
    ),
    (
        "**actor workers** step environments and store samples",
        Explained("srl's design: where it places the fragments, by construction"),
    ),
    (
        "Each actor worker steps a *ring* of environment groups",
        Explained("what the ring parameter means, by construction"),
    ),
    # the runs to solve and the timelines
    ("`until=solved` ends a run after the first learner iteration", Explained("the stop condition's definition")),
    (
        "Each policy runs from two seeds (one run per policy would compare noise)",
        Explained("how the comparison is run: the method, not its outcome"),
    ),
    ("Each row of a timeline is one replica", Explained("how to read the timeline figure")),
    (
        "Under `coarse` the actors wait while the learner updates",
        Explained("coarse is synchronous by construction: a gather, then a broadcast, at every update"),
    ),
    ("Under `srl` the two rows of one actor worker", Explained("what the ring is designed to do, an intent")),
    ("That needs cores: where four processes share fewer", Shown("every actor row waited most of its time")),
    ("The cell prints each row's share of waiting", Shown("srl, share of the time each actor row waits")),
    # staleness and its corrections
    ("A trajectory's *staleness* is how many learner updates", Explained("the definition of staleness")),
    (
        "`RunResult.staleness` lists it per learner iteration",
        Explained("what the result's fields hold and the dropping rule, by the API's design"),
    ),
    ("Stale data is off-policy data", Explained("a definition: data that older weights collected is off-policy")),
    (
        "on CartPole the cell prints whether any correction's seeds all fell outside",
        Shown("every correction's seeds overlapped plain PPO's range"),
    ),
    # the sweep
    (
        "At 0 an actor waits for the newest weights before every rollout",
        Explained("what the bound allows, by its definition"),
    ),
    ("**mean staleness** of the trajectories trained on", Explained("a column's definition in the sweep's table")),
    (
        "**backlog**: how many actors had a trajectory waiting",
        Explained("a column's definition; 1.0 is its floor by construction"),
    ),
    ("**time to solve**, in env steps and in seconds", Explained("a column's definition in the sweep's table")),
    (
        "Before you run the next cell: at `max_staleness=0`",
        Explained("an instruction to the student before the run, stating no result"),
    ),
    ("(a) exactly 0 in every run, on any machine", Explained("the prediction's options, none stated as the result")),
    (
        "the sweep's cell asserts it, and that no run trained on data older than its bound",
        Asserted("a <= bound for (bound, _), runs in sweep.items()"),
    ),
    ("At **bound 0** the staleness is 0 by construction", Asserted("mean_staleness(r) == 0 for n in (1, 2)")),
    (
        "**Time to solve** weighs the two against each other",
        Explained("the trade-off in principle; the table and the figure show how it came out"),
    ),
    (
        "The table's last column says how many seeds solved within the budget",
        Shown("median {statistics.median(s for s, _ in at):,.0f} steps"),
    ),
    # one edge at a time
    (
        "the learner takes whichever arrive first",
        Explained("the stream operator's definition, as the placement routes it"),
    ),
    (
        "checks that relaxing both edges of `coarse` *is* `async`'s placement",
        Asserted("relaxed.transfers == ppo.place('async'"),
    ),
    (
        "It prints the median and range over the seeds of the env steps/s",
        Shown("spread([r.mean_return() for r in runs], '{:.1f}')"),
    ),
    (
        "(a) `exact`: plain Python's values, as `coarse`'s",
        Explained("the prediction's options, none stated as the result"),
    ),
    ("`coarse` is exact (plain Python's values)", Asserted("[runs[0].guarantee for runs in one_edge")),
    ("(plain Python's values) and never stale", Asserted("a == 0 for r in one_edge['coarse']")),
    ("so each update trains on trajectories up to one version old", Asserted("max(a) <= 1 for a in ages")),
    (
        "the bound is asserted, and so is the guarantee each run announced",
        Asserted("[runs[0].guarantee for runs in one_edge"),
    ),
    # gpu_only and the design space
    ("the cell says which it was", Shown("the worker was faster than the notebook's process in")),
    (
        "The systems these policies mirror differ in four choices",
        Explained("the published systems' designs, from their papers"),
    ),
    ("central, on the learner's accelerator", Asserted("facts['SEED RL']['inference'] ==")),
    (
        "`multi_learner` | on every worker | one rollout buffer per worker | sync | gradients, all-reduced",
        Asserted("facts['IMPALA']['sync'] == facts['SRL']['sync']"),
    ),
    ("nothing inside a device; gradients between devices", Asserted("facts['Anakin']['crosses'] == ['nothing']")),
    # exercises, rubric and solutions
    ("compare how much of their time the actor workers wait", Explained("an exercise's instruction")),
    ("1 for code that runs `srl` with `ring=1`", Explained("the rubric: what earns the points, no fact of the run")),
    ("1 for code or a reading of the sweep", Explained("the rubric: what earns the points, no fact of the run")),
    (
        "after each step it sends the observations to the policy worker",
        Explained("what ring=1 does, by construction"),
    ),
    (
        "the ring hides the inference round trip behind environment work",
        Explained("what the ring is designed to hide, SRL's argument"),
    ),
    (
        "the cell prints, from two seeds, which kept its actor workers busier here",
        Shown("here ring=2's actor workers were"),
    ),
    (
        "The ring pays when every actor worker has a core of its own",
        Explained("SRL's design argument, not measured on this machine"),
    ),
    (
        "so the tight bounds should win there (the cell prints which setting did)",
        Shown("fewest env steps (median of 2 seeds)"),
    ),
    (
        "a looser bound lets the actors run ahead, and can solve sooner",
        Explained("what is possible in principle; the cell prints which setting won"),
    ),
    (
        "When the same setting wins both, as it may on CartPole",
        Explained("a conditional reading of the printed line, true whichever setting wins"),
    ),
    (
        "fragnb refuses the loop before anything runs, naming the line",
        Asserted("refused is not None and 'line' in str(refused)"),
    ),
]
