"""Text tasks as batched environments: a prompt is the observation, a completion the action.

A language-model RL loop (GRPO, as verl, AReaL, OpenRLHF and TRL train with it) looks like any other
vector-env loop here: ``reset`` answers prompts, ``step(completions)`` answers rewards, and every
episode is one step long, so the next prompts come back as the next observations. That is what lets
fragnb capture, place and check such a loop with the machinery every other loop uses.

Prompts and answers are characters of a small fixed vocabulary (:data:`VOCAB`); nothing is downloaded.
``group`` consecutive environments share a prompt, so a loop samples ``group`` completions of each
prompt (GRPO's group). A group's prompt comes from a stream keyed by the group, so a shard of the
environments draws exactly the prompts its environments draw in the whole batch.
"""

from __future__ import annotations

import torch

from ..components import Env
from ..streams import EnvStreams

__all__ = ["VOCAB", "PAD", "EOS", "encode", "decode", "TextTask", "Addition", "Reverse"]

#: Token 0 pads, token 1 ends a completion; the rest are characters.
PAD, EOS = 0, 1
_CHARS = "0123456789+=>abcdefghijklmnopqrstuvwxyz"
VOCAB = ["<pad>", "<eos>", *_CHARS]
_INDEX = {c: i + 2 for i, c in enumerate(_CHARS)}


def encode(text: str) -> list[int]:
    """The tokens of ``text`` (one per character of :data:`VOCAB`)."""
    try:
        return [_INDEX[c] for c in text]
    except KeyError as e:
        raise ValueError(f"{e.args[0]!r} is not in the vocabulary {_CHARS!r}") from None


def decode(tokens) -> str:
    """The text of a completion: its characters up to the first end token (padding dropped)."""
    out = []
    for t in torch.as_tensor(tokens).tolist():
        if t == EOS:
            break
        if t != PAD:
            out.append(VOCAB[t] if 0 <= t < len(VOCAB) else "?")
    return "".join(out)


