"""fragnb: write an RL training loop once in a notebook cell; capture it into a fragment graph,
place it with a distribution policy and run it.

>>> %load_ext fragnb                                     # doctest: +SKIP
"""

from . import algos, components, envs, policies, streams
from .batch import SavedRun, load_run
from .errors import FragmentError
from .graph import FragmentGraph, capture
from .predict import profile
from .runtime import RunResult, measure, run
from .seeds import SweepResult, sweep
from .setups import Setup

__all__ = [
    "capture",
    "measure",
    "profile",
    "run",
    "sweep",
    "Setup",
    "SweepResult",
    "explore",
    "debug",
    "runs",
    "attach",
    "load_run",
    "SavedRun",
    "shutdown",
    "FragmentGraph",
    "FragmentError",
    "RunResult",
    "components",
    "envs",
    "algos",
    "policies",
    "streams",
]
__version__ = "0.1.0"


def explore(graph: FragmentGraph, policy="single", cluster=None, **params):
    """Widgets to choose a distribution policy for ``graph`` and see its placement redrawn, compare
    two policies, compose your own, and run the loop from Run and Stop buttons (the kernel stays
    free meanwhile). Parameters as for :func:`run`; see :class:`fragnb.widgets.Explorer`.

    Parameters
    ----------
    graph : FragmentGraph
        A captured loop (:func:`capture` or ``%%fragment``), profiled once under ``single`` on copies
        when the explorer opens, unless ``profile=`` gives its profile.
    policy : str or DistributionPolicy
        The policy the controls show first.
    cluster : optional
        Where the Run button's distributed runs go, as :func:`run` takes it.
    **params
        The policy's parameters the controls show first (``actors=2``), and the explorer's own:
        ``predict_on`` (the cluster preset its predictions are for) and ``profile`` (a
        :class:`~fragnb.predict.Profile` of the loop, from :func:`profile`).

    Returns
    -------
    Explorer
        The widgets; a notebook shows them when they are a cell's last value. Placing and drawing
        start nothing; only the Run button runs the loop.

    Examples
    --------
    >>> import torch, fragnb
    >>> from fragnb.algos.ppo import SMALL_LOOP, small_setup
    >>> globals().update(small_setup(seed=0))  # notebook 01's components: 4 envs, 8 steps
    >>> graph = fragnb.capture(SMALL_LOOP, globals(), name="ppo")
    >>> explorer = fragnb.explore(graph, "coarse", actors=2)
    >>> type(explorer).__name__, explorer.policy.value
    ('Explorer', 'coarse')
    """
    from .widgets import Explorer

    return Explorer(graph, policy, cluster, **params)


def debug() -> None:
    """Replay, here in the kernel, the last distributed run whose cell code raised on a worker, until it
    raises again, and raise it: ``%debug`` then opens in the frame where it failed, with the replica's
    values (:mod:`fragnb.runtime.replay`). Synchronous policies replay; the error of a run that cannot
    says why.

    Raises
    ------
    Exception
        The failed run's own exception, raised again here from the frame where it failed.
    RuntimeError
        When no distributed run has failed in this kernel, or when the replay ends without the error.

    Examples
    --------
    In a kernel where no distributed run has failed, there is nothing to replay:

    >>> import fragnb
    >>> fragnb.debug()
    Traceback (most recent call last):
        ...
    RuntimeError: no failed run to replay in this kernel: fragnb.debug() replays the last distributed run ...
    """
    from .runtime.replay import debug as replay

    replay()


def runs(cluster):
    """The detached runs on ``cluster`` (a ``tcp://`` scheduler address, or a ``distributed.Client`` of one),
    newest first, as a list of records (name, cell, policy, state, progress, checkpoint_dir) that prints as a
    table; ``.cancel(name)`` ends one after its current iteration (:mod:`fragnb.runtime.detached`).

    Examples
    --------
    Detached runs live on a scheduler started on its own (``dask scheduler``), not on the kernel's cluster:

    >>> import fragnb
    >>> fragnb.runs("local")
    Traceback (most recent call last):
        ...
    fragnb.errors.FragmentError: cluster='local' ends with this kernel, and a detached run must outlive it: ...
    """
    from .runtime.detached import runs as listed

    return listed(cluster)


def attach(name: str, cluster, *, graph=None, progress: bool = True, plot: bool = True):
    """Follow the detached run ``name`` on ``cluster`` from where it is until it ends, and return its
    RunResult; given the cell's ``graph`` (captured again in this kernel after the setup cells), leave in its
    namespace what plain Python would (:func:`fragnb.runtime.detached.attach`). A Ctrl-C leaves the run going.

    Examples
    --------
    A run handed over with ``fragnb.run(ppo, "coarse", "tcp://...", actors=2, checkpoint_dir=..., detach=True)``
    is followed, in a later kernel, with ``fragnb.attach("ppo", "tcp://...", graph=ppo)``. The kernel's own
    cluster keeps none:

    >>> import fragnb
    >>> fragnb.attach("ppo", None)
    Traceback (most recent call last):
        ...
    fragnb.errors.FragmentError: cluster=None ends with this kernel, and a detached run must outlive it: ...
    """
    from .runtime.detached import attach as follow
    from .runtime.pipeline import _live

    return follow(name, cluster, graph=graph, live=_live(progress, plot))


def shutdown() -> None:
    """Close the Dask clusters fragnb started in this process, and the process their workers are
    forked from (done at exit anyway).

    Examples
    --------
    Nothing to close in a kernel where no distributed run has started a cluster; after one, the next
    distributed run starts a fresh cluster:

    >>> import fragnb
    >>> fragnb.shutdown()
    """
    import sys

    if "fragnb.runtime.cluster.clusters" in sys.modules:  # nothing to close if no distributed run ever started one
        sys.modules["fragnb.runtime.cluster.clusters"].shutdown(forkserver=True)


def load_ipython_extension(ipython):
    """``%load_ext fragnb``: register the ``%%fragment`` magic. No Dask worker starts yet: the magic
    starts the ones a run needs as it captures the cell (a kernel that only captures and draws holds
    none). ``FRAGNB_WARM=1`` in the environment starts two in the background now, for a first
    distributed run that finds them up."""
    import os
    import sys

    from .ui.magics import FragmentMagics

    ipython.register_magics(FragmentMagics)
    from .runtime.cluster.budget import limit, small

    if note := small(limit()):  # mybinder.org's one core and 2 GB: say so at the top of the notebook
        print(note, file=sys.stderr)
    if os.environ.get("FRAGNB_WARM") == "1":
        from .runtime.cluster.clusters import warm

        warm()
