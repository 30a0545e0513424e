"""`fragnb.rows`: a replica's share computes its rows as the whole batch does, so exact runs are exact at any
replica count and any length; and the safety net labels a run that is not, before it starts (issue 66)."""

import dataclasses
import threading

import pytest
import torch
import torch.nn.functional as F

import fragnb
from conftest import NOTEBOOK_01_LOOP
from corpus.compare import compare_namespaces
from fragnb.algos.ppo import ActorCritic, PPOActor, PPOConfig, PPOLearner, RolloutBuffer
from fragnb.envs import CartPole
from fragnb.errors import FragmentError
from fragnb.plan import script as plan_script
from fragnb.rows import whole_rows
from fragnb.runtime.pipeline import preflight

ROWS = 48  # divides by 2, 3, 4, 6, 8, 12, 16, 24: every replica count a test chooses


def _nets():
    torch.manual_seed(0)
    return {
        "tanh MLP (notebook 01's)": ActorCritic(4, 2).actor,
        "SiLU, sigmoid, layer norm": torch.nn.Sequential(
            torch.nn.Linear(4, 33), torch.nn.SiLU(), torch.nn.Linear(33, 5), torch.nn.Sigmoid(), torch.nn.LayerNorm(5)
        ),
        "ELU, GELU, softmax": torch.nn.Sequential(
            torch.nn.Linear(4, 64), torch.nn.ELU(), torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 3)
        ),
    }


def _outside_modules(net, x):
    """What an actor computes around its network: the functions a loop calls itself."""
    logits = net(x)
    logp = torch.log_softmax(logits, dim=-1)
    dist = torch.distributions.Categorical(logits=logits)
    return (
        logp,
        logp.exp().cumsum(-1),
        dist.entropy(),
        torch.sigmoid(x).sum(-1),
        torch.sin(x.double()),
        x.pow(3).mean(dim=1),
        F.elu(x) @ torch.ones(4, 2),
    )


@pytest.mark.parametrize("count", [2, 3, 4, 6, 8, 16, 48])
@pytest.mark.parametrize("name", list(_nets()))
def test_a_share_computes_its_rows_to_the_bit_as_the_whole_batch(name, count):
    net = _nets()[name]
    x = torch.randn(ROWS, 4, generator=torch.Generator().manual_seed(1)) * 3
    with torch.no_grad():
        whole = _outside_modules(net, x)
        size = ROWS // count
        for i in range(count):
            with whole_rows(i * size, size, ROWS):
                mine = _outside_modules(net, x[i * size : (i + 1) * size])
            for k, (a, b) in enumerate(zip(whole, mine)):
                assert torch.equal(a[i * size : (i + 1) * size], b), (name, count, i, k)


def _rounding_by_rows(monkeypatch):
    """A matrix kernel that rounds by the batch's row count, as a CPU's does (1 ulp off below 48 rows): the same
    fault on every machine, where real kernels differ at other counts on each CPU."""
    linear = F.linear

    def by_rows(input, weight, bias=None):
        out = linear(input, weight, bias)
        return out if input.shape[0] >= ROWS else torch.nextafter(out, torch.full_like(out, float("inf")))

    monkeypatch.setattr(F, "linear", by_rows)


def test_a_kernel_that_rounds_by_the_row_count_rounds_a_share_as_it_rounds_the_whole_batch(monkeypatch):
    _rounding_by_rows(monkeypatch)
    net, x = _nets()["tanh MLP (notebook 01's)"], torch.randn(ROWS, 4)
    with torch.no_grad():
        whole = net(x)
        assert not torch.equal(net(x[8:16]), whole[8:16])  # the planted fault: what a share computes without it
        with whole_rows(8, 8, ROWS):
            assert torch.equal(net(x[8:16]), whole[8:16])


