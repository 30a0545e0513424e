"""The project's files agree with each other, and the layers import one way."""

import ast
import os
import pathlib
import re
import subprocess
import sys
import tomllib

import pytest
import yaml

from conftest import ROOT

# conda-forge names for PyPI names that differ.
CONDA_NAME = {"torch": "pytorch", "graphviz": "python-graphviz"}
CONDA_ONLY = {"python", "pip", "graphviz"}  # the interpreter, the installer, the `dot` program


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~\[;]", requirement.strip(), maxsplit=1)[0].lower()


def test_environment_yml_names_the_same_dependencies_as_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    pypi = {_name(r) for r in project["dependencies"] + extras["dev"] + extras["bench"] + extras["class"]}
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda = {_name(d) for d in env["dependencies"] if isinstance(d, str)} - CONDA_ONLY
    pip_part = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    pip_only = {_name(p) for p in pip_part if p != "-e ."}  # not on conda-forge
    assert conda | pip_only == {CONDA_NAME.get(n, n) if n not in pip_only else n for n in pypi}
    assert "-e ." in pip_part


def test_binders_environment_pins_every_package_the_course_needs_within_pyprojects_floors():
    """binder/ builds the course on mybinder.org (repo2docker): `make binder` writes its environment from the
    course's own (fragnb/course/pins.py), every runtime and `class` dependency pinned with == to a release that
    meets pyproject.toml's floor; conda brings Python, pip, setuptools (postBuild builds without isolation) and
    graphviz's `dot`, and postBuild installs fragnb itself (repo2docker installs the environment before it copies
    the repository, so `-e .` cannot be there)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    conda = yaml.safe_load((ROOT / "binder" / "environment.yml").read_text())["dependencies"]
    names = {_name(d) for d in conda if isinstance(d, str)}
    assert "python=3.11" in conda and {"pip", "setuptools", "graphviz"} <= names, conda
    (pip,) = [d["pip"] for d in conda if isinstance(d, dict)]
    assert pip[0] == "--extra-index-url https://download.pytorch.org/whl/cpu"  # torch's CPU build, not CUDA's
    pinned = {canonicalize_name(r.split("==")[0]): r.split("==")[1] for r in pip[1:]}
    assert all("==" in r for r in pip[1:]), [r for r in pip[1:] if "==" not in r]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for requirement in map(Requirement, [*project["dependencies"], *project["optional-dependencies"]["class"]]):
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"binder/environment.yml does not pin {name}: run `make binder`"
        assert requirement.specifier.contains(pinned[name]), f"{name}=={pinned[name]} is below {requirement}"
    post = (ROOT / "binder" / "postBuild").read_text()
    assert "pip install --no-deps --no-build-isolation -e ." in post and os.access(
        ROOT / "binder" / "postBuild", os.X_OK
    )


def test_binders_environment_is_what_make_binder_writes_from_the_pins(monkeypatch):
    from fragnb.course import pins

    monkeypatch.setattr(pins, "pins", lambda requirements: ["dask==2026.8.0", "torch==2.13.0"])
    text = pins.binder_environment(ROOT / "pyproject.toml")
    conda = yaml.safe_load(text)["dependencies"]
    assert conda[-1] == {
        "pip": ["--extra-index-url https://download.pytorch.org/whl/cpu", "dask==2026.8.0", "torch==2.13.0"]
    }


def test_pins_follow_what_a_requirement_needs_in_turn_at_the_installed_release():
    from importlib.metadata import version

    from fragnb.course.pins import pins

    got = pins(["distributed>=2024.8"])
    assert f"distributed=={version('distributed')}" in got and f"dask=={version('dask')}" in got  # dask in turn
    assert all(p.split("==")[0] != "fragnb" for p in got)


def project_dependencies() -> list[str]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]


def test_capture_and_policies_import_no_cluster_or_plotting_library():
    code = (
        "import sys, fragnb, fragnb.graph, fragnb.policies, fragnb.plan, fragnb.ui.render; "
        "heavy = [m for m in ('dask', 'distributed', 'matplotlib', 'ipywidgets') if m in sys.modules]; "
        "print(heavy); sys.exit(bool(heavy))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    # `import fragnb` leaves the run's live view (tqdm's bar, the dashboard) to the first run that shows one. Not
    # tqdm itself: torch imports it (torch.hub), so the module that would bring it is what is checked.
    code = (
        "import sys, fragnb; live = [m for m in ('fragnb.ui.live', 'fragnb.ui') if m in sys.modules]; "
        "print(live); sys.exit(bool(live))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


# -- the layers --------------------------------------------------------------------------------------
#: The house, in the order data flows: a module may import from its own layer and the ones before it.
#: Each entry names a module and covers the modules under it too, so ``fragnb.runtime`` covers
#: ``fragnb.runtime.job``; a module belongs to the layer of the LONGEST entry that covers it, so a room
#: of the runtime (``fragnb.runtime.worker``) is a layer of its own below the run at ``fragnb.runtime``'s
#: top. The one exception is the root: the entry ``fragnb`` names the package's own ``__init__`` alone
#: (as a prefix it would cover every module, and a module left out of every layer would pass unseen).
#: Every package (sub-package) is named by an entry of its own, so a new room is placed by a decision:
#: under its parent's entry alone it would fall silently into the parent's layer.
ROOT_PACKAGE = "fragnb"
LAYERS = [
    (
        "base",
        [
            "fragnb.errors",
            "fragnb.text",
            "fragnb.streams",
            "fragnb.components",
            "fragnb.shards",
            "fragnb.rows",
            "fragnb.arguments",
            "fragnb.stats",
            "fragnb.sinks",
        ],
    ),
    ("reference components", ["fragnb.envs", "fragnb.algos"]),
    ("capture", ["fragnb.graph"]),
    ("placement", ["fragnb.policies"]),
    ("plan", ["fragnb.plan"]),
    ("execution: channels and collectives", ["fragnb.runtime.net"]),
    ("execution: clusters", ["fragnb.runtime.cluster"]),
    ("execution: a worker's replicas", ["fragnb.runtime.worker"]),
    ("execution: the run and its executors", ["fragnb.runtime"]),
    ("prediction", ["fragnb.predict"]),  # after execution: profile and calibrate run the loop
    ("results", ["fragnb.ui", "fragnb.widgets", "fragnb.setups", "fragnb.seeds"]),
    (
        "entry points",
        [ROOT_PACKAGE, "fragnb.notebook", "fragnb.demo", "fragnb.course", "fragnb.batch", "fragnb.__main__"],
    ),
]
#: Facades: a method of a lower layer's object that hands over to a later layer, importing it inside
#: the method (so importing the lower module loads nothing of the later one). Each is a user-facing
#: shortcut the design names, approved for the one function that holds the import (its qualified name,
#: ``Class.method``): another function of the same module that looks ahead is not a facade.
FACADES = {
    ("fragnb.graph.model", "FragmentGraph.place", "fragnb.policies"): "placing a captured graph in one call",
    ("fragnb.graph.model", "FragmentGraph.render", "fragnb.ui.render"): "drawing the graph",
    ("fragnb.graph.model", "FragmentGraph._repr_mimebundle_", "fragnb.ui.render"): "the graph's notebook display",
    ("fragnb.policies.placement", "Placement.render", "fragnb.ui.render"): "drawing the placement",
    ("fragnb.policies.placement", "Placement._repr_mimebundle_", "fragnb.ui.render"): "the placement's display",
    ("fragnb.policies.placement", "Placement.predict", "fragnb.predict.model"): "a placement's predicted throughput",
    ("fragnb.runtime.result", "RunResult.plot", "fragnb.ui.live"): "a run's learning curve in a notebook",
    ("fragnb.runtime.result", "RunResult.timeline", "fragnb.ui.live"): "a run's timeline in a notebook",
    ("fragnb.runtime.pipeline", "_live", "fragnb.ui.live"): "run(progress=True): the default view, bar and dashboard",
}
#: A module named in a string (``importlib.import_module``, ``__import__``, ``sys.modules``) is an import no
#: layer check sees: only the entry points may name the package's modules so, and these, each for its reason.
#: (A test of ``"fragnb.x" in sys.modules`` alone runs and loads nothing, and is not one.)
BY_NAME = {
    ("fragnb.widgets.running", "Runner._ended", "fragnb.runtime.cluster.clusters"): (
        "Stop shuts down the cluster a run started, without loading the cluster module when no run did"
    ),
    ("fragnb.widgets.running", "_clusters", "fragnb.runtime.cluster.clusters"): (
        "the remote clusters a run connected to, without loading the cluster module when no run did"
    ),
}
#: How an import runs, most eager first: when the importing module is imported, when one of its
#: functions is called, or never (under ``if TYPE_CHECKING:``, for annotations).
AT_IMPORT, IN_FUNCTION, TYPING_ONLY = "at import", "in a function", "for annotations"


def module_files(root: pathlib.Path) -> dict[str, pathlib.Path]:
    """Module name -> file, for the package ``root/fragnb`` and its widgets (``root/widgets`` installs as
    ``fragnb.widgets``)."""
    files = {}
    for path in sorted((root / "fragnb").rglob("*.py")) + sorted((root / "widgets").glob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        parts[0] = "fragnb.widgets" if parts[0] == "widgets" else parts[0]
        if parts[-1] == "__init__":
            parts.pop()
        files[".".join(parts)] = path
    return files


def _typing_only(tree: ast.Module) -> set[int]:
    blocks = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.If) and ast.unparse(n.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
    ]
    return {id(n) for block in blocks for body in block.body for n in ast.walk(body)}


def _holders(tree: ast.Module) -> dict[int, str]:
    """Node -> the qualified name of the innermost function holding it (``FragmentGraph.place``; a nested
    function is ``outer.inner``), for the nodes that run when a function is called, not at import."""
    holder: dict[int, str] = {}

    def visit(node: ast.AST, scope: str, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            if function:
                holder[id(child)] = function
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                name = scope + getattr(child, "name", "<lambda>")
                visit(child, name + ".", name)
            else:  # a class names the methods under it; its body runs where the class statement does
                visit(child, scope + child.name + "." if isinstance(child, ast.ClassDef) else scope, function)

    visit(tree, "", "")
    return holder


def imports(files: dict[str, pathlib.Path]) -> dict[str, set[tuple[str, str, str]]]:
    """Module -> the package's modules it imports, as (target, how, function): how the import runs
    (:data:`AT_IMPORT`, :data:`IN_FUNCTION` or :data:`TYPING_ONLY`) and the function that holds it
    (empty at the module's top)."""
    out = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text())
        typing_only, holders = _typing_only(tree), _holders(tree)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else []))
                # `from . import text` imports the module fragnb.text; `from .graph import capture` the package
                targets = [f"{target}.{a.name}" if f"{target}.{a.name}" in files else target for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            function = holders.get(id(node), "")
            how = TYPING_ONLY if id(node) in typing_only else IN_FUNCTION if function else AT_IMPORT
            found |= {(t, how, function) for t in targets if t in files and t != name}
        out[name] = found
    return out


def _named(node: ast.AST) -> str | None:
    """The module that a call of ``importlib.import_module`` or ``__import__``, or a look-up in
    ``sys.modules``, names, if that is one of the package's (``fragnb.x``, or relative: ``.x``). A name
    built at run time counts when a string of it does (``f"fragnb.algos.{name}"``)."""
    call = ast.unparse(node.func) if isinstance(node, ast.Call) and node.args else ""
    if call.endswith(("import_module", "__import__")) or call.startswith("sys.modules."):
        arg = node.args[0]  # sys.modules.get, .pop, .setdefault
    elif isinstance(node, ast.Subscript) and ast.unparse(node.value) == "sys.modules":
        arg = node.slice
    else:
        return None
    strings = [n.value for n in ast.walk(arg) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    if any(re.match(r"fragnb\b|\.+[A-Za-z_]", s) for s in strings):
        return arg.value if isinstance(arg, ast.Constant) else ast.unparse(arg)
    return None


def _covers(entry: str, module: str) -> bool:
    return module == entry or (entry != ROOT_PACKAGE and module.startswith(entry + "."))


def layer_of(module: str) -> int | None:
    """The index in :data:`LAYERS` of the longest entry that covers ``module``; None if none does."""
    covering = [(len(entry), i) for i, (_, entries) in enumerate(LAYERS) for entry in entries if _covers(entry, module)]
    return max(covering)[1] if covering else None


def unlayered(root: pathlib.Path) -> list[str]:
    """Modules no layer covers, packages no entry names, entries listed twice (the longest match would be
    two layers) and entries that name no module (a layer map that no longer describes the package)."""
    modules = module_files(root)
    entries = [entry for _, names in LAYERS for entry in names]
    problems = [
        f"{m} is in no layer: add it (or its package) to a layer of LAYERS" for m in modules if layer_of(m) is None
    ]
    problems += [
        f"{e} is listed {entries.count(e)} times in LAYERS: a module must be in exactly one layer"
        for e in sorted(set(entries))
        if entries.count(e) > 1
    ]
    # a folder of modules, `__init__.py` or not (a namespace package imports as well)
    packages = {m if path.name == "__init__.py" else m.rpartition(".")[0] for m, path in modules.items()}
    problems += [
        f"package {p} is named by no entry of LAYERS: list it in LAYERS (in its parent's layer, or a layer of its own)"
        for p in sorted(packages - set(entries) - {ROOT_PACKAGE})
    ]
    problems += [f"{e} in LAYERS names no module" for e in entries if not any(_covers(e, m) for m in modules)]
    return problems


def upward_imports(root: pathlib.Path) -> list[str]:
    """Imports of a later layer that are not :data:`FACADES` (at the module's top, or in a function no
    facade names), and facades no longer there. Annotations-only imports (under ``if TYPE_CHECKING:``) are
    exempt: they never run, so they load nothing and make no order of imports; the names they bring are a
    type's spelling, not a use of the later layer's code (a placement is annotated with the graph it
    places, not the reverse)."""
    found = imports(module_files(root))
    problems = []
    for module, sites in sorted(found.items()):
        for target, how, function in sorted(sites):
            if how == TYPING_ONLY or layer_of(target) <= layer_of(module) or (module, function, target) in FACADES:
                continue
            where = f"in {function}" if function else how
            problems.append(
                f"{module} ({LAYERS[layer_of(module)][0]}) imports {target} ({LAYERS[layer_of(target)][0]}) {where}: "
                "a later layer, and not a facade"
            )
    problems += [
        f"facade {m} -> {t} in {f} ({why}) is no longer there: remove it from FACADES"
        for (m, f, t), why in sorted(FACADES.items())
        if (t, IN_FUNCTION, f) not in found.get(m, ())
    ]
    return problems


def imports_by_name(root: pathlib.Path) -> list[str]:
    """Modules of the package named in a string (see :func:`_named`) outside the entry points and
    :data:`BY_NAME`, and uses in :data:`BY_NAME` no longer there."""
    found = set()
    for module, path in module_files(root).items():
        tree = ast.parse(path.read_text())
        holders = _holders(tree)
        found |= {(module, holders.get(id(n), ""), t) for n in ast.walk(tree) if (t := _named(n))}
    problems = [
        f"{m} ({LAYERS[layer_of(m)][0]}) reaches {t} by name {f'in {f}' if f else 'at import'}: the layer "
        "checks do not see it; import it, or list it in BY_NAME with the reason"
        for m, f, t in sorted(found)
        if layer_of(m) != len(LAYERS) - 1 and (m, f, t) not in BY_NAME
    ]
    problems += [
        f"{m} naming {t} in {f} ({why}) is no longer there: remove it from BY_NAME"
        for (m, f, t), why in sorted(BY_NAME.items())
        if (m, f, t) not in found
    ]
    return problems


def import_circles(root: pathlib.Path) -> list[str]:
    """Circles of imports that run (inside functions too: a circle a late import hides is still a
    circle in the design), each once, starting at its smallest module.

    Importing ``a.b.c`` runs the ``__init__`` of the packages ``a`` and ``a.b`` first, and what those import
    at import time, save the packages the importer is itself inside (they ran before it). Such a run is a
    node of its own, ``a.b.__init__``, whose imports are the package's at import only: importing a module
    of a package calls none of the package's functions."""
    files = module_files(root)
    found = imports(files)
    runs = {m: {t for t, how, _ in sites if how != TYPING_ONLY} for m, sites in found.items()}
    packages = {m for m, path in files.items() if path.name == "__init__.py"}
    runs |= {f"{p}.__init__": {t for t, how, _ in found[p] if how == AT_IMPORT} for p in packages}

    def inits(importer: str, target: str) -> set[str]:  # the root is above every importer: it never shows
        inside = importer.removesuffix(".__init__")
        above = {target.rsplit(".", n)[0] for n in range(1, target.count(".") + 1)}
        return {f"{p}.__init__" for p in above & packages if not (inside == p or inside.startswith(p + "."))}

    graph = {m: targets | {i for t in targets for i in inits(m, t)} for m, targets in runs.items()}
    circles = set()
    for start in graph:  # the shortest path from each module back to itself
        paths, seen = [[start]], {start}
        while paths:
            path = paths.pop(0)
            for nxt in sorted(graph.get(path[-1], ())):
                if nxt == start:
                    i = path.index(min(path))
                    circles.add(tuple(path[i:] + path[:i]))
                elif nxt not in seen:
                    seen.add(nxt)
                    paths.append(path + [nxt])
    return ["import circle: " + " -> ".join(c + (c[0],)) for c in sorted(circles)]


def test_every_module_is_in_exactly_one_layer():
    problems = unlayered(ROOT)
    assert not problems, "\n".join(problems)


def test_no_module_imports_a_later_layer_but_the_named_facades():
    problems = upward_imports(ROOT)
    assert not problems, "\n".join(problems)


def test_no_module_but_the_entry_points_names_the_packages_modules_in_a_string():
    problems = imports_by_name(ROOT)
    assert not problems, "\n".join(problems)


def test_no_import_circles():
    problems = import_circles(ROOT)
    assert not problems, "\n".join(problems)


GUARDS = (unlayered, upward_imports, imports_by_name, import_circles)


def _copy(root: pathlib.Path) -> pathlib.Path:
    """A copy of the package (``fragnb`` and ``widgets``) under ``root``, to plant a fault in."""
    import shutil

    for name in ("fragnb", "widgets"):
        shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def _edit(root: pathlib.Path, module: str, change) -> None:
    path = root / "fragnb" / module
    path.write_text(change(path.read_text()))


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> dict[str, list[str]]:
    """What each guard reports on an unplanted copy of the package: what it reports on the repository (so
    nothing, once that is clean), the copy changing nothing a guard reads."""
    root = _copy(tmp_path_factory.mktemp("clean"))
    reported = {guard.__name__: guard(root) for guard in GUARDS}
    assert reported == {guard.__name__: guard(ROOT) for guard in GUARDS}
    return reported


def _planted(clean: dict[str, list[str]], root: pathlib.Path) -> dict[str, list[str]]:
    """What each guard reports on the planted copy ``root`` and not on the clean one (guards that report
    nothing new are left out, so a fault that trips the wrong guard too shows)."""
    found = {g.__name__: sorted(set(g(root)) - set(clean[g.__name__])) for g in GUARDS}
    print("\n".join(line for lines in found.values() for line in lines))  # shown with -s
    return {name: lines for name, lines in found.items() if lines}


def test_the_guards_find_a_planted_upward_import(clean, tmp_path):
    # capture reaching up to the results, at the top of the module (after `from __future__`, which must come
    # first); to a new module that imports nothing, so that no circle closes and only this guard sees it
    planted = _copy(tmp_path)
    (planted / "fragnb" / "ui" / "leaf.py").write_text('"""Imports nothing."""\n')
    future = "from __future__ import annotations\n"
    _edit(planted, "graph/model.py", lambda text: text.replace(future, future + "\nfrom ..ui import leaf\n", 1))
    assert _planted(clean, planted) == {
        "upward_imports": [
            "fragnb.graph.model (capture) imports fragnb.ui.leaf (results) at import: a later layer, and not a facade"
        ]
    }


def test_the_guards_find_a_planted_circle(clean, tmp_path):
    # two modules of one layer that import each other
    planted = _copy(tmp_path)
    _edit(planted, "errors.py", lambda text: text + "\nfrom . import text  # planted\n")
    _edit(planted, "text.py", lambda text: text + "\nfrom . import errors  # planted\n")
    assert _planted(clean, planted) == {
        "import_circles": ["import circle: fragnb.errors -> fragnb.text -> fragnb.errors"]
    }


def test_the_guards_find_a_planted_module_in_no_layer(clean, tmp_path):
    planted = _copy(tmp_path)
    (planted / "fragnb" / "stray.py").write_text('"""In no layer."""\n')
    assert _planted(clean, planted) == {
        "unlayered": ["fragnb.stray is in no layer: add it (or its package) to a layer of LAYERS"]
    }


def test_the_guards_find_a_planted_package_no_entry_names(clean, tmp_path):
    # a new room of the runtime, which its parent's entry `fragnb.runtime` covers
    planted = _copy(tmp_path)
    (planted / "fragnb" / "runtime" / "newroom").mkdir()
    (planted / "fragnb" / "runtime" / "newroom" / "__init__.py").write_text('"""A room no entry names."""\n')
    assert _planted(clean, planted) == {
        "unlayered": [
            "package fragnb.runtime.newroom is named by no entry of LAYERS: list it in LAYERS (in its parent's "
            "layer, or a layer of its own)"
        ]
    }


def test_a_facade_is_the_one_function_it_names_not_its_module(clean, tmp_path):
    # a second lazy import of the placement, in a new method of a module whose FragmentGraph.place is a facade
    planted = _copy(tmp_path)
    method = "    def place(self"
    lazy = "    def place_twice(self):\n        from ..policies import place\n\n        return place(self)\n\n"
    _edit(planted, "graph/model.py", lambda text: text.replace(method, lazy + method, 1))
    assert _planted(clean, planted) == {
        "upward_imports": [
            "fragnb.graph.model (capture) imports fragnb.policies (placement) in FragmentGraph.place_twice: "
            "a later layer, and not a facade"
        ]
    }


def test_the_longest_entry_decides_and_the_root_names_only_itself():
    names = {i: name for i, (name, _) in enumerate(LAYERS)}
    assert names[layer_of("fragnb")] == "entry points"
    assert names[layer_of("fragnb.runtime.worker.walker")] == "execution: a worker's replicas"
    assert names[layer_of("fragnb.runtime.pipeline")] == "execution: the run and its executors"
    assert layer_of("fragnb.nowhere") is None


def test_the_guards_find_a_planted_import_by_name(clean, tmp_path):
    # the run's pipeline and live view, reached from capture through strings the import statements do not show
    planted = _copy(tmp_path)
    by_name = (
        "\n\ndef _planted(name):\n"
        "    import importlib\n    import sys\n\n"
        '    importlib.import_module("fragnb.runtime.pipeline")\n'
        '    sys.modules.get("fragnb.ui.live")\n'
        '    return sys.modules[f"fragnb.ui.{name}"]\n'
    )
    _edit(planted, "graph/model.py", lambda text: text + by_name)
    who = "fragnb.graph.model (capture) reaches"
    why = "by name in _planted: the layer checks do not see it; import it, or list it in BY_NAME with the reason"
    assert _planted(clean, planted) == {
        "imports_by_name": [
            f"{who} f'fragnb.ui.{{name}}' {why}",
            f"{who} fragnb.runtime.pipeline {why}",
            f"{who} fragnb.ui.live {why}",
        ]
    }


def test_the_guards_find_a_planted_circle_through_a_packages_init(clean, tmp_path):
    # a function of envs imports one module of algos; importing it runs algos/__init__.py first, which imports
    # a module that imports the envs module back: no import statement names the package's __init__
    planted = _copy(tmp_path)
    (planted / "fragnb" / "envs" / "planted.py").write_text("def f():\n    from ..algos import a2c\n")
    (planted / "fragnb" / "algos" / "planted.py").write_text("from ..envs import planted\n")
    _edit(planted, "algos/__init__.py", lambda text: text + "\nfrom . import planted\n")
    assert _planted(clean, planted) == {
        "import_circles": [
            "import circle: fragnb.algos.__init__ -> fragnb.algos.planted -> fragnb.envs.planted -> "
            "fragnb.algos.__init__"
        ]
    }


def test_the_guards_find_the_circle_plans_init_made_when_it_imported_the_script(clean, tmp_path):
    # the real circle this modelling found: a placement's `predict` imports predict.model, which imports
    # plan.program, which runs plan/__init__.py first; when that imported plan.script, the graph's model came back
    planted = _copy(tmp_path)
    _edit(planted, "plan/__init__.py", lambda text: text + "\nfrom .script import ReplicaId, Script\n")
    found = _planted(clean, planted)
    assert list(found) == ["import_circles"]
    assert (
        "import circle: fragnb.graph.model -> fragnb.policies -> fragnb.policies.placement -> fragnb.predict.model -> "
        "fragnb.plan.__init__ -> fragnb.plan.script -> fragnb.graph.model"
    ) in found["import_circles"]


# -- one place per policy kind ------------------------------------------------------------------------------
#: The flags policy kinds once were, read in 13 modules; every stage now asks the policy's mode.
KIND_FLAGS = ("whole", "decoupled", "fused")


def _is_mode(node: ast.AST) -> bool:
    """Whether ``node`` spells a mode: ``mode`` or ``<anything>.mode`` (``script.mode``, ``policy.mode``)."""
    return (isinstance(node, ast.Name) and node.id == "mode") or (
        isinstance(node, ast.Attribute) and node.attr == "mode"
    )


def kind_branches(source: str, policies: set[str]) -> list[str]:
    """Where ``source`` decides by a policy's kind rather than by asking its mode: a comparison with a
    policy's name, a read of a kind flag (``policy.whole``, ``script.decoupled``, ``policy.fused``), a read of
    a mode's own declarations (``mode._splits``) or of a method without asking it (``script.mode.walker ==
    "free"``), a comparison of what a mode answers or of its name (``mode.walker() == "free"``), or a test of
    a mode's class (``isinstance(mode, Decoupled)``): the mode's methods answer, and the answer is used, not
    branched on by kind."""
    from fragnb.policies.modes import MODES, Mode

    methods = {n for n in dir(Mode) if not n.startswith("_") and callable(getattr(Mode, n))}
    classes = {cls.__name__ for cls in MODES.values()} | {"Mode"}
    tree = ast.parse(source)
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and all(
            isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn, ast.Is, ast.IsNot)) for op in node.ops
        ):
            sides = (node.left, *node.comparators)
            named = [c.value for c in sides if isinstance(c, ast.Constant)]
            if all(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops):  # `"fine" in curves` looks up a key
                found += [f"line {node.lineno}: compares with the policy name {n!r}" for n in named if n in policies]
            asked = [
                c
                for c in sides
                if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and _is_mode(c.func.value)
            ]
            asked += [c for c in sides if isinstance(c, ast.Attribute) and _is_mode(c.value)]
            found += [f"line {node.lineno}: compares what the mode answers ({ast.unparse(c)})" for c in asked]
            found += [
                f"line {node.lineno}: compares a mode's class"
                for c in sides
                if isinstance(c, ast.Name) and c.id in classes
            ]
        elif (
            isinstance(node, ast.Call)
            and ast.unparse(node.func) in ("isinstance", "issubclass")
            and len(node.args) == 2
        ):
            kinds = [n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name) and n.id in classes]
            found += [f"line {node.lineno}: tests a mode's class ({k})" for k in kinds]
        elif isinstance(node, ast.Attribute) and node.attr in KIND_FLAGS and not _is_mode(node.value):
            found.append(f"line {node.lineno}: reads the kind flag .{node.attr}")
        elif isinstance(node, ast.Attribute) and _is_mode(node.value):
            if node.attr.startswith("_") and not node.attr.startswith("__"):
                found.append(f"line {node.lineno}: reads the mode's own declaration .{node.attr}")
            elif node.attr in methods and id(node) not in called:
                found.append(f"line {node.lineno}: reads .{node.attr} of a mode without asking it (call the method)")
    return found


