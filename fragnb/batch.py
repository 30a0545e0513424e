"""A notebook cell as a batch job: ``python -m fragnb run NOTEBOOK.ipynb --cell NAME [OPTIONS]``.

The researcher's next step after a notebook: the same ``%%fragment`` cell, for hours, without a notebook
(on a cluster's node, inside an ``sbatch`` script, under ``nohup``). The notebook's code cells above the
cell run first, in order, as its setup, in an IPython shell (its magics work; other ``%%fragment`` cells
are skipped); ``--set NAME=VALUE`` then changes a setup value (``--set iterations=2000``). The cell runs
through the ``%%fragment`` magic itself, with the options of its own ``%%fragment`` line and then those
given here, which win (``--policy coarse --actors 8 --cluster tcp://... --checkpoint-dir ckpt``): the
same refusals, the same run, the same disk checkpoints, and ``--resume ckpt`` goes on after a lost job.
``--slurm-runner``, in every task of an ``srun``, makes the job's tasks the cluster: the scheduler, the run
and its workers (dask-jobqueue's SLURMRunner).
Its progress is a line every few seconds, which a log file holds.

What the run leaves is saved in ``--out`` (default ``NOTEBOOK-NAME/``): ``values.pt``, every variable the
cell assigned and every object it used as plain Python would leave them, in one ``torch.save`` (objects
that share a network still share it); ``result.pkl``, the :class:`~fragnb.runtime.result.RunResult`;
``run.json``, what ran and how it ended, and what could not be saved and why. :func:`load_run` reads them
back in a notebook.

Exit status: 0 when the run ended, 1 when the setup or the run raised (the error as the notebook shows
it, naming the cell), 2 for a bad command line.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import pickle
import shlex
import sys
import time
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["main", "load_run", "SavedRun"]

#: What the batch command adds to the cell's own options: run it, and show nothing a log cannot hold.
_FORCED = ["--run", "--no-plot", "--quiet"]
#: Options of the magic that make no batch job: what they show or hand back needs a notebook.
_REFUSED = {"--explore": "it shows widgets", "--seeds": "it runs a sweep", "--detach": "the job is the detached run"}


@dataclass
class SavedRun:
    """What a batch run leaves (``python -m fragnb run ... --out DIR``): its ``values`` (name -> object), its
    ``result`` (the :class:`~fragnb.runtime.result.RunResult`) and ``manifest`` (``run.json``: notebook, cell,
    options, policy, how it ended, what was saved and what could not be, and why).

    Examples
    --------
    The files' round trip, as the batch command writes them and a notebook reads them back:

    >>> import tempfile, fragnb
    >>> out = tempfile.mkdtemp()
    >>> fragnb.SavedRun({"iterations": 3}, None, {"cell": "ppo"}).save(out)
    >>> saved = fragnb.load_run(out)
    >>> saved.values, saved.manifest["cell"], saved.manifest["not saved"]
    ({'iterations': 3}, 'ppo', {})
    >>> saved.restore(globals())
    >>> iterations
    3
    """

    values: dict[str, Any]
    result: Any
    manifest: dict[str, Any]

    def restore(self, namespace: dict) -> None:
        """Put the saved values into ``namespace`` (a notebook's ``globals()``), as if the cell had run there."""
        namespace.update(self.values)

    def save(self, path: str | Path) -> None:
        """Write ``values.pt`` (the values that pickle, in one file, so objects that share a network still share
        it), ``result.pkl`` and ``run.json`` (the manifest, with what was saved and what was not, and why)."""
        import torch

        out = Path(path)
        out.mkdir(parents=True, exist_ok=True)
        unsaved = {}
        for name, value in self.values.items():
            try:
                pickle.dumps(value)
            except Exception as e:  # noqa: BLE001 - whatever keeps it from pickling is what run.json says
                unsaved[name] = f"{type(e).__name__}: {e}"[:200]
        torch.save({n: v for n, v in self.values.items() if n not in unsaved}, out / "values.pt")
        (out / "result.pkl").write_bytes(pickle.dumps(self.result))
        self.manifest = {**self.manifest, "saved": sorted(set(self.values) - set(unsaved)), "not saved": unsaved}
        (out / "run.json").write_text(json.dumps(self.manifest, indent=1) + "\n")


def load_run(path: str | Path) -> SavedRun:
    """Read what ``python -m fragnb run NOTEBOOK --cell NAME --out PATH`` saved (:class:`SavedRun`).

    Parameters
    ----------
    path : str or Path
        The batch run's ``--out`` directory.

    Returns
    -------
    SavedRun
        ``.values`` (every variable the cell assigned and object it used), ``.result`` (the RunResult) and
        ``.manifest``; ``.restore(globals())`` puts the values into a notebook.

    Examples
    --------
    >>> import tempfile, fragnb
    >>> out = tempfile.mkdtemp()
    >>> fragnb.SavedRun({"returns": [9.0, 21.0]}, None, {"cell": "ppo", "iterations": 2}).save(out)
    >>> saved = fragnb.load_run(out)
    >>> saved.values["returns"], saved.manifest["iterations"]
    ([9.0, 21.0], 2)
    >>> fragnb.load_run(tempfile.mkdtemp())
    Traceback (most recent call last):
    FileNotFoundError: ... holds no batch run (no run.json): give the --out of `python -m fragnb run`
    """
    import torch

    out = Path(path)
    if not (out / "run.json").exists():
        raise FileNotFoundError(f"{out} holds no batch run (no run.json): give the --out of `python -m fragnb run`")
    manifest = json.loads((out / "run.json").read_text())
    values = torch.load(out / "values.pt", weights_only=False)  # the user's own objects: their classes, pickled
    result = pickle.loads((out / "result.pkl").read_bytes())
    return SavedRun(values, result, manifest)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m fragnb run",
        description="Run a notebook's %%fragment cell as a batch job, after the code cells above it.",
        epilog="Every other option is the %%fragment magic's (--policy, --actors, --cluster, --checkpoint-dir, "
        "--resume, --time-limit, ...): `%%fragment?` in a notebook lists them.",
    )
    parser.add_argument("notebook", type=Path, help="the notebook (.ipynb)")
    parser.add_argument("--cell", required=True, metavar="NAME", help="the %%%%fragment NAME cell to run")
    parser.add_argument("--out", type=Path, metavar="DIR", help="where to save what the run leaves (NOTEBOOK-NAME/)")
    parser.add_argument(
        "--slurm-runner",
        action="store_true",
        help="inside `srun` (each task runs this command): task 0 is the Dask scheduler, task 1 the run, the "
        "others its single-threaded workers (dask-jobqueue's SLURMRunner: pip install 'fragnb[slurm]')",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="after the setup, assign a Python literal to a name or an attribute (config.lr=1e-3); repeatable",
    )
    return parser


