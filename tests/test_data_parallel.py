"""``data_parallel``: any loop with a torch optimiser, replicated whole, gradients averaged at every step.

The field's loops (tests/corpus/field.py: CleanRL's PPO and DQN, the PyTorch DQN tutorial and
REINFORCE, episode loops that ``break``, one environment or a vector of them) run as written in
each replica; the networks stay equal because every ``optimizer.step()`` applies the gradients
averaged over the replicas. One replica is plain Python, value for value.
"""

import time
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch

import fragnb
from conftest import kill_a_worker_when_shown, wait_for_no_workers
from corpus.compare import compare_namespaces
from corpus.field import FIELD, FIELD_BY_NAME
from fragnb.envs import CartPole
from fragnb.plan.script import Script
from fragnb.runtime.cluster import clusters
from fragnb.shards import SEED_STRIDE, reseed

#: The network each field loop trains.
NETWORK = {
    "cleanrl_ppo": "agent",
    "ppo_continuous": "agent",
    "dqn_tutorial": "policy_net",
    "reinforce": "policy",
    "a2c": "net",
    "cleanrl_dqn": "q_network",
    "vector_reinforce": "policy",
    "q_lambda": "q_net",
    "reinforce_functions": "policy",
    "episodes_while": "model",
    "tensordict_for_else": "agent",
    "optimiser_dict": "actor",
}

CHECKSUM = (
    "def checksum(net):\n    return torch.cat([p.detach().flatten() for p in net.parameters()]).double().sum().item()\n"
)


def _plain(loop):
    ns = loop.namespace()
    exec(compile(loop.cell, "<cell>", "exec"), ns)
    return ns


def _with_checksums(loop):
    """The loop's namespace and cell, the cell recording its network's checksum as each iteration
    starts: after the previous one's last step on every replica."""
    ns = loop.namespace()
    exec(CHECKSUM, ns)
    ns["sums"] = []
    head, _, body = loop.cell.partition("\n")
    return ns, f"{head}\n    sums.append(checksum({NETWORK[loop.name]}))\n{body}"


# -- placing: nothing is split, so nothing of splitting is refused ------------------------------------------
@pytest.mark.parametrize("loop", FIELD, ids=[loop.name for loop in FIELD])
def test_every_field_loop_places_under_data_parallel(loop):
    graph = fragnb.capture(loop.cell, loop.namespace(), name=loop.name)
    placement = graph.place("data_parallel", replicas=3)
    assert {f.group for f in placement.fragments.values()} == {"replicas"} and not placement.exact


def test_one_environment_is_still_refused_where_a_policy_splits_it_and_the_refusal_names_data_parallel():
    loop = FIELD_BY_NAME["dqn_tutorial"]
    graph = fragnb.capture(loop.cell, loop.namespace(), name=loop.name)
    with pytest.raises(fragnb.FragmentError, match="one environment, stepped episode by episode.*data_parallel"):
        graph.place("coarse", actors=2)


SPLITTING = {"coarse": "actors", "fine": "actors", "multi_learner": "learners", "async": "actors", "srl": "actors"}


@pytest.mark.parametrize("loop", FIELD, ids=[loop.name for loop in FIELD])
def test_every_refusal_of_a_field_loop_before_running_names_data_parallel_which_runs_it(loop):
    graph = fragnb.capture(loop.cell, loop.namespace(), name=loop.name)
    refused = 0
    for policy, count in SPLITTING.items():
        try:
            Script.of(graph.place(policy, **{count: 2}))
        except ValueError as e:  # FragmentError is one
            refused += 1
            assert "data_parallel" in str(e), (policy, str(e))
    assert refused  # each field loop is refused by some policy that splits it; data_parallel runs them all (below)


# -- re-seeding whole copies (no cluster) -------------------------------------------------------------------
def test_a_replicas_gymnasium_env_resets_with_its_seed_moved_on_and_replica_0_keeps_the_notebooks():
    env, copy0 = gym.make("CartPole-v1"), gym.make("CartPole-v1")
    reseed({"env": env}, 1, seed=0)
    reseed({"env": copy0}, 0, seed=0)
    first, _ = env.reset(seed=7)
    assert np.array_equal(first, gym.make("CartPole-v1").reset(seed=7 + SEED_STRIDE)[0])
    assert np.array_equal(copy0.reset(seed=7)[0], gym.make("CartPole-v1").reset(seed=7)[0])
    unseeded = [gym.make("CartPole-v1") for _ in range(2)]
    for e in unseeded:
        e.reset(seed=3)
    reseed({"env": unseeded[1]}, 1, seed=0)
    assert not np.array_equal(unseeded[0].reset()[0], unseeded[1].reset()[0])  # a reset without a seed differs too


