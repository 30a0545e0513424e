"""GRPO on a tiny character-level transformer, as notebook 11 writes it: plain torch in the loop cell,
fragnb's text task and model in the setup. :func:`grpo` sizes it (tests run a few small iterations;
the notebook and ``benchmarks/llm.py`` larger ones)."""

from __future__ import annotations

from corpus.loops import CorpusLoop, _loop

__all__ = ["grpo", "grpo_components"]

GRPO_SETUP = """
    import copy

    import torch

    from fragnb.algos.grpo import TinyLM, completion_mask, warm_up
    from fragnb.envs.text import Addition
    from fragnb.streams import EnvStreams

    seed = {seed}
    prompts_per_step, group, max_new_tokens = {prompts}, {group}, 4
    clip, beta, epochs = 0.2, 0.04, 2
    env = Addition(prompts_per_step * group, seed=seed, group=group, reward="{reward}")
    policy = TinyLM(seed=seed)
    warm_up(policy, env, steps={warm_up}, seed=seed)
    reference = copy.deepcopy(policy).requires_grad_(False)
    optimizer = torch.optim.Adam(policy.parameters(), lr={lr})
    streams = EnvStreams(seed, torch.arange(env.num_envs), "sample")
    prompts, _ = env.reset(seed=seed)
    rewards = []
"""

GRPO_CELL = """
    for iteration in range({iterations}):
        completions, old_logp = policy.generate(prompts, max_new_tokens, streams=streams)
        next_prompts, reward, terminated, truncated, info = env.step(completions)
        r = reward.view(-1, group)
        advantages = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).view(-1, 1)
        mask = completion_mask(completions)
        with torch.no_grad():
            ref_logp = reference.logprobs(prompts, completions)
        for epoch in range(epochs):
            logp = policy.logprobs(prompts, completions)
            ratio = torch.exp(logp - old_logp)
            surrogate = torch.min(ratio * advantages, torch.clamp(ratio, 1 - clip, 1 + clip) * advantages)
            kl = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1
            loss = (-(surrogate - beta * kl) * mask).sum() / mask.sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        rewards.append(reward.mean().item())
        prompts = next_prompts
"""

COMPONENTS_SETUP = """
    import torch

    from fragnb.algos.grpo import GRPOActor, GRPOLearner, TinyLM, warm_up
    from fragnb.envs.text import Addition

    seed = {seed}
    prompts_per_step, group = {prompts}, {group}
    env = Addition(prompts_per_step * group, seed=seed, group=group)
    model = TinyLM(seed=seed)
    warm_up(model, env, steps={warm_up}, seed=seed)
    actor = GRPOActor(model, env.num_envs, max_new_tokens=4, seed=seed)
    learner = GRPOLearner(model, group, lr={lr})
    prompts = env.reset()
    rewards = []
"""

COMPONENTS_CELL = """
    for iteration in range({iterations}):
        completions, old_logp = actor.act(prompts)
        next_prompts, reward, terminated, truncated, info = env.step(completions)
        stats = learner.update(prompts, completions, old_logp, reward)
        rewards.append(stats["reward"])
        prompts = next_prompts
"""


def grpo(
    prompts: int = 8,
    group: int = 4,
    iterations: int = 4,
    warm_up: int = 20,
    seed: int = 0,
    lr: float = 1e-3,
    reward: str = "partial",
) -> CorpusLoop:
    """The GRPO loop (plain torch in the cell) at these sizes."""
    sizes = dict(prompts=prompts, group=group, iterations=iterations, warm_up=warm_up, seed=seed, lr=lr, reward=reward)
    return _loop("grpo", GRPO_SETUP.format(**sizes), GRPO_CELL.format(**sizes))


def grpo_components(prompts: int = 8, group: int = 4, iterations: int = 4, warm_up: int = 20, seed: int = 0):
    """The same algorithm written against fragnb's GRPOActor and GRPOLearner."""
    sizes = dict(prompts=prompts, group=group, iterations=iterations, warm_up=warm_up, seed=seed, lr=1e-3)
    return _loop("grpo_components", COMPONENTS_SETUP.format(**sizes), COMPONENTS_CELL.format(**sizes))


def slow_start_addition(*args, **kwargs):
    """``Addition`` whose shards other than the first take a second over their first step: under ``async``
    the learner then takes a fast actor's iterations 0 and 1 together, and later the slow actor's iteration
    0 beside the fast one's iteration 2 or more (tests/test_grpo.py). A local class: it travels by value."""
    from fragnb.envs.text import Addition

    class SlowStartAddition(Addition):
        def step(self, actions):
            if not getattr(self, "started", False):
                self.started = True
                if int(self.env_ids[0]) > 0:
                    import time

                    time.sleep(1.0)
            return super().step(actions)

    return SlowStartAddition(*args, **kwargs)
