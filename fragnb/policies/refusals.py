"""What a policy cannot place: the refusals :func:`fragnb.policies.placing.place` raises for a loop.

Each check looks at the captured loop's objects beside the groups and replica counts a policy gives
them, and refuses, before any worker starts, what would run but not as plain Python does: a driver
replicated beside a single learner, environments that do not split evenly, a component or a trained
tensor held in two groups, replicated learners that train with a plain optimiser, a whole-cell
policy's replicas with no optimiser to average. The messages name the cell's line and what to do
instead. Apart from the placing itself, which only calls them in order; the policy's parameters are
checked where :func:`~fragnb.policies.placing.place` reads them. Pure: no cluster library.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import FragmentError

if TYPE_CHECKING:
    from ..graph import FragmentGraph
    from ..graph.model import Statement
    from .placement import FragmentPlacement
    from .policy import DistributionPolicy

__all__ = [
    "check_driver_replicas",
    "check_divisible",
    "check_one_group_per_component",
    "check_no_bare_parameters_shared",
    "check_plain_learners",
    "check_an_optimiser",
]


def check_driver_replicas(graph: FragmentGraph, policy: DistributionPolicy, counts: dict[str, int]) -> None:
    """The driver's statements (the cell's bookkeeping) run once per replica of their group: either
    that group has one replica, or every group is replicated (data parallel, each replica a whole loop).
    A replicated driver beside a single learner would interleave its values in another order than
    plain Python."""
    home = policy.groups["driver"]
    single = sorted(
        {policy.groups[f.role] for f in graph.fragments} - {home} & {g for g, n in counts.items() if n == 1}
    )
    if counts[home] > 1 and single:
        raise ValueError(
            f"policy {policy.name!r} runs the driver's statements in {home!r} x{counts[home]} but {single} x1: "
            "the cell's bookkeeping would run once per replica and its values would not be plain Python's. "
            "Put the driver with a group of one replica (the learner's), or replicate every group (data parallel)"
        )


def check_one_group_per_component(graph: FragmentGraph, fragments: dict[str, FragmentPlacement]) -> None:
    """A component used from two worker groups would have two diverging copies: refuse. (A bare
    network is the exception: its weights go from the group that trains it to the others.)"""
    import torch

    where: dict[str, dict[str, Statement]] = {}
    for frag in graph.fragments:
        for s in frag.statements:
            for comp in s.components:
                if isinstance(graph.namespace[comp], torch.nn.Module):
                    continue
                where.setdefault(comp, {}).setdefault(fragments[frag.name].group, s)
    for comp, groups in where.items():
        if len(groups) > 1:
            home, (group, late) = next(iter(groups)), max(groups.items(), key=lambda gs: gs[1].lineno)
            read = _attributes_read(late.node, comp)
            if read:
                n = fragments[next(f.name for f in graph.fragments if groups[home] in f.statements)].replicas
                raise FragmentError.in_source(
                    f"`{comp}.{read}` is read in group {group!r}, and `{comp}` lives in group {home!r}"
                    f"{f' (x{n}, each replica holding a share of it)' if n > 1 else ''}: no copy of it is there. Read it "
                    f"into a notebook value in an earlier cell (`{read} = {comp}.{read}`) and use that, or compute it in "
                    f"a statement of {comp}'s own role",
                    late.lineno,
                    graph.source,
                )
            uses = ", ".join(f"line {st.lineno} in group {g!r}" for g, st in groups.items())
            raise FragmentError.in_source(
                f"`{comp}` is used from two worker groups ({uses}); each would hold its own copy and their states "
                "would diverge. Use it from statements of one role (e.g. call its method yourself instead of handing "
                "it to a function), or choose a policy that places those roles together",
                late.lineno,
                graph.source,
            )


def _attributes_read(node: ast.AST, name: str) -> str | None:
    """The attribute of ``name`` a statement reads, if all it does with ``name`` is read attributes
    (``env.num_envs``), not call a method or hand ``name`` itself on."""
    calls = {id(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)}
    attributes = [
        n
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == name
    ]
    names = [n for n in ast.walk(node) if isinstance(n, ast.Name) and n.id == name]
    if attributes and len(attributes) == len(names) and not any(id(a) in calls for a in attributes):
        return attributes[0].attr
    return None


def check_plain_learners(
    graph: FragmentGraph, fragments: dict[str, FragmentPlacement], policy: DistributionPolicy
) -> None:
    """Replicated learners average the gradients of fragnb Learners' networks; a plain optimiser's
    network would train on each replica's share alone."""
    import torch

    found = []  # (statement, name): what the replicated learner fragments train with plain torch
    for frag in graph.fragments:
        if frag.role != "learner" or fragments[frag.name].replicas == 1:
            continue
        for s in frag.statements:
            for c in s.components:
                value = graph.namespace[c]
                trainable = isinstance(value, torch.nn.Module) and any(p.requires_grad for p in value.parameters())
                if trainable or isinstance(value, torch.optim.Optimizer):
                    found.append((s, c, frag))
    if not found:
        return
    # The optimiser is the true cause (what steps the weights), not a frozen reference network read beside it.
    s, name, frag = next((f for f in found if isinstance(graph.namespace[f[1]], torch.optim.Optimizer)), found[0])
    raise FragmentError.in_source(
        f"policy {policy.name!r} runs {fragments[frag.name].replicas} learners, which average the gradients of "
        f"fragnb Learners' networks; `{name}` ({type(graph.namespace[name]).__name__}) "
        + ("steps networks" if isinstance(graph.namespace[name], torch.optim.Optimizer) else "is")
        + " trained by the loop itself, so each learner would train on its own share alone. Use 'data_parallel', which averages the "
        "gradients of any optimiser, one learner (coarse, fine, async, srl), or wrap the update in a "
        "fragnb.components.Learner",
        s.lineno,
        graph.source,
    )


