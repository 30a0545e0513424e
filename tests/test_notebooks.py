"""The course notebooks agree with each other (nbval runs each of them top to bottom)."""

import json

import pytest

from conftest import ROOT


def _fragment_cells(name: str) -> list[str]:
    cells = json.loads((ROOT / "notebooks" / name).read_text())["cells"]
    return [
        "".join(c["source"])
        for c in cells
        if c["cell_type"] == "code" and "".join(c["source"]).startswith("%%fragment")
    ]


def test_notebook_02_runs_notebook_01s_loop_unchanged(canonical):
    # its `ppo` cells place and run the loop of notebook 01; other cells show other loops
    bodies = {
        cell.partition("\n")[2]
        for cell in _fragment_cells("02_distribution_policies.ipynb")
        if cell.split()[1] == "ppo"
    }
    assert bodies == {canonical.body}


# -- the course as a teacher receives it ------------------------------------------------------
COURSE = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _cells(path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def _source(cell: dict) -> str:
    return "".join(cell["source"])


@pytest.mark.parametrize("path", COURSE, ids=lambda p: p.stem)
def test_every_notebook_has_goals_exercises_a_quiz_and_solutions(path):
    cells = _cells(path)
    text = [_source(c) for c in cells]
    assert "**Goals.**" in text[0], "the first cell states the learning goals"
    assert any("## Exercise" in t for t in text)
    quiz = [i for i, t in enumerate(text) if "## Quiz" in t]
    assert (
        len(quiz) == 1 and text[quiz[0] + 1].startswith("answers = {") and "quiz(answers, truth)" in text[quiz[0] + 2]
    )
    solutions = [c for c in cells if "solution" in c["metadata"].get("tags", [])]
    assert solutions, "exercise solutions and the quiz's key are tagged 'solution' (make handouts drops them)"
    assert any("assert quiz(answers, truth) == len(truth)" in _source(c) for c in solutions), (
        "the key is checked against the computed truth"
    )
    for c in solutions:  # collapsed where a student opens them: JupyterLab and GitHub
        if c["cell_type"] == "code":
            assert c["metadata"].get("jupyter", {}).get("source_hidden"), _source(c)[:60]
        else:
            assert _source(c).startswith(("<details>", "**Quiz.**")), _source(c)[:60]


@pytest.mark.parametrize("path", COURSE, ids=lambda p: p.stem)
def test_the_rendered_course_is_in_step_with_the_notebooks(path):
    """docs/course/ holds every notebook run top to bottom (`make course`), for reading without installing."""
    rendered = ROOT / "docs" / "course" / path.name
    assert rendered.exists(), f"{rendered.relative_to(ROOT)} is missing: run `make course`"
    source, copy = _cells(path), _cells(rendered)
    assert [(c["cell_type"], _source(c)) for c in copy] == [(c["cell_type"], _source(c)) for c in source], (
        f"{rendered.relative_to(ROOT)} is older than {path.relative_to(ROOT)}: run `make course`"
    )
    for c in copy:
        if c["cell_type"] == "code":
            assert c["execution_count"] is not None, f"a cell of {rendered.name} never ran: {_source(c)[:60]}"
            assert not [o for o in c["outputs"] if o["output_type"] == "error"], (
                f"{rendered.name} failed: {_source(c)[:60]}"
            )


def test_handouts_drop_the_solutions():
    import nbformat
    from nbconvert.preprocessors import TagRemovePreprocessor

    handout, _ = TagRemovePreprocessor(remove_cell_tags={"solution"}, enabled=True).preprocess(
        nbformat.read(COURSE[0], as_version=4), {}
    )
    kept = [_source(c) for c in handout.cells]
    assert (
        len(kept) < len(_cells(COURSE[0]))
        and not any("assert quiz(" in t for t in kept)
        and any("## Quiz" in t for t in kept)
    )


def test_the_course_page_lists_every_notebook_with_its_minutes():
    page = (ROOT / "notebooks" / "README.md").read_text()
    for path in COURSE:
        row = next((line for line in page.splitlines() if f"({path.name})" in line), None)
        assert row is not None, f"notebooks/README.md does not link {path.name}"
        assert row.rstrip(" |").rsplit("|", 1)[-1].strip().replace(".", "", 1).isdigit(), f"no minutes in: {row}"
