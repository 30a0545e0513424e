"""Notebook 07's sentences that state what its run measured or computed, and how the run checks each (see
`claims/__init__.py`)."""

from claims import Asserted, Explained, Shown  # noqa: F401

CLAIMS = [
    ("After this notebook you can say (1) why", Explained("the learning goals: what a student can do afterwards")),
    (
        "| the loop | 13 lines | the same 13 lines |",
        Explained("by construction: the cell below is notebook 1's loop, copied"),
    ),
    ("An agent observes 18 numbers", Explained("simple_spread's definition, as PettingZoo/MPE2 gives it")),
    ("A uniformly random policy, 512 episodes", Explained("the count is the cell's own argument, episodes=512")),
    ("`3 x 18 + 3` inputs", Shown("policy.critic[0].in_features")),
    ("`buffer.batch(...)` runs GAE for each environment", Explained("a definition of what the learner computes")),
    ("Actor and critic share no weights", Explained("the learner's design, as its code writes it")),
    (
        "The graph fragnb captures from these 13 lines will have",
        Explained("a prediction's options; the run below answers it"),
    ),
    (
        "these are still an `Env`, an `Actor`, a `Buffer` and a `Learner`",
        Asserted("[f.role for f in mappo.fragments] =="),
    ),
    ("The fragment graph is PPO's, fragment for fragment (asserted)", Asserted("roles(mappo) == roles(ppo_graph)")),
    ("two actor workers each step 16 of the 32 environments", Shown('mappo.place("coarse", actors=2).measured(sizes)')),
    (
        "They are more than half of the gathered batch, and all of what `fine` gathers for inference (both asserted)",
        Asserted("obs_bytes > batch_bytes / 2 and fine['env@step', 'actor@step'] >= obs_bytes"),
    ),
    ("prints its `transfer_bytes` beside the prediction", Shown("coarse.transfer_bytes")),
    (
        "merging the two would spare `fine` one of its two copies",
        Explained("by construction: both edges carry the same observations"),
    ),
    ("and it is the larger network", Asserted("count(policy.critic) > count(policy.actor)")),
    (
        "so `fine` sends as many messages per step with 3 agents as with one",
        Explained("by construction: the graph's edges do not depend on the number of agents"),
    ),
    ("in this process (`single`): 4,800 episodes (asserted)", Asserted("len(returns) == iterations * config.num_envs")),
    ("prints how much of the way from the random policy", Shown("of the way")),
    ("score more than 10 above the random policy", Asserted("trained > baseline + 10")),
    ("The MAPPO paper trains simple_spread for millions of steps", Explained("a paper's design, not this run")),
    (
        "Two iterations of 8 environments each, from the same seed",
        Explained("the settings of the cell below, its own arguments"),
    ),
    (
        "the `coarse` run will leave (a) plain Python's weights",
        Explained("a prediction's options; the run below answers it"),
    ),
    (
        "the `coarse` run leaves the weights plain Python leaves",
        Asserted("torch.equal(w_single, w_coarse) and r_single"),
    ),
    ("1 for the loop left as it is and the graph compared", Explained("a rubric line: what an answer must contain")),
    (
        "1 for the traffic printed for `N=5` under both policies",
        Explained("a rubric line: what an answer must contain"),
    ),
    (
        "1 for the two-iteration run with its largest weight difference",
        Explained("a rubric line: what an answer must contain"),
    ),
    ("No line of the loop changes, and neither does the graph", Asserted("shape(regraph) == shape(mappo)")),
    (
        "the per-step observations under `fine` grow exactly like `N²` (x2.78 from 3 agents to 5)",
        Explained("by the observation's definition: 6N² floats an environment, 150/54 from 3 to 5"),
    ),
    (
        "asserts that the broadcast grows less than the observations",
        Asserted("moved[5]['weights'] / moved[3]['weights'] < moved[5]['fine observations']"),
    ),
    ("The shared actor reads one agent's `6N + N` inputs", Explained("the network's architecture, by construction")),
    ("the broadcast would shrink to the shared actor", Explained("a sketch of another design, not this run")),
    (
        "`multi_learner` runs DD-PPO: each learner trains",
        Explained("the policy's design: each learner steps 8 / 2 environments"),
    ),
    (
        "every later update starts from weights that already differ (the cell asserts that they do)",
        Asserted("(w_single - w_data_parallel).abs().max() > 1e-05"),
    ),
]
