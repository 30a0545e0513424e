"""Try a public training script under fragnb's policies, as a user who pastes it into a notebook would.

    .venv/bin/python tests/try_public.py PATH/TO/ppo.py --set total_timesteps=192 --set num_steps=16 \\
        --policies coarse fine data_parallel

The file is read as its authors wrote it (fetch it yourself; never commit it). What a user changes when
pasting a script into two notebook cells is changed here, and nothing else:

- the setup cell is the module's statements and the main block (``if __name__ == "__main__":`` or the
  body of ``main()``) up to the training loop; the ``%%fragment`` cell is that loop (the main block's
  outermost ``for``/``while`` with the most statements), and what follows it is left out;
- ``tyro.cli(Args)`` becomes ``Args(**SET)``, ``parser.parse_args()`` parses ``--argv``, and TensorBoard's
  ``SummaryWriter`` and wandb record into a list instead of writing files (with ``--real-writer``, the
  script's own ``SummaryWriter`` writes its event files, and each policy's verdict says whether TensorBoard
  reads plain Python's scalars from them: docs/guide/logging.md);
- ``--iterations N`` cuts a ``for ... in range(...)``/``count(...)`` (or ``while``) training loop to N iterations;
- ``--replace 'OLD=>NEW'`` edits the source where plain Python cannot run it here as written either (an
  ``import gym`` where Gymnasium is installed); say so beside the verdict.

Each policy's verdict compares the namespace the run leaves with plain Python's after the same cell
(``tests/corpus/compare.py``): ``exact``, ``statistical`` (the run said so before it started and
trained), ``refused`` (a FragmentError or UsageError before any worker started, printed), or a failure:
``DIFFERENT`` (a silent difference: the worst) and ``CRASH`` (a raw traceback). Plain Python and fragnb
both run at one torch thread.
"""

from __future__ import annotations

import argparse
import ast
import copy
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

STUBS = """
class SummaryWriter:  # TensorBoard's writer, recording in memory
    def __init__(self, *args, **kwargs):
        self.records = []
    def add_scalar(self, tag, value, step=None, *args, **kwargs):
        self.records.append((tag, value, step))
    def add_text(self, *args, **kwargs):
        pass
    def add_histogram(self, *args, **kwargs):
        pass
    def close(self):
        pass
    def flush(self):
        pass


class _NoWandb:  # Weights & Biases, logging nowhere
    def __getattr__(self, name):
        return lambda *args, **kwargs: None


wandb = _NoWandb()
"""


class _Rewrite(ast.NodeTransformer):
    """The edits a user makes when pasting a script into a notebook (see the module docstring)."""

    def __init__(self, values: dict, argv: list[str], real_writer: bool = False):
        self.values = values
        self.argv = argv
        self.real_writer = real_writer

    def visit_Import(self, node):
        kept = [a for a in node.names if a.name.split(".")[0] not in ("tyro", "wandb")]
        if not kept:
            return None
        node.names = kept
        return node

    def visit_ImportFrom(self, node):
        tensorboard = node.module and node.module.startswith("torch.utils.tensorboard") and not self.real_writer
        if node.module and (tensorboard or node.module.split(".")[0] == "tyro"):
            return None
        return node

    def visit_Call(self, node):
        self.generic_visit(node)
        func = ast.unparse(node.func)
        if func == "tyro.cli" and node.args:
            keywords = [ast.keyword(k, ast.parse(repr(v), mode="eval").body) for k, v in self.values.items()]
            return ast.copy_location(ast.Call(node.args[0], [], keywords), node)
        if func.endswith("parse_args") and not node.args:
            node.args = [ast.parse(repr(self.argv), mode="eval").body]
            return node
        return node


