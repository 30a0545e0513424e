"""Merge: what the replicas hold at the end (or at a checkpoint) back into the notebook's namespace."""

from __future__ import annotations

import pickle
import sys
import warnings
from dataclasses import replace

import torch

from .. import shards, sinks
from ..components import role_of
from ..plan.script import ReplicaId, peers
from ..streams import advanced
from .worker.bindings import holdings
from .worker.edges import combine
from .worker.report import Finals

__all__ = ["merge", "checkpoint_finals"]


def merge(ns: dict, script, finals: dict[str, Finals], logs: sinks.Logs | None = None) -> None:
    """Variables from the group that assigned them last (gathered over its replicas); components
    merged from their shards and loaded in place, learners last so their networks win. Under a
    whole-cell policy every replica ran the whole cell on its own copies: the notebook takes replica
    0's, as plain Python would have left them (the networks are every replica's). The calls replicas made on
    sinks are made on the notebook's, those ``logs`` has not made yet (all of them without it)."""
    if script.mode.whole_copies():
        _check_networks_agree(finals)
        script = replace(script, groups=dict.fromkeys(script.groups, 1))
        finals = {script.leader: finals[script.leader]}
    first = finals[script.leader]  # under a decoupled policy, actors count iterations of their own
    last_writer, scalars = first.last_writer, first.scalars
    program = script.program

    def of_group(g: str) -> list[Finals]:
        return [finals[p] for p in peers(g, script.groups[g])]

    for var in script.variables:
        if var in last_writer:
            g = last_writer[var]
            if any(f.lost for f in of_group(g)):
                continue  # a replica's part died with its worker: the notebook keeps its value
            if var not in of_group(g)[0].variables:
                ns.pop(var, None)  # the cell deleted it (`del`)
                continue
            ns[var] = combine(
                var,
                [f.variables[var] for f in of_group(g)],
                kind=program.kinds.get(var, "sharded"),
                origin=program.origin.get(var, ""),
                strict=script.strict,
                full=script.shapes.get(var),
                axis=program.axes.get(var, 0),
            )
        elif var in scalars:
            ns[var] = scalars[var]
    for name in {n for f in finals.values() for n in f.streams}:  # each replica drew its environments' share
        ns[name].counters = advanced(ns[name].counters, [f.streams[name] for f in finals.values() if name in f.streams])
    for name in script.function_globals:  # whole cell: what the notebook's functions rebound (`global steps_done`)
        if name in first.variables:
            ns[name] = first.variables[name]
    # what the replicas logged, made on the notebook's own writers and loggers once, in the loop's order: plain
    # Python's for an exact run; under async/srl the learner's iterations, each with its actors' calls before its own
    logs = logs or sinks.Logs(ns, script.per_env, None)
    if said := logs.end({tuple(ReplicaId.parse(r)): f.calls for r, f in finals.items()}):
        print(
            f"fragnb: the replicas' logs were written from this notebook, in the loop's order: {said}",
            file=sys.stderr,
        )
    comps = [(c, g) for g in script.groups for c in of_group(g)[0].components]
    owners = {w.owner_comp: w.owner for w in script.weights}
    # learners last, and a network's owner after the groups that only received its weights: theirs win
    for name, g in sorted(comps, key=lambda cg: (role_of(ns[cg[0]]) == "learner", owners.get(cg[0]) == cg[1])):
        shards.absorb(ns[name], shards.merge([f.components[name] for f in of_group(g)]))


def checkpoint_finals(script, blobs: dict[str, bytes]) -> dict[str, Finals]:
    """What the notebook merges, from every replica's checkpoint (:meth:`Walker.checkpoint`)."""
    held_by = script.components()
    finals = {}
    for name, blob in blobs.items():
        state = pickle.loads(blob)
        group = ReplicaId.parse(name).group
        variables, components = holdings(script, group, state["replica"]["ns"], held_by[group])
        walker = state["walker"]
        finals[name] = Finals(
            variables,
            components,
            scalars=walker["scalars"],
            last_writer=walker["last_writer"],
            calls=sinks.calls_of(state["replica"]["ns"]),
        )
    return finals


def _check_networks_agree(finals: dict[str, Finals]) -> None:
    """Whole-cell replicas step every optimiser with the same averaged gradients, so their networks
    end equal; say so loudly if they do not (a network trained without a torch optimiser, say)."""
    kept = [(name, f) for name, f in finals.items() if not f.lost]
    if len(kept) < 2:
        return
    (first, lead), others = kept[0], kept[1:]
    for comp, value in lead.components.items():
        for attr, net in shards.networks(value).items():
            for name, f in others:
                other = shards.network(f.components[comp], attr) if comp in f.components else None
                if other is None:
                    continue
                for key, tensor in net.state_dict().items():
                    if not torch.equal(tensor, other.state_dict()[key]):
                        warnings.warn(
                            f"`{comp}{'.' + attr if attr else ''}` differs between {first} and {name} at the end of the "
                            f"run ({key}): its training is not averaged across replicas (data_parallel averages what "
                            "torch optimisers step); the notebook holds replica 0's",
                            RuntimeWarning,
                            stacklevel=2,
                        )
                        return