class _OldReset(gym.Env):
    """An environment written for older gym: ``reset(self)`` takes nothing, and draws from its np_random."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,))
    action_space = gym.spaces.Discrete(2)

    def reset(self):
        return self.np_random.random(2), {}

    def step(self, action):
        return self.np_random.random(2), 1.0, False, False, {}


class _SeedFirst(_OldReset):
    """``reset(self, seed=None)``: a seed taken positionally, as some of the field's own environments do."""

    def reset(self, seed=None):
        if seed is not None:
            self._np_random, _ = gym.utils.seeding.np_random(seed)
        return self.np_random.random(2), {}


def test_a_replicas_env_resets_whatever_its_reset_takes():
    """Reseeding passes on what the loop passed and nothing more: an older ``reset(self)`` is called as the
    loop calls it (it raised `unexpected keyword argument 'seed'` on replica 1, after the cluster started)."""
    old, reference = _OldReset(), _OldReset()
    for env in (old, reference):
        env._np_random, _ = gym.utils.seeding.np_random(0)
    reseed({"env": old}, 1, seed=0)
    assert not np.array_equal(old.reset()[0], reference.reset()[0])  # its own generator: other episodes
    first = _SeedFirst()
    reseed({"env": first}, 1, seed=0)
    assert np.array_equal(first.reset(7)[0], _SeedFirst().reset(7 + SEED_STRIDE)[0])  # positional, moved on
    assert np.array_equal(first.reset(seed=7)[0], _SeedFirst().reset(seed=7 + SEED_STRIDE)[0])


def test_a_replicas_vector_env_seeds_each_sub_environment_as_the_next_batch():
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(2)])
    reseed({"envs": envs}, 2, seed=0)
    wide = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(2)])
    assert np.array_equal(envs.reset(seed=5)[0], wide.reset(seed=5 + 2 * SEED_STRIDE)[0])


def test_a_replicas_fragnb_env_serves_the_next_environments_of_a_larger_batch():
    env = CartPole(num_envs=4, seed=0)
    reseed({"env": env}, 1, seed=0)
    wide = CartPole(num_envs=8, seed=0)
    assert env.env_ids.tolist() == [4, 5, 6, 7]
    assert torch.equal(env.reset(), wide.reset()[4:])


# -- running: through fragnb.run and through the magic --------------------------------------------------------
@pytest.mark.parametrize("loop", FIELD, ids=[loop.name for loop in FIELD])
def test_field_loop_under_two_replicas_trains_with_networks_equal_after_every_iteration(loop):
    ns, cell = _with_checksums(loop)
    net = ns[NETWORK[loop.name]]
    before = [p.detach().clone() for p in net.parameters()]
    graph = fragnb.capture(cell, ns, name=loop.name)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # merge: the replicas' networks differ at the end
        result = fragnb.run(graph, "data_parallel", replicas=2, progress=False, plot=False)
    assert result.guarantee == "data-parallel" and set(result.replica_values) == {"replicas[0]", "replicas[1]"}
    first, second = (result.replica_values[r]["sums"] for r in ("replicas[0]", "replicas[1]"))
    assert len(first) > 1 and first == second  # the same weights on both, iteration after iteration
    assert ns["sums"] == first  # the notebook holds replica 0's
    assert any(not torch.equal(a, b) for a, b in zip(before, net.parameters())), "the weights never moved"


@pytest.mark.parametrize("name", ["cleanrl_ppo", "dqn_tutorial", "vector_reinforce"])
def test_one_replica_is_plain_python(name):
    loop = FIELD_BY_NAME[name]
    plain = _plain(loop)
    ns = loop.namespace()
    result = fragnb.run(fragnb.capture(loop.cell, ns, name=name), "data_parallel", progress=False, plot=False)
    assert result.guarantee == "exact"
    compare_namespaces(plain, ns, loop.cell)