class TextTask(Env):
    """A batch of one-step text problems, ``group`` environments per prompt.

    Subclasses give ``prompt_len``, ``answer_len`` (the longest answer, end token included) and
    :meth:`_problems`. Rewards are ``"exact"`` (1 for the right answer followed by the end token, else 0:
    sparse) or ``"partial"`` (the share of answer positions right, over the longer of the answer and the
    completion: a dense signal that reaches 1 exactly when ``"exact"`` does). A completion of any tokens
    gets a reward in [0, 1], never an exception.

    Parameters
    ----------
    num_envs : int
        Completions per step (prompts x ``group``).
    seed : int
        Seed of the prompt streams.
    group : int
        Consecutive environments that share each prompt; must divide ``num_envs``.
    reward : {"partial", "exact"}
        How a completion is scored.
    """

    per_env = Env.per_env + ("prompt_streams", "prompts", "answers")
    prompt_len: int = 0
    answer_len: int = 0

    def __init__(self, num_envs: int, seed: int = 0, group: int = 1, reward: str = "partial"):
        super().__init__(num_envs, seed)
        if group < 1 or num_envs % group:
            raise ValueError(f"group={group} must be at least 1 and divide num_envs={num_envs}")
        if reward not in ("partial", "exact"):
            raise ValueError(f"reward must be 'partial' or 'exact', got {reward!r}")
        self.group, self.reward = int(group), reward
        self.obs_shape, self.action_shape = (self.prompt_len,), (self.answer_len,)
        self.num_actions = len(VOCAB)
        self._reseeded()
        self.prompts = torch.zeros(num_envs, self.prompt_len, dtype=torch.int64)
        self.answers = torch.zeros(num_envs, self.answer_len, dtype=torch.int64)

    def _reseeded(self) -> None:
        self.prompt_streams = EnvStreams(self.seed, self.env_ids // self.group, "prompt")

    # -- to implement ----------------------------------------------------------------------------------
    def _problems(self, u: torch.Tensor) -> tuple[list[str], list[str]]:
        """Prompts and answers (as text) from uniform numbers ``u`` of shape ``(n, k)``, one row each."""
        raise NotImplementedError

    draws: int = 4  #: uniform numbers one problem uses

    # -- the environment ---------------------------------------------------------------------------
    def _reset(self, mask: torch.Tensor) -> torch.Tensor:
        self.prompts[mask], self.answers[mask] = self._tokens(self.prompt_streams.uniform(self.draws, mask))
        return self.prompts[mask].clone()

    def _tokens(self, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The problems of uniform numbers ``u`` as tokens: prompts, and answers ended and padded."""
        prompts, answers = self._problems(u)
        tokens = torch.full((len(answers), self.answer_len), PAD, dtype=torch.int64)
        for row, answer in enumerate(answers):
            ids = encode(answer) + [EOS]
            tokens[row, : len(ids)] = torch.tensor(ids)
        return torch.tensor([encode(p) for p in prompts], dtype=torch.int64), tokens

    def score(self, completions: torch.Tensor) -> torch.Tensor:
        """The reward of each completion against the current answers, float32 in [0, 1]."""
        out = torch.as_tensor(completions, dtype=torch.int64).reshape(self.num_envs, -1)
        width = max(out.shape[1], self.answer_len)
        out = torch.nn.functional.pad(out, (0, width - out.shape[1]), value=PAD)
        answers = torch.nn.functional.pad(self.answers, (0, width - self.answer_len), value=PAD)
        # Lengths up to and including the end token; a completion without one runs to its width.
        ends = out == EOS
        out_len = torch.where(
            ends.any(1), ends.int().argmax(1) + 1, torch.full_like(ends[:, 0], width, dtype=torch.int64)
        )
        answer_len = (answers == EOS).int().argmax(1) + 1
        position = torch.arange(width)
        right = ((out == answers) & (position < out_len[:, None]) & (position < answer_len[:, None])).sum(1)
        exact = (right == answer_len) & (out_len == answer_len)
        if self.reward == "exact":
            return exact.float()
        return (right / torch.maximum(out_len, answer_len)).float()

    def _step(self, actions: torch.Tensor):
        reward = self.score(actions)
        done = torch.ones(self.num_envs, dtype=torch.bool)
        return self.prompts.clone(), reward, done, torch.zeros_like(done)

    def problems(self, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` fresh prompts and answer tokens from streams of their own (``seed``): a held-out test set."""
        return self._tokens(EnvStreams(seed, torch.arange(n), "test").uniform(self.draws))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_envs={self.num_envs}, group={self.group}, reward={self.reward!r})"


class Addition(TextTask):
    """Two-digit addition: ``"07+45="`` answered ``"52"`` (numbers written with two digits, the sum without
    leading zeros).

    Parameters
    ----------
    num_envs, seed, group, reward
        See :class:`fragnb.envs.text.TextTask`.

    Examples
    --------
    >>> import torch
    >>> from fragnb.envs import Addition
    >>> env = Addition(num_envs=4, seed=0, group=2)
    >>> prompts = env.reset()
    >>> prompts.shape, bool((prompts[0] == prompts[1]).all())
    (torch.Size([4, 6]), True)

    Prompts and completions are tokens (:func:`fragnb.envs.text.encode` and :func:`~fragnb.envs.text.decode`
    translate); a completion is scored against the answer, end token included:

    >>> from fragnb.envs.text import EOS, PAD, decode, encode
    >>> [decode(p) for p in prompts]
    ['78+08=', '78+08=', '51+84=', '51+84=']
    >>> texts = ["86", "85", "135", "13"]
    >>> completions = torch.tensor([encode(t) + [EOS] + [PAD] * (3 - len(t)) for t in texts])
    >>> obs, reward, terminated, truncated, info = env.step(completions)
    >>> [round(r, 2) for r in reward.tolist()]  # "partial": the share of answer positions right
    [1.0, 0.67, 1.0, 0.5]
    """

    prompt_len, answer_len, draws = 6, 4, 2

    def _problems(self, u):
        a, b = (u * 100).floor().long().clamp_(max=99).T.tolist()
        return [f"{x:02d}+{y:02d}=" for x, y in zip(a, b)], [str(x + y) for x, y in zip(a, b)]


class Reverse(TextTask):
    """Reverse six letters of ``a``-``h``: ``"cabdhe>"`` answered ``"ehdbac"``.

    Parameters
    ----------
    num_envs, seed, group, reward
        See :class:`fragnb.envs.text.TextTask`.

    Examples
    --------
    >>> import torch
    >>> from fragnb.envs import Reverse
    >>> from fragnb.envs.text import decode
    >>> env = Reverse(num_envs=2, seed=0, reward="exact")
    >>> prompts = env.reset()
    >>> prompts.shape
    torch.Size([2, 7])
    >>> [decode(p) for p in prompts]
    ['gagcdc>', 'eghebb>']
    >>> completions = env.answers.clone()  # the right answers (tokens, end token included)
    >>> completions[1, :6] = completions[1, :6].flip(0)  # environment 1 answers its word unreversed
    >>> obs, reward, terminated, truncated, info = env.step(completions)
    >>> reward.tolist(), terminated.tolist()  # every episode is one step
    ([1.0, 0.0], [True, True])
    """

    prompt_len, answer_len, draws = 7, 7, 6

    def _problems(self, u):
        letters = (u * 8).floor().long().clamp_(max=7).tolist()
        words = ["".join("abcdefgh"[i] for i in row) for row in letters]
        return [w + ">" for w in words], [w[::-1] for w in words]