def check_an_optimiser(graph: FragmentGraph, policy: DistributionPolicy, splits: Callable[[], str | None]) -> None:
    """A whole-cell policy keeps its replicas' networks equal by averaging what torch optimisers step:
    a loop that steps none (tabular values, weights updated by hand) would learn N times alone. ``splits`` says
    why ``coarse`` cannot place the loop (None where it can), for the policy the refusal offers instead."""
    import torch

    from ..shards import torch_held

    built = _optimiser_built_in_the_cell(graph)
    if built is not None:
        call, what = built
        raise FragmentError.in_source(
            f"policy {policy.name!r} averages, at each step, the gradients of the torch optimisers that exist when "
            f"the run starts, and `{ast.unparse(call.func)}(...)` {what} inside the cell, where no replica can "
            "match it with the others' before its loop runs: each replica would train that one alone. Build it "
            "in an earlier cell and use it here, or use 'single'",
            call.lineno,
            graph.source,
        )
    held = torch_held(graph.namespace[n] for n in sorted(graph.inputs) if n in graph.namespace)
    if not any(isinstance(v, torch.optim.Optimizer) for v in held):
        first = graph.loops[0].lineno if graph.loops else None
        why_not = splits()
        instead = (
            "Use 'single', or a policy that splits the loop ('coarse': one learner)"
            if why_not is None
            else f"Use 'single', which runs it as plain Python: a policy that splits the loop cannot place it either "
            f"({why_not})"
        )
        raise FragmentError.in_source(
            f"policy {policy.name!r} keeps its replicas' networks equal by averaging the gradients torch optimisers "
            "apply, and this loop steps no torch.optim optimiser (from the cell's objects, their attributes or the "
            f"functions it calls): each replica would learn alone. {instead}",
            first,
            graph.source,
        )


