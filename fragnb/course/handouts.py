"""Students' copies of the course notebooks, and the autograder that grades what they hand in.

A notebook in ``notebooks/`` is the teacher's copy: every exercise's solution follows it, collapsed (cells
tagged ``solution``), and its quiz is an otter-grader question. The answers cell is followed by the key, then
by the question's tests: a public one (every question has an answer) and hidden ones, which compute each
answer from the notebook's own objects and runs, so the key cannot drift from the code. nbval runs the
teacher's copy top to bottom, so CI runs the hidden tests against the key on every change.

:func:`write_handouts` drops the ``solution`` cells and hands the rest to ``otter assign``, which writes, per
notebook, ``student/`` (no key, no hidden test: ``grader.check("quiz")`` runs the public one) and
``autograder/autograder.zip`` (every test), which ``otter run -a autograder.zip SUBMISSION.ipynb`` grades with.

The zip also carries what grading needs outside the teacher's environment, so that a bare Python can grade:
a wheel of fragnb built from this repository (fragnb is not on PyPI); ``requirements.txt``, which installs
it and pins fragnb's dependencies, otter-grader and everything those need in turn to the version installed
where the handouts are made (:func:`pinned_requirements`: the environment the course ran and was tested in;
exact pins, not pyproject's floors, so that a submission is graded with the releases its key was computed
with, whenever it is graded); and ``environment.yml`` with the same pins and the same Python, from which
``otter grade``'s Docker image and Gradescope build their grading environment.

Why otter-grader rather than nbgrader: a notebook stays one file that runs top to bottom, tests next to the
question they check, with no course directory, database or formgrader service to keep; grading is one command
that runs the submission in a Jupyter kernel (the notebooks' magics work), and the same zip serves Gradescope.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from .pins import pins
from .rendered import is_solution, keyless

#: otter-assign's configuration, the same for every notebook: a check cell after the quiz, no export cell
#: (students hand in the .ipynb), and no run of the tests at assign time (nbval already runs them, in CI).
CONFIG = """# ASSIGNMENT CONFIG
name: {name}
init_cell: true
check_all_cell: false
export_cell: false
run_tests: false
generate: true
show_question_points: true
python_version: "{python}"
requirements: {requirements}
overwrite_requirements: true
"""

#: Where Gradescope and ``otter grade`` unpack an autograder zip (otter's ``autograder_dir``) before its
#: ``setup.sh`` builds the environment from ``environment.yml``.
SOURCE = "/autograder/source"
#: The folder of the zip that holds fragnb's wheel. Its name matters: ``otter grade``'s Dockerfile adds only
#: ``setup.sh``, ``environment.yml`` and ``requirements.*`` before it runs ``setup.sh`` (a folder's files
#: land in ``SOURCE`` itself), while Gradescope unpacks the whole zip first (they land in ``SOURCE/WHEELS``);
#: ``--find-links`` names both places.
WHEELS = "requirements.wheels"
#: What grading needs besides fragnb and its dependencies. Not otter's ``grading`` extra: what it adds to run a
#: submission in a Jupyter kernel (ipykernel, jupyter_client) are fragnb's dependencies already, and the rest
#: (pypdf) writes PDFs, which the handouts do not make, so every package stays pinned.
GRADER = "otter-grader"

#: What the course's notebooks import beyond fragnb's dependencies: notebook 09 keeps CleanRL's TensorBoard
#: ``SummaryWriter`` (the ``tracking`` extra's), and grading runs the notebook.
COURSE = ("tensorboard",)


def student_master(notebook: dict, name: str, requirements: str = "null") -> dict:
    """The teacher's notebook as otter-assign reads it: without the ``solution`` cells (exercise solutions and
    the quiz's key), with the assignment's configuration first (``requirements``: the path of the pip lines
    that ``environment.yml`` installs)."""
    import nbformat

    nb = nbformat.from_dict(notebook)
    nb.cells = [c for c in nb.cells if not is_solution(c)]
    keyless(nb.cells)  # the quiz's key and hidden tests do not follow its introduction there
    python = f"{sys.version_info.major}.{sys.version_info.minor}"  # the interpreter the pins are for
    config = CONFIG.format(name=name, python=python, requirements=requirements)
    nb.cells.insert(0, nbformat.v4.new_raw_cell(config))
    return nb


def build_wheel(out: Path) -> Path:
    """A wheel of fragnb built from the repository this fragnb was installed from (``pip install -e``), in
    ``out``. The sources are copied first, so that the build leaves no ``build/`` in the repository."""
    import fragnb

    root = Path(fragnb.__file__).resolve().parents[1]
    if not (root / "pyproject.toml").exists():
        raise RuntimeError(
            f"the autograder carries a wheel of fragnb built from its repository, and {root} is not one: "
            "make handouts from a clone (`pip install -e .` there)"
        )
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "fragnb"
        skip = shutil.ignore_patterns("__pycache__", "*.pyc")
        for name in ("fragnb", "widgets"):
            shutil.copytree(root / name, source / name, ignore=skip)
        for name in ("pyproject.toml", "README.md"):
            shutil.copy(root / name, source / name)
        pip = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(out), str(source)]
        with contextlib.suppress(ImportError):  # setuptools is here: no isolated build environment to download
            import setuptools  # noqa: F401

            pip.insert(-1, "--no-build-isolation")
        done = subprocess.run(pip, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"building fragnb's wheel failed:\n{done.stdout}{done.stderr}")
    (wheel,) = out.glob("fragnb-*.whl")
    return wheel


def pinned_requirements(wheel: Path) -> list[str]:
    """``name==version`` for every distribution that ``wheel`` (fragnb's), :data:`GRADER` and :data:`COURSE` need,
    with what those need in turn, at the version installed here (:func:`.pins.pins`)."""
    from email.parser import Parser

    with zipfile.ZipFile(wheel) as zf:
        metadata = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        fragnb_requires = Parser().parsestr(zf.read(metadata).decode()).get_all("Requires-Dist") or []
    return pins([*fragnb_requires, GRADER, *COURSE])  # fragnb's runtime requirements: its extras' have markers


def grading_requirements(wheel: Path, pins: list[str], find_links: list[str]) -> str:
    """pip's requirements for grading: fragnb (its wheel, found through ``find_links``) and ``pins``."""
    version = wheel.name.split("-")[1]
    header = [
        "# What grading a handout needs (fragnb/course/handouts.py): fragnb from the wheel in this zip, and every",
        "# package the course ran with, pinned to the version `make handouts` found installed.",
        *(f"--find-links {f}" for f in find_links),
        f"fragnb=={version}",
    ]
    return "\n".join([*header, *pins]) + "\n"


def _add_to_zip(zipped: Path, files: dict[str, bytes | Path]) -> None:
    """Adds ``files`` (name in the zip: contents or a path) to ``zipped``."""
    with zipfile.ZipFile(zipped, "a", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, what in files.items():
            if isinstance(what, Path):
                zf.write(what, name)
            else:
                zf.writestr(name, what)


def write_handouts(paths: list[str], out: str = "handouts") -> list[Path]:
    """For each notebook, ``OUT/<stem>/student/<name>`` (the handout) and ``OUT/<stem>/autograder/`` (the
    zip to grade with, which carries fragnb's wheel and the pinned environment); returns the handouts'
    paths."""
    import nbformat
    from otter.assign import main as assign

    written = []
    with tempfile.TemporaryDirectory() as built:
        wheel = build_wheel(Path(built))
        pins = pinned_requirements(wheel)
        # environment.yml's pip part names the wheel's folder by its absolute path (where conda runs pip is
        # not ours to say); requirements.txt's --find-links is relative to the file, as pip reads it
        image = Path(built) / "environment-requirements.txt"
        image.write_text(grading_requirements(wheel, pins, [f"{SOURCE}/{WHEELS}", SOURCE]))
        requirements = grading_requirements(wheel, pins, [WHEELS])
        for path in map(Path, paths):
            target = Path(out) / path.stem
            with tempfile.TemporaryDirectory() as tmp:
                master = Path(tmp) / path.name
                notebook = nbformat.read(path, as_version=4)
                nbformat.write(student_master(notebook, path.stem, json.dumps(str(image))), master)
                with contextlib.redirect_stdout(io.StringIO()):  # otter's summary table, per notebook
                    assign(str(master), str(target), no_pdfs=True, no_run_tests=True)
            (target / "autograder" / "requirements.txt").write_text(requirements)
            for zipped in (target / "autograder").glob("*.zip"):
                _add_to_zip(zipped, {"requirements.txt": requirements.encode(), f"{WHEELS}/{wheel.name}": wheel})
            written.append(target / "student" / path.name)
            print(f"{written[-1]} (autograder: {target / 'autograder'})")
    return written
