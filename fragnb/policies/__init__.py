"""Distribution policies: graph + parameters --> Placement (replicas, devices, edge operators).

``policy`` holds a policy as data and the registry, ``builtin`` the seven policies of the design's
table, ``placement`` the pure function that applies one to a graph (no cluster library imported).
"""

from ..text import human
from . import builtin  # noqa: F401  registers the built-in policies
from .operators import Operator
from .placement import EdgePlacement, FragmentPlacement, Placement
from .placing import choices, place
from .policy import POLICIES, ROLES, DistributionPolicy, register, resolve
from .transfers import Transfer

__all__ = [
    "DistributionPolicy",
    "Placement",
    "FragmentPlacement",
    "EdgePlacement",
    "Transfer",
    "Operator",
    "POLICIES",
    "ROLES",
    "register",
    "resolve",
    "place",
    "choices",
    "human",
]
