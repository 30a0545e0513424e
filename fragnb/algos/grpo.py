"""A tiny causal language model and what GRPO needs around it, on a CPU, nothing downloaded.

:class:`TinyLM` is a character-level decoder-only transformer (about 100k parameters) built from a
configuration, with the two calls an RL loop for language models makes: ``generate`` (sampling, and the
log-probability of each sampled token under the sampling policy) and ``logprobs`` (the same
log-probabilities of given completions, with gradients: what the trainer optimises). It is written in
plain torch rather than as a ``transformers`` GPT-2 configuration: that dependency would bring a
tokenizer, a hub client and seconds of import for a model that fits in a page, and its ``generate``
samples from torch's global generator, where fragnb needs per-environment streams to keep a run exact
across placements (``generate(..., streams=...)``).

:func:`warm_up` is the supervised start every RL-for-LMs recipe assumes (here seconds of teacher
forcing), and :func:`grpo_loss` is GRPO's objective for a batch, written out so that a notebook cell
can show it line by line. :class:`GRPOActor` and :class:`GRPOLearner` are the same algorithm as
fragnb components, for a loop written against them (as :mod:`fragnb.algos.ppo` has both ways):

    completions, old_logp = actor.act(prompts)
    prompts_next, reward, terminated, truncated, info = env.step(completions)
    stats = learner.update(prompts, completions, old_logp, reward)
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..components import Actor, Learner
from ..envs.text import EOS, PAD, VOCAB, TextTask

__all__ = [
    "LMConfig",
    "TinyLM",
    "warm_up",
    "accuracy",
    "completion_mask",
    "group_advantages",
    "grpo_loss",
    "GRPOActor",
    "GRPOLearner",
]


@dataclass
class LMConfig:
    """A tiny decoder: ``layers`` pre-norm blocks of ``heads``-head causal attention and a 4x MLP."""

    vocab: int = len(VOCAB)
    context: int = 16
    width: int = 64
    heads: int = 4
    layers: int = 2


class _Block(nn.Module):
    def __init__(self, c: LMConfig):
        super().__init__()
        self.heads = c.heads
        self.norm1, self.norm2 = nn.LayerNorm(c.width), nn.LayerNorm(c.width)
        self.qkv, self.out = nn.Linear(c.width, 3 * c.width), nn.Linear(c.width, c.width)
        self.mlp = nn.Sequential(nn.Linear(c.width, 4 * c.width), nn.GELU(), nn.Linear(4 * c.width, c.width))

    def forward(self, x):
        n, t, w = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(n, t, 3, self.heads, w // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(a.transpose(1, 2).reshape(n, t, w))
        return x + self.mlp(self.norm2(x))


class TinyLM(nn.Module):
    """A character-level causal transformer.

    Examples
    --------
    >>> lm = TinyLM(LMConfig(), seed=0)
    >>> sum(p.numel() for p in lm.parameters()) > 90_000
    True
    """

    def __init__(self, config: LMConfig | None = None, seed: int | None = None):
        super().__init__()
        self.config = c = config or LMConfig()
        if seed is not None:
            torch.manual_seed(seed)
        self.embed, self.position = nn.Embedding(c.vocab, c.width), nn.Embedding(c.context, c.width)
        self.blocks = nn.ModuleList(_Block(c) for _ in range(c.layers))
        self.norm, self.head = nn.LayerNorm(c.width), nn.Linear(c.width, c.vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Next-token logits at every position, ``(n, t, vocab)``."""
        t = tokens.shape[1]
        if t > self.config.context:
            raise ValueError(f"{t} tokens exceed the model's context of {self.config.context}")
        x = self.embed(tokens) + self.position(torch.arange(t, device=tokens.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))

    @torch.no_grad()
    def generate(
        self, prompts: torch.Tensor, max_new_tokens: int, streams=None, temperature: float = 1.0, greedy: bool = False
    ):
        """Sample a completion of each prompt: ``(tokens, logprobs)``, both ``(n, max_new_tokens)``.

        After a completion's end token the rest is padding with log-probability 0. ``streams`` (a
        :class:`fragnb.streams.EnvStreams`, one stream per prompt row) makes the draws those of each
        environment's own stream, independent of how the batch is split; without it the draws come from
        torch's global generator. ``greedy`` takes the likeliest token instead (no draw).
        """
        seq, done = prompts, torch.zeros(len(prompts), dtype=torch.bool, device=prompts.device)
        tokens, logps = [], []
        for _ in range(max_new_tokens):
            logits = self(seq)[:, -1] / temperature
            dist = torch.distributions.Categorical(logits=logits)
            if greedy:
                token = logits.argmax(-1)
            else:
                token = streams.sample(dist) if streams is not None else dist.sample()
            logp = dist.log_prob(token)
            token, logp = token.masked_fill(done, PAD), logp.masked_fill(done, 0.0)
            done = done | (token == EOS)
            tokens.append(token)
            logps.append(logp)
            seq = torch.cat([seq, token[:, None]], 1)
        return torch.stack(tokens, 1), torch.stack(logps, 1)

    def logprobs(self, prompts: torch.Tensor, completions: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
        """Log-probability of each completion token given what precedes it, ``(n, L)``; 0 after the end token."""
        logits = self(torch.cat([prompts, completions], 1)[:, :-1])[:, prompts.shape[1] - 1 :] / temperature
        logp = torch.log_softmax(logits, -1).gather(-1, completions[..., None]).squeeze(-1)
        return logp * completion_mask(completions)


def completion_mask(completions: torch.Tensor) -> torch.Tensor:
    """1.0 on a completion's tokens up to and including its end token, 0.0 on the padding after it."""
    ended_before = torch.cumsum((completions == EOS).int(), 1) - (completions == EOS).int()
    return (ended_before == 0).float()


def warm_up(model: TinyLM, task: TextTask, steps: int = 300, batch: int = 128, lr: float = 3e-3, seed: int = 0):
    """Supervised teacher forcing on ``task``'s problems for ``steps`` Adam steps (the start every RL
    recipe for language models assumes); returns the last loss."""
    optimiser = torch.optim.Adam(model.parameters(), lr=lr)
    loss = torch.tensor(math.nan)
    for step in range(steps):
        prompts, answers = task.problems(batch, seed=seed * 1_000_003 + step)
        logp = model.logprobs(prompts, answers)
        loss = -(logp.sum(1) / completion_mask(answers).sum(1)).mean()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    return loss.item()


@torch.no_grad()
def accuracy(model: TinyLM, task: TextTask, n: int = 512, seed: int = 12345) -> float:
    """Exact-match share of greedy completions on ``n`` held-out problems of ``task``."""
    prompts, answers = task.problems(n, seed=seed)
    out, _ = model.generate(prompts, answers.shape[1], greedy=True)
    return float((out == answers).all(1).float().mean())


def group_advantages(rewards: torch.Tensor, group: int, eps: float = 1e-4) -> torch.Tensor:
    """GRPO's advantage: each reward less its group's mean, over the group's standard deviation."""
    r = rewards.view(-1, group)
    return ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + eps)).view(-1)