@pytest.mark.parametrize("name", ["cleanrl_ppo", "reinforce", "reinforce_functions"])
def test_the_magic_runs_a_field_loop_under_data_parallel_as_fragnb_run_does(shell, name, capsys):
    loop = FIELD_BY_NAME[name]
    shell.run_cell(loop.setup, store_history=False).raise_error()
    net = shell.user_ns[NETWORK[name]]
    before = [p.detach().clone() for p in net.parameters()]
    shell.run_cell_magic(
        "fragment",
        f"{name} --policy data_parallel --replicas 2 --run --no-progress --no-plot --no-dashboard",
        loop.cell,
    )
    result = shell.user_ns[name].last_run
    assert result.guarantee == "data-parallel" and result.iterations > 0
    assert "data-parallel run: each of the 2 replicas" in capsys.readouterr().err
    assert any(not torch.equal(a, b) for a, b in zip(before, net.parameters()))


def test_a_lost_worker_resumes_from_the_checkpoint_with_the_replicas_still_equal(monkeypatch, capsys):
    loop = FIELD_BY_NAME["vector_reinforce"]
    ns, cell = _with_checksums(loop)
    cell = cell.replace("for update in range(4):", "for update in range(8):")
    clusters.shutdown()  # a fresh cluster has exactly the workers the run uses: the one killed holds a replica
    killed = kill_a_worker_when_shown(monkeypatch, 5)
    graph = fragnb.capture(cell, ns, name="vector_reinforce")
    result = fragnb.run(graph, "data_parallel", replicas=2, checkpoint_every=2, plot=False)
    assert killed and "starts again from the checkpoint" in capsys.readouterr().err
    first, second = (result.replica_values[r]["sums"] for r in ("replicas[0]", "replicas[1]"))
    assert len(first) == 8 and first == second and result.lost_workers


#: Two loops written as tutorials write them, sized to learn CartPole a little on a small budget: a
#: vector REINFORCE with Gymnasium's episode statistics, and an episode-by-episode REINFORCE whose
#: episodes end in a `while True: ... break`.
LEARNING_SETUP = """
import gymnasium as gym
import torch
import torch.nn as nn

torch.manual_seed(seed)
num_envs, num_steps, gamma = 4, 32, 0.99
envs = gym.vector.SyncVectorEnv(
    [lambda: gym.wrappers.RecordEpisodeStatistics(gym.make("CartPole-v1")) for _ in range(num_envs)]
)
env = gym.make("CartPole-v1")
policy = nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 2))
optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)
obs = torch.Tensor(envs.reset(seed=1)[0])
episode_returns = []
"""

