"""The ``%%fragment`` cell magic: parse arguments, capture, bind, display, run."""

from __future__ import annotations

import ast
from argparse import ArgumentTypeError

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import MagicArgumentParser, argument, magic_arguments, parse_argstring
from IPython.display import display

from .. import policies
from ..errors import FragmentError
from ..graph import FragmentGraph, capture
from ..plan.recording import parse_record
from ..policies.relaxing import parse_edge
from ..runtime import CHECKPOINT_EVERY, CHECKPOINT_SHARE, measure, run_placement
from ..runtime.cluster.clusters import warm
from ..runtime.local import torch_threads
from ..runtime.plane import wanted
from ..runtime.result import RunResult

__all__ = ["FragmentMagics"]


def _merged(records: list[tuple[str, tuple[int, ...] | None]]) -> dict | None:
    """Repeated ``--record`` flags as one ``record=``: a fragment named twice records at both's iterations."""
    out: dict[str, tuple[int, ...] | None] = {}
    for name, its in records:
        out[name] = None if its is None or out.get(name, ()) is None else tuple(sorted({*out.get(name, ()), *its}))
    return out or None


def _count(text: str) -> int:
    """A flag's count: a whole number, 0 or more (else the magic's usage error names the flag and the value)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ArgumentTypeError(f"{text!r} is not a count: give a whole number, 0 or more")
    return value


def _edge(text: str) -> tuple[str, tuple[str, int | None]]:
    """``--edge``'s value (:func:`~fragnb.policies.relaxing.parse_edge`), or the magic's usage error."""
    try:
        return parse_edge(text)
    except ValueError as e:
        raise ArgumentTypeError(str(e)) from None


def _recorded(text: str) -> tuple[str, tuple[int, ...] | None]:
    """``--record``'s value (:func:`~fragnb.plan.recording.parse_record`), or the magic's usage error."""
    try:
        return parse_record(text)
    except ValueError as e:
        raise ArgumentTypeError(str(e)) from None


@magics_class
class FragmentMagics(Magics):
    """Magics that turn a training-loop cell into a fragment graph."""

    @magic_arguments()
    @argument("name", help="variable that receives the FragmentGraph")
    @argument("--policy", "-p", default="single", help="distribution policy (default: single, one process)")
    # each policy's parameters (--actors, --max-staleness, ...) are not here: _parser adds them from the registry
    @argument(
        "--cluster",
        help="'local' (default), 'cuda', a scheduler address tcp://host:port or tls://host:port, "
        "or the name of a distributed.Client variable",
    )
    @argument("--run", action="store_true", help="also execute the loop under the policy")
    @argument(
        "--explore",
        action="store_true",
        help="show the policy explorer (choose, compare and run policies) instead of the drawing",
    )
    @argument("--no-progress", action="store_true", help="no progress bar during --run")
    @argument("--no-plot", action="store_true", help="no live dashboard during --run")
    @argument(
        "--restarts",
        type=_count,
        default=2,
        metavar="N",
        help="synchronous policies: start again from the last checkpoint up to N times when a worker is lost (default 2)",
    )
    @argument(
        "--checkpoint-every",
        type=_count,
        default=None,
        metavar="K",
        help=f"synchronous policies: keep the replicas' state in the notebook every K iterations (0: never; default: "
        f"every {CHECKPOINT_EVERY} at most, within {CHECKPOINT_SHARE * 100:.0f} percent of the run's time)",
    )
    @argument(
        "--checkpoint-dir",
        metavar="DIR",
        help="synchronous policies: also write each checkpoint to DIR (a directory or an fsspec URL), the newest two kept",
    )
    @argument(
        "--resume",
        metavar="DIR",
        help="with --run: go on from the newest checkpoint in DIR that a run of this cell wrote (in this or another kernel)",
    )
    @argument(
        "--detach",
        nargs="?",
        const=True,
        default=False,
        metavar="NAME",
        help="with --run, --cluster tcp://... and --checkpoint-dir: hand the run to the cluster and return at once "
        "(named NAME, or the cell's name); fragnb.attach() follows it from any kernel",
    )
    @argument(
        "--time-limit",
        type=float,
        default=None,
        metavar="SECONDS",
        help="with --run: end the run after the iteration during which SECONDS have passed",
    )
    @argument(
        "--no-dashboard", action="store_true", help="fragnb's own Dask cluster serves no dashboard (HTTP) during --run"
    )
    @argument("--quiet", "-q", action="store_true", help="do not display the graph")
    @argument(
        "--no-check", action="store_true", help="skip the safety net (the first iterations compared with plain Python)"
    )
    @argument(
        "--exact",
        action="store_true",
        help="refuse a run that could only be statistical (global random draws in replicated statements)",
    )
    @argument(
        "--record",
        action="append",
        default=[],
        type=_recorded,
        metavar="FRAGMENT[:K[-L]]",
        help="with --run: keep what FRAGMENT's statements read and leave on every replica (at iterations K to L, "
        "from 0; all by default) for NAME.last_run.replay(FRAGMENT, K); repeatable",
    )
    @argument(
        "--edge",
        action="append",
        default=[],
        type=_edge,
        metavar="LABEL=OPERATOR[:BOUND]",
        help="the operator of the crossing edge that carries LABEL, e.g. 'policy=versioned pull:2' (quoted whole), "
        "policy=versioned-pull:2 or batch=stream "
        "(place(..., edges=...)); repeatable",
    )
    @argument(
        "--role",
        action="append",
        default=[],
        metavar="NAME=ROLE",
        help="give the object NAME this role instead of what its type says (env, actor, learner, buffer); repeatable",
    )
    @argument(
        "--until-return",
        type=float,
        metavar="R",
        help="with --run: stop after the first iteration where the mean return of the last 20 episodes reaches R",
    )
    @argument(
        "--seeds",
        metavar="0-3",
        help="with --run: run the loop once per seed (0-3 or 1,5,9) side by side, each after its %%%%setup cell with that seed",
    )
    @argument("--setup", metavar="NAME", help="with --seeds: the %%%%setup cell to run first (default: the only one)")
    @argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=V1,V2",
        help="with --seeds: a grid setting, e.g. args.learning_rate=2.5e-4,1e-3, assigned after the setup; repeatable",
    )
    @argument(
        "--threshold", type=float, metavar="R", help="with --seeds: the table gives each seed's env steps to return R"
    )
    @cell_magic
    def fragment(self, line: str, cell: str):
        """Capture the cell's training loop as a fragment graph bound to NAME, and display it.

        With a distributed ``--policy`` the placement is drawn instead. With ``--run`` the loop then
        runs under the policy; afterwards the namespace holds what plain execution of the cell would
        leave (trained components, the cell's variables), and the RunResult is kept as
        ``NAME.last_run``.

        Example::

            %%fragment ppo --run
            for it in range(iterations):
                ...
        """
        parser, declared = _parser()
        args = parser.parse_argstring(line)
        if not cell.strip():
            raise UsageError("%%fragment needs a training loop in the cell body, below the %%fragment line")
        if not args.name.isidentifier():
            raise UsageError(f"%%fragment NAME: {args.name!r} is not a valid variable name")
        if args.until_return is not None and not args.run:
            raise UsageError("--until-return needs --run")
        if args.edge and args.explore:
            raise UsageError(
                "--edge with --explore: the explorer does not choose edges yet; place(..., edges=...) does"
            )
        if args.record and (not args.run or args.seeds is not None):
            raise UsageError("--record needs --run (one run, not --seeds)")
        if args.explore and args.run:
            raise UsageError("--explore has its own Run button; leave out --run")
        sweeping = args.seeds is not None
        if (args.setup or args.param or args.threshold is not None) and not sweeping:
            raise UsageError("--setup, --param and --threshold go with --seeds")
        if sweeping and (not args.run or args.until_return is not None):
            raise UsageError("--seeds needs --run (and takes --threshold rather than --until-return)")
        try:
            policy = policies.resolve(args.policy)
        except ValueError as e:
            raise UsageError(str(e)) from None
        # only the flags given; one another policy declares stays text, and place refuses it naming this one's
        params = {k: _value(k, v, policy) for k in declared if (v := getattr(args, k)) is not None}
        if args.edge:
            params["edges"] = {label: choice if choice[1] is not None else choice[0] for label, choice in args.edge}
        ns = self.shell.user_ns
        cluster = _cluster(args.cluster, ns)
        if args.name in ns and not isinstance(ns[args.name], FragmentGraph):
            raise UsageError(
                f"%%fragment {args.name}: `{args.name}` already holds your {type(ns[args.name]).__name__}, "
                "which the graph would replace; give the graph another name"
            )
        # A blank first line stands for the %%fragment line: errors then name the lines Jupyter numbers.
        roles = dict(r.split("=", 1) for r in args.role if "=" in r)
        if len(roles) != len(args.role):
            raise UsageError(f"--role takes NAME=ROLE, got {[r for r in args.role if '=' not in r]}")
        try:
            graph = capture("\n" + self.shell.transform_cell(cell), ns, name=args.name, roles=roles)
        except ValueError as e:
            if isinstance(e, FragmentError):
                raise
            raise UsageError(str(e)) from None
        try:
            placement = graph.place(policy, **params)  # bad parameters fail here, before anything runs
        except (TypeError, ValueError) as e:
            raise UsageError(str(e)) from None
        ns[args.name] = graph
        if policy.mode.on_workers() and (args.run or args.explore):
            # the workers this run needs start while the placement is measured and drawn
            warm(cluster, wanted(placement, cluster), dashboard=not args.no_dashboard)
        if args.explore:
            from ..widgets import Explorer

            display(Explorer(graph, policy, cluster, **params))
        elif not args.quiet:
            if policy.mode.on_workers() and not policy.mode.whole_copies():
                # one dry iteration on copies: bytes on the drawn edges (the graph keeps no sizes); a policy that
                # runs the whole cell in each replica sends nothing between groups, and its objects need not copy
                placement = placement.measured(measure(graph))
            display(placement if policy.mode.on_workers() else graph)
        if args.run and sweeping:
            graph.last_sweep = _sweep(graph, args, policy, params, cluster, ns, roles)
            print(graph.last_sweep)
        elif args.run:
            until = None if args.until_return is None else _mean_return_reaches(args.until_return)
            result = run_placement(
                placement,
                cluster,
                progress=not args.no_progress,
                plot=not args.no_plot,
                check=not args.no_check,
                until=until,
                dashboard=not args.no_dashboard,
                restarts=args.restarts,
                checkpoint_every=args.checkpoint_every,
                checkpoint_dir=args.checkpoint_dir,
                resume=args.resume,
                exact=args.exact,
                record=_merged(args.record),
                detach=args.detach,
                time_limit=args.time_limit,
            )
            if isinstance(result, RunResult):  # a detached run's is fragnb.attach's to keep
                graph.last_run = result  # NAME.last_run: the user's record of the latest run
            print(result)

    @line_magic
    def fragment_debug(self, line: str = ""):
        """Replay here the last distributed run whose cell code raised on a worker, until it raises again,
        and raise it: ``%debug`` then opens in the frame where it failed, with the replica's values
        (:func:`fragnb.debug`)."""
        from ..runtime.replay import debug

        debug()

    @magic_arguments()
    @argument("name", help="variable that receives the Setup (what --seeds runs before the loop)")
    @argument("--seed", type=int, default=0, help="the seed this run of the cell uses (default 0)")
    @cell_magic
    def setup(self, line: str, cell: str):
        """Run the cell now as plain Python with ``seed = S`` defined (``--seed``, default 0) and torch
        at one thread (as fragnb's workers and ``fragnb.run`` use it), and keep
        its source as NAME: ``%%fragment ... --seeds 0-3 --run`` runs it on each worker with that run's
        seed before the loop, and ``fragnb.sweep(graph, setup=NAME, ...)`` takes it.

        Example::

            %%setup ppo_setup
            args = Args(seed=seed)
            torch.manual_seed(args.seed)
        """
        from ..setups import Setup

        args = parse_argstring(self.setup, line)
        if not args.name.isidentifier():
            raise UsageError(f"%%setup NAME: {args.name!r} is not a valid variable name")
        source = self.shell.transform_cell(cell)
        if "get_ipython()" in source:
            raise UsageError(
                "%%setup: the cell runs on workers as plain Python, where IPython's magics and ! commands do "
                "not; move them to a cell of their own"
            )
        ns = self.shell.user_ns
        ns["seed"] = args.seed
        # torch at one thread, as on the workers the sweep's runs take: an orthogonal initialisation
        # (QR) rounds differently with two threads, and seed S's objects here would not be its run's
        with torch_threads(1):
            self.shell.ex(source)
        ns[args.name] = Setup(args.name, source="\n" + source)


def _parser() -> tuple[MagicArgumentParser, list[str]]:
    """The magic's own flags, and ``--name-with-dashes`` for each parameter of every policy registered now (a user
    may ``register`` one in an earlier cell); also those parameters' names. Read from the policies, the flags cannot
    drift from them, and the help (``%%fragment?``) lists them."""
    own = FragmentMagics.fragment.parser
    parser = MagicArgumentParser(own.prog, description=own.description, parents=[own])
    group = parser.add_argument_group(
        "policy parameters", "what the policies named declare; given to graph.place only when set"
    )
    declared: dict[str, dict[str, list[str]]] = {}  # parameter: {its default: the policies with that default}
    for policy in policies.POLICIES.values():
        for name, default in policy.parameters.items():
            declared.setdefault(name, {}).setdefault(repr(default), []).append(policy.name)
    taken = {action.dest for action in own._actions}
    for name, defaults in declared.items():
        which = "; ".join(f"{', '.join(names)} (default {default})" for default, names in defaults.items())
        if name in taken:  # its value would be the magic's own option's
            raise UsageError(
                f"the policy parameter {name!r} of {which} is also an option of %%fragment's own; "
                "rename the parameter and register the policy again"
            )
        # argparse formats % in help
        group.add_argument("--" + name.replace("_", "-"), dest=name, metavar="VALUE", help=which.replace("%", "%%"))
    FragmentMagics.fragment.__doc__ = parser.format_help()
    return parser, list(declared)


def _value(name: str, text: str, policy: policies.DistributionPolicy):
    """``--name``'s text as a value of the type of ``policy``'s default for it; the text itself when the policy has
    no such parameter, for ``place`` to refuse naming the ones it has."""
    if name not in policy.parameters:
        return text
    default = policy.parameters[name]
    try:
        if isinstance(default, bool):
            return {"true": True, "false": False}[text.lower()]
        if isinstance(default, (int, float, str)):
            return type(default)(text)
        return ast.literal_eval(text)  # None: an optional number (samples_per_insert), 4 or 0.5; place checks it
    except (KeyError, ValueError, SyntaxError):
        kind = "a number" if default is None else type(default).__name__
        raise UsageError(
            f"--{name.replace('_', '-')} {text}: policy {policy.name!r} takes {kind} (default {default!r})"
        ) from None


def _sweep(graph, args, policy, params, cluster, ns, roles):
    """``--seeds``: the sweep the magic's options describe."""
    from ..seeds import sweep
    from ..setups import Setup, seeds_from

    try:
        seeds = seeds_from(args.seeds)
    except ValueError as e:
        raise UsageError(str(e)) from None
    setups = {k: v for k, v in ns.items() if isinstance(v, Setup) and not k.startswith("_")}
    if args.setup is not None:
        if not isinstance(ns.get(args.setup), Setup):
            raise UsageError(f"--setup {args.setup}: no %%setup cell named {args.setup!r} ran in this kernel")
        setup = ns[args.setup]
    elif len(setups) == 1:
        setup = next(iter(setups.values()))
    else:
        raise UsageError(
            "--seeds needs the setup each seed runs first: run a %%setup NAME cell"
            if not setups
            else f"--seeds: name the setup to run first with --setup ({', '.join(sorted(setups))})"
        )
    grid = {}
    for item in args.param:
        key, eq, values = item.partition("=")
        if not eq:
            raise UsageError(f"--param takes NAME=V1,V2, got {item!r}")
        try:
            parsed = ast.literal_eval(f"[{values}]")
        except (ValueError, SyntaxError):
            raise UsageError(f"--param {item!r}: values must be Python literals, e.g. 2.5e-4,1e-3") from None
        grid[key.strip()] = parsed
    try:
        return sweep(
            graph,
            setup,
            seeds,
            grid or None,
            policy.name,
            cluster,
            threshold=args.threshold,
            progress=not args.no_progress,
            plot=not args.no_plot,
            roles=roles,
            **params,
        )
    except ValueError as e:
        raise UsageError(str(e)) from None


def _cluster(name: str | None, ns: dict):
    """``--cluster``'s value as ``run`` takes it: a name of the notebook's is the Client it holds."""
    if name is None:
        return None  # Dask is imported only when a distributed run needs it
    from ..runtime.cluster.clusters import ClusterError, named

    try:
        return named(name, ns)
    except ClusterError as e:
        raise UsageError(str(e)) from None


def _mean_return_reaches(threshold: float):
    def reached(result) -> bool:
        return result.mean_return() >= threshold

    reached.__doc__ = f"mean return of the last 20 episodes >= {threshold}"
    return reached


_parser()  # the help (%%fragment?) lists the built-in policies' parameters before the magic first runs
