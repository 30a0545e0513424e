"""Replica: what runs inside a Dask worker for one replica of one worker group.

A replica keeps its own namespace (its shard of the components and the loop's variables) in
this worker process between tasks, so heavy state stays put and only the values an edge carries
move, worker to worker. Values crossing an edge are combined here, on the receiving side:
``gather`` concatenates the senders' parts along the environment axis, ``scatter`` takes this
replica's slice of one sender's value, ``broadcast`` takes it whole.
"""

from __future__ import annotations

import linecache
import pickle
from dataclasses import dataclass, field
from typing import Any

import distributed
import torch

from .components import Component, Env
from .errors import FragmentError
from .program import DRIVER, Timer

__all__ = ["gather", "scatter", "combine", "Replica", "init_replica", "run_segment", "value", "report", "finish_replica", "drop_run"]

_REPLICAS: dict[tuple[str, str, int], Replica] = {}  # (run id, group, replica index) -> this worker's replicas


# -- edge operators (pure) --------------------------------------------------------------------
class Mismatch(ValueError):
    """Replicas hold values of one variable that cannot be combined into the plain-Python value."""


def gather(parts: list, kind: str = "sharded", strict: bool = True) -> Any:
    """Many replicas' values of one variable as one.

    ``sharded`` values (computed from each replica's environments) are concatenated along the
    environment axis: tensors and lists end to end, dicts and tuples element-wise. Anything else,
    and every ``replicated`` value, must be equal on every replica; one is taken. With ``strict``
    false (data-parallel policies, whose replicas each run the whole loop) replica 0's is taken.
    """
    first = parts[0]
    if len(parts) == 1:
        return first
    if kind == "sharded":
        if isinstance(first, torch.Tensor) and first.dim() > 0:
            return torch.cat(parts)
        if isinstance(first, list) and first and all(isinstance(x, torch.Tensor) and x.dim() > 0 for x in first) \
                and all(isinstance(p, list) and len(p) == len(first) for p in parts):
            return [torch.cat(xs) for xs in zip(*parts)]  # e.g. per-step tensors: each step's environments joined
        if isinstance(first, list):
            return [x for p in parts for x in p]
        if isinstance(first, tuple) and all(isinstance(p, tuple) and len(p) == len(first) for p in parts):
            items = [gather(list(xs), kind, strict) for xs in zip(*parts)]
            return type(first)(*items) if hasattr(first, "_fields") else tuple(items)
        if isinstance(first, dict) and all(isinstance(p, dict) and p.keys() == first.keys() for p in parts):
            return {k: gather([p[k] for p in parts], kind, strict) for k in first}
    if strict and not all(_equal(first, p) for p in parts[1:]):
        raise Mismatch(f"replicas hold different values ({_short(first)} vs {_short(next(p for p in parts if not _equal(first, p)))})")
    return first


def _equal(a, b) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape and bool(torch.equal(a, b))
    try:
        return bool(a == b)
    except Exception:  # e.g. numpy arrays, objects without equality: same object only
        return a is b


def _short(value) -> str:
    text = repr(value)
    return text if len(text) < 60 else text[:57] + "..."


def scatter(value: Any, index: int, count: int, num_envs: int | None) -> Any:
    """Replica ``index``'s share of ``value``: tensors whose leading axis is the environments are
    split evenly; dicts and tuples element-wise; anything else is whole."""
    if count == 1 or num_envs is None:
        return value
    if isinstance(value, torch.Tensor) and value.dim() > 0 and len(value) == num_envs:
        size = num_envs // count
        return value[index * size : (index + 1) * size]
    if isinstance(value, dict):
        return {k: scatter(v, index, count, num_envs) for k, v in value.items()}
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(scatter(v, index, count, num_envs) for v in value)
    return value


