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
fragnb components, for a loop written against them (as :mod:`fragnb.algos.ppo` has both ways)::

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
    """A tiny decoder: ``layers`` pre-norm blocks of ``heads``-head causal attention and a 4x MLP.

    Parameters
    ----------
    vocab : int
        Tokens (the text tasks' vocabulary, :data:`fragnb.envs.text.VOCAB`).
    context : int
        Longest sequence, prompt and completion together.
    width : int
        Embedding width; ``heads`` must divide it.
    heads : int
        Attention heads.
    layers : int
        Transformer blocks.

    Examples
    --------
    >>> from fragnb.algos.grpo import LMConfig, TinyLM
    >>> LMConfig()
    LMConfig(vocab=41, context=16, width=64, heads=4, layers=2)
    >>> small = TinyLM(LMConfig(width=16, heads=2, layers=1), seed=0)  # for quick experiments
    >>> sum(p.numel() for p in small.parameters())
    4921
    """

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

    Parameters
    ----------
    config : LMConfig, optional
        Its size (``LMConfig()`` by default).
    seed : int, optional
        Seeds torch's global generator before the weights are drawn (``None``: as it is).

    Examples
    --------
    >>> import torch
    >>> from fragnb.algos.grpo import LMConfig, TinyLM
    >>> lm = TinyLM(LMConfig(), seed=0)
    >>> sum(p.numel() for p in lm.parameters()) > 90_000
    True

    Completing prompts of the addition task, and scoring given completions:

    >>> from fragnb.envs import Addition
    >>> prompts = Addition(num_envs=4, seed=0).reset()
    >>> lm(prompts).shape  # next-token logits at every position
    torch.Size([4, 6, 41])
    >>> tokens, logp = lm.generate(prompts, max_new_tokens=4, greedy=True)
    >>> tokens.shape, logp.shape
    (torch.Size([4, 4]), torch.Size([4, 4]))
    >>> bool(torch.allclose(lm.logprobs(prompts, tokens), logp, atol=1e-4))  # the same, with gradients
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
    """1.0 on a completion's tokens up to and including its end token, 0.0 on the padding after it.

    Parameters
    ----------
    completions : torch.Tensor
        Tokens, ``(n, L)``.

    Returns
    -------
    torch.Tensor
        float32, ``(n, L)``.

    Examples
    --------
    >>> import torch
    >>> from fragnb.algos.grpo import completion_mask
    >>> from fragnb.envs.text import EOS, PAD, encode
    >>> completions = torch.tensor([encode("86") + [EOS, PAD], encode("135") + [EOS]])
    >>> completion_mask(completions).tolist()
    [[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]]
    """
    ended_before = torch.cumsum((completions == EOS).int(), 1) - (completions == EOS).int()
    return (ended_before == 0).float()


def warm_up(model: TinyLM, task: TextTask, steps: int = 300, batch: int = 128, lr: float = 3e-3, seed: int = 0):
    """Supervised teacher forcing on ``task``'s problems for ``steps`` Adam steps (the start every RL
    recipe for language models assumes); returns the last loss.

    Parameters
    ----------
    model : TinyLM
        Trained in place.
    task : fragnb.envs.text.TextTask
        Where the problems come from (:meth:`~fragnb.envs.text.TextTask.problems`, fresh ones each step).
    steps : int
        Adam steps.
    batch : int
        Problems per step.
    lr : float
        Adam's learning rate.
    seed : int
        Seed of the problems drawn.

    Returns
    -------
    float
        The last step's loss: the mean over problems of the negative log-likelihood per answer token.

    Examples
    --------
    A few steps on a small model (a real warm-up takes hundreds):

    >>> from fragnb.algos.grpo import LMConfig, TinyLM, warm_up
    >>> from fragnb.envs import Addition
    >>> model = TinyLM(LMConfig(width=16, heads=2, layers=1), seed=0)
    >>> loss = warm_up(model, Addition(num_envs=1), steps=2, batch=8)
    >>> type(loss), loss > 0
    (<class 'float'>, True)
    """
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
    """Exact-match share of greedy completions on ``n`` held-out problems of ``task``.

    Parameters
    ----------
    model : TinyLM
        Completes greedily (its likeliest token each time).
    task : fragnb.envs.text.TextTask
        Where the problems come from (:meth:`~fragnb.envs.text.TextTask.problems`).
    n : int
        Problems.
    seed : int
        Seed of the held-out problems: the same ``seed`` gives the same test set.

    Returns
    -------
    float
        In [0, 1].

    Examples
    --------
    >>> from fragnb.algos.grpo import LMConfig, TinyLM, accuracy
    >>> from fragnb.envs import Addition
    >>> model = TinyLM(LMConfig(width=16, heads=2, layers=1), seed=0)
    >>> score = accuracy(model, Addition(num_envs=1), n=32)
    >>> type(score), 0.0 <= score <= 1.0
    (<class 'float'>, True)
    """
    prompts, answers = task.problems(n, seed=seed)
    out, _ = model.generate(prompts, answers.shape[1], greedy=True)
    return float((out == answers).all(1).float().mean())


