"""Sinks: the objects a loop logs through, whose calls are effects, not values.

TensorBoard's ``SummaryWriter`` (torch's and tensorboardX's), a Weights & Biases run and the ``wandb``
module's ``log``, MLflow's ``log_metric``/``log_param``/..., a ``logging.Logger`` and the ``logging``
module's functions, and a file the notebook opened for writing are recognised by their types, not their
names (:func:`kind_of`). A distributed run never copies one: the safety net's and the profile's
rehearsals hold a :class:`Quiet` stand-in that does nothing (no line, step or event from a dry run), and
each replica holds a :class:`Held` stand-in that keeps every call with where the walk was when it was made
(:data:`Call`). The notebook then makes the calls on its own object (:func:`perform`), each once, in plain
Python's order: by the program's position (iteration, segment), then the vector steps taken within the
segment, then the replica (a replica holds the next environments), then the order the replica made them.
A replicated statement's calls are replica 0's (every replica makes the same call; plain Python makes it
once); a statement computed from environments (``writer.add_scalar("charts/episodic_return", ...)`` over
the replica's finished episodes) keeps every replica's.

Pure: no cluster library, and no logging library is imported unless the cell's objects come from one.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import io
import logging
import sys
import types
from typing import Any, NamedTuple

__all__ = [
    "kind_of",
    "Quiet",
    "Held",
    "Call",
    "calls_of",
    "chosen",
    "perform",
    "described",
    "Logs",
    "built_in_cell",
    "refuse_built_in_cell",
    "stand_in",
]

#: Classes whose instances are sinks, by (module, class name) anywhere in an object's MRO: checked by
#: type, never imported here.
CLASSES = {
    ("torch.utils.tensorboard.writer", "SummaryWriter"): "tensorboard",
    ("tensorboardX.writer", "SummaryWriter"): "tensorboard",
    ("wandb.sdk.wandb_run", "Run"): "wandb",
}

_LOGGING = frozenset({"debug", "info", "warning", "warn", "error", "exception", "critical", "fatal", "log"})

#: Modules whose functions of these names are effects (their other attributes are the module's own).
MODULES = {
    "wandb": frozenset({"log", "alert", "save"}),
    "mlflow": frozenset(
        {
            "log_metric",
            "log_metrics",
            "log_param",
            "log_params",
            "set_tag",
            "set_tags",
            "log_dict",
            "log_text",
            "log_figure",
            "log_artifact",
        }
    ),
    "logging": _LOGGING,
}

#: The calls on an object sink of each kind that are effects; anything else it is asked on a worker is refused.
METHODS = {
    "tensorboard": lambda name: name.startswith("add_") or name in ("flush", "close"),
    "wandb": lambda name: name in ("log", "alert", "save", "finish", "define_metric"),
    "logging": lambda name: name in _LOGGING,
    "file": lambda name: name in ("write", "writelines", "flush"),
}

#: A factory the cell may call to build a sink (by the object's module and name).
_FACTORIES = {("wandb", "init"), ("wandb.sdk.wandb_init", "init"), ("mlflow", "start_run"), ("logging", "getLogger")}


def kind_of(value: Any) -> str | None:
    """The kind of sink ``value`` is (``"tensorboard"``, ``"wandb"``, ``"mlflow"``, ``"logging"``,
    ``"file"``), or None.

    Examples
    --------
    >>> import logging, io, sys
    >>> from fragnb.sinks import kind_of
    >>> kind_of(logging.getLogger("train")), kind_of(logging), kind_of(sys.stdout), kind_of([])
    ('logging', 'logging', None, None)
    """
    if isinstance(value, (Quiet, Held)):
        return value.kind
    if isinstance(value, types.ModuleType):
        return value.__name__ if value.__name__ in MODULES else None
    if isinstance(value, logging.Logger):
        return "logging"
    if isinstance(value, type):
        return None
    for cls in type(value).__mro__:
        if (kind := CLASSES.get((cls.__module__, cls.__qualname__))) is not None:
            return kind
    # a file opened for writing (open()'s types), not an in-memory buffer (StringIO: the loop reads it back)
    files = (io.TextIOWrapper, io.BufferedWriter, io.BufferedRandom, io.FileIO)
    if isinstance(value, files) and value not in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            return "file" if not value.closed and value.writable() else None
        except ValueError:
            return None
    return None


class _StandIn:
    """What a run holds in place of the notebook's sink ``name`` of ``kind``."""

    def __init__(self, kind: str, name: str):
        self.kind, self.name = kind, name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        if self.kind in MODULES:
            if attr in MODULES[self.kind]:
                return self._effect(attr)
            return getattr(importlib.import_module(self.kind), attr)  # logging.INFO, wandb.Histogram
        if METHODS[self.kind](attr):
            return self._effect(attr)
        raise AttributeError(
            f"`{self.name}.{attr}`: `{self.name}` is a {self.kind} sink, kept on the notebook's side; a distributed run "
            f"makes its calls ({self.name}.add_scalar(...), .log(...)) there, once, and cannot read its other attributes. "
            "Read them before the cell, or run it under 'single'"
        )

    def _effect(self, method: str):
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.kind} sink {self.name!r}>"

    def __eq__(self, other) -> bool:
        return isinstance(other, _StandIn) and (other.kind, other.name) == (self.kind, self.name)

    def __hash__(self) -> int:
        return hash((self.kind, self.name))


