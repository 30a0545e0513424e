"""Distribution policies: a name-keyed registry of how fragments are placed.

This module holds data only and imports no cluster library: choosing or checking a policy never
starts a worker.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DistributionPolicy", "POLICIES", "register", "resolve"]


@dataclass(frozen=True)
class DistributionPolicy:
    """Where fragments run, how many copies run, and what each crossing edge becomes.

    Subclass and :func:`register` to add a policy of your own.
    """

    name: str
    mirrors: str
    description: str
    distributed: bool = False


POLICIES: dict[str, DistributionPolicy] = {}


def register(policy: DistributionPolicy) -> DistributionPolicy:
    """Add ``policy`` to the registry under its name (replacing one of the same name)."""
    POLICIES[policy.name] = policy
    return policy


register(DistributionPolicy("single", "a plain loop (CleanRL)", "every fragment in this process; edges are direct references"))


def resolve(policy: str | DistributionPolicy) -> DistributionPolicy:
    """The registered policy of that name, or ``policy`` itself; an unknown name lists the known ones."""
    if isinstance(policy, DistributionPolicy):
        return policy
    try:
        return POLICIES[policy]
    except KeyError:
        raise ValueError(f"unknown distribution policy: {policy!r} (must be one of {sorted(POLICIES)})") from None