def _cells(path: Path, name: str) -> tuple[list[tuple[int, str]], list[str], str]:
    """The setup cells above ``%%fragment name`` (code cell number from 1, source), its line's options (the
    magic's own parser finds its name), its body."""
    from .ui.magics import _parser as magic_parser

    parse = magic_parser()[0].parse_argstring
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    setup, found = [], []
    for number, cell in enumerate(cells, 1):
        source = "".join(cell["source"])
        first, _, body = source.partition("\n")
        if first.startswith("%%fragment"):
            words = shlex.split(first)[1:]
            here = parse(first.removeprefix("%%fragment")).name
            found.append(f"{here} (cell {number})")
            if here == name:
                words.remove(name)
                return setup, words, body
            continue
        setup.append((number, source))
    there = ", ".join(found) or "none"
    raise LookupError(f"{path} has no `%%fragment {name}` cell; its %%fragment cells: {there}")


def _assign(ns: dict, setting: str) -> None:
    """``--set NAME=VALUE`` (or ``obj.attr=VALUE``): a Python literal, assigned after the setup."""
    target, sep, text = setting.partition("=")
    if not sep or not target.replace(".", "_").isidentifier():
        raise ValueError(f"--set takes NAME=VALUE (a Python literal), got {setting!r}")
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise ValueError(
            f"--set {setting}: {text!r} is not a Python literal (a number, a string in quotes, ...)"
        ) from None
    head, *attrs = target.split(".")
    if head not in ns:
        raise ValueError(f"--set {setting}: the setup cells assign no `{head}`")
    if not attrs:
        ns[head] = value
        return
    obj = ns[head]
    for attr in attrs[:-1]:
        obj = getattr(obj, attr)
    setattr(obj, attrs[-1], value)


def _kept(graph, ns: dict) -> dict[str, Any]:
    """What the cell leaves: every name it assigns, every component it calls, every value it reads from the
    setup (modules, functions and classes come from the setup's code, not from the run)."""
    from .plan.values import graph_writes

    names = graph_writes(graph) | set(graph.components) | set(graph.inputs)
    code = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type)
    return {n: ns[n] for n in sorted(names) if n in ns and not isinstance(ns[n], code)}


def _first_run(options: list[str]) -> list[str]:
    """``--resume DIR`` without a checkpoint in DIR yet starts from the beginning: the same command submits a
    job's first run and its requeued ones (the magic itself refuses it, naming what DIR lacks)."""
    from .runtime.store import holds_checkpoint

    for i, option in enumerate(options):
        if option == "--resume" and i + 1 < len(options):
            directory, end = options[i + 1], i + 2
        elif option.startswith("--resume="):
            directory, end = option.split("=", 1)[1], i + 1
        else:
            continue
        if holds_checkpoint(directory):
            return options
        print(f"fragnb: no checkpoint in {directory} yet: the run starts from the beginning", file=sys.stderr)
        return options[:i] + options[end:]
    return options


def _out(args: argparse.Namespace) -> Path:
    return args.out or args.notebook.with_name(f"{args.notebook.stem}-{args.cell}")