class Quiet(_StandIn):
    """A rehearsal's sink: every call does nothing (a dry run logs no step the run would not)."""

    def _effect(self, method: str):
        return lambda *args, **kwargs: None


class Call(NamedTuple):
    """One call a replica made on a sink: its place in the run's order (:meth:`Held.key`), the cell's line,
    the method, its arguments."""

    key: tuple
    line: int
    method: str
    args: tuple
    kwargs: dict


class Held(_StandIn):
    """A replica's sink: it keeps each call (:data:`Call`), ordered by what the replica it is bound to
    (:meth:`bind`) says of where its walk is (``sink_key()``), with the cell's line that made it."""

    def __init__(self, kind: str, name: str):
        super().__init__(kind, name)
        self.calls: list[Call] = []
        self.driver = None

    def bind(self, driver) -> None:
        """Key the calls by ``driver``: the replica whose namespace (``driver.ns``) holds this sink."""
        self.driver = driver

    def __getstate__(self) -> dict:  # a checkpoint keeps the calls, not the replica
        return {**self.__dict__, "driver": None}

    def _effect(self, method: str):
        def call(*args, **kwargs):
            driver = self.driver
            frame, line = sys._getframe(1), 0
            while frame is not None and driver is not None:  # the cell's own frame: its globals are the replica's
                if frame.f_globals is driver.ns:
                    line = frame.f_lineno
                    break
                frame = frame.f_back
            key = driver.sink_key() if driver is not None else ()
            self.calls.append(Call(key, line, method, args, kwargs))

        return call


def stand_in(value: Any, name: str, rehearsal: bool) -> Any:
    """What a run holds of ``value`` (bound to ``name``): a sink's stand-in (:class:`Quiet` in a rehearsal,
    else :class:`Held`), or ``value`` itself."""
    kind = kind_of(value)
    if kind is None:
        return value
    return Quiet(kind, name) if rehearsal else Held(kind, name)


def calls_of(ns: dict) -> dict[str, list[Call]]:
    """The calls each :class:`Held` sink of a replica's namespace kept, by name."""
    return {name: v.calls for name, v in ns.items() if isinstance(v, Held)}


def chosen(
    per_replica: dict[tuple[str, int], dict[str, list[Call]]], per_env: frozenset[int]
) -> list[tuple[str, Call]]:
    """The calls the notebook makes of those ``per_replica`` (group and replica index -> calls by sink name),
    as (sink name, call) in plain Python's order: a call of a line in ``per_env`` (a statement computed from
    the replica's environments) from every replica, any other from replica 0 alone (each made the same)."""
    calls = [
        (name, call)
        for (_, index), sinks in per_replica.items()
        for name, made in sinks.items()
        for call in made
        if index == 0 or call.line in per_env
    ]
    return sorted(calls, key=lambda c: c[1].key)


