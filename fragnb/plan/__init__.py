"""Plan: a Placement --> the Script every replica of a run walks, the third stage of a run.

``program`` cuts the cell into per-group segments (loops split per group where they can be, driven
step by step where they cannot) and says how each variable's values combine; ``decoupled`` refuses
what ``async`` and ``srl`` cannot run; ``script`` bundles it all, once per run; ``instrument``
rewrites the cell's code with fragment timers. Pure: nothing here starts a process.
"""

from .program import DrivenLoop, Program, Segment, plan
from .script import ReplicaId, Script

__all__ = ["plan", "Program", "Segment", "DrivenLoop", "Script", "ReplicaId"]