def test_no_module_outside_the_policies_branches_on_a_policy_kind():
    from fragnb.policies import POLICIES

    branches = [
        f"{module}: {b}"
        for module, path in module_files(ROOT).items()
        if not module.startswith("fragnb.policies")
        for b in kind_branches(path.read_text(), set(POLICIES))
    ]
    assert not branches, "ask the policy's mode (fragnb.policies.modes) instead:\n" + "\n".join(branches)


def test_the_kind_guard_finds_a_planted_name_comparison_and_a_flag():
    from fragnb.policies import POLICIES

    planted = "if policy.name == 'async':\n    pass\nif script.decoupled or policy.whole:\n    pass\nx = mode.fused()\n"
    assert kind_branches(planted, set(POLICIES)) == [
        "line 1: compares with the policy name 'async'",
        "line 3: reads the kind flag .decoupled",
        "line 3: reads the kind flag .whole",
    ]


@pytest.mark.parametrize(
    "planted, found",
    [
        ('if script.mode.walker == "free":\n    pass\n', "compares what the mode answers"),
        ('if script.mode.walker == "free":\n    pass\n', "reads .walker of a mode without asking it"),
        ('if script.mode.walker() == "free":\n    pass\n', "compares what the mode answers (script.mode.walker())"),
        ("if isinstance(placement.policy.mode, Decoupled):\n    pass\n", "tests a mode's class (Decoupled)"),
        ("if type(mode) is Whole:\n    pass\n", "compares a mode's class"),
        ("n = 1 if mode._splits else 2\n", "reads the mode's own declaration ._splits"),
        ('if policy.mode.name == "decoupled":\n    pass\n', "compares what the mode answers (policy.mode.name)"),
    ],
)
def test_the_kind_guard_finds_a_branch_on_a_modes_flag_or_class(planted, found):
    from fragnb.policies import POLICIES

    assert any(found in b for b in kind_branches(planted, set(POLICIES))), kind_branches(planted, set(POLICIES))