def perform(ns: dict, per_replica: dict[tuple[str, int], dict[str, list[Call]]], per_env: frozenset[int]) -> int:
    """Make the calls replicas kept (:func:`chosen`) on the notebook's sinks in ``ns``, once each, in plain
    Python's order. Returns how many calls were made.

    Examples
    --------
    Two actors each log their own finished episode at vector step 3; each logs the iteration's line:

    >>> from fragnb.sinks import Call, perform
    >>> out = []
    >>> class Writer:
    ...     def add_scalar(self, *a): out.append(a)
    >>> ns = {"writer": Writer()}
    >>> calls = {
    ...     ("actors", i): {"writer": [Call(((1, 0, 0), 3, i, 1), 7, "add_scalar", ("return", 10.0 + i, 24), {}),
    ...                                Call(((1, 0, 0), 0, i, 0), 4, "add_scalar", ("iteration", 0, 0), {})]}
    ...     for i in (0, 1)
    ... }
    >>> perform(ns, calls, frozenset({7}))
    3
    >>> out
    [('iteration', 0, 0), ('return', 10.0, 24), ('return', 11.0, 24)]
    """
    made = chosen(per_replica, per_env)
    for name, call in made:
        getattr(ns[name], call.method)(*call.args, **call.kwargs)
    return len(made)


def described(name: str, sink: Any, calls: int) -> str:
    """What a run says of a sink it logged through: ``calls`` calls on ``name``, and where they went."""
    kind = kind_of(sink)
    where = {
        "tensorboard": lambda: f"TensorBoard, {sink.get_logdir()}",
        "wandb": lambda: f"W&B run {getattr(sink, 'name', '')} in {getattr(sink, 'dir', '')}",
        "file": lambda: f"file {getattr(sink, 'name', '')}",
        "logging": lambda: f"logger {getattr(sink, 'name', 'logging')!r}",
        "mlflow": lambda: "MLflow's active run",
    }
    try:
        said = where[kind]()
    except Exception:  # a writer closed already, or of another version: its kind says enough
        said = kind
    return f"{calls} call{'s' if calls != 1 else ''} on `{name}` ({said})"


class Logs:
    """The notebook's side of one run's sinks: the calls replicas report as they go, made as soon as every
    replica has finished the iteration they belong to (TensorBoard shows a long run as it goes), and at the
    end the rest, each once: a run restarted from a checkpoint replays iterations whose calls were made
    already, and those are not made again (TensorBoard keeps the first attempt's, each step once).

    Parameters
    ----------
    ns : dict
        The notebook's namespace, which holds the sinks.
    per_env : frozenset of int
        As :func:`chosen`'s.
    loop : int or None
        The iteration loop's place in the program's top level (a call's ``key[0][:2]`` is that place and the
        iteration), if it has one.
    """

    def __init__(self, ns: dict, per_env: frozenset[int], loop: int | None):
        self.ns, self.per_env, self.loop = ns, per_env, loop
        self.pending: dict[tuple[str, int], dict[str, list[Call]]] = {}
        self.through = 0  # the calls of the iterations before this one (and before the loop) are made
        self.made: dict[str, int] = {}  # sink name -> calls made on it

    def _done(self, call: Call, iterations: int) -> bool:
        """Whether ``call`` falls before iteration ``iterations`` of the loop (or before the loop)."""
        where = call.key[0] if call.key else ()
        if self.loop is None or not where or iterations <= 0:
            return False
        return where[0] < self.loop or where[0] == self.loop and len(where) > 1 and where[1] < iterations

    def begin(self) -> None:
        """An attempt of the run starts: what a failed one reported and was not made yet is dropped (its replicas
        were lost before every one finished those iterations); the new attempt's replicas report it again."""
        self.pending.clear()

    def add(self, replica: tuple[str, int], calls: dict[str, list[Call]]) -> None:
        """Calls ``replica`` reported, made at once if their iteration is before :attr:`through`: a restarted
        run reports again what its checkpoint holds."""
        for name, made in calls.items():
            kept = [c for c in made if not self._done(c, self.through)]
            self.pending.setdefault(replica, {}).setdefault(name, []).extend(kept)

    def upto(self, iterations: int) -> None:
        """Every replica has finished ``iterations`` iterations: make the calls of those not made yet."""
        if iterations <= self.through:
            return
        ready: dict[tuple[str, int], dict[str, list[Call]]] = {}
        for replica, sinks in self.pending.items():
            for name, made in sinks.items():
                ready.setdefault(replica, {})[name] = [c for c in made if self._done(c, iterations)]
                made[:] = [c for c in made if not self._done(c, iterations)]
        self._perform(ready)
        self.through = iterations

    def _perform(self, per_replica: dict[tuple[str, int], dict[str, list[Call]]]) -> None:
        for name, call in chosen(per_replica, self.per_env):
            if name not in self.ns:  # a detached run's conductor holds the components alone: attach() makes them
                continue
            getattr(self.ns[name], call.method)(*call.args, **call.kwargs)
            self.made[name] = self.made.get(name, 0) + 1

    def end(self, per_replica: dict[tuple[str, int], dict[str, list[Call]]]) -> str:
        """The run has ended with ``per_replica``'s calls (every call each replica kept): make those not made
        yet. Returns what the run logged where, in words ("" if nothing, or only on a rehearsal's quiet sinks)."""
        rest = {
            r: {n: [c for c in made if not self._done(c, self.through)] for n, made in sinks.items()}
            for r, sinks in per_replica.items()
        }
        self.pending.clear()
        self._perform(rest)
        said = [(name, n) for name, n in self.made.items() if not isinstance(self.ns[name], Quiet)]
        boards = [self.ns[name] for name, _ in said if kind_of(self.ns[name]) == "tensorboard"]
        logdir = boards and (getattr(boards[0], "log_dir", None) or getattr(boards[0], "logdir", None))  # torch's, X's
        watch = f". Watch it in JupyterLab: %load_ext tensorboard, then %tensorboard --logdir {logdir} --host 127.0.0.1"
        return "; ".join(described(name, self.ns[name], n) for name, n in said) + (watch if logdir else "")