def grpo_loss(logp, old_logp, ref_logp, advantages, mask, clip: float = 0.2, kl_coef: float = 0.04):
    """GRPO's objective over tokens: the clipped ratio against the sampling policy, less a KL penalty
    to the reference model (the k3 estimator), averaged over each completion's tokens."""
    ratio = torch.exp(logp - old_logp)
    a = advantages[:, None]
    surrogate = torch.min(ratio * a, torch.clamp(ratio, 1 - clip, 1 + clip) * a)
    kl = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1
    per_token = -(surrogate - kl_coef * kl) * mask
    return (per_token.sum(1) / mask.sum(1).clamp(min=1)).mean()


class GRPOActor(Actor):
    """Samples ``max_new_tokens`` of each prompt with ``model``, from each environment's own stream."""

    def __init__(self, model: TinyLM, num_envs: int, max_new_tokens: int, seed: int = 0, temperature: float = 1.0):
        super().__init__(num_envs, seed)
        self.model, self.max_new_tokens, self.temperature = model, int(max_new_tokens), float(temperature)

    def act(self, prompts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Completions and the sampling policy's log-probability of each of their tokens."""
        return self.model.generate(prompts, self.max_new_tokens, streams=self.streams, temperature=self.temperature)


class GRPOLearner(Learner):
    """GRPO updates of ``model`` against a frozen copy of it as it is now (the reference).

    Parameters
    ----------
    model : TinyLM
        The policy; the actors sample with it, its weights broadcast after each update.
    group : int
        Completions per prompt (consecutive rows), over which advantages are normalised.
    lr, epochs, clip, kl_coef : float, int, float, float
        Adam's learning rate, passes over each batch, the ratio's clip and the KL penalty's weight.
    """

    def __init__(self, model: TinyLM, group: int, lr: float = 1e-3, epochs: int = 2, clip: float = 0.2, kl_coef=0.04):
        self.model, self.group, self.epochs, self.clip, self.kl_coef = model, int(group), int(epochs), clip, kl_coef
        self.reference = copy.deepcopy(model).requires_grad_(False)
        self.optimizer = torch.optim.Adam(model.parameters(), lr=lr)
        self.updates = 0

    def update(self, prompts, completions, old_logp, reward) -> dict[str, float]:
        """One GRPO step on a batch of whole groups; returns the loss and the mean reward."""
        advantages = group_advantages(reward, self.group)
        mask = completion_mask(completions)
        with torch.no_grad():
            ref_logp = self.reference.logprobs(prompts, completions)
        for _ in range(self.epochs):
            logp = self.model.logprobs(prompts, completions)
            loss = grpo_loss(logp, old_logp, ref_logp, advantages, mask, self.clip, self.kl_coef)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
        self.updates += 1
        return {"loss": loss.item(), "reward": reward.mean().item()}