#: name -> (the seed its setup starts from, the cell)
LEARNING = {
    "vector_reinforce": (
        0,
        """
for update in range(60):
    logps, rewards, dones = [], [], []
    for step in range(num_steps):
        dist = torch.distributions.Categorical(logits=policy(obs))
        action = dist.sample()
        next_obs, reward, terminated, truncated, info = envs.step(action.numpy())
        logps.append(dist.log_prob(action))
        rewards.append(torch.as_tensor(reward, dtype=torch.float32))
        dones.append(torch.as_tensor(terminated | truncated, dtype=torch.float32))
        obs = torch.Tensor(next_obs)
        if "episode" in info:
            episode_returns += [float(r) for r in info["episode"]["r"][info["_episode"]]]
    returns, running = [], torch.zeros(num_envs)
    for t in reversed(range(num_steps)):
        running = rewards[t] + gamma * running * (1.0 - dones[t])
        returns.insert(0, running)
    returns = torch.stack(returns)
    returns = (returns - returns.mean()) / (returns.std() + 1e-8)
    loss = -(torch.stack(logps) * returns).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
""",
    ),
    "episodic_reinforce": (
        1,
        """
for episode in range(80):
    state, _ = env.reset(seed=episode)
    log_probs, rewards = [], []
    while True:
        m = torch.distributions.Categorical(logits=policy(torch.as_tensor(state, dtype=torch.float32)))
        action = m.sample()
        state, reward, terminated, truncated, _ = env.step(action.item())
        log_probs.append(m.log_prob(action))
        rewards.append(reward)
        if terminated or truncated:
            break
    R, returns = 0.0, []
    for r in reversed(rewards):
        R = r + gamma * R
        returns.insert(0, R)
    returns = torch.tensor(returns)
    returns = (returns - returns.mean()) / (returns.std() + 1e-8)
    loss = -(torch.stack(log_probs) * returns).sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    episode_returns.append(sum(rewards))
""",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(LEARNING))
def test_two_replicas_improve_the_return_on_a_small_budget(name, one_thread):
    """Each replica's own episodes, first twenty against last twenty: the averaged updates learn."""
    seed, cell = LEARNING[name]
    ns = {"seed": seed}
    exec(LEARNING_SETUP, ns)
    result = fragnb.run(fragnb.capture(cell, ns, name=name), "data_parallel", replicas=2, plot=False)
    for replica, values in result.replica_values.items():
        returns = values["episode_returns"]
        first, last = sum(returns[:20]) / 20, sum(returns[-20:]) / 20
        assert len(returns) >= 40 and last >= 2 * first, (replica, first, last)


# Where the field keeps its optimiser: inside the network (minimalRL's style: `self.optimizer`, stepped by the
# network's own `train_net()`), or in an agent object a tutorial's class builds. Each loop ends its iteration with
# the weights' checksum: before the iteration's end, where tensors no optimiser steps follow replica 0's, so
# an optimiser data_parallel does not find (each replica stepping on its own data) shows as checksums apart.
HELD_SETUP = """
import gymnasium as gym
import torch
import torch.nn as nn


def reinforce(optimizer, data):
    ret, loss = 0.0, 0.0
    optimizer.zero_grad()
    for r, p in data[::-1]:
        ret = r + 0.98 * ret
        loss = loss - torch.log(p) * ret
    loss.backward()
    optimizer.step()
    data.clear()


class Policy(nn.Module):
    def __init__(self, owns_optimizer):
        super().__init__()
        self.fc = nn.Linear(4, 2)
        self.data = []
        if owns_optimizer:
            self.optimizer = torch.optim.Adam(self.parameters(), lr=1e-2)

    def forward(self, x):
        return torch.softmax(self.fc(x), -1)

    def train_net(self):
        reinforce(self.optimizer, self.data)


class Agent:
    def __init__(self, net):
        self.net = net
        self.optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)

    def train_net(self):
        reinforce(self.optimizer, self.net.data)


torch.manual_seed(3)
env = gym.make("CartPole-v1")
pi = Policy(owns_optimizer=OWNER == "network")
trainer = pi if OWNER == "network" else Agent(pi)
sums = []
"""
HELD_CELL = """
for n_epi in range(4):
    s, _ = env.reset(seed=n_epi)
    done = False
    while not done:
        prob = pi(torch.from_numpy(s).float())
        a = torch.distributions.Categorical(prob).sample()
        s, r, term, trunc, _ = env.step(a.item())
        pi.data.append((r, prob[a]))
        done = term or trunc
    trainer.train_net()
    sums.append(sum(p.double().sum().item() for p in pi.parameters()))
"""


@pytest.mark.parametrize("owner", ["network", "agent"])
def test_an_optimiser_a_network_or_an_agent_keeps_is_averaged_as_one_from_the_setup(owner):
    """Shown failing before fragnb.shards.torch_held: the replicas' checksums parted at the first iteration
    (each stepped its own data, replica 0's weights then copied over replica 1's), a data-parallel run in
    name that learned from one replica's episodes."""
    ns = {"OWNER": owner}
    exec(HELD_SETUP, ns)
    result = fragnb.run(
        fragnb.capture(HELD_CELL, ns, name=owner), "data_parallel", replicas=2, plot=False, progress=False
    )
    first, second = (result.replica_values[r]["sums"] for r in ("replicas[0]", "replicas[1]"))
    assert len(first) == 4 and first == second


def test_a_loop_that_steps_no_optimiser_is_refused_with_more_than_one_replica(canonical, ppo_ns):
    env = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(2)])
    ns = {"envs": env, "np": np, "returns": []}
    cell = "envs.reset(seed=0)\nfor it in range(3):\n    _, reward, *_ = envs.step(envs.action_space.sample())\n    returns.append(reward.sum())\n"
    graph = fragnb.capture(cell, ns, name="random_agent")
    with pytest.raises(fragnb.FragmentError, match="steps no torch.optim optimiser"):
        graph.place("data_parallel", replicas=2)
    graph.place("data_parallel", replicas=1)  # one replica is plain Python: nothing to keep equal
    fragnb.capture(canonical.body, ppo_ns(), name="ppo").place("data_parallel", replicas=2)  # a Learner's optimiser


