"""The safety net: before a distributed run, compare its first iterations with plain Python.

Two copies of the objects the cell uses run the cell's first iteration(s): one as plain Python,
one through the very driver and replica code a distributed run uses, with every replica in this
process. Every variable the cell assigns and every component it uses must come out the same; the
first that differs stops the run before any worker starts, naming the variable and its line.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
import types
from typing import TYPE_CHECKING

import numpy as np
import torch

from ..components import Component, Episode
from ..errors import FragmentError
from ..plan.script import Script
from ..plan.values import graph_writes
from ..streams import EnvStreams, reached
from .draws import Draws, Watching, clock_reads, reached_from, refuse_inexact
from .job import Job
from .local import aside, copies, exec_cell
from .threads import InThreads
from .worker.edges import vector_info
from .worker.generators import restore, states
from .worker.travel import classes_kept

if TYPE_CHECKING:
    from ..policies import Placement

__all__ = ["check", "smaller", "difference", "structure", "CHECKED_REPLICAS"]


def check(placement, exact: bool = False) -> tuple[float, Draws, dict[str, tuple], str]:
    """Run the first iterations both ways on copies and raise FragmentError on the first difference.
    The net plans a short Script of its own (the run's is planned from what it finds). The most of the
    mode's iterations (:meth:`~fragnb.policies.modes.Mode.net_iterations`) runs first (the second iteration
    catches weights that did not travel); only when it differs do the fewer run, each in turn, so
    that the error names where the difference starts (after the first iteration alone, say). A
    loop that passes pays for the longest check alone: 2 iterations each way, not 1 + 2.

    The first plain run also finds the statements that draw from a global generator
    (:mod:`fragnb.runtime.draws`). Where the run is statistical, values that depend on those draws
    are compared by their structure only (type, shape, dtype); ``exact`` refuses such a run instead.
    Values that agree within 1e-5 are then compared bit for bit: replicas compute their rows on the whole
    batch's shape (:mod:`fragnb.rows`), so an exact run leaves plain Python's very bits; where some
    statement still rounds otherwise (an op fragnb does not widen), the last value returned says which,
    and the run is labelled as reproducing plain Python within rounding (``exact`` refuses it).
    Returns the seconds it took, the draws, the shapes of the cell's tensor variables in plain Python
    after the last count's iterations (the run joins replicas' tensors as they say), and that rounding
    ("" where every compared value is plain Python's to the bit)."""
    start = time.perf_counter()
    iterations = placement.policy.mode.net_iterations()
    small, fewer = smaller(placement)
    if fewer:
        print(
            f"fragnb: the safety net checks {fewer} (the same statements and edges, on larger shares): "
            "its cost does not grow with the replicas",
            file=sys.stderr,
        )
    checked = Script.of(small)

    def compared(count: int):
        return _compare(
            small, dataclasses.replace(checked, limit=count, until=None, checkpoint_every=0), placement, exact
        )

    counts = sorted(set(iterations))
    try:
        failure = None
        try:
            draws, shapes, rounded = compared(counts[-1])
        except FragmentError as e:
            failure = e
        if failure is not None:
            for count in counts[:-1]:
                compared(count)  # raises if the difference is there already after ``count`` iterations
            raise failure
    except FragmentError as e:
        if fewer:
            e.add_note(f"The safety net checked {fewer}.")
        raise
    return time.perf_counter() - start, draws, shapes, rounding(placement, rounded)


#: The safety net checks a group of more replicas with this many at most (every replica is a thread of
#: the notebook's process there: 32 took 16 s).
CHECKED_REPLICAS = 4


def smaller(placement: Placement) -> tuple[Placement, str]:
    """``placement`` with each replica count above :data:`CHECKED_REPLICAS` cut to its largest
    divisor up to it (the environments still split evenly), and what was cut, in words ("" if nothing).
    A replica holds its share of the batch whatever the count, so what one computes differently from
    plain Python shows with 4 replicas as with 64."""
    policy, params = placement.policy, dict(placement.params)
    cut = []
    for group, n in policy.replicas.items():
        name = n if isinstance(n, str) else n[0] if isinstance(n, tuple) else None
        if name is None or params[name] <= CHECKED_REPLICAS:
            continue
        fewer = next((d for d in range(CHECKED_REPLICAS, 1, -1) if params[name] % d == 0), params[name])
        if fewer != params[name]:
            total = placement.groups[group][0]
            cut.append(f"{group!r} with {total * fewer // params[name]} replicas in place of {total}")
            params[name] = fewer
    if not cut:
        return placement, ""
    return placement.graph.place(policy, **params), ", ".join(cut)


def _compare(placement, script, asked, exact: bool) -> tuple[Draws, dict[str, tuple], dict[str, str]]:
    """Run ``script`` plain and placed (``placement``: ``asked``, the run's own, or fewer replicas of it) and
    compare; a refusal of an inexact run names ``asked``'s replica counts, those the user chose."""
    graph, iterations = placement.graph, script.limit
    plain, simulated = copies(graph), copies(graph)
    job = Job(placement, script, simulated, live=None)
    # Packed before the plain side runs: classes and functions are shared, not copied, and what their
    # globals hold (an EnvStreams a network's method samples from) moves on as the plain side draws.
    job.payloads  # noqa: B018 (a cached property: packing is the point)
    shared = reached([graph.namespace[n] for n in graph.inputs if n in graph.namespace], graph.namespace)
    kept = {name: s.counters.clone() for name, s in shared.items()}
    with aside():  # the notebook's generators are untouched, the cell silent
        saved = states()  # both copies start from what the run starts from
        watcher = Watching(graph, plain, iterations)
        exec_cell(graph, plain, watcher, trace=True)
        draws = watcher.draws()
        refuse_inexact(asked, draws, exact)
        restore(saved)
        for name, counters in kept.items():  # and so are the streams the plain side drew from through them
            shared[name].counters = counters.clone()
        shapes = {
            v: tuple(plain[v].shape)
            for v in script.variables
            if isinstance(plain.get(v), (torch.Tensor, np.ndarray)) and plain[v].ndim > 1
        }
        # the replicas join their tensors as plain Python's shapes say
        try:
            with classes_kept(graph.namespace):
                InThreads().execute(job.walking(dataclasses.replace(script, shapes=shapes)))
        except FragmentError:
            raise
        except Exception as e:  # plain Python ran these iterations: the placement is the cause
            raise _raises(placement, iterations, e) from e
        finally:
            # replicas that are threads here run the notebook's own classes (cloudpickle hands back the class
            # it pickled), whose methods draw from the notebook's streams: the run packs those after the net
            for name, counters in kept.items():
                shared[name].counters = counters.clone()
    # what depends on the draws of a statistical run, or on a clock, is compared by its structure only
    loose = reached_from(graph, clock_reads(graph) | (set() if draws.exact(placement) else set(draws.statements)))
    compared = sorted(graph_writes(graph)) + sorted(graph.components)
    # and what the cell only reads, which its calls may change in place (optimisers in a dict, stepped
    # through a loop variable): the notebook must hold what plain Python's holds after the run
    compared += sorted(n for n in graph.inputs - set(compared) if n in plain and not isinstance(plain[n], _CODE))
    for name in compared:
        if (name in plain) != (
            name in simulated
        ) and name not in loose:  # a sampled episode may not end: `for i in ended` ran no time
            raise _differs(placement, iterations, name, "exists only in one of them")
        if (
            name in plain
            and name in simulated
            and (diff := (structure if name in loose else difference)(plain[name], simulated[name], name))
        ):
            raise _differs(placement, iterations, name, diff)
    rounded = {  # within 1e-5, yet not the same bits
        name: diff
        for name in compared
        if name not in loose
        and name in plain
        and name in simulated
        and (diff := difference(plain[name], simulated[name], name, bits=True))
    }
    return draws, shapes, rounded


def rounding(placement, rounded: dict[str, str]) -> str:
    """What a run whose values agree with plain Python's only within rounding says before it starts
    ("" where they are the same bits): the first replicated statement that assigns or uses one of them."""
    if not rounded:
        return ""
    graph = placement.graph
    touching = [
        s
        for s in graph.statements
        if (set(s.writes) | set(s.components)) & rounded.keys()
        and placement.fragments[graph.fragment_of(s).name].replicas > 1
    ]
    if not touching:
        return f"the replicas leave {next(iter(rounded.values()))}: {_ROUNDING}"
    first = touching[0]
    frag = placement.fragments[graph.fragment_of(first).name]
    name = next((n for n in first.writes if n in rounded), next(iter(rounded)))
    return (
        f"line {first.lineno} (`{first.source.splitlines()[0].strip()}`), run by each of the {frag.replicas} "
        f"replicas of {frag.group!r} on its share, leaves {rounded[name]}: {_ROUNDING}"
    )


_ROUNDING = (
    "it reproduces plain Python within float rounding, not to the bit, and over a long run the trajectory diverges "
    "as another seed's would. 'single' reproduces plain Python bit for bit; --exact (run(exact=True)) refuses such a run"
)


#: Values the cell reads that are code, not state: never compared.
_CODE = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType, types.MethodType)


