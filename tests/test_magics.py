import pytest
import torch
from IPython.core.error import UsageError

from fragnb import FragmentError, FragmentGraph


def _setup(shell, canonical, iterations=2):
    shell.run_cell(canonical.setup, store_history=False).raise_error()
    shell.user_ns["iterations"] = iterations


def test_fragment_magic_binds_the_graph_without_running(shell, canonical, capsys):
    _setup(shell, canonical)
    shell.run_cell_magic("fragment", "ppo", canonical.body)
    graph = shell.user_ns["ppo"]
    assert isinstance(graph, FragmentGraph) and graph.name == "ppo"
    assert "returns" not in shell.user_ns and shell.user_ns["env"].vector_steps == 0


def test_fragment_run_equals_plain_execution_of_the_cell(shell, canonical):
    _setup(shell, canonical)
    before = set(shell.user_ns)
    shell.run_cell_magic("fragment", "ppo --run --no-progress --no-plot --quiet", canonical.body)
    magic_vars = set(shell.user_ns) - before - {"ppo"}
    magic_weights = {k: v.clone() for k, v in shell.user_ns["learner"].policy.state_dict().items()}
    magic_returns = list(shell.user_ns["returns"])

    shell.reset(new_session=False)
    _setup(shell, canonical)
    before = set(shell.user_ns)
    shell.run_cell(canonical.body, store_history=False).raise_error()
    plain_vars = set(shell.user_ns) - before

    assert magic_vars == plain_vars and "stats" in plain_vars
    assert shell.user_ns["returns"] == magic_returns
    for key, value in shell.user_ns["learner"].policy.state_dict().items():
        assert torch.equal(value, magic_weights[key]), key


def test_run_prints_a_summary(shell, canonical, capsys):
    _setup(shell, canonical, iterations=1)
    shell.run_cell_magic("fragment", "ppo --run --no-progress --no-plot --quiet", canonical.body)
    assert "ppo under 'single': 1 iterations" in capsys.readouterr().out
    assert shell.user_ns["ppo"].last_run.iterations == 1


def test_until_return_stops_after_the_iteration_that_reaches_it(shell, canonical, capsys):
    _setup(shell, canonical, iterations=30)
    shell.run_cell_magic("fragment", "ppo --run --until-return 30 --no-progress --no-plot --quiet", canonical.body)
    result = shell.user_ns["ppo"].last_run
    assert (
        1 < result.iterations < 30
        and result.mean_return() >= 30
        and "stopped: the stop condition held" in capsys.readouterr().out
    )


@pytest.mark.parametrize("flag", ["--checkpoint-every -3", "--restarts two"])
def test_a_count_flag_given_no_count_is_a_usage_error_naming_the_flag(shell, canonical, flag):
    _setup(shell, canonical)
    name, value = flag.split()
    with pytest.raises(UsageError, match=f"argument {name}: '{value}' is not a count: give a whole number, 0 or more"):
        shell.run_cell_magic("fragment", f"ppo --policy coarse --run {flag}", canonical.body)
    assert "ppo" not in shell.user_ns


def test_unknown_policy_is_a_usage_error_listing_the_known_ones(shell, canonical):
    _setup(shell, canonical)
    with pytest.raises(
        UsageError,
        match=r"unknown distribution policy: 'coarser' \(must be one of \['async', 'coarse', 'data_parallel', 'fine', 'gpu_only', 'multi_learner', 'single', 'srl'\]\)",
    ):
        shell.run_cell_magic("fragment", "ppo --policy coarser", canonical.body)
    assert "ppo" not in shell.user_ns


@pytest.mark.parametrize(
    "line, cell, message",
    [
        ("", "for it in range(2):\n    pass\n", "arguments are required"),
        ("ppo", "   \n", "needs a training loop"),
        ("2ppo", "for it in range(2):\n    pass\n", "not a valid variable name"),
        ("ppo --until-return 475", "for it in range(2):\n    pass\n", "--until-return needs --run"),
    ],
)
def test_bad_magic_lines_are_usage_errors(shell, line, cell, message):
    with pytest.raises(UsageError, match=message):
        shell.run_cell_magic("fragment", line, cell)


def test_a_graph_never_replaces_a_users_object(shell, canonical):
    _setup(shell, canonical)
    env = shell.user_ns["env"]
    with pytest.raises(UsageError, match="`env` already holds your CartPole, which the graph would replace"):
        shell.run_cell_magic("fragment", "env", canonical.body)
    assert shell.user_ns["env"] is env
    shell.run_cell_magic("fragment", "ppo --quiet", canonical.body)
    shell.run_cell_magic("fragment", "ppo --quiet", canonical.body)  # a graph may replace a graph: the cell re-run