def test_a_refusal_offers_coarse_only_where_coarse_places_the_loop():
    """A loop that learns by no optimiser is refused by data_parallel, which offered 'coarse' whatever the loop:
    a random agent with no learner, or one environment stepped episode by episode, which coarse refuses in turn."""
    from fragnb.policies import refusals, resolve

    ns = {"envs": gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(2)]), "returns": []}
    random_agent = fragnb.capture(
        "envs.reset(seed=0)\nfor it in range(3):\n    _, reward, *_ = envs.step(envs.action_space.sample())\n"
        "    returns.append(reward.sum())\n",
        ns,
    )
    one_env = fragnb.capture(
        "for i_episode in range(2):\n    state, info = env.reset(seed=i_episode)\n    for t in range(50):\n"
        "        state, reward, terminated, truncated, _ = env.step(env.action_space.sample())\n"
        "        if terminated or truncated:\n            break\n",
        {"env": gym.make("CartPole-v1")},
    )
    for graph, cause in ((random_agent, "needs fragments of roles"), (one_env, "stepped episode by episode (line 2)")):
        with pytest.raises(fragnb.FragmentError) as refused:
            graph.place("data_parallel", replicas=2)
        said = str(refused.value)
        assert "Use 'single', which runs it as plain Python" in said and cause in said, said
        assert "'coarse': one learner" not in said and "use policy 'data_parallel'" not in said
        with pytest.raises((fragnb.FragmentError, ValueError), match=cause.split(" (line")[0]):
            graph.place("coarse", actors=1)  # as the refusal says
    # where coarse places the loop, the refusal offers it (the decision alone: such a loop learns by hand)
    with pytest.raises(fragnb.FragmentError, match=r"Use 'single', or a policy that splits the loop \('coarse'"):
        refusals.check_an_optimiser(random_agent, resolve("data_parallel"), lambda: None)


AGENT_SETUP = """
import gymnasium as gym
import torch


class Agent:
    def __init__(self):
        self.env = gym.make("CartPole-v1")
        self.net = torch.nn.Linear(4, 2)
        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.01)


torch.manual_seed(0)
agent = Agent()
"""
AGENT_CELL = """
firsts, sums = [], []
for ep in range(3):
    obs, _ = agent.env.reset(seed=ep)
    firsts.append(float(obs[0]))
    loss = agent.net(torch.as_tensor(obs)).logsumexp(0)
    agent.optimizer.zero_grad()
    loss.backward()
    agent.optimizer.step()
    sums.append(sum(p.double().sum().item() for p in agent.net.parameters()))
"""


def test_a_loop_through_an_agents_attributes_runs_under_data_parallel_and_is_refused_naming_them_where_split():
    """Issue 71: `agent.env.reset(...)`, `agent.net(obs)`, `agent.optimizer.step()` were refused everywhere as
    "the loop calls no component". A policy that splits the loop still refuses, naming the attributes and
    data_parallel; data_parallel runs it, reseeding the environment the agent holds (shown failing with the
    reseed walk left at the namespace's top level: both replicas reset to the same observations)."""
    ns = {}
    exec(AGENT_SETUP, ns)
    graph = fragnb.capture(AGENT_CELL, ns, name="agent_loop")
    with pytest.raises(fragnb.FragmentError) as info:
        graph.place("coarse", actors=2)
    message = str(info.value)
    assert info.value.lineno == 4 and "`agent.env`, an environment, line 4" in message, message
    assert "`agent.optimizer`, an optimiser, line 7" in message and "'data_parallel'" in message, message
    result = fragnb.run(graph, "data_parallel", replicas=2, plot=False, progress=False)
    first, second = (result.replica_values[r] for r in ("replicas[0]", "replicas[1]"))
    assert first["sums"] == second["sums"] and len(first["sums"]) == 3  # averaged: equal networks
    assert all(a != b for a, b in zip(first["firsts"], second["firsts"]))  # each replica its own episodes


