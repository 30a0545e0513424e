"""Runtime: a planned run --> execution --> RunResult, the fourth stage.

``run`` is the one way through (place once, plan once, safety net, execute); a ``Job`` goes to one
of three executors with one method, ``execute(job) -> RunResult``: ``local.InNotebook`` (``single``),
``threads.InThreads`` (the safety net's replicas) and ``plane.OnDask`` (a cluster's workers). Each
replica walks the Script (``walker``, ``decoupled``), exchanging values over ``channels`` and
combining them with ``edges``; ``merge`` brings what they hold back. ``events`` is how the notebook
watches work on a cluster (a run's replicas, a sweep's runs: ``sweep``). Dask is imported only when a
distributed policy runs.
"""

from .measure import measure
from .pipeline import CHECKPOINT_EVERY, CHECKPOINT_SHARE, run, run_placement
from .result import RunResult, first_solved

__all__ = ["run", "run_placement", "RunResult", "first_solved", "measure", "CHECKPOINT_EVERY", "CHECKPOINT_SHARE"]