def _main_block(tree: ast.Module) -> tuple[list[ast.stmt], list[ast.stmt]]:
    """Split the module into (module statements outside the main block, the main block's statements)."""
    top, main = [], []
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    for node in tree.body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            body = node.body
            # `if __name__ == "__main__": main()`: the body of main() is the block
            if len(body) == 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Call):
                name = ast.unparse(body[0].value.func)
                if name in functions:
                    body = functions[name].body
                    top = [n for n in top if n is not functions[name]]
            main = body
        else:
            top.append(node)
    if not main:  # a tutorial written as a module: its top-level statements are the notebook's cells
        return [], top
    return top, main


def _size(node: ast.AST) -> int:
    return sum(1 for n in ast.walk(node) if isinstance(n, ast.stmt))


def split(
    source: str, values: dict, argv: list[str], iterations: int | None, real_writer: bool = False
) -> tuple[str, str]:
    """The setup cell and the training-loop cell a user would paste."""
    tree = _Rewrite(values, argv, real_writer).visit(ast.parse(source))
    top, main = _main_block(tree)
    loops = [i for i, n in enumerate(main) if isinstance(n, (ast.For, ast.While))]
    if not loops:
        raise SystemExit("no loop in the main block")
    at = max(loops, key=lambda i: _size(main[i]))
    loop = copy.deepcopy(main[at])
    if iterations is not None:
        if isinstance(loop, ast.For) and ast.unparse(loop.iter).startswith(("count(", "itertools.count(", "range(")):
            first = loop.iter.args[0] if loop.iter.args else ast.Constant(0)
            start = (
                "0" if ast.unparse(loop.iter).startswith("range(") and len(loop.iter.args) == 1 else ast.unparse(first)
            )
            loop.iter = ast.parse(f"range({start}, {start} + {iterations})", mode="eval").body
        elif isinstance(loop, ast.While):
            loop = ast.parse(f"for _iteration in range({iterations}):\n    pass").body[0]
            loop.body = copy.deepcopy(main[at].body)
    stubs = STUBS[STUBS.index("class _NoWandb") :] if real_writer else STUBS
    setup = stubs + "\n" + ast.unparse(ast.Module(top + main[:at], []))
    return setup, ast.unparse(loop) + "\n"


def namespace(setup: str, path: Path, ns: dict | None = None) -> dict:
    import torch

    torch.set_num_threads(1)
    ns = {} if ns is None else ns
    ns.update({"__file__": str(path), "__name__": "__main__"})
    import random

    import numpy as np

    random.seed(0), np.random.seed(0), torch.manual_seed(0)  # a script that seeds nothing still runs alike twice
    _seed_unseeded_gymnasium()
    clock = time.time
    time.time = lambda: 1.8e9  # run names made of the wall clock: the same in every namespace
    try:
        exec(compile(setup, f"<setup {path.name}>", "exec"), ns)
    finally:
        time.time = clock
    writer = ns.get("writer")
    if hasattr(writer, "get_logdir"):  # --real-writer: this namespace's event files in a directory of their own
        writer.close()  # (the run name is the same in every namespace: the clock is fixed above)
        ns["writer"] = type(writer)(tempfile.mkdtemp(prefix="try_public_"))
    return ns


def _seed_unseeded_gymnasium() -> None:
    """A Gymnasium environment first reset without a seed draws one from the OS: here from NumPy's global
    generator instead (in this process; a worker's replicas are re-seeded by data_parallel anyway)."""
    import numpy as np
    from gymnasium.utils import seeding

    if getattr(seeding.np_random, "seeded_here", False):
        return
    original = seeding.np_random

    def np_random(seed=None):
        return original(int(np.random.randint(2**31)) if seed is None else seed)

    np_random.seeded_here = True
    seeding.np_random = np_random


def verdict(setup: str, cell: str, path: Path, policy: str, replicas: int, magic: bool) -> tuple[str, str]:
    what, why = _verdict(setup, cell, path, policy, replicas, magic)
    plain, run = _LAST.pop("plain", None), _LAST.pop("run", None)
    return what, why + ("" if what == "refused" else _logs(plain, run, what))  # a refused run wrote nothing


_LAST: dict = {}  # the last verdict's two namespaces' SummaryWriters (--real-writer)


