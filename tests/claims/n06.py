"""Notebook 06's sentences that state what its run measured or computed, and how the run checks each (see
`claims/__init__.py`)."""

from claims import Asserted, Explained, Shown  # noqa: F401

CLAIMS = [
    (
        "run it on the local Dask cluster and check the invariant yourself",
        Asserted("invariant"),
    ),
    (
        "A DP places these fragments in two steps",
        Explained("how a DP is defined and placed, by construction"),
    ),
    (
        "| source group | destination group | operator |",
        Explained("fragnb's rule deriving each edge's operator, a definition"),
    ),
    (
        "Suppose you want the buffer on the learner's machine instead",
        Explained("a design's motivation, what the policy is meant to do"),
    ),
    (
        "`register` adds the policy to fragnb's registry",
        Explained("what register does by design; the next cell prints the registry"),
    ),
    (
        "The same cell as always, now with `--policy central_buffer --actors 2`.",
        Explained("says what the next cell runs, an instruction"),
    ),
    (
        "after five iterations under `central_buffer`, compared with plain Python's",
        Explained("a prediction's question, whose options follow"),
    ),
    (
        "(a) identical bit for bit (`torch.equal`); (b) within 1e-5",
        Explained("a prediction's options, one of which the run confirms"),
    ),
    (
        "compare every tensor of the network's `state_dict()` with `torch.equal`",
        Explained("says what the next cell checks, not what it finds"),
    ),
    (
        "That is fragnb's promise for a run it calls exact",
        Asserted("invariant"),
    ),
    (
        "1 for the five-iteration run and the invariant cell passing (bit for bit)",
        Explained("a rubric's criterion, not a fact of this run"),
    ),
    (
        "A DP is checked against the loop when it is placed, which is pure",
        Explained("placing is pure by construction: it starts no worker"),
    ),
    (
        "(`%%fragment ... --actors 3` gives the same message.)",
        Explained("the magic places through the same function, by construction"),
    ),
    (
        "Write a policy `own_buffer` that puts environments and actors on N workers",
        Explained("an exercise's instruction, not a fact of this run"),
    ),
    (
        "Write `fine` yourself under another name",
        Explained("an exercise's instruction, not a fact of this run"),
    ),
    (
        "two groups of one replica each, so fragnb calls it an **exchange**",
        Asserted("operator(placed, 'buffer@it', 'learner') == 'exchange'"),
    ),
    (
        "The cells below register it, print its placement, run five iterations and check the invariant",
        Asserted("all((torch.equal(mine[k], v) for k, v in learner.policy.state_dict().items()))"),
    ),
    (
        "`logged` does not place: its `episodes_in(buffer)` line is the driver's",
        Asserted("refusal(logged, 'own_buffer', actors=2) == 'FragmentError'"),
    ),
    (
        "Its placement has the same groups, fragments and edges as the built-in one",
        Asserted("shape(ppo.place('my_fine', actors=2)) == shape(ppo.place('fine', actors=2))"),
    ),
]
