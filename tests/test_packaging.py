"""The project's files agree with each other, and the layers import one way."""

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
        "import sys, fragnb, fragnb.capture, fragnb.policies, fragnb.render; "
        "heavy = [m for m in ('dask', 'distributed', 'matplotlib', 'ipywidgets') if m in sys.modules]; "
        "print(heavy); sys.exit(bool(heavy))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_lower_layers_never_import_upper_ones():
    order = ["streams", "components", "render", "policies", "graph", "capture", "program", "measure", "live", "replica", "clusters", "executor", "runtime", "magics"]
    for i, module in enumerate(order):
        source = (ROOT / "fragnb" / f"{module}.py").read_text()
        imported = set(re.findall(r"^\s*from \.(\w+) import", source.split("if TYPE_CHECKING:")[0], re.M))
        later = imported & set(order[i + 1 :])
        assert not later, f"fragnb/{module}.py imports {later}, a later layer"
