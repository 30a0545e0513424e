"""The project's files agree with each other, and the layers import one way."""

import ast
import pathlib
import re
import subprocess
import sys
import tomllib

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
    pypi = {_name(r) for r in project["dependencies"] + extras["dev"] + extras["bench"]}
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda = {_name(d) for d in env["dependencies"] if isinstance(d, str)} - CONDA_ONLY
    pip_part = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    pip_only = {_name(p) for p in pip_part if p != "-e ."}  # not on conda-forge
    assert conda | pip_only == {CONDA_NAME.get(n, n) if n not in pip_only else n for n in pypi}
    assert "-e ." in pip_part


def test_capture_and_policies_import_no_cluster_or_plotting_library():
    code = (
        "import sys, fragnb, fragnb.graph, fragnb.policies, fragnb.plan, fragnb.ui.render; "
        "heavy = [m for m in ('dask', 'distributed', 'matplotlib', 'ipywidgets') if m in sys.modules]; "
        "print(heavy); sys.exit(bool(heavy))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


#: The house, in the order data flows: a module may import from its own layer and the ones before it.
LAYERS = [
    ("base", ["fragnb.errors", "fragnb.text", "fragnb.streams", "fragnb.components"]),
    ("reference components", ["fragnb.envs", "fragnb.algos"]),
    ("capture", ["fragnb.graph"]),
    ("placement", ["fragnb.policies"]),
    ("plan", ["fragnb.plan"]),
    ("execution", ["fragnb.runtime"]),
    ("results", ["fragnb.ui", "fragnb.widgets"]),
    ("entry points", ["fragnb.notebook", "fragnb.demo", "fragnb"]),
]
#: Facades: a method of a lower layer's object that hands over to a later layer, imported inside it.
#: Each is the user-facing shortcut the design names (``graph.place``, ``graph.render``, drawings and
#: plots in a notebook's display, a run's default live view); nothing else may look ahead.
FACADES = {
    ("fragnb.graph.model", "fragnb.policies"),  # FragmentGraph.place
    ("fragnb.graph.model", "fragnb.ui.render"),  # FragmentGraph.render and its notebook display
    ("fragnb.policies.placement", "fragnb.ui.render"),  # Placement.render and its notebook display
    ("fragnb.runtime.result", "fragnb.ui.live"),  # RunResult.plot and .timeline
    ("fragnb.runtime.pipeline", "fragnb.ui.live"),  # run(progress=True): the bar and dashboard in a notebook
}


def _module_files() -> dict[str, pathlib.Path]:
    files = {}
    for path in sorted((ROOT / "fragnb").rglob("*.py")) + sorted((ROOT / "widgets").glob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        parts[0] = "fragnb.widgets" if parts[0] == "widgets" else parts[0]
        if parts[-1] == "__init__":
            parts.pop()
        files[".".join(parts)] = path
    return files


def _imports(files: dict[str, pathlib.Path]) -> dict[str, dict[str, bool]]:
    """Module -> fragnb modules it imports (anywhere in the file, inside functions too) -> whether
    the import runs (False: only under ``if TYPE_CHECKING:``, for annotations)."""
    out = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text())
        typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If) and ast.unparse(block.test) == "TYPE_CHECKING"
                       for n in ast.walk(block)}
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: dict[str, bool] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else []))
                targets = [f"{target}.{a.name}" if f"{target}.{a.name}" in files else target for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            for t in targets:
                if t in files and t != name:
                    found[t] = found.get(t, False) or id(node) not in typing_only
        out[name] = found
    return out


def _layer_of(module: str) -> int:
    return max(i for i, (_, prefixes) in enumerate(LAYERS) for p in prefixes if module == p or module.startswith(p + "."))


def test_every_module_has_a_layer():
    for module in _module_files():
        assert any(module == p or module.startswith(p + ".") for _, prefixes in LAYERS for p in prefixes), module


def test_no_module_imports_a_later_layer_but_the_named_facades():
    upward = sorted((m, t) for m, found in _imports(_module_files()).items() for t in found
                    if _layer_of(t) > _layer_of(m) and (m, t) not in FACADES)
    assert not upward, "imports from a later layer: " + ", ".join(f"{m} -> {t}" for m, t in upward)
    imports = _imports(_module_files())
    stale = sorted(f for f in FACADES if f[1] not in imports.get(f[0], {}))
    assert not stale, f"facades no longer there: {stale}"


def test_no_import_circles():
    graph = {m: {t for t, runs in found.items() if runs} for m, found in _imports(_module_files()).items()}
    for start in graph:  # a path from a module back to itself
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in graph.get(node, ()):
                assert nxt != start, "import circle: " + " -> ".join(path + [nxt])
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, path + [nxt]))