def built_in_cell(statements, namespace: dict) -> tuple[str, str, int] | None:
    """A sink the cell builds itself (``writer = SummaryWriter(...)``, ``run = wandb.init(...)``,
    ``log = open("log.txt", "w")``), judged from what the call's callee is in ``namespace``: (the name
    it is bound to, what builds it, its line), or None. A distributed run makes a sink's calls on the
    notebook's object, so the object must exist before the cell."""
    for s in statements:
        node = s.node
        if not isinstance(node, (ast.Assign, ast.AnnAssign, ast.With)):
            continue
        pairs = (
            [(item.optional_vars, item.context_expr) for item in node.items]
            if isinstance(node, ast.With)
            else [(node.targets[0] if isinstance(node, ast.Assign) else node.target, node.value)]
        )
        for target, value in pairs:
            if not isinstance(value, ast.Call) or not isinstance(target, ast.Name):
                continue
            callee = _resolve(value.func, namespace)
            if _builds_sink(callee, value):
                return target.id, ast.unparse(value.func), node.lineno
    return None


def _resolve(expr: ast.expr, namespace: dict) -> Any:
    """The object a name or dotted attribute of the cell stands for in ``namespace`` (None if unknown)."""
    if isinstance(expr, ast.Name):
        return namespace.get(expr.id, getattr(builtins, expr.id, None))
    if isinstance(expr, ast.Attribute):
        owner = _resolve(expr.value, namespace)
        return getattr(owner, expr.attr, None) if owner is not None else None
    return None


def _builds_sink(callee: Any, call: ast.Call) -> bool:
    if callee is None:
        return False
    if isinstance(callee, type):
        return any((cls.__module__, cls.__qualname__) in CLASSES for cls in callee.__mro__)
    if callee is builtins.open:
        how = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "mode"), None)
        return isinstance(how, ast.Constant) and isinstance(how.value, str) and any(c in how.value for c in "wax+")
    return (getattr(callee, "__module__", None), getattr(callee, "__name__", None)) in _FACTORIES


def refuse_built_in_cell(graph, policy: str) -> None:
    """Refuse, before anything runs, a distributed run of a cell that builds its own sink (see
    :func:`built_in_cell`): naming it, its line and the ways out."""
    from .errors import FragmentError

    built = built_in_cell(graph.statements, graph.namespace)
    if built is None:
        return
    name, what, line = built
    raise FragmentError.in_source(
        f"`{name}` is a logger the cell builds itself ({what}(...)). Under {policy!r} the replicas' calls on a "
        f"writer or logger are made by the notebook, on its own object, once and in plain Python's order: build "
        f"`{name}` in a cell before this one (the setup), where the notebook holds it; or run under 'single'",
        line,
        graph.source,
    )