METHOD_SETUP = """
import gymnasium as gym
import torch


class Reinforce:
    def __init__(self, seed):
        torch.manual_seed(seed)
        self.env = gym.make("CartPole-v1")
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=1e-2)
        self.seed = seed
        self.sums = []  # the weights' checksum after each update

    def act(self, obs):
        dist = torch.distributions.Categorical(logits=self.net(torch.as_tensor(obs)))
        action = dist.sample()
        return action.item(), dist.log_prob(action)

    def train(self, num_episodes, gamma=0.99):
        returns = []
        for episode in range(num_episodes):
            obs, _ = self.env.reset(seed=self.seed + episode)
            log_probs, rewards, done = [], [], False
            while not done:
                action, log_prob = self.act(obs)
                obs, reward, terminated, truncated, _ = self.env.step(action)
                log_probs.append(log_prob)
                rewards.append(reward)
                done = terminated or truncated
            ret, discounted = 0.0, []
            for r in reversed(rewards):
                ret = r + gamma * ret
                discounted.insert(0, ret)
            loss = -(torch.stack(log_probs) * torch.tensor(discounted)).sum()
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            returns.append(sum(rewards))
            self.sums.append(sum(p.double().sum().item() for p in self.net.parameters()))
        return returns, self.sums
"""


def test_a_loop_in_an_agents_method_runs_through_the_magic_under_single_as_plain_python_and_data_parallel(
    shell, capsys
):
    """Issue 71: the rainbow-is-all-you-need style, `agent.train(n)`, in a notebook: the magic reads the
    method's body, `single` is plain Python (returns and weights), data_parallel x2 runs it announced, each
    replica its own episodes (the agent's env reseeded) with equal networks after every update."""
    shell.run_cell(METHOD_SETUP, store_history=False).raise_error()
    plain = shell.user_ns["Reinforce"](0)
    expected, _ = plain.train(3)
    flags = "--run --no-progress --no-plot --no-dashboard"
    shell.run_cell("agent = Reinforce(0)", store_history=False).raise_error()
    shell.run_cell_magic("fragment", f"train_single --policy single {flags}", "returns, sums = agent.train(3)\n")
    assert shell.user_ns["returns"] == expected and "episode" not in shell.user_ns  # its variables stay its own
    assert all(torch.equal(a, b) for a, b in zip(plain.net.parameters(), shell.user_ns["agent"].net.parameters()))
    shell.run_cell("agent = Reinforce(0)", store_history=False).raise_error()
    shell.run_cell_magic(
        "fragment", f"train_dp --policy data_parallel --replicas 2 {flags}", "returns, sums = agent.train(3)\n"
    )
    result = shell.user_ns["train_dp"].last_run
    assert result.guarantee == "data-parallel" and shell.user_ns["train_dp"].read_from.startswith("Reinforce.train")
    first, second = (result.replica_values[r] for r in ("replicas[0]", "replicas[1]"))
    assert first["sums"] == second["sums"] and len(first["sums"]) == 3
    assert first["returns"] != second["returns"]  # each replica's own episodes
    assert "data-parallel run: each of the 2 replicas" in capsys.readouterr().err


BUILT_SETUP = """
import gymnasium as gym
import torch


class Reinforce:
    def __init__(self):
        self.net = torch.nn.Linear(4, 2)
        self.optimizer = torch.optim.AdamW(self.net.parameters(), lr=1e-3)


env = gym.make("CartPole-v1")
"""


@pytest.mark.parametrize(
    "cell, line, made",
    [
        # the Gymnasium REINFORCE tutorial's shape: an agent (and its optimiser) per seed, built in the loop
        (
            "for seed in range(2):\n    agent = Reinforce()\n    obs, _ = env.reset(seed=seed)\n",
            2,
            "its `__init__` builds a torch.optim.AdamW",
        ),
        (
            "net = torch.nn.Linear(4, 2)\nopt = torch.optim.SGD(net.parameters(), lr=0.1)\nfor it in range(2):\n    env.reset(seed=it)\n",
            2,
            "makes one",
        ),
    ],
)
def test_an_optimiser_built_inside_the_cell_is_refused_naming_its_line(cell, line, made):
    """Issue 71: it was refused as "this loop steps no torch.optim optimiser", false where the cell steps one."""
    ns = {}
    exec(BUILT_SETUP, ns)
    graph = fragnb.capture(cell, ns, name="built")
    with pytest.raises(fragnb.FragmentError) as info:
        graph.place("data_parallel", replicas=2)
    assert info.value.lineno == line and made in str(info.value) and "inside the cell" in str(info.value)
    graph.place("data_parallel", replicas=1)  # one replica is plain Python