def combine(var: str, parts: list, index: int, count: int, num_envs: int | None, kind: str = "sharded",
            origin: str = "", strict: bool = True) -> Any:
    """What replica ``index`` of ``count`` receives of ``var`` from the senders' ``parts``."""
    try:
        value = gather(parts, kind, strict)
    except Mismatch as e:
        raise FragmentError(
            f"`{var}` ({origin}) is computed on each of {len(parts)} replicas from their own environments and "
            f"{e}: it is a per-replica value (a mean or count over one replica's environments, say) that no "
            "operator turns into the plain-Python value. Compute it from values the single-replica side "
            "receives, e.g. after the rollout loop in a statement that uses no component") from None
    return scatter(value, index, count, num_envs)


def to_device(value: Any, device: str) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {k: to_device(v, device) for k, v in value.items()}
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(to_device(v, device) for v in value)
    return value


# -- the replica --------------------------------------------------------------------------------
@dataclass
class Replica:
    """One replica's namespace, code and bookkeeping, living in a worker process."""

    group: str
    index: int
    count: int
    device: str
    ns: dict[str, Any]
    codes: dict[int, Any]
    seconds: dict[str, float] = field(default_factory=dict)
    seen: dict[str, int] = field(default_factory=dict)  # episodes already reported, per env component
    steps0: dict[str, int] = field(default_factory=dict)  # env steps of each env component at start
    timers: dict[str, Timer] = field(default_factory=dict)
    strict: bool = True  # values that cannot be combined are an error (else replica 0's is taken)
    records: dict[str, list] = field(default_factory=dict)  # key -> values recorded for another group, step by step
    replays: dict[str, list] = field(default_factory=dict)  # key -> another group's recorded values, to replay

    def record(self, key: str, names: tuple[str, ...]) -> None:
        """Keep the values another group's statement reads here, as they are at its place in the loop."""
        self.records.setdefault(key, []).append({n: _snapshot(self.ns[n]) for n in names if n in self.ns})

    def replay(self, key: str) -> None:
        """Bind the next recorded values before this group's statement that reads them."""
        self.ns.update(self.replays[key].pop())

    def timer(self, name: str) -> Timer:
        # Called on every timed block of the rollout: reuse one Timer per fragment.
        if name not in self.timers:
            self.timers[name] = Timer(self.seconds, name)
        return self.timers[name]

    def envs(self) -> dict[str, Env]:
        return {k: v for k, v in self.ns.items() if isinstance(v, Env)}

    def report(self) -> tuple[list, int]:
        """Episodes finished since the last report, as (episode, environments of the whole batch),
        and env steps taken by this replica since the run began."""
        episodes = []
        for name, env in self.envs().items():
            episodes += [(ep, env.num_envs * self.count) for ep in env.episodes[self.seen[name] :]]
            self.seen[name] = len(env.episodes)
        return episodes, sum(env.env_steps - self.steps0[name] for name, env in self.envs().items())


def _snapshot(value):
    # Containers the recording group may still append to are copied; tensors crossing an edge are immutable.
    return type(value)(value) if type(value) in (list, dict, set) else value


def init_replica(run_id: str, group: str, index: int, count: int, device: str, payload: bytes, codes: bytes,
                 sharded: list[str], source: tuple[str, str], strict: bool = True) -> str:
    """Unpickle the notebook's objects, shard the components in ``sharded``, and keep them here."""
    filename, text = source
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    ns = pickle.loads(payload)
    ns["print"] = distributed.print  # the cell's prints reach the notebook, not only this worker's log
    for name in sharded:
        ns[name] = ns[name].shard(index, count)
    if device != "cpu":
        for comp in (v for v in ns.values() if isinstance(v, Component)):
            for value in vars(comp).values():
                if isinstance(value, torch.nn.Module):
                    value.to(device)
    compiled = {i: compile(module, filename, "exec") for i, module in pickle.loads(codes).items()}
    rep = Replica(group, index, count, device, ns, compiled, strict=strict)
    rep.seen = {name: len(env.episodes) for name, env in rep.envs().items()}
    rep.steps0 = {name: env.env_steps for name, env in rep.envs().items()}
    _REPLICAS[(run_id, group, index)] = rep
    return group