def structure(a, b, path: str) -> str | None:
    """Where a value that depends on random draws differs in what does not: its type, a tensor's shape
    and dtype, a dict's keys, a component's attributes (a sampled episode may end earlier: lengths
    and values are free)."""
    if type(a) is not type(b) and not (isinstance(a, dict) and isinstance(b, dict)):
        return f"{path} is a {type(a).__name__} in plain Python, a {type(b).__name__} here"
    if isinstance(a, torch.Tensor) and (a.dim(), a.dtype) != (b.dim(), b.dtype):
        return f"{path} is a {a.dim()}-d {a.dtype} tensor in plain Python, a {b.dim()}-d {b.dtype} one here"
    if isinstance(a, torch.Tensor) and a.shape[1:] != b.shape[1:]:
        return f"{path} has shape {tuple(a.shape)} in plain Python, {tuple(b.shape)} here"
    if isinstance(a, (torch.nn.Module, torch.optim.Optimizer)):
        return structure(a.state_dict(), b.state_dict(), path)
    if isinstance(a, dict):
        # a vector env's infos gain keys as its environments end episodes, which the draws decide
        if a.keys() != b.keys() and all(isinstance(k, str) for k in a) and not (vector_info(a) and vector_info(b)):
            return f"{path} has keys {sorted(map(str, a))} in plain Python, {sorted(map(str, b))} here"
        return next((d for k in a if k in b and (d := structure(a[k], b[k], f"{path}[{k!r}]"))), None)
    if isinstance(a, Component):
        return structure(vars(a), vars(b), path)
    return None


