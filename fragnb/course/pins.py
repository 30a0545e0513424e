"""Pins: the course's environment as exact versions, for every place that rebuilds it elsewhere.

The autograder zips (:mod:`.handouts`) and Binder (``binder/environment.yml``) each rebuild the environment the
course ran and was tested in, away from it: a grading machine months later, mybinder.org's image. Both take
the same list: every distribution that some requirements need, with what those need in turn, at the version
installed where the list is made (``make handouts``, ``make binder``: run them from the course's own
environment, the one ``make setup`` builds and CI tests). Exact pins rather than ``pyproject.toml``'s floors,
so that a rebuild gets the releases the course's checks passed with, not whatever is newest that day.
"""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["pins", "binder_environment", "write_binder"]

#: What the course adds to fragnb's own dependencies in a class (pyproject.toml's ``class`` extra).
CLASS_EXTRA = "class"
#: PyTorch's index of CPU builds: pypi.org's ``torch`` is the CUDA build on Linux (gigabytes of CUDA libraries);
#: a pin ``torch==2.13.0`` takes ``2.13.0+cpu`` from here, the build the course runs with.
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
#: The build backend's floor (pyproject.toml's build-system): conda's build tools float, the course's packages do not.
SETUPTOOLS = "68"


def pins(requirements: list[str]) -> list[str]:
    """``name==version`` for every distribution ``requirements`` need, with what those need in turn, at the
    version installed here; a local label (``2.13.0+cpu``) is dropped, so that the pin names the release. A
    needed distribution that is not installed here is named without a version; fragnb itself is left out."""
    from importlib.metadata import PackageNotFoundError, distribution

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import Version

    def needed(requirement: Requirement, extras: frozenset[str]) -> bool:
        marker = requirement.marker
        return marker is None or any(marker.evaluate({"extra": e}) for e in {"", *extras})

    out: dict[str, str] = {}
    todo = [r for r in map(Requirement, requirements) if needed(r, frozenset())]
    seen: set = set()
    while todo:
        req = todo.pop()
        key = (canonicalize_name(req.name), frozenset(req.extras))
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = distribution(req.name)
        except PackageNotFoundError:
            out.setdefault(key[0], req.name)
            continue
        out[key[0]] = f"{dist.metadata['Name']}=={Version(dist.version).public}"
        todo += [dep for dep in map(Requirement, dist.requires or []) if needed(dep, frozenset(req.extras))]
    out.pop("fragnb", None)
    return [out[k] for k in sorted(out)]


def binder_environment(pyproject: Path) -> str:
    """``binder/environment.yml`` for repo2docker: conda's Python (this one's minor version), pip, setuptools
    (``postBuild`` builds fragnb without an isolated build environment) and graphviz's ``dot``; then pip, from
    PyTorch's CPU index and PyPI, every runtime dependency of fragnb and of its ``class`` extra, pinned."""
    import tomllib

    project = tomllib.loads(pyproject.read_text())["project"]
    pinned = pins([*project["dependencies"], *project["optional-dependencies"][CLASS_EXTRA]])
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    lines = [
        "# Binder (repo2docker) builds the course from this folder. Written by `make binder` from the course's own",
        "# environment (fragnb/course/pins.py): every package fragnb and its `class` extra need, theirs too, pinned to",
        "# the release the course's tests passed with; tests/test_packaging.py checks it against pyproject.toml.",
        "# repo2docker installs this before it copies the repository, so postBuild installs fragnb itself.",
        "name: fragnb",
        "channels:",
        "  - conda-forge",
        "dependencies:",
        f"  - python={python}",
        "  - pip",
        f"  - setuptools>={SETUPTOOLS}   # postBuild: pip install --no-build-isolation -e .",
        "  - graphviz            # the `dot` program",
        "  - pip:",
        f"      - --extra-index-url {TORCH_CPU_INDEX}",
        *(f"      - {p}" for p in pinned),
    ]
    return "\n".join(lines) + "\n"


def write_binder(root: Path) -> Path:
    """Write ``root/binder/environment.yml`` from the environment this runs in."""
    path = root / "binder" / "environment.yml"
    path.write_text(binder_environment(root / "pyproject.toml"))
    print(f"{path}: {path.read_text().count('==')} pins")
    return path