def test_widening_never_changes_what_a_function_computes():
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(4, 4, generator=gen), torch.randn(4, 4, generator=gen)  # a weight with as many rows as a share
    row, ints = torch.randn(1, 4, generator=gen), torch.arange(4)
    batched = torch.randn(4, 3, 5, generator=gen), torch.randn(4, 5, 2, generator=gen)
    cases = {
        "weight with the share's rows": lambda: torch.tanh(x) * torch.sigmoid(w),
        "broadcast row": lambda: torch.exp(x - row),
        "keywords": lambda: F.linear(input=x, weight=w) + torch.softmax(x, dim=1),
        "addmm": lambda: torch.addmm(torch.zeros(4), x, w),
        "batched matmul": lambda: torch.matmul(*batched),
        "matrix @ batch of matrices": lambda: torch.tanh(x) @ torch.randn(3, 4, 2, generator=gen.manual_seed(1)),
        "unbatched convolution": lambda: F.conv1d(torch.sigmoid(x), torch.ones(2, 4, 1)),
        "max over a dimension": lambda: torch.max(torch.tanh(x), dim=1),
        "over every row": lambda: (torch.sigmoid(x).sum(), torch.softmax(x, 0), torch.logsumexp(x, dim=(0, 1))),
        "integers": lambda: ints.pow(2),
        "scalars": lambda: torch.exp(torch.tensor(0.5)),
        "in place": lambda: x.clone().sigmoid_(),
    }
    for name, case in cases.items():
        plain = case()
        with whole_rows(4, 4, 16):
            widened = case()
        flat = [plain] if isinstance(plain, torch.Tensor) else list(plain)
        wide = [widened] if isinstance(widened, torch.Tensor) else list(widened)
        assert type(widened) is type(plain), name
        for a, b in zip(flat, wide):
            torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-7, msg=name)
    # gradients flow through the tiling as through the share's own computation
    net = _nets()["SiLU, sigmoid, layer norm"]
    net(x).sum().backward()
    plain = [p.grad.clone() for p in net.parameters()]
    net.zero_grad()
    with whole_rows(4, 4, 16):
        net(x).sum().backward()
    for a, b in zip(plain, [p.grad for p in net.parameters()]):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


def test_only_the_thread_that_computes_a_share_widens_and_torch_is_as_it_was_after():
    tanh, linear, forward = torch.tanh, F.linear, torch.nn.Sequential.forward
    methods = dict(torch.Tensor.__dict__)
    seen, inside, done = [], threading.Event(), threading.Event()

    def share():
        with whole_rows(2, 2, 8):
            inside.set()
            done.wait(10)

    t = threading.Thread(target=share)
    t.start()
    inside.wait(10)
    assert torch.tanh is not tanh  # wrapped while a share computes
    x = torch.randn(2, 3)
    seen.append(torch.tanh(x))  # on another thread: as it is
    done.set()
    t.join()
    assert torch.equal(seen[0], tanh(x))
    assert (torch.tanh, F.linear, torch.nn.Sequential.forward) == (tanh, linear, forward)
    assert dict(torch.Tensor.__dict__) == methods  # TensorBase's methods are inherited again, not copied in


# -- the safety net labels what it cannot make exact ------------------------------------------------


def _ppo(iterations: int, num_envs: int = ROWS, num_steps: int = 8) -> dict:
    """Notebook 01's components, small: ``num_envs`` CartPoles, ``num_steps`` steps, one epoch of two minibatches."""
    torch.manual_seed(0)
    config = PPOConfig(num_envs=num_envs, num_steps=num_steps, update_epochs=1, num_minibatches=2)
    env = CartPole(num_envs=num_envs, seed=0)
    policy = ActorCritic(obs_dim=4, num_actions=2)
    return {
        "config": config,
        "env": env,
        "policy": policy,
        "actor": PPOActor(policy, num_envs, seed=0),
        "buffer": RolloutBuffer(num_envs, num_steps, env.obs_shape, config.gamma, config.gae_lambda),
        "learner": PPOLearner(policy, config, seed=0),
        "iterations": iterations,
    }


def test_replicas_that_round_otherwise_are_labelled_before_the_run_and_refused_when_exact(monkeypatch, capsys):
    _rounding_by_rows(monkeypatch)
    placement = fragnb.capture(NOTEBOOK_01_LOOP, _ppo(2), name="ppo").place("coarse", actors=4)
    assert preflight(placement, check=True, exact=False).guarantee == "exact"  # widened: the same bits
    of = plan_script.Script.of.__func__  # the planted fault: replicas compute on their share's shape
    monkeypatch.setattr(
        plan_script.Script,
        "of",
        classmethod(lambda cls, *a, **k: dataclasses.replace(of(cls, *a, **k), whole_rows=False)),
    )
    capsys.readouterr()
    before = preflight(placement, check=True, exact=False)
    said = capsys.readouterr().err
    assert before.guarantee == "rounding" and before.draws == (said.split("within rounding: ")[1].strip(),)
    assert "line 5 (`action, logprob, value = actor.act(obs)`), run by each of the 4 replicas of 'actors'" in said
    assert "within float rounding" in said and "diverges as another seed's would" in said
    with pytest.raises(FragmentError, match=r"exact guarantee was asked for, but line 5 .* 'single' runs the loop"):
        preflight(placement, check=True, exact=True)