def _largest(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.double() - b.double()).abs().nan_to_num().max().item() if a.numel() else 0.0


def _differs(placement: Placement, iterations: int, name: str, diff: str) -> FragmentError:
    """The error for ``name``, naming the line most likely at fault: one that assigns or uses it in a
    replicated group (there it sees one replica's share), else the last that assigns it."""
    graph = placement.graph
    touching = [s for s in graph.statements if name in s.writes or name in s.components]
    replicated = [s for s in touching if placement.fragments[graph.fragment_of(s).name].replicas > 1]
    culprit = (replicated or touching or [None])[-1]
    where = ""
    if replicated:
        frag = placement.fragments[graph.fragment_of(culprit).name]
        where = f" (assigned or used by each of the {frag.replicas} replicas of {frag.group!r})"
    rounding = ""
    if "largest difference" in diff:
        rounding = (
            ". If values differ only slightly, this can also be floating-point rounding: a function fragnb does not "
            "compute on the whole batch's shape (fragnb.rows: an in-place one, one a module kept a reference to) may "
            "round a share's rows otherwise in the last bit, and chaotic dynamics (MuJoCo) amplify that over a "
            "rollout; such a run learns alike, not to the same weights"
        )
    return FragmentError(
        f"under this policy the cell would not leave what plain Python leaves: after {iterations} iteration(s) "
        f"`{name}`{where} differs: {diff}. Nothing ran on the cluster. Rewrite the line so that it reads values, "
        f"not one replica's share of a component (README: values across replicas){rounding}. Or run with check=False "
        "(--no-check) to run anyway",
        culprit.lineno if culprit else None,
        culprit.source.splitlines()[0] if culprit else None,
    )


def _raises(placement: Placement, iterations: int, error: Exception) -> FragmentError:
    """The refusal for a cell that raises under this placement where plain Python ran: the cell line it
    raised at, the error, and what the replica found about why (a tensor sized from the whole batch)."""
    lineno, tb = None, error.__traceback__
    while tb is not None:  # the innermost frame of the cell itself
        if tb.tb_frame.f_code.co_filename == placement.graph.filename:
            lineno = tb.tb_lineno
        tb = tb.tb_next
    why = [n for n in getattr(error, "__notes__", ()) if not n.lstrip().startswith(("File ", "(raised in"))]
    first = (str(error).splitlines() or [""])[0]
    others = "'single' runs the loop as plain Python does"
    if not placement.policy.mode.whole_copies():
        try:
            placement.graph.place("data_parallel", replicas=2)
            others += ", and 'data_parallel' runs the whole cell in each replica, splitting nothing"
        except FragmentError:
            pass
    return FragmentError.in_source(
        f"under {placement.policy.name!r} the cell raises where plain Python does not, in its first "
        f"{'iteration' if iterations == 1 else f'{iterations} iterations'}: {type(error).__name__}: {first}"
        + "".join(f". {n.rstrip('.')}" for n in why)
        + f". Nothing ran on the cluster; {others}",
        lineno,
        placement.graph.source,
    )