def group_advantages(rewards: torch.Tensor, group: int, eps: float = 1e-4) -> torch.Tensor:
    """GRPO's advantage: each reward less its group's mean, over the group's standard deviation.

    Parameters
    ----------
    rewards : torch.Tensor
        ``(n,)``, ``group`` consecutive rewards per prompt.
    group : int
        Completions per prompt.
    eps : float
        Added to the standard deviation, so that a group of equal rewards gets advantages 0.

    Returns
    -------
    torch.Tensor
        ``(n,)``.

    Examples
    --------
    >>> import torch
    >>> from fragnb.algos.grpo import group_advantages
    >>> advantages = group_advantages(torch.tensor([1.0, 0.0, 0.5, 0.5]), group=2)
    >>> [round(a, 3) for a in advantages.tolist()]  # the second group's completions did equally well
    [0.707, -0.707, 0.0, 0.0]
    """
    r = rewards.view(-1, group)
    return ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + eps)).view(-1)


def grpo_loss(logp, old_logp, ref_logp, advantages, mask, clip: float = 0.2, kl_coef: float = 0.04):
    """GRPO's objective over tokens: the clipped ratio against the sampling policy, less a KL penalty
    to the reference model (the k3 estimator), averaged over each completion's tokens.

    Parameters
    ----------
    logp, old_logp, ref_logp : torch.Tensor
        ``(n, L)`` log-probabilities of the completions' tokens under the policy being trained, the
        policy that sampled them and the reference model.
    advantages : torch.Tensor
        ``(n,)``, one per completion (:func:`group_advantages`).
    mask : torch.Tensor
        ``(n, L)``, 1 on the tokens that count (:func:`completion_mask`).
    clip : float
        The ratio is clipped to ``[1 - clip, 1 + clip]``.
    kl_coef : float
        Weight of the KL penalty.

    Returns
    -------
    torch.Tensor
        The loss to minimise, a scalar (the mean over completions).

    Examples
    --------
    Where the three policies agree, the loss is minus the mean advantage:

    >>> import torch
    >>> from fragnb.algos.grpo import grpo_loss
    >>> logp = torch.zeros(2, 3, requires_grad=True)
    >>> loss = grpo_loss(logp, torch.zeros(2, 3), torch.zeros(2, 3), torch.tensor([1.0, 0.0]), torch.ones(2, 3))
    >>> loss.item()
    -0.5
    >>> loss.backward()
    >>> logp.grad.shape
    torch.Size([2, 3])
    """
    ratio = torch.exp(logp - old_logp)
    a = advantages[:, None]
    surrogate = torch.min(ratio * a, torch.clamp(ratio, 1 - clip, 1 + clip) * a)
    kl = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1
    per_token = -(surrogate - kl_coef * kl) * mask
    return (per_token.sum(1) / mask.sum(1).clamp(min=1)).mean()


class GRPOActor(Actor):
    """Samples ``max_new_tokens`` of each prompt with ``model``, from each environment's own stream.

    Parameters
    ----------
    model : TinyLM
        The policy; share it with the learner so that updates reach the actor.
    num_envs : int
        Prompts :meth:`act` receives.
    max_new_tokens : int
        Tokens per completion (the task's ``answer_len``).
    seed : int
        Seed of the per-environment sampling streams.
    temperature : float
        Divides the logits before sampling.

    Examples
    --------
    >>> from fragnb.algos.grpo import GRPOActor, LMConfig, TinyLM
    >>> from fragnb.envs import Addition
    >>> env = Addition(num_envs=4, seed=0, group=2)
    >>> model = TinyLM(LMConfig(width=16, heads=2, layers=1), seed=0)
    >>> actor = GRPOActor(model, num_envs=4, max_new_tokens=env.answer_len, seed=0)
    >>> completions, old_logp = actor.act(env.reset())
    >>> completions.shape, old_logp.shape
    (torch.Size([4, 4]), torch.Size([4, 4]))
    >>> obs, reward, terminated, truncated, info = env.step(completions)
    >>> reward.shape
    torch.Size([4])
    """

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

    Examples
    --------
    The loop in :mod:`fragnb.algos.grpo`'s description, once: 2 prompts of the addition task, 2
    completions each.

    >>> from fragnb.algos.grpo import GRPOActor, GRPOLearner, LMConfig, TinyLM
    >>> from fragnb.envs import Addition
    >>> env = Addition(num_envs=4, seed=0, group=2)
    >>> model = TinyLM(LMConfig(width=16, heads=2, layers=1), seed=0)
    >>> actor = GRPOActor(model, num_envs=4, max_new_tokens=env.answer_len, seed=0)
    >>> learner = GRPOLearner(model, group=2)
    >>> prompts = env.reset()
    >>> completions, old_logp = actor.act(prompts)
    >>> prompts_next, reward, terminated, truncated, info = env.step(completions)
    >>> stats = learner.update(prompts, completions, old_logp, reward)
    >>> sorted(stats), learner.updates
    (['loss', 'reward'], 1)
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