#: A module's most lines unless the layout page names it with its reason.
LONGEST = 450


def long_modules(root: pathlib.Path) -> dict[str, int]:
    """Every module of the package (and its widgets) over :data:`LONGEST` lines, by path: its lines."""
    paths = sorted((root / "fragnb").rglob("*.py")) + sorted((root / "widgets").glob("*.py"))
    lines = {str(p.relative_to(root)): len(p.read_text().splitlines()) for p in paths}
    return {p: n for p, n in lines.items() if n > LONGEST}


def named_long(layout: str) -> set[str]:
    """The modules the layout page's "Modules over 450 lines" names (`` - `path`: reason``)."""
    section = layout.partition("## Modules over 450 lines")[2].partition("\n## ")[0]
    return set(re.findall(r"^- `([^`]+\.py)`: \S", section, flags=re.M))


def test_no_module_is_over_450_lines_unless_the_layout_page_says_why():
    long, named = long_modules(ROOT), named_long((ROOT / "docs" / "development" / "layout.md").read_text())
    unnamed = {p: n for p, n in long.items() if p not in named}
    assert not unnamed, (
        f"modules over {LONGEST} lines: split them, or name each with its reason on the layout page: {unnamed}"
    )
    assert named <= set(long), (
        f"the layout page names modules no longer over {LONGEST} lines: {sorted(named - set(long))}"
    )


def test_the_size_check_finds_a_long_module_nobody_named(tmp_path):
    (tmp_path / "fragnb").mkdir()
    (tmp_path / "widgets").mkdir()
    (tmp_path / "fragnb" / "big.py").write_text("x = 1\n" * (LONGEST + 1))
    (tmp_path / "fragnb" / "small.py").write_text("x = 1\n" * LONGEST)
    assert long_modules(tmp_path) == {"fragnb/big.py": LONGEST + 1}
    layout = "## Modules over 450 lines\n\n- `fragnb/big.py`: why.\n\n## Next\n- `fragnb/small.py`: not here.\n"
    assert named_long(layout) == {"fragnb/big.py"}
    assert named_long(layout.replace("- `fragnb/big.py`: why.", "")) == set()


def test_every_test_file_has_a_row_in_the_tests_readme():
    listed = (ROOT / "tests" / "README.md").read_text()
    missing = sorted(p.name for p in (ROOT / "tests").glob("test_*.py") if f"`{p.name}`" not in listed)
    assert not missing, f"tests/README.md has no row for {missing}: say what each covers"