def _optimiser_built_in_the_cell(graph: FragmentGraph) -> tuple[ast.Call, str] | None:
    """The first call of the cell that makes a torch optimiser: a ``torch.optim`` class, or a class of the
    user's whose ``__init__`` names one (the Gymnasium REINFORCE tutorial's agent, built in its seed loop),
    with what it makes; None if none does."""
    import inspect

    import torch

    def optimiser_class(name: str) -> bool:
        cls = getattr(torch.optim, name, None)
        return isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)

    for call in (n for n in ast.walk(graph.tree) if isinstance(n, ast.Call)):
        path, func = [], call.func
        while isinstance(func, ast.Attribute):
            path.append(func.attr)
            func = func.value
        if not isinstance(func, ast.Name) or func.id not in graph.namespace:
            continue
        obj = graph.namespace[func.id]
        for attr in reversed(path):
            obj = getattr(obj, attr, None)
        if not isinstance(obj, type):
            continue
        if issubclass(obj, torch.optim.Optimizer):
            return call, "makes one"
        init = getattr(obj, "__init__", None)
        if inspect.isfunction(init):
            made = next((n for n in init.__code__.co_names if optimiser_class(n)), None)
            if made is not None:
                return call, f"makes one (its `__init__` builds a torch.optim.{made})"
    return None


def check_no_bare_parameters_shared(graph: FragmentGraph, fragments: dict[str, FragmentPlacement]) -> None:
    """A trained tensor held directly by components of two groups (a Gaussian policy's ``log_std``
    beside its network) would never reach the other group: fragnb sends networks, whole, not bare tensors."""
    import torch

    held: dict[int, dict[str, tuple[str, int]]] = {}  # id(tensor) -> group -> (component.attribute, first line)
    for frag in graph.fragments:
        group = fragments[frag.name].group
        for s in frag.statements:
            for comp in s.components:
                for attr, value in (
                    vars(graph.namespace[comp]).items() if hasattr(graph.namespace[comp], "__dict__") else ()
                ):
                    if isinstance(value, torch.Tensor) and value.requires_grad:
                        held.setdefault(id(value), {}).setdefault(group, (f"{comp}.{attr}", s.lineno))
    for groups in held.values():
        if len(groups) > 1:
            (a, (name_a, _)), (b, (name_b, line)) = list(groups.items())[:2]
            raise FragmentError.in_source(
                f"`{name_a}` (group {a!r}) and `{name_b}` (group {b!r}) are one trained tensor: fragnb sends a learner's "
                "networks (torch.nn.Module) to the other groups after each update, not tensors held beside them, so one "
                "side would go on with a copy that never learns. Hold it inside a network both use (`self.log_std = "
                "nn.Parameter(...)` in the policy's nn.Module), or run under 'single'",
                line,
                graph.source,
            )


def check_divisible(graph: FragmentGraph, fragments: dict[str, FragmentPlacement], policy: DistributionPolicy) -> None:
    """Every component of a replicated fragment that holds a batch of environments must split evenly."""
    for frag in graph.fragments:
        n = fragments[frag.name].replicas
        for comp in frag.components:
            num_envs = getattr(graph.namespace.get(comp), "num_envs", None)
            if n > 1 and isinstance(num_envs, int) and num_envs % n:
                divisors = [d for d in range(1, num_envs + 1) if num_envs % d == 0]
                setting = _num_envs_setting(graph, comp)
                raise FragmentError.in_source(  # the loop's objects, not a parameter: a refusal of the loop, at its line
                    f"`{comp}` has num_envs={num_envs}, which {n} replicas of {frag.name!r} under "
                    f"{policy.name!r} cannot split evenly: make num_envs a multiple of {n} "
                    f"({'`' + setting + '`, which the loop reads, ' if setting else ''}in the cell that makes `{comp}`), "
                    f"ask for {_one_of(divisors)} replica{'s' if divisors != [1] else ''}, or use policy "
                    "'data_parallel', which runs the whole loop in each replica on its own copy of the environments",
                    graph.first_use(comp),
                    graph.source,
                )


def _one_of(values: list) -> str:
    return " or ".join(filter(None, [", ".join(map(str, values[:-1])), str(values[-1])]))


def _num_envs_setting(graph: FragmentGraph, comp: str) -> str | None:
    """The setting the cell reads the number of environments from, other than ``comp`` itself
    (CleanRL's ``args.num_envs``), if it reads one."""
    for node in ast.walk(graph.tree):
        if isinstance(node, ast.Attribute) and node.attr == "num_envs" and ast.unparse(node.value) != comp:
            return ast.unparse(node)
    return None
