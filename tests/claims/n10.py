"""Notebook 10's sentences that state what its run measured or computed, and how the run checks each (see
`claims/__init__.py`)."""

from claims import Asserted, Explained, Shown  # noqa: F401

CLAIMS = [
    (
        "A course cannot rent 64 GPUs, and a researcher wants to know which distribution policy to pay for",
        Explained("the notebook's motivation, no result of a run"),
    ),
    (
        "MSRL's headline runs on 64 GPUs and SRL's on 15,000 cores",
        Explained("what the papers report, not this notebook's run"),
    ),
    (
        "After this notebook you can (1) profile a loop once",
        Explained("the notebook's goals, what a student learns"),
    ),
    (
        "`fragnb.profile(ppo)` runs a few iterations under `single` on **copies** of the components",
        Asserted("'stats' not in dir() and costs.env_steps == config.num_envs * config.num_steps"),
    ),
    (
        "`placement.predict(cluster, profile=costs)` models the run's program",
        Explained("the model's design, as fragnb/predict/model.py writes it"),
    ),
    (
        "a synchronous policy's iteration takes the sum, over the segments $s$ it walks",
        Explained("the model's formula, a definition"),
    ),
    (
        "Here $j$ runs over the statements of segment $s$",
        Explained("the symbols of the model's formula, defined"),
    ),
    (
        "$h_s$ is paid only where $s$ reads what another group",
        Explained("the symbols of the model's formula, defined"),
    ),
    (
        "$A$ is the all-reduce of `multi_learner`'s gradients at every optimizer step",
        Explained("the symbols of the model's formula, defined"),
    ),
    (
        "Under a decoupled policy the learner's side and the actors' side run side by side",
        Explained("how the model treats decoupled policies, by its design"),
    ),
    (
        "Let the batch-sized work of the replicated groups be a share $p$",
        Explained("a derivation from the formula, no measured value"),
    ),
    (
        "The first term of $T_{\\min}$ is then",
        Explained("a derivation from the formula, no measured value"),
    ),
    (
        "With `replicas=`, as in the scaling figures below, each replica brings its own environments instead",
        Explained("what the replicas argument means, by definition"),
    ),
    (
        "The same placement on a cluster you do not have, and your own cluster description",
        Explained("introduces the next cell's predictions"),
    ),
    (
        "`scaling(ppo, costs, cluster)` predicts each policy at 1 to 1,024 replicas",
        Explained("what the scaling call does, as its arguments set it"),
    ),
    (
        "The learner then trains on more data each iteration",
        Explained("follows from growing the batch with the replicas, by construction"),
    ),
    (
        "A circle marks where a curve stops gaining",
        Explained("defines the figure's marker and the findings' threshold"),
    ),
    (
        "Read each finding as a hypothesis about this loop, with its reason",
        Shown("sweep.findings()"),
    ),
    (
        "Replicas beyond a cluster's cores take turns, but each brings its own environments",
        Explained("how the model charges replicas past the cores, by its design"),
    ),
    (
        "What the model does guarantee, for any profile, the cell below checks on every point of both sweeps",
        Asserted("p.seconds_per_iteration >= p.bound_seconds and p.env_steps_per_s <= cores_worth"),
    ),
    (
        "It then prints where each curve stops gaining against the cluster's cores",
        Shown("stops gaining past {n:,} replicas ({side} the cores' count)"),
    ),
    (
        "`fine` pays a message per replica at every environment step and `multi_learner` an all-reduce",
        Shown("for line in sweep.findings()"),
    ),
    (
        "`async`'s learner never waits for a rollout, so its curve can reach higher",
        Shown("async's highest is"),
    ),
    (
        "The `here` preset describes this 2-core machine as it was measured once",
        Explained("describes a preset and what calibrate() does"),
    ),
    (
        "Then we measure `coarse` with 1, 2 and 4 actors on the 32 environments of the loop",
        Explained("describes how the next cell measures, its procedure"),
    ),
    (
        "The cells above printed how many of the three actor counts the model got within 25 %",
        Shown("within 25 % of the median: {within} of {len(rows)} actor counts"),
    ),
    (
        "`benchmarks/predict.py` checks every policy the same way",
        Explained("points to the benchmark script and its table on the site, not this run"),
    ),
    (
        "What the model leaves out on a machine like this one",
        Explained("what the model does not charge, by its design; the runs above show its size here"),
    ),
    (
        "checks the refined prediction on a new run it was not fitted on",
        Shown("here the refined prediction came"),
    ),
    (
        "Notebook 2 asked when distribution pays",
        Explained("recalls notebook 2's question and setup"),
    ),
    (
        "The next cell runs a small version of that sweep beside fragnb's model",
        Explained("describes the next cell's procedure"),
    ),
    (
        "The cell prints, per point, the measurement, the prediction and the bound",
        Shown("fragnb's prediction was "),
    ),
    (
        "Amdahl's bound on `coarse` x2's speed-up over `single`, computed from the split $p$, will be (a) below",
        Explained("a prediction's options, asked before the run"),
    ),
    (
        "Amdahl's bound sits between 1x and 2x `single` at every step cost, whatever the machine",
        Asserted("len(points) == 2 * len(step_costs) and all((1 <= s <= 2 for s in amdahl.values()))"),
    ),
    (
        "How far the measurement falls from the bound and from the prediction is this run's, printed above",
        Shown("{abs(bound / real - 1):.0%}"),
    ),
    (
        "Under `coarse`, the actors roll out their shares of the 32 environments while the learner waits",
        Explained("how coarse runs an iteration, by its design"),
    ),
    (
        "More actors make each share smaller, but every actor still pays each call's fixed cost",
        Explained("how the model charges each replica, by its design"),
    ),
    (
        "Then compare with the busy shares measured in the runs above",
        Explained("an instruction of the exercise"),
    ),
    ("Ask the model at every actor count the explorer offers", Explained("the solution's method, an instruction")),
    (
        "so the model never predicts more env steps/s from more actors past it",
        Asserted("predicted[b].env_steps_per_s <= predicted[a].env_steps_per_s"),
    ),
    (
        "`docs/clusters.md` has recipes for a Slurm cluster",
        Explained("points to documentation, no result"),
    ),
]
