"""Students' copies of the course notebooks, and the autograder that grades what they hand in.

A notebook in ``notebooks/`` is the teacher's copy: every exercise's solution follows it, collapsed (cells
tagged ``solution``), and its quiz is an otter-grader question. The answers cell is followed by the key, then
by the question's tests: a public one (every question has an answer) and hidden ones, which compute each
answer from the notebook's own objects and runs, so the key cannot drift from the code. nbval runs the
teacher's copy top to bottom, so CI runs the hidden tests against the key on every change.

:func:`write_handouts` drops the ``solution`` cells and hands the rest to ``otter assign``, which writes, per
notebook, ``student/`` (no key, no hidden test: ``grader.check("quiz")`` runs the public one) and
``autograder/autograder.zip`` (every test), which ``otter run -a autograder.zip SUBMISSION.ipynb`` grades with.

Why otter-grader rather than nbgrader: a notebook stays one file that runs top to bottom, tests next to the
question they check, with no course directory, database or formgrader service to keep; grading is one command
that runs the submission in a Jupyter kernel (the notebooks' magics work), and the same zip serves Gradescope.
"""

from __future__ import annotations

import contextlib
import io
import tempfile
from pathlib import Path

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
"""


def student_master(notebook: dict, name: str) -> dict:
    """The teacher's notebook as otter-assign reads it: without the ``solution`` cells (exercise solutions and
    the quiz's key), with the assignment's configuration first."""
    import nbformat

    nb = nbformat.from_dict(notebook)
    nb.cells = [c for c in nb.cells if "solution" not in c.metadata.get("tags", [])]
    nb.cells.insert(0, nbformat.v4.new_raw_cell(CONFIG.format(name=name)))
    return nb


def write_handouts(paths: list[str], out: str = "handouts") -> list[Path]:
    """For each notebook, ``OUT/<stem>/student/<name>`` (the handout) and ``OUT/<stem>/autograder/`` (the
    zip to grade with); returns the handouts' paths."""
    import nbformat
    from otter.assign import main as assign

    written = []
    for path in map(Path, paths):
        target = Path(out) / path.stem
        with tempfile.TemporaryDirectory() as tmp:
            master = Path(tmp) / path.name
            nbformat.write(student_master(nbformat.read(path, as_version=4), path.stem), master)
            with contextlib.redirect_stdout(io.StringIO()):  # otter's summary table, per notebook
                assign(str(master), str(target), no_pdfs=True, no_run_tests=True)
        written.append(target / "student" / path.name)
        print(f"{written[-1]} (autograder: {target / 'autograder'})")
    return written