# -- long runs at the replica counts users choose, on Dask -----------------------------------------


def _plain(make, cell: str) -> dict:
    ns = make()
    exec(compile(cell, "<cell>", "exec"), ns)
    return ns


@pytest.mark.parametrize("policy, actors", [("coarse", 3), ("coarse", 8), ("coarse", 16), ("fine", 6)])
def test_coarse_and_fine_leave_single_s_bits_after_40_iterations_at_any_replica_count(policy, actors, one_thread):
    """On this machine's CPU, coarse x16 without whole rows ended 0.23 from plain Python after 100 iterations
    (its shares of 3 rows round the actor's logits otherwise); on another CPU, x4 ended 0.40 apart after 20.
    Twice those 20 iterations, compared to the bit: a last bit that differed anywhere would show."""
    plain = _plain(lambda: _ppo(40), NOTEBOOK_01_LOOP)
    ns = _ppo(40)
    result = fragnb.run(
        fragnb.capture(NOTEBOOK_01_LOOP, ns, name="ppo"), policy, actors=actors, progress=False, plot=False
    )
    assert result.guarantee == "exact" and len(ns["returns"]) > 150
    compare_namespaces(plain, ns, NOTEBOOK_01_LOOP, bits=True)


def test_the_magic_runs_coarse_x8_to_the_bit_as_fragnb_run_does(shell, one_thread):
    plain = _plain(lambda: _ppo(30), NOTEBOOK_01_LOOP)
    shell.user_ns.update(_ppo(30))
    shell.run_cell_magic("fragment", "ppo --policy coarse --actors 8 --run --no-progress --no-plot", NOTEBOOK_01_LOOP)
    assert shell.user_ns["ppo"].last_run.guarantee == "exact"
    compare_namespaces(plain, {k: v for k, v in shell.user_ns.items() if k in plain}, NOTEBOOK_01_LOOP, bits=True)


def test_a_remote_cluster_s_replicas_leave_single_s_bits_too(one_thread):
    from test_distributed import dask_processes

    plain = _plain(lambda: _ppo(30), NOTEBOOK_01_LOOP)
    with dask_processes() as address:
        ns = _ppo(30)
        fragnb.run(
            fragnb.capture(NOTEBOOK_01_LOOP, ns, name="ppo"),
            "coarse",
            actors=12,
            cluster=address,
            progress=False,
            plot=False,
        )
    compare_namespaces(plain, ns, NOTEBOOK_01_LOOP, bits=True)


def test_mappo_and_dqn_leave_single_s_bits_after_40_iterations_at_8_replicas(one_thread):
    """Notebook 07's MAPPO (a shared actor over three agents, a centralised critic) and notebook 08's DQN (an
    update every environment step, a replay buffer, a target network), with the loops as the notebooks write them."""
    from test_dqn import CELL as DQN_CELL
    from test_dqn import namespace as dqn_namespace
    from test_mappo import namespace as mappo_namespace

    from fragnb.algos.dqn import DQNConfig
    from fragnb.algos.mappo import MAPPOConfig

    mappo = MAPPOConfig(num_envs=16, num_steps=5, hidden=32, update_epochs=1, num_minibatches=2)
    dqn = DQNConfig(num_envs=16, buffer_size=256, batch_size=16, learning_starts=8, target_every=10, hidden=32)
    for cell, make in (
        (NOTEBOOK_01_LOOP, lambda: mappo_namespace(mappo, iterations=40)),
        (DQN_CELL, lambda: dqn_namespace(dqn, iterations=40, steps_per_iteration=1)),
    ):
        plain = _plain(make, cell)
        ns = make()
        result = fragnb.run(fragnb.capture(cell, ns), "coarse", actors=8, progress=False, plot=False)
        assert result.guarantee == "exact"
        compare_namespaces(plain, ns, cell, bits=True)