def run_segment(run_id: str, group: str, index: int, segment: int, scalars: dict, inputs: dict, num_envs: int | None,
                exports: list[str], after=None, replays: dict | None = None) -> dict:
    """Execute one segment of the cell in this replica; return what other groups need.

    ``inputs`` maps a variable to ``(key, outputs, kind, origin)``: the sending replicas' segment
    results, combined here. ``replays`` maps a record key to ``(outputs, kinds)``: another group's
    step-by-step records, combined step by step. ``after`` is this replica's previous task:
    depending on it keeps the replica's segments in program order.
    """
    rep = _REPLICAS[(run_id, group, index)]
    ns = rep.ns
    ns.update(scalars)
    for var, (key, outputs, kind, origin) in inputs.items():
        value = to_device(combine(var, [o[key] for o in outputs], index, rep.count, num_envs, kind, origin, rep.strict), rep.device)
        if var.startswith("weights:"):
            _, comp, attr = var.split(":")
            getattr(ns[comp], attr).load_state_dict(value)
        else:
            ns[var] = value
    for key, (outputs, kinds) in (replays or {}).items():
        steps = zip(*(o[key] for o in outputs))  # each sender recorded the same steps
        rep.replays[key] = [
            {v: to_device(combine(v, [p[v] for p in parts], index, rep.count, num_envs, *kinds[v], rep.strict), rep.device)
             for v in parts[0]}
            for parts in steps
        ][::-1]  # popped from the end
    ns[DRIVER] = rep
    try:
        exec(rep.codes[segment], ns)
    except Exception as e:
        e.add_note(_where(e, f"replica {index} of {group!r}"))
        raise
    finally:
        ns.pop(DRIVER, None)
    out = {v: ns[v] for v in exports if ":" not in v and v in ns}
    for key in (e for e in exports if e.startswith("weights:")):
        _, comp, attr = key.split(":")
        out[key] = getattr(ns[comp], attr).state_dict()
    for key in (e for e in exports if e.startswith("record:")):
        out[key] = rep.records.pop(key, [])
    return to_device(out, "cpu")


def _where(error: BaseException, replica: str) -> str:
    """The user's cell line the error came from, for a message that survives the trip to the notebook."""
    tb, last = error.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.startswith("<fragment "):
            last = tb
        tb = tb.tb_next
    if last is None:
        return f"(raised in {replica})"
    filename, lineno = last.tb_frame.f_code.co_filename, last.tb_lineno
    text = linecache.getline(filename, lineno).strip()
    return f'  File "{filename}", line {lineno}, in {replica}' + (f"\n    {text}" if text else "")


def value(run_id: str, group: str, index: int, name: str, after=None):
    """A variable of this replica (a stop flag: a bool), ``False`` if it is not assigned yet."""
    return bool(_REPLICAS[(run_id, group, index)].ns.get(name, False))


def report(run_id: str, group: str, index: int, after=None) -> tuple[list, int]:
    """This replica's progress since its last report (``after``: the task to wait for)."""
    return _REPLICAS[(run_id, group, index)].report()


def finish_replica(run_id: str, group: str, index: int, variables: list[str], components: list[str], after=None) -> dict:
    """This replica's final variables, components and timings, to merge back into the notebook."""
    rep = _REPLICAS[(run_id, group, index)]
    return {
        "variables": to_device({v: rep.ns[v] for v in variables if v in rep.ns}, "cpu"),
        "components": {c: rep.ns[c] for c in components if c in rep.ns},
        "seconds": dict(rep.seconds),
    }


def drop_run(run_id: str) -> int:
    """Forget every replica of ``run_id`` in this worker (and leave its process group)."""
    keys = [k for k in _REPLICAS if k[0] == run_id]
    for key in keys:
        del _REPLICAS[key]
    from . import collectives

    collectives.leave(run_id)
    return len(keys)