def _logs(plain, run, what: str) -> str:
    """What TensorBoard reads from the run's event files beside plain Python's, where the script's own
    SummaryWriter wrote them (``--real-writer``); its clock-based tags (``charts/SPS``) left out."""
    if plain is None or run is None or not hasattr(run, "get_logdir"):
        return ""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    def scalars(writer):
        writer.flush()
        acc = EventAccumulator(writer.get_logdir(), size_guidance={"scalars": 0})
        acc.Reload()
        return [(t, e.step, e.value) for t in sorted(acc.Tags()["scalars"]) if "SPS" not in t for e in acc.Scalars(t)]

    a, b = scalars(plain), scalars(run)
    if a == b:
        return f"; TensorBoard: plain Python's {len(a)} scalars"
    if [x[:2] for x in a] == [x[:2] for x in b]:
        return f"; TensorBoard: plain Python's {len(a)} tags and steps" + (", other values" if what == "exact" else "")
    return f"; TensorBoard: DIFFERENT ({len(b)} scalars, plain Python {len(a)})"


def _sink(ns: dict, where: str) -> bool:
    """Whether ``where`` is in a logger or writer of ``ns`` (its own object in each namespace: _logs compares
    what it wrote)."""
    from fragnb.sinks import kind_of

    return kind_of(ns.get(where.split(".")[0].split("[")[0])) is not None


def _verdict(setup: str, cell: str, path: Path, policy: str, replicas: int, magic: bool) -> tuple[str, str]:
    import fragnb

    plain = namespace(setup, path)  # setup then cell, as a notebook runs them: the setup seeds the global generators
    exec(compile(cell, "<cell>", "exec"), plain)
    again = namespace(setup, path)
    exec(compile(cell, "<cell>", "exec"), again)
    noise = {where for where, _ in differences(plain, again)}  # wall-clock values: differ between two plain runs
    ns = namespace(setup, path)
    _LAST.update(plain=plain.get("writer"), run=ns.get("writer"))
    params = {} if policy == "single" else {"replicas" if policy == "data_parallel" else "actors": replicas}
    try:
        if magic:
            result = _through_magic(ns, setup, path, cell, policy, params)
        else:
            graph = fragnb.capture(cell, ns, name=path.stem)
            result = fragnb.run(graph, policy, progress=False, plot=False, **params)
    except fragnb.FragmentError as e:
        return "refused", str(e).splitlines()[0]
    except Exception as e:  # noqa: BLE001 - a raw error is the verdict
        if type(e).__name__ == "UsageError":
            return "refused", str(e).splitlines()[0]
        return "CRASH", type(e).__name__ + ": " + "".join(traceback.format_exception_only(e)).strip().splitlines()[-1]
    found = [(where, why) for where, why in differences(plain, ns) if where not in noise and not _sink(plain, where)]
    unseeded = f" (unseeded: {len(noise)} values differ between two plain runs, not compared)" if noise else ""
    if not found:
        if noise:
            return f"ran, {result.guarantee}", unseeded
        return ("exact" if result.guarantee == "exact" else f"{result.guarantee} (yet equal)"), ""
    where, why = found[0]
    if result.guarantee in ("statistical", "data-parallel"):
        return result.guarantee, f"said before it ran; {len(found)} values differ, first {why[:160]}{unseeded}"
    return "DIFFERENT", f"{len(found)} values differ, first {why[:300]}{unseeded}"


