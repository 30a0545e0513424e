"""What a run recorded of its fragments (``fragnb.run(..., record=[...])``), and running it again in the kernel.

Every replica kept, for the recorded fragments' statements at the chosen iterations, what each read
before it ran and left after it (:mod:`fragnb.runtime.worker.recorder`); :class:`Records` holds those
calls in the notebook, and :func:`rerun` runs one of them again here, as
:func:`fragnb.debug` runs a failed decoupled run's statement on what it had read.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any

from ..arguments import check, instance, whole
from ..plan.instrument import compile_cell
from ..plan.script import ReplicaId
from .worker.generators import restore, states
from .worker.recorder import Call
from .worker.travel import classes_kept

__all__ = ["Records", "rerun"]


def rerun(graph, call: Call) -> dict[str, Any]:
    """Run ``call``'s statement again in this kernel on the values it read (and, when recorded, the global
    generators' states it started from); return what it assigned and the components it used. The
    notebook's namespace only lends the names the statement did not read (modules, functions)."""
    if call.missing:
        raise RuntimeError(
            f"line {call.line} cannot run again: what it read was not all kept ("
            + "; ".join(f"{name}: {why}" for name, why in call.missing)
            + ")"
        )
    stmt = graph.statements[call.statement]
    with classes_kept(graph.namespace):
        ns = {**graph.namespace, **pickle.loads(call.inputs)}
    code = compile_cell(graph.filename, graph.source, [stmt.node])
    before = states()
    try:
        if call.generators:
            restore(call.generators)
        exec(code, ns)
    finally:
        restore(before)
    return {name: ns[name] for name in (*sorted(stmt.writes), *stmt.components) if name in ns}


#: What the look-ups of a record accept (:meth:`Records.of`, and through it ``inputs``, ``outputs``, ``replay``).
ACCEPTS = {
    "fragment": instance(str, "a fragment's name, as the drawing shows it"),
    "iteration": whole(0),
    "replica": whole(0),
}


@dataclass
class Records:
    """What a run recorded (``fragnb.run(..., record=[...])``, ``--record``): every run of the recorded
    fragments' statements at the chosen iterations, on every replica, as
    calls (:class:`~fragnb.runtime.worker.recorder.Call`), within ``bound`` bytes (``dropped``: calls past it)."""

    calls: list[Call]
    dropped: int
    bound: int
    graph: Any = field(repr=False)

    def __repr__(self) -> str:
        size = sum(c.size for c in self.calls)
        kept = ", ".join(
            f"{name} ({len({(c.iteration, c.replica) for c in self.calls if c.fragment == name})} iteration-replicas)"
            for name in dict.fromkeys(c.fragment for c in self.calls)
        )
        return (
            f"<Records: {len(self.calls)} calls of {kept or 'nothing'}, {size / 2**20:.1f} MiB of the bound "
            f"{self.bound / 2**20:.0f} MiB; {self.dropped} past it, not kept>"
        )

    def of(self, fragment: str, iteration: int, replica: int = 0) -> list[Call]:
        """The calls of ``fragment``'s statements in ``iteration`` on replica ``replica`` of its group, in order."""
        check("replay", ACCEPTS, fragment=fragment, iteration=iteration, replica=replica)
        found = [
            c
            for c in self.calls
            if c.fragment == fragment and c.iteration == iteration and ReplicaId.parse(c.replica).index == replica
        ]
        if not found:
            kept = sorted({(c.fragment, c.iteration, ReplicaId.parse(c.replica).index) for c in self.calls})
            raise LookupError(
                f"no record of {fragment!r} at iteration {iteration} on replica {replica}; recorded "
                f"(fragment, iteration, replica): {kept[:12]}{' ...' if len(kept) > 12 else ''}"
                + (f" ({self.dropped} calls past the bound were not kept)" if self.dropped else "")
            )
        return found

    def inputs(self, fragment: str, iteration: int, replica: int = 0) -> list[dict[str, Any]]:
        """What each call of :meth:`of` read, unpickled here."""
        return [self._loads(c.inputs) for c in self.of(fragment, iteration, replica)]

    def outputs(self, fragment: str, iteration: int, replica: int = 0) -> list[dict[str, Any]]:
        """What each call of :meth:`of` assigned, and the components it used as it left them."""
        return [self._loads(c.outputs) for c in self.of(fragment, iteration, replica)]

    def replay(self, fragment: str, iteration: int, replica: int = 0) -> list[dict[str, Any]]:
        """Run each call of :meth:`of` again in this kernel on its recorded inputs (:func:`rerun`) and
        return what each left, as :meth:`outputs` holds it (the notebook's namespace is not touched)."""
        return [rerun(self.graph, c) for c in self.of(fragment, iteration, replica)]

    def _loads(self, blob: bytes) -> dict[str, Any]:
        with classes_kept(self.graph.namespace):
            return pickle.loads(blob)
