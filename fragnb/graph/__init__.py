"""Capture: a cell's source --AST--> FragmentGraph, the first stage of a run.

``normalize`` rewrites control flow and nested calls into plain statements, ``build`` finds each
statement's role, groups them into fragments and draws the def-use and state edges, ``model`` holds
the graph's data. Nothing here starts a process or imports a cluster library.
"""

from .build import capture
from .model import Edge, Fragment, FragmentGraph, Loop, Statement

__all__ = ["capture", "FragmentGraph", "Fragment", "Edge", "Loop", "Statement"]
