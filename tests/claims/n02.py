"""Notebook 02's sentences that state what its run measured or computed, and how the run checks each (see
`claims/__init__.py`)."""

from claims import Asserted, Explained, Shown  # noqa: F401

CLAIMS = [
    (
        "Each panel has a scale of its own",
        Explained("why the plot's panels keep their own y-axes: the step cost sets each panel's rates, not the run"),
    ),
    (
        "A DP never edits the loop",
        Explained("what a DP does by construction: it places and connects fragments, the loop's code stays"),
    ),
    (
        "After this notebook you can (1) say",
        Explained("the learning goals: what the student will be able to do, no fact of the run"),
    ),
    (
        "The components are built exactly as in notebook 1.",
        Explained("by construction: the cell's code is notebook 1's, wrapped in a function"),
    ),
    (
        "We wrap the cell in a function so that every DP below starts",
        Explained("why the code is organised as it is, a property of the code"),
    ),
    (
        "Invalid parameters fail here, before any worker starts",
        Explained("an invitation to try; place() starts no worker by construction and checks the split"),
    ),
    (
        "so `returns` comes back exactly as plain Python builds it",
        Asserted("returned['coarse'] == returned['single'] and returned['fine'] == returned['single']"),
    ),
    (
        "Each run rebuilds the components with the same seed.",
        Explained("what the next cell's code does, by construction"),
    ),
    (
        "(a) all three: averaging the gradients of two halves",
        Explained("the options of a prediction, the student's to choose, not facts of the run"),
    ),
    (
        "Under `coarse` the weights equal `single`'s to the last bit",
        Asserted("torch.equal(weights['coarse'], weights['single'])"),
    ),
    (
        "and under `fine` as well; `returns` lists the same episodes in the same order",
        Asserted("torch.equal(weights['fine'], weights['single'])"),
    ),
    (
        "The same bits are no accident of two actors.",
        Asserted("all((torch.equal(w, long_single) for w in long_weights.values()))"),
    ),
    (
        "A CPU computes a batch of 8 rows with",
        Explained("why the last bits could differ: how CPU kernels work, stated in the guide with its measurements"),
    ),
    (
        "So each replica computes its rows among the whole batch's shape",
        Asserted("all((torch.equal(w, long_single) for w in long_weights.values()))"),
    ),
    (
        "is a different algorithm, whose weights differ from `single`'s",
        Asserted("(weights['multi_learner'] - weights['single']).abs().max() > 1e-05"),
    ),
    (
        "Each of its $N$ replicas (`learners=N`, 2 here) runs the whole loop",
        Explained("DD-PPO's design as multi_learner implements it, not a measurement"),
    ),
    (
        "so every replica takes the same step and their weights stay equal.",
        Explained("follows by construction: every replica steps with the same averaged gradient"),
    ),
    (
        "the gradient's linearity gives",
        Explained("a derivation: the gradient's linearity, no fact of the run"),
    ),
    (
        "That equality is exact (to float rounding) when the shards are equal",
        Explained("a mathematical condition of the derivation above"),
    ),
    (
        "`single`'s minibatch is $N b$ samples drawn from the whole batch",
        Explained("how the two algorithms draw their minibatches, by their code"),
    ),
    (
        "which is why its weights are not `single`'s in the table above",
        Asserted("(weights['multi_learner'] - weights['single']).abs().max() > 1e-05"),
    ),
    (
        "Why expect little from distribution on CartPole",
        Explained(
            "an expectation reasoned from CartPole's code and the DPs' messages; the line under the table prints what happened"
        ),
    ),
    (
        "The line under the table says how the distributed DPs compared",
        Shown("distribution did not pay on CartPole"),
    ),
    (
        "Distribution can pay off when environment steps or learner updates are expensive",
        Explained("a general principle (Amdahl's law), measured in the section it names"),
    ),
    (
        "the notebook only receives progress events",
        Shown('print(f"coarse: workers sent each other {r.transfer_bytes:,} bytes'),
    ),
    (
        "Every replica records when it works on which fragment",
        Explained("what the timeline draws, by construction of its legend"),
    ),
    (
        "Under `coarse` the two actors roll out at the same time, each in its own process",
        Explained(
            "a synchronous DP's schedule by construction: the learner needs both batches, the actors its weights"
        ),
    ),
    (
        "Under `fine` the learner and the environment workers alternate at every step",
        Explained("fine's schedule by construction: inference on the learner, physics on the workers"),
    ),
    (
        "Zoom into 50 ms to see single steps",
        Explained("an instruction: the next cell draws a 50 ms window of the run"),
    ),
    (
        "the cell's last lines print how long `single`'s `env@step` took per environment step here",
        Shown("per environment step at step cost 0"),
    ),
    (
        "adds `s` seconds of CPU work to every environment's step",
        Explained("what the step_cost parameter does, by its definition in CartPole"),
    ),
    (
        "Each run is 4 iterations; the rate is taken from the median iteration",
        Explained("the measuring method, by construction of seconds_per_iteration"),
    ),
    (
        "With $N$ actors on $N$ free cores and nothing paid for messages",
        Explained("Amdahl's law: a mathematical bound, no fact of the run"),
    ),
    (
        "and every message, process and core shared takes from it.",
        Explained("why the bound is an upper bound: costs it leaves out"),
    ),
    (
        "The bound takes one process to run as fast as another.",
        Explained("an assumption of the bound, stated"),
    ),
    (
        "on a busy machine it can be the slower one",
        Shown("def beyond(step_cost, n, speedup)"),
    ),
    (
        "and prints it with the bound at each step cost",
        Shown("so Amdahl allows at most"),
    ),
    (
        "A distributed run can still come out level or ahead, one actor included",
        Explained("a possibility and its cause; the cell's lines print what happened here"),
    ),
    (
        "the second actor can approach Amdahl's bound",
        Shown("costly environment: coarse x2 reached"),
    ),
    (
        "Without a free core, the two actors take turns on the same core",
        Explained("follows from step_cost's CPU-time work: two processes on one core take turns"),
    ),
    (
        "cannot add compute: the processes take turns on the same cores",
        Shown("costly environment: coarse x4 reached"),
    ),
    (
        "On a machine with more cores, `coarse` would go on gaining",
        Explained("Amdahl's law applied to a machine this run did not use"),
    ),
    (
        "splits only the physics: inference stays with the learner",
        Explained("fine's placement by construction, as its drawing above shows"),
    ),
    (
        "Where every process has a core of its own it has no more to split than `coarse`",
        Explained("reasoning from the two placements, no measured fact"),
    ),
    (
        "captures, draws the placement and runs, with a progress bar and a live dashboard",
        Shown("%%fragment ppo --policy coarse --actors 2 --run"),
    ),
    (
        "Notebook 3 runs the same loop under the *decoupled* DPs",
        Explained("what notebook 3 covers, a pointer"),
    ),
    (
        "so the namespace after a distributed run is the one plain Python leaves",
        Asserted("distributed == (episodes, log['value_loss'])"),
    ),
    (
        "estimate the step cost at which `coarse` with 2 actors would just match `single`",
        Explained("an exercise's instruction, the student's to measure"),
    ),
    (
        "(Hint: per iteration, `single` pays `a + A s`",
        Explained(
            "the ideal slopes follow from 32 x 32 steps an iteration split over 2 actors; the solution prints the run's"
        ),
    ),
    (
        "1 for the timeline drawn and the learner's",
        Explained("the rubric: what an answer must contain to earn its points"),
    ),
    (
        "1 for each crossing edge's bytes per iteration",
        Explained("the rubric: what an answer must contain to earn its points"),
    ),
    (
        "1 for `a` and `b` read from `per_iteration` at cost 0",
        Explained("the rubric: what an answer must contain to earn its points"),
    ),
    (
        "Each replica trains on its half of the data",
        Explained("how multi_learner's update works, by its design"),
    ),
    (
        "the cell says which it did here",
        Shown("here multi_learner's update took"),
    ),
    (
        "The measured figure departs from the prediction by what the prediction leaves out",
        Shown('print(f"predicted {predicted:,} bytes, measured'),
    ),
    (
        "Write each iteration time as a line in the step cost",
        Explained("the method of the solution, a model"),
    ),
    (
        "the runs at 500 µs give the slopes `A` and `B`",
        Shown('print(f"A = {A:,.0f}, B = {B:,.0f}'),
    ),
    (
        "They meet at `s = (b - a) / (A - B)`",
        Shown("break-even near"),
    ),
]