def differences(plain, other, path: str = "", seen: set | None = None):
    """(path, message) for every value that differs, going into containers and plain objects (a
    network, an optimiser or a tensor is one value)."""
    import types

    import torch

    from corpus.compare import _WALL_CLOCK, assert_same

    seen = set() if seen is None else seen
    if id(plain) in seen or path.count(".") + path.count("[") > 12:
        return
    if isinstance(plain, (types.ModuleType, types.FunctionType, types.MethodType, type)):
        return
    if isinstance(plain, (dict, list, tuple)) or hasattr(plain, "__dict__"):
        seen.add(id(plain))
    if isinstance(plain, dict) and isinstance(other, dict) and not path.endswith("state_dict()"):
        for key in sorted(set(plain) | set(other), key=repr):
            if key == "__builtins__" or key in _WALL_CLOCK or (key == "t" and path.endswith("['episode']")):
                continue
            where = f"{path}[{key!r}]" if path else str(key)
            if key not in plain or key not in other:
                yield where, f"{where}: only in {'plain' if key in plain else 'fragnb'}"
            else:
                yield from differences(plain[key], other[key], where, seen)
        return
    if isinstance(plain, (list, tuple)) and isinstance(other, (list, tuple)) and len(plain) == len(other):
        for i, (a, b) in enumerate(zip(plain, other)):
            yield from differences(a, b, f"{path}[{i}]", seen)
        return
    plainish = hasattr(plain, "__dict__") and not isinstance(plain, (torch.nn.Module, torch.optim.Optimizer, type))
    if plainish and type(plain).__eq__ is object.__eq__ and type(plain).__name__ == type(other).__name__:
        if not callable(plain) or not hasattr(plain, "__code__"):
            yield from differences(vars(plain), vars(other), path + ".", seen)
            return
    try:
        assert_same(plain, other, path)
    except AssertionError as e:
        yield path, str(e)
    except Exception as e:  # noqa: BLE001 - what cannot be compared is reported, not raised
        yield path, f"{path}: cannot compare ({e})"


def _through_magic(ns: dict, setup: str, path: Path, cell: str, policy: str, params: dict):
    """Run the setup in an IPython shell's namespace (its functions' globals, as in a notebook), then the
    cell through ``%%fragment``; ``ns`` is left holding what the shell's namespace holds."""
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    shell.run_line_magic("load_ext", "fragnb")
    shell.user_ns.clear()
    shell.user_ns.update(namespace(setup, path, shell.user_ns))
    options = " ".join(f"--{k} {v}" for k, v in params.items())
    shell.run_cell_magic("fragment", f"tried --policy {policy} {options} --run --no-progress --no-plot", cell)
    ns.clear()
    ns.update(shell.user_ns)
    return ns.pop("tried").last_run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", type=Path)
    parser.add_argument("--set", action="append", default=[], help="NAME=VALUE for the Args dataclass (tyro)")
    parser.add_argument("--argv", default="", help="arguments for an argparse script's parse_args()")
    parser.add_argument("--iterations", type=int, help="cut a range()/count()/while training loop to this many")
    parser.add_argument(
        "--replace", action="append", default=[], help="OLD=>NEW in the source, for what plain Python needs here too"
    )
    parser.add_argument("--policies", nargs="+", default=["single", "coarse", "fine", "data_parallel"])
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--magic", action="store_true", help="run through %%%%fragment rather than fragnb.run")
    parser.add_argument("--show", action="store_true", help="print the two cells and stop")
    parser.add_argument("--real-writer", action="store_true", help="keep the script's TensorBoard SummaryWriter")
    options = parser.parse_args()
    values = {}
    for item in options.set:
        name, _, value = item.partition("=")
        values[name] = ast.literal_eval(value)
    source = options.path.read_text()
    for edit in options.replace:  # what plain Python needs to run the file here at all (say so in the table)
        old, _, new = edit.partition("=>")
        if old not in source:
            raise SystemExit(f"--replace: {old!r} is not in {options.path}")
        source = source.replace(old, new)
    setup, cell = split(source, values, options.argv.split(), options.iterations, options.real_writer)
    if options.show:
        print(setup, "\n# ---- %%fragment cell ----\n", cell)
        return
    import fragnb

    for policy in options.policies:
        start = time.perf_counter()
        what, why = verdict(setup, cell, options.path, policy, options.replicas, options.magic)
        print(f"{options.path.name:40s} {policy:14s} {what:12s} {time.perf_counter() - start:5.1f}s {why}", flush=True)
    fragnb.shutdown()


if __name__ == "__main__":
    main()