def _wall_clock(info: dict, key) -> bool:
    """Gymnasium's RecordEpisodeStatistics reports each episode's wall-clock time beside its return
    and length (``info["episode"]["t"]``): never the same twice, so not compared."""
    return key in ("t", "_t") and "r" in info and "l" in info


def difference(a, b, path: str, bits: bool = False) -> str | None:
    """A description of the first place where ``a`` (plain Python's) and ``b`` differ, or ``None``:
    tensors within 1e-5, floats within 1e-5 relative (with ``bits``, to the last bit), containers item by
    item, components by their state."""
    if isinstance(a, Episode) and isinstance(b, Episode):  # when an episode ended is wall-clock time
        a, b = a._replace(time=0.0), b._replace(time=0.0)
    if type(a) is not type(b) and not (
        isinstance(a, dict) and isinstance(b, dict)
    ):  # an OrderedDict is a dict to plain code
        return f"{path} is a {type(a).__name__} in plain Python, a {type(b).__name__} here"
    if isinstance(a, torch.Tensor):
        if a.shape != b.shape:
            return f"{path} has shape {tuple(a.shape)} in plain Python, {tuple(b.shape)} here"
        if not a.is_floating_point():
            return None if torch.equal(a, b) else f"{path} holds other values"
        if bits:
            same = torch.equal(a, b) or bool(((a == b) | (a.isnan() & b.isnan())).all())
            return None if same else f"`{path}` with other last bits (largest difference {_largest(a, b):.2g})"
        a, b = a.double(), b.double()
        if torch.allclose(a, b, atol=1e-5, rtol=1e-5):
            return None
        return f"{path} holds other values (largest difference {(a - b).abs().nan_to_num().max().item():.2g}, of values up to {a.abs().nan_to_num().max().item():.2g})"
    if isinstance(a, np.ndarray) and a.dtype != object:
        return difference(
            torch.from_numpy(np.array(a)), torch.from_numpy(np.array(b)), path, bits
        )  # copies: arrays may be read-only
    if isinstance(a, (torch.nn.Module, torch.optim.Optimizer, EnvStreams)):
        return difference(a.state_dict(), b.state_dict(), path, bits)
    if isinstance(a, torch.Generator):
        return None if torch.equal(a.get_state(), b.get_state()) else f"{path} is in another state"
    if isinstance(a, dict):
        if a.keys() != b.keys():
            return f"{path} has keys {sorted(map(str, a))} in plain Python, {sorted(map(str, b))} here"
        return next(
            (d for k in a if not _wall_clock(a, k) and (d := difference(a[k], b[k], f"{path}[{k!r}]", bits))), None
        )
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return f"{path} has {len(a)} items in plain Python, {len(b)} here"
        return next((d for i, (x, y) in enumerate(zip(a, b)) if (d := difference(x, y, f"{path}[{i}]", bits))), None)
    if isinstance(
        a, (float, np.floating)
    ):  # numpy's float32 scalars too (CleanRL's explained_var), not only float's subclasses
        close = a == b if bits else math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-6)
        return None if close or (math.isnan(a) and math.isnan(b)) else f"{path} is {a!r} in plain Python, {b!r} here"
    if isinstance(a, Component):
        return difference(vars(a), vars(b), path, bits)
    if type(a).__name__ == "TensorDict":  # TensorDict rollouts (LeanRL, TorchRL): no truth value, its tensors by key
        return difference(a.to_dict(), b.to_dict(), path, bits)
    if type(a).__eq__ is object.__eq__:
        return None  # no value equality (e.g. a Gymnasium env object): its state shows elsewhere
    try:
        return None if bool(a == b) else f"{path} is {a!r} in plain Python, {b!r} here"
    except Exception:  # objects without a usable equality: not compared
        return None
