"""fragnb: write an RL training loop once in a notebook cell; capture it into a fragment graph,
place it with a distribution policy and run it.

>>> %load_ext fragnb                                     # doctest: +SKIP
"""

from . import algos, components, envs
from .capture import capture
from .errors import FragmentError
from .graph import FragmentGraph
from .runtime import RunResult, run

__all__ = ["capture", "run", "FragmentGraph", "FragmentError", "RunResult", "components", "envs", "algos"]
__version__ = "0.1.0"


def load_ipython_extension(ipython):
    """``%load_ext fragnb``: register the ``%%fragment`` magic."""
    from .magics import FragmentMagics

    ipython.register_magics(FragmentMagics)