def in_slurm_job(args: argparse.Namespace, options: list[str]) -> int:
    """One task of an ``srun``: the cluster's scheduler or a worker until the run ends (dask-jobqueue's
    SLURMRunner: they never return from entering it), or the run itself, on the client the runner gives."""
    try:
        from dask_jobqueue.slurm import SLURMRunner
        from distributed import Client
    except ImportError:
        print("fragnb: --slurm-runner needs dask-jobqueue: pip install 'fragnb[slurm]'", file=sys.stderr)
        return 2
    out = _out(args)
    out.mkdir(parents=True, exist_ok=True)  # the scheduler's address is written there: a directory every node sees
    # One thread per worker process (fragnb's replicas); the web pages on each node's loopback (ssh -L to see them)
    workers = {"nthreads": 1, "dashboard_address": "127.0.0.1:0"}
    scheduler = {"dashboard_address": "127.0.0.1:0"}
    try:
        with SLURMRunner(
            scheduler_file=str(out / "scheduler-{job_id}.json"), scheduler_options=scheduler, worker_options=workers
        ) as runner:
            with Client(runner) as client:
                client.wait_for_workers(runner.n_workers)
                try:
                    return run_cell(args, options, client)
                finally:  # workers first, then the scheduler: no worker logs a broken connection at the end
                    client.retire_workers(close_workers=True)
    except KeyboardInterrupt:  # how the runner ends its scheduler and worker tasks once the run has closed it
        if os.environ.get("SLURM_PROCID") == "1":
            raise
        return 0


def run_cell(args: argparse.Namespace, options: list[str], client=None) -> int:
    """Run the setup and the cell in an IPython shell; save what the run leaves. The exit status. ``client``:
    the cluster of an ``srun``'s tasks (:func:`in_slurm_job`)."""
    import matplotlib

    from .runtime.cluster.clusters import shutdown

    matplotlib.use("Agg")  # a figure the setup draws goes nowhere
    from IPython.core.interactiveshell import InteractiveShell

    setup, own, body = _cells(args.notebook, args.cell)
    shell = InteractiveShell.instance()
    start = time.time()
    for number, source in setup:
        print(f"fragnb: setup cell {number}", file=sys.stderr, flush=True)
        if not shell.run_cell(source, silent=True).success:  # silent: a cell's last value is not printed
            print(
                f"fragnb: setup cell {number} of {args.notebook} raised (above); the run did not start", file=sys.stderr
            )
            return 1
    if "fragnb" not in shell.extension_manager.loaded:  # a setup without `%load_ext fragnb`
        shell.extension_manager.load_extension("fragnb")
    for setting in args.set:
        _assign(shell.user_ns, setting)
    options = _first_run(options)
    if client is not None:
        shell.user_ns["_fragnb_slurm_job"] = client
        options = [*options, "--cluster", "_fragnb_slurm_job"]
    line = shlex.join([args.cell, *own, *options, *_FORCED])
    print(f"fragnb: %%fragment {line}", file=sys.stderr, flush=True)
    try:
        ran = shell.run_cell(f"%%fragment {line}\n{body}", store_history=False).success
    finally:
        shutdown(forkserver=True)  # the job's cluster ends with it, cleanly, whether the run ended or raised
    if not ran:
        return 1
    graph = shell.user_ns[args.cell]
    result = graph.last_run
    out = _out(args)
    manifest = {
        "notebook": str(args.notebook),
        "cell": args.cell,
        "options": line,
        "set": args.set,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(start)),
        "policy": result.policy,
        "guarantee": result.guarantee,
        "iterations": result.iterations,
        "env steps": result.env_steps,
        "seconds": round(result.seconds, 3),
        "stopped": result.stopped,
    }
    SavedRun(_kept(graph, shell.user_ns), result, manifest).save(out)
    print(f"fragnb: saved to {out} (fragnb.load_run({str(out)!r}) reads it back)", file=sys.stderr, flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args, options = parser.parse_known_args(argv)
    if not args.notebook.exists():
        parser.error(f"no notebook at {args.notebook}")
    try:
        own = _cells(args.notebook, args.cell)[1]
        for option, why in _REFUSED.items():
            if any(o == option or o.startswith(option + "=") for o in own + options):
                raise ValueError(f"{option} makes no batch job: {why}")
        if args.slurm_runner and any(o == "--cluster" or o.startswith("--cluster=") for o in options):
            raise ValueError("--slurm-runner is the cluster (the srun's tasks): give no --cluster")
        for setting in args.set:
            if "=" not in setting:
                raise ValueError(f"--set takes NAME=VALUE (a Python literal), got {setting!r}")
    except (LookupError, ValueError) as e:
        parser.error(str(e))
    try:
        return in_slurm_job(args, options) if args.slurm_runner else run_cell(args, options)
    except ValueError as e:  # a --set the setup cannot take
        print(f"fragnb: {e}", file=sys.stderr)
        return 2