@pytest.mark.timeout(180)
def test_a_recursion_error_in_a_replica_ends_the_run_with_the_error_not_a_wait():
    """A RecursionError's traceback, thousands of frames deep, never reached the notebook: the client did not
    learn that the replicas had failed and the run waited forever. Tasks now send its first frames."""
    ns = {}
    exec(
        "import torch\nnet = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(net.parameters(), lr=0.1)\n"
        "def deep(n):\n    return deep(n + 1)\n",
        ns,
    )
    cell = (
        "for it in range(3):\n    loss = net(torch.ones(4, 2)).pow(2).mean()\n    opt.zero_grad()\n"
        "    loss.backward()\n    opt.step()\n    if it == 1:\n        deep(0)\n"
    )
    start = time.monotonic()
    with pytest.raises(RecursionError) as info:
        fragnb.run(fragnb.capture(cell, ns, name="deep"), "data_parallel", replicas=2, progress=False, plot=False)
    assert time.monotonic() - start < 90
    assert 'File "<fragment deep>", line 7' in "\n".join(info.value.__notes__)
    wait_for_no_workers()


# -- one plan per run: replicas draw from the run's seed ------------------------------------------------------
SEEDED_SETUP = """
import gymnasium as gym
import torch
env = gym.make("CartPole-v1")
net = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
drawn = []
"""
SEEDED_CELL = """
for step in range(3):
    obs, _ = env.reset()
    drawn.append((obs.tolist(), int(env.action_space.sample())))
    loss = net(torch.as_tensor(obs)).pow(2).sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def _replica_draws(seed: int) -> list:
    """What replica 1 drew (unseeded resets, an action space's samples) in a data-parallel run started
    after ``torch.manual_seed(seed)``."""
    ns: dict = {}
    exec(SEEDED_SETUP, ns)
    torch.manual_seed(seed)
    graph = fragnb.capture(SEEDED_CELL, ns, name="seeded")
    result = fragnb.run(graph, "data_parallel", replicas=2, progress=False, plot=False)
    return result.replica_values["replicas[1]"]["drawn"]


def test_a_replicas_draws_follow_the_runs_seed():
    # The run was once planned twice and its payloads packed from the first plan, made before the run's
    # seed was known: replica 1 re-seeded its environments from 0 whatever torch.manual_seed said.
    first, again, other = _replica_draws(1234), _replica_draws(1234), _replica_draws(99)
    assert first == again  # the same seed: the same numbers
    assert first != other  # another seed: other numbers


# -- the placement is the program: a transfer's operator is what the run does ---------------------------------
def test_a_transfers_operator_is_what_the_drawing_shows_and_what_the_run_does():
    from fragnb.runtime.pipeline import run_placement

    loop = FIELD_BY_NAME["vector_reinforce"]

    def run(averaging: bool) -> tuple[list, list, str]:
        ns, cell = _with_checksums(loop)
        placement = fragnb.capture(cell, ns, name=loop.name).place("data_parallel", replicas=2)
        assert [str(t) for t in placement.transfers] == ["replicas: all-reduce (gradients)"]
        if not averaging:  # each replica keeps its own gradients: two independent copies side by side
            placement = placement.with_operator("replicas", "replicas", "gradients", "local")
        assert Script.of(placement).transfers == placement.transfers  # the Script carries what is drawn
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # merge: the replicas' networks differ
            result = run_placement(placement, progress=False, plot=False)
        first, second = (result.replica_values[r]["sums"] for r in ("replicas[0]", "replicas[1]"))
        return first, second, placement.render().source

    first, second, drawn = run(averaging=True)
    assert first == second and "gradients averaged" in drawn
    first, second, drawn = run(averaging=False)
    assert first[0] == second[0] and first[1:] != second[1:]  # the same start, then each its own updates
    assert "gradients averaged" not in drawn


def test_an_operator_the_mode_cannot_run_is_refused_naming_those_it_can(canonical, ppo_ns):
    placement = fragnb.capture(canonical.body, ppo_ns()).place("coarse", actors=2)
    weights = next(t for t in placement.transfers if t.kind == "state")
    with pytest.raises(ValueError, match=r"moves it by one of \['broadcast', 'versioned pull'\], not 'all-reduce'"):
        placement.with_operator(weights.src, weights.dst, "state", "all-reduce")
    with pytest.raises(ValueError, match="no transfer 'learner' -> 'nowhere'"):
        placement.with_operator("learner", "nowhere", "state", "broadcast")


FOLLOWER_SETUP = """
import gymnasium as gym
import torch
env = gym.make("CartPole-v1")
env.reset(seed=0)
net = torch.nn.Linear(4, 2)
target = torch.nn.Linear(4, 2)  # no optimiser steps it: it follows replica 0's after every iteration
optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
sums, moved = [], []
"""
FOLLOWER_CELL = """
for step in range(20):
    sums.append(float(target.weight.sum()))
    obs, _ = env.reset()
    loss = net(torch.as_tensor(obs)).pow(2).sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    moved.append(bool(obs[0] > 0))
    if obs[0] > 0:  # the replica's own reset decides: one replica may move it where the other does not
        with torch.no_grad():
            target.weight.add_(float(obs[1]))
"""


def test_a_tensor_one_replica_alone_moves_is_replica_0s_again_after_the_iteration():
    """The followers' broadcast is skipped when no replica's moved since the last one: a replica whose own
    episode moved it (replica 1's, here) must still bring the broadcast about."""
    ns: dict = {}
    torch.manual_seed(3)
    exec(FOLLOWER_SETUP, ns)
    graph = fragnb.capture(FOLLOWER_CELL, ns, name="followers")
    result = fragnb.run(graph, "data_parallel", replicas=2, progress=False, plot=False)
    first, second = (result.replica_values[r] for r in ("replicas[0]", "replicas[1]"))
    assert any(b and not a for a, b in zip(first["moved"], second["moved"])), "replica 1 alone moved it at a step"
    assert any(not a and not b for a, b in zip(first["moved"], second["moved"])), "a step where none moved it"
    assert first["sums"] == second["sums"]  # equal at the start of every iteration


def test_a_fast_loops_live_view_ends_on_its_last_iteration_though_replicas_report_a_tenth_of_a_second_apart():
    """Replicas tell the notebook their progress at most every REPORT_EVERY_S (an event per iteration took a
    core of the notebook's process on CleanRL's dqn.py); what each did after its last report is told when
    its loop ends, so the bar counts every iteration and the notebook does not wait for events that never come."""
    from fragnb.ui.live import LiveProgress

    loop = FIELD_BY_NAME["cleanrl_dqn"]  # 40 iterations of about a millisecond: all but the first unreported
    view = LiveProgress(total=None, progress=False, plot=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = fragnb.run(
            fragnb.capture(loop.cell, loop.namespace(), name=loop.name), "data_parallel", replicas=2, progress=view
        )
    assert result.iterations == 40 and view.iterations == 40


def test_a_first_keyboard_interrupt_ends_every_replica_after_the_same_iteration_with_equal_networks(interrupt_once):
    """The leader's ruling on an iteration (stop, keep a checkpoint) rides in the header of its last collective
    round, which every replica reaches, instead of a round trip to the leader after it: the replicas still stop
    together, and say why."""
    import dataclasses

    loop = FIELD_BY_NAME["cleanrl_dqn"]
    loop = dataclasses.replace(
        loop, setup=loop.setup.replace("total_timesteps: int = 40", "total_timesteps: int = 20000")
    )
    ns, cell = _with_checksums(loop)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = fragnb.run(fragnb.capture(cell, ns, name=loop.name), "data_parallel", replicas=2, plot=False)
    assert 1 <= result.iterations < 20000 and result.stopped.startswith("interrupted"), result.stopped
    first, second = (result.replica_values[r]["sums"] for r in ("replicas[0]", "replicas[1]"))
    assert len(first) == len(second) == result.iterations and first == second  # the same network at every iteration
