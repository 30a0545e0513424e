"""A distribution policy as data, and the registry of policies by name.

A policy is mostly data: which worker group each role's fragments go to, and how many replicas each
group has; :mod:`fragnb.policies.placement` applies one to a graph.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import ArgumentError
from .modes import Mode, mode_of

__all__ = ["ROLES", "DistributionPolicy", "POLICIES", "register", "resolve"]


ROLES = ("env", "actor", "buffer", "learner", "driver")


@dataclass(frozen=True)
class DistributionPolicy:
    """Where fragments run, how many copies run, and what each crossing edge becomes.

    Parameters
    ----------
    name, mirrors, description : str
        Shown in errors, the README table and placements.
    tradeoff : str
        What the policy gains and what it pays for it, in a sentence (the explorer shows it).
    groups : dict
        Role (``"env"``, ``"actor"``, ``"buffer"``, ``"learner"``, ``"driver"``) to worker group.
    replicas : dict
        Worker group to its replica count: an int, the name of a parameter (``"actors"``), or two
        names ``(workers, per_worker)``: that many worker processes, each running ``per_worker``
        replicas as threads (``srl``'s ring of environment groups on one actor worker).
    gpu_groups : tuple of str
        Groups that run on a GPU when ``device="cuda"`` (or ``"auto"`` and one is present).
    collectives : tuple of str
        Communication inside a replicated group, in words, for the drawing (a mode that averages
        gradients: ``"gradients all-reduced"``).
    required_roles : tuple of str
        Roles the graph must have for the policy to make sense.
    options : dict
        Further parameters and their defaults (``max_staleness`` of ``async``).
    mode : str or Mode
        How the replicas run together (:mod:`fragnb.policies.modes`): ``"lockstep"`` (the default:
        shares of the environments, in step, plain Python's values), ``"averaged"`` (every group
        replicated, gradients all-reduced: ``multi_learner``), ``"fused"`` (averaged, environments on
        the device: ``gpu_only``), ``"whole"`` (each replica the whole cell on re-seeded copies:
        ``data_parallel``), ``"decoupled"`` (the groups other than the driver's run free of it,
        streaming to it and pulling its weights by version: ``async``, ``srl``), ``"local"``
        (``single``).

    Examples
    --------
    A user's own policy, defined in a cell: environments and actors on N workers, buffer and learner
    together on one.

    >>> from fragnb.policies import DistributionPolicy
    >>> mine = DistributionPolicy(
    ...     "my_policy", "a user's own", "actors with their envs on N workers; buffer with the learner",
    ...     groups={"env": "actors", "actor": "actors", "buffer": "learner", "learner": "learner", "driver": "learner"},
    ...     replicas={"actors": "actors", "learner": 1}, required_roles=("actor", "learner"))
    >>> sorted(mine.parameters)
    ['actors', 'device']

    :func:`register` gives it its name everywhere (``fragnb.run(graph, "my_policy")``, ``%%fragment
    --policy``, the explorer); the object itself places a graph as a registered name does:

    >>> import torch, fragnb
    >>> from fragnb.algos.ppo import SMALL_LOOP, small_setup
    >>> globals().update(small_setup(seed=0))  # notebook 01's components: 4 envs, 8 steps
    >>> graph = fragnb.capture(SMALL_LOOP, globals(), name="ppo")
    >>> print(graph.place(mine, actors=2, device="cpu"))
    Placement of 'ppo' under 'my_policy' {'actors': 2, 'device': 'cpu'}
      actors x2 (cpu): env@cell, actor@step, env@step, actor@it
      learner x1 (cpu): buffer@step, buffer@it, learner
      actor@step -> buffer@step [gather: action, logprob, value]
      env@step -> buffer@step [gather: obs, reward, terminated, truncated]
      env@cell -> buffer@step [gather: obs]
      actor@it -> buffer@it [gather: last_value]
      learner -> actor@step [broadcast: policy weights]
      learner -> actor@it [broadcast: policy weights]
    """

    name: str
    mirrors: str
    description: str
    groups: dict[str, str] = field(default_factory=lambda: dict.fromkeys(ROLES, "main"))
    replicas: dict[str, int | str | tuple[str, str]] = field(default_factory=lambda: {"main": 1})
    gpu_groups: tuple[str, ...] = ()
    collectives: tuple[str, ...] = ()
    required_roles: tuple[str, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    mode: Mode | str = "lockstep"
    tradeoff: str = ""

    def __post_init__(self):
        object.__setattr__(self, "mode", mode_of(self.mode))  # chosen once: every stage asks it
        missing = [r for r in ROLES if r not in self.groups]
        if missing:
            raise ValueError(
                f"policy {self.name!r}: groups must give every role a worker group; {missing} have none "
                f"(roles: {list(ROLES)})"
            )
        unknown = sorted(set(self.groups) - set(ROLES))
        if unknown:
            raise ValueError(f"policy {self.name!r}: {unknown} are not roles (roles: {list(ROLES)})")
        if self.mode.whole_copies() and len(set(self.groups.values())) != 1:
            raise ValueError(
                f"policy {self.name!r}: mode {self.mode.name!r} runs the whole cell in each replica: one group for "
                "every role"
            )
        if self.collectives and not self.mode.averages():
            raise ValueError(
                f"policy {self.name!r}: collectives describe gradients averaged across replicas, which mode "
                f"{self.mode.name!r} does not do; give mode='averaged' (or 'whole', 'fused'), or no collectives"
            )
        uncounted = sorted(set(self.groups.values()) - set(self.replicas))
        if uncounted:
            raise ValueError(
                f"policy {self.name!r}: replicas gives no count for the worker groups {uncounted}; "
                "give each an int or the name of a parameter, e.g. replicas={'actors': 'actors', 'learner': 1}"
            )

    @property
    def parameters(self) -> dict[str, Any]:
        """Parameters the policy takes, with their defaults."""
        counts = {n if isinstance(n, str) else n[0]: 1 for n in self.replicas.values() if not isinstance(n, int)}
        return {**counts, **({"device": "auto"} if self.gpu_groups or counts else {}), **self.options}


POLICIES: dict[str, DistributionPolicy] = {}


def register(policy: DistributionPolicy) -> DistributionPolicy:
    """Add ``policy`` to the registry under its name (replacing one of the same name).

    Parameters
    ----------
    policy : DistributionPolicy
        The policy to register.

    Returns
    -------
    DistributionPolicy
        ``policy`` itself.

    Examples
    --------
    >>> from fragnb.policies import POLICIES, DistributionPolicy, register, resolve
    >>> mine = register(DistributionPolicy(
    ...     "actors_apart", "a user's own", "actors with their envs on N workers; buffer with the learner",
    ...     groups={"env": "actors", "actor": "actors", "buffer": "learner", "learner": "learner", "driver": "learner"},
    ...     replicas={"actors": "actors", "learner": 1}, required_roles=("actor", "learner")))
    >>> resolve("actors_apart") is mine, "actors_apart" in POLICIES
    (True, True)
    >>> del POLICIES["actors_apart"]  # the registry is a dict: this unregisters it
    """
    POLICIES[policy.name] = policy
    return policy


def resolve(policy: str | DistributionPolicy) -> DistributionPolicy:
    """The registered policy of that name, or ``policy`` itself; an unknown name lists the known ones.

    Parameters
    ----------
    policy : str or DistributionPolicy
        A registered name, or a policy.

    Returns
    -------
    DistributionPolicy

    Raises
    ------
    ValueError
        For a name no policy is registered under.

    Examples
    --------
    >>> from fragnb.policies import resolve
    >>> coarse = resolve("coarse")
    >>> coarse.name, coarse.parameters
    ('coarse', {'actors': 1, 'device': 'auto'})
    >>> resolve(coarse) is coarse
    True
    >>> resolve("corase")
    Traceback (most recent call last):
        ...
    ValueError: unknown distribution policy: 'corase' (must be one of ['async', 'coarse', ...])
    """
    if isinstance(policy, DistributionPolicy):
        return policy
    if not isinstance(policy, str):
        raise ArgumentError(
            f"policy={policy!r:.60} is not accepted: give a policy's name (one of {sorted(POLICIES)}) or a "
            "DistributionPolicy (parameters go beside it: policy='coarse', actors=2)"
        )
    try:
        return POLICIES[policy]
    except KeyError:
        raise ValueError(f"unknown distribution policy: {policy!r} (must be one of {sorted(POLICIES)})") from None
