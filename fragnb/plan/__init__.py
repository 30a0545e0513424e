"""Plan: a Placement --> the Script every replica of a run walks, the third stage of a run.

``program`` cuts the cell into per-group segments (loops split per group where they can be, driven
step by step where they cannot) and says how each variable's values combine; ``decoupled`` refuses
what ``async`` and ``srl`` cannot run; ``script`` bundles it all, once per run; ``instrument``
rewrites the cell's code with fragment timers. Pure: nothing here starts a process.
"""

from .program import DrivenLoop, Program, Segment, plan

__all__ = ["plan", "Program", "Segment", "DrivenLoop", "Script", "ReplicaId"]


def __getattr__(name: str):
    """``Script`` and ``ReplicaId`` on first use: ``script`` imports the graph's model, and importing any
    module here (``predict.model`` imports ``program``, for a placement's ``predict``) runs this file first,
    which would close a circle back to the graph."""
    if name not in ("Script", "ReplicaId"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import script

    return getattr(script, name)