def test_bad_cell_raises_fragment_error_and_binds_nothing(shell, canonical):
    _setup(shell, canonical)
    with pytest.raises(
        FragmentError, match="line 4: `actoin` is not defined"
    ):  # as Jupyter numbers it: %%fragment is line 1
        shell.run_cell_magic("fragment", "ppo --run", "obs = env.reset()\nfor it in range(2):\n    env.step(actoin)\n")
    assert "ppo" not in shell.user_ns and "obs" not in shell.user_ns


def test_exact_refuses_a_statistical_run_before_any_worker_naming_the_draw(shell):
    from test_draws import CELL, _namespace

    shell.user_ns.update(_namespace())
    with pytest.raises(FragmentError, match=r"^line 6: the exact guarantee was asked for.*'actors' x2"):
        shell.run_cell_magic(
            "fragment", "g --policy coarse --actors 2 --run --exact --no-progress --no-plot --quiet", CELL
        )
    assert "it" not in shell.user_ns and shell.user_ns["env"].vector_steps == 0


def test_a_whole_cell_policy_is_drawn_without_a_dry_run_on_copies(shell, monkeypatch):
    """data_parallel sends nothing between groups: the magic has no edge to size, so it makes no copies of the
    notebook's objects (TorchRL's tutorials keep a tqdm bar writing to a stream, which copies refuse)."""
    from corpus.field import FIELD_BY_NAME
    from fragnb.ui import magics

    def measured(graph):
        raise AssertionError("measured a whole-cell placement")

    monkeypatch.setattr(magics, "measure", measured)
    loop = FIELD_BY_NAME["reinforce_functions"]
    shell.run_cell(loop.setup, store_history=False).raise_error()
    shell.run_cell_magic("fragment", "reinforce --policy data_parallel --replicas 2", loop.cell)
    assert isinstance(shell.user_ns["reinforce"], FragmentGraph)


# -- the policy parameters' flags, read from the registry ---------------------------------------------------
def _placements(monkeypatch) -> list:
    """The placements the magic makes, recorded as graph.place returns them."""
    placed, place = [], FragmentGraph.place

    def recorded(graph, policy, **params):
        placed.append(place(graph, policy, **params))
        return placed[-1]

    monkeypatch.setattr(FragmentGraph, "place", recorded)
    return placed


def test_every_flag_written_by_hand_before_still_parses():
    from fragnb.ui.magics import _parser

    line = "g --actors 2 --learners 3 --replicas 4 --policy-workers 5 --ring 6 --max-staleness 7 --device cpu"
    args = _parser()[0].parse_argstring(line)  # text: the chosen policy's defaults give the types
    given = (args.actors, args.learners, args.replicas, args.policy_workers, args.ring, args.max_staleness, args.device)
    assert given == ("2", "3", "4", "5", "6", "7", "cpu")


def test_samples_per_insert_reaches_the_async_placement(shell, canonical, monkeypatch):
    _setup(shell, canonical)
    placed = _placements(monkeypatch)
    shell.run_cell_magic("fragment", "ppo --policy async --actors 2 --samples-per-insert 4 --quiet", canonical.body)
    assert placed[-1].params["samples_per_insert"] == 4 and placed[-1].params["actors"] == 2
    shell.run_cell_magic("fragment", "ppo --policy async --actors 2 --quiet", canonical.body)
    assert placed[-1].params["samples_per_insert"] is None  # not given: the policy's default


def test_a_users_own_policy_gets_a_flag_for_each_of_its_parameters(shell, canonical, monkeypatch):
    from fragnb.policies import POLICIES, DistributionPolicy
    from fragnb.ui.magics import FragmentMagics

    _setup(shell, canonical)
    placed = _placements(monkeypatch)
    monkeypatch.setitem(
        POLICIES, "warming", DistributionPolicy("warming", "mine", "one process", options={"warmup": 3})
    )
    shell.run_cell_magic("fragment", "ppo --policy warming --warmup 5 --quiet", canonical.body)
    assert placed[-1].params == {"warmup": 5}
    assert "--warmup VALUE" in FragmentMagics.fragment.__doc__  # %%fragment? lists it
    with pytest.raises(UsageError, match=r"--warmup soon: policy 'warming' takes int \(default 3\)"):
        shell.run_cell_magic("fragment", "ppo --policy warming --warmup soon --quiet", canonical.body)


def test_a_parameter_of_another_policy_is_refused_naming_the_policys_own(shell, canonical):
    _setup(shell, canonical)
    with pytest.raises(UsageError, match=r"policy 'coarse' takes \['actors', 'device'\], got \['samples_per_insert'\]"):
        shell.run_cell_magic("fragment", "ppo --policy coarse --samples-per-insert 4 --quiet", canonical.body)
    assert "ppo" not in shell.user_ns
