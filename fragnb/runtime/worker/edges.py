"""Edges: how the values of one variable held by several replicas become what a receiver gets.

``gather`` concatenates the senders' parts along the environment axis (or checks that replicated
values agree), ``scatter`` takes one receiving replica's slice, ``combine`` does both and turns a
mismatch into an error naming the variable. Pure: tensors and Python values in, out.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch

from ...errors import FragmentError
from ...plan.keys import RecordKey

__all__ = ["Mismatch", "gather", "vector_info", "env_axis", "scatter", "combine", "to_device", "refuse_autograd"]


class Mismatch(ValueError):
    """Replicas hold values of one variable that cannot be combined into the plain-Python value."""


def gather(parts: list, kind: str = "sharded", strict: bool = True, full: tuple | None = None, axis: int = 0) -> Any:
    """Many replicas' values of one variable as one.

    ``sharded`` values (computed from each replica's environments) are concatenated along the
    environment axis: tensors and lists end to end, dicts and tuples element-wise. A tensor's
    environment axis is the leading one, unless ``full`` (its shape in plain Python, which the safety
    net saw) or ``axis`` (what the dataflow says: ``obs[step] = next_obs``) says the parts make it up
    along another: storage preallocated as ``(num_steps, num_envs)`` joins along its second. Anything else, and every ``replicated`` value, must be equal
    on every replica; one is taken. With ``strict`` false (data-parallel policies, whose replicas each
    run the whole loop) replica 0's is taken.
    """
    first = parts[0]
    if len(parts) == 1:
        return first
    if kind == "sharded":
        if isinstance(first, torch.Tensor) and first.dim() > 0:
            return torch.cat(parts, env_axis([p.shape for p in parts], full, axis))
        if isinstance(first, np.ndarray) and first.ndim > 0:  # a Gymnasium-style loop's arrays
            return np.concatenate(parts, env_axis([p.shape for p in parts], full, axis))
        if (
            isinstance(first, list)
            and first
            and all(isinstance(x, torch.Tensor) and x.dim() > 0 for x in first)
            and all(isinstance(p, list) and len(p) == len(first) for p in parts)
        ):
            return [torch.cat(xs) for xs in zip(*parts)]  # e.g. per-step tensors: each step's environments joined
        if isinstance(first, list):
            return [x for p in parts for x in p]
        if isinstance(first, tuple) and all(isinstance(p, tuple) and len(p) == len(first) for p in parts):
            items = [gather(list(xs), kind, strict) for xs in zip(*parts)]
            return type(first)(*items) if hasattr(first, "_fields") else tuple(items)
        if isinstance(first, dict) and all(isinstance(p, dict) and p.keys() == first.keys() for p in parts):
            return {k: gather([p[k] for p in parts], kind, strict) for k in first}
        if all(vector_info(p) for p in parts):
            return _join_infos(parts)
    if strict and not all(_equal(first, p) for p in parts[1:]):
        raise Mismatch(
            f"replicas hold different values ({_short(first)} vs {_short(next(p for p in parts if not _equal(first, p)))})"
        )
    return first


def vector_info(value) -> bool:
    """Whether ``value`` looks like a Gymnasium vector env's ``infos``: a dict of per-environment
    arrays (and dicts of them), where a key appears only once some environment reported it."""
    return isinstance(value, dict) and all(
        isinstance(v, np.ndarray) and v.ndim == 1 or vector_info(v) for v in value.values()
    )


def _join_infos(parts: list[dict]) -> dict:
    """Shards' ``infos`` as the whole batch's: a key one shard lacks is blank there (zeros, a false
    ``_key`` mask), as Gymnasium fills it for environments that did not report it."""
    size = next((len(a) for p in parts for a in _arrays(p)), None)
    if size is None:
        return {}
    out = {}
    for key in dict.fromkeys(k for p in parts for k in p):
        present = next(p[key] for p in parts if key in p)
        if isinstance(present, dict):
            out[key] = _join_infos([p.get(key) or _blank_info(present, size) for p in parts])
        else:
            out[key] = np.concatenate([p[key] if key in p else _blank(present, size) for p in parts])
    return out


def _arrays(info: dict):
    for v in info.values():
        yield from _arrays(v) if isinstance(v, dict) else (v,)


def _blank(like: np.ndarray, size: int) -> np.ndarray:
    return np.full(size, None, dtype=object) if like.dtype == object else np.zeros(size, like.dtype)


def _blank_info(like: dict, size: int) -> dict:
    return {k: _blank_info(v, size) if isinstance(v, dict) else _blank(v, size) for k, v in like.items()}


def env_axis(shapes: list, full: tuple | None, axis: int = 0) -> int:
    """The axis along which parts of ``shapes`` make up (all or an even share of) a tensor of shape
    ``full``: the one axis where they add up to it, or a divisor of it, and agree with it elsewhere;
    else ``axis`` (where they have one)."""
    if full is not None:
        for d in range(len(full)):
            if all(len(s) == len(full) and all(s[k] == full[k] for k in range(len(full)) if k != d) for s in shapes):
                total = sum(s[d] for s in shapes)
                if total and full[d] % total == 0 and d > 0:
                    return d
    return axis if all(len(s) > axis for s in shapes) else 0


def _equal(a, b) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.shape == b.shape
            and bool(torch.equal(a, b))
        )
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.shape == b.shape
            and bool(np.array_equal(a, b))
        )
    try:
        return bool(a == b)
    except Exception:  # e.g. numpy arrays, objects without equality: same object only
        return a is b


def _short(value) -> str:
    text = repr(value)
    return text if len(text) < 60 else text[:57] + "..."


def scatter(value: Any, index: int, count: int, num_envs: int | None, axis: int = 0) -> Any:
    """Replica ``index``'s share of ``value``: tensors whose environment axis (``axis``, else the
    leading one) holds the environments are split evenly along it; dicts and tuples element-wise;
    anything else is whole."""
    if count == 1 or num_envs is None:
        return value
    if isinstance(value, (torch.Tensor, np.ndarray)) and value.ndim > 0:
        axis = axis if value.ndim > axis and value.shape[axis] == num_envs else 0
        if value.shape[axis] == num_envs:
            size = num_envs // count
            cut = (slice(None),) * axis + (slice(index * size, (index + 1) * size),)
            return value[cut]
    if isinstance(value, dict):
        return {k: scatter(v, index, count, num_envs) for k, v in value.items()}
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(scatter(v, index, count, num_envs) for v in value)
    return value


def combine(
    var: str,
    parts: list,
    *,
    index: int = 0,
    count: int = 1,
    num_envs: int | None = None,
    kind: str = "sharded",
    origin: str = "",
    strict: bool = True,
    full: tuple | None = None,
    axis: int = 0,
) -> Any:
    """What replica ``index`` of ``count`` (of ``num_envs`` environments) receives of ``var`` from the
    senders' ``parts``, combined as its ``kind`` says (``origin``: the line that assigns it, for errors;
    ``full``: its shape in plain Python, if known; ``axis``: its environment axis, as the dataflow says).
    The defaults give the whole value, as the notebook merges it."""
    try:
        value = gather(parts, kind, strict, full, axis)
    except Mismatch as e:
        raise FragmentError(
            f"`{var}` ({origin}) is computed on each of {len(parts)} replicas from their own environments and "
            f"{e}: it is a per-replica value (a mean or count over one replica's environments, say) that no "
            "operator turns into the plain-Python value. Compute it from values the single-replica side "
            "receives, e.g. after the rollout loop in a statement that uses no component"
        ) from None
    return scatter(value, index, count, num_envs, axis)


def to_device(value: Any, device: str) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):  # a state_dict is an OrderedDict: the copy keeps the type it had
        moved = copy.copy(value)
        for k, v in value.items():
            moved[k] = to_device(v, device)
        return moved
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(to_device(v, device) for v in value)
    return value


def refuse_autograd(out: dict, origin: dict[str, str], sender: str, receiver: str) -> None:
    """Refuse to send a tensor that carries an autograd graph to another worker group: the graph
    stays behind, so a ``backward()`` there would reach no network (the weights would never change)."""
    for key, value in out.items():
        # a split loop's records are per-step dicts of the variables a later group replays
        named = [(v, x) for step in value for v, x in step.items()] if isinstance(key, RecordKey) else [(key, value)]
        var, path = next(((v, p) for v, x in named if (p := _graph_in(x, v)) is not None), (None, None))
        if path is not None:
            raise FragmentError.at(
                f"`{path}` carries an autograd graph from group {sender!r} to {receiver!r}: gradients cannot follow it to another process, so the "
                f"learner's backward() would not reach the network and its weights would never change. Recompute it on "
                f"the learner's side from what the rollout stores (observations and actions: PPO recomputes its "
                f"log-probabilities), `.detach()` it where no gradient should flow, or run the loop under a policy "
                f"that keeps it in one process ('fine', or 'data_parallel': the whole loop in each replica)",
                origin.get(var, ""),
            )


def _graph_in(value: Any, path: str, depth: int = 0) -> str | None:
    if isinstance(value, torch.Tensor):
        return path if value.grad_fn is not None else None
    if depth > 3:
        return None
    if isinstance(value, (list, tuple)):
        return next((p for i, v in enumerate(value) if (p := _graph_in(v, f"{path}[{i}]", depth + 1))), None)
    if isinstance(value, dict):
        return next((p for k, v in value.items() if (p := _graph_in(v, f"{path}[{k!r}]", depth + 1))), None)
    return None
