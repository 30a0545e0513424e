"""The course notebooks agree with each other (nbval runs each of them top to bottom)."""

import json
import re
from pathlib import Path

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


def _quiz(cells: list[dict]) -> dict:
    """A notebook's quiz as otter-grader reads it: the cells between its markers, by block."""
    text = [_source(c) for c in cells]
    begin = next(i for i, t in enumerate(text) if cells[i]["cell_type"] == "raw" and t.startswith("# BEGIN QUESTION"))
    end = text.index("# END QUESTION", begin)
    blocks, current = {"solution": [], "tests": []}, None
    for c in cells[begin + 1 : end]:
        t = _source(c)
        if c["cell_type"] == "raw":
            current = {"# BEGIN SOLUTION": "solution", "# BEGIN TESTS": "tests"}.get(t)
        elif current:
            blocks[current].append(c)
    return blocks


@pytest.mark.parametrize("path", COURSE, ids=lambda p: p.stem)
def test_every_notebook_has_goals_exercises_a_quiz_and_solutions(path):
    cells = _cells(path)
    text = [_source(c) for c in cells]
    assert "**Goals.**" in text[0], "the first cell states the learning goals"
    assert any("## Exercise" in t for t in text)
    assert len([t for t in text if "## Quiz" in t]) == 1
    quiz = _quiz(cells)
    answers, *key = quiz["solution"]
    assert _source(answers).startswith("answers = {") and "None" in _source(answers), "the students' answers cell"
    assert key and all("solution" in c["metadata"].get("tags", []) for c in key), "the key: dropped from handouts"
    assert any(_source(c).startswith("# The quiz's key") for c in key)
    hidden = [c for c in quiz["tests"] if _source(c).startswith("# HIDDEN")]
    questions = len(eval(_source(answers).split("=", 1)[1]))  # noqa: S307 - a dict of Nones
    predictions = _predictions(cells)
    assert predictions, "at least one prediction written before a run (fragnb.course.predict), compared after it"
    graded = [_source(c) for c in hidden]
    assert len(hidden) == questions + len(predictions), "one hidden test per question and per prediction"
    assert sum("assert same(answers.get(" in t for t in graded) == questions and all(
        any(f'same(predicted("{name}")' in t for t in graded) for name in predictions
    ), "each hidden test computes its answer from the notebook's objects"
    check = next(_source(c) for c in quiz["tests"] if not _source(c).startswith("# HIDDEN"))
    assert "unanswered()" in check, "the public check asks for every prediction too"
    points = re.search(r"points: (\d+)", _source(next(c for c in cells if _source(c).startswith("# BEGIN QUESTION"))))
    assert points and int(points[1]) == len(hidden), "a point per question and per prediction"
    solutions = [c for c in cells if "solution" in c["metadata"].get("tags", [])]
    for c in solutions:  # collapsed where a student opens them: JupyterLab and GitHub
        if c["cell_type"] == "code":
            assert c["metadata"].get("jupyter", {}).get("source_hidden"), _source(c)[:60]
        else:
            assert _source(c).startswith(("<details>", "**Quiz.**")), _source(c)[:60]


def _predictions(cells: list[dict]) -> list[str]:
    """The names of the predictions a notebook asks for before its runs, each compared with the run after it."""
    names, compared = [], []
    for c in cells:
        if c["cell_type"] != "code" or "solution" in c["metadata"].get("tags", []):
            continue
        names += re.findall(r'^predict\("(.+?)", None\)', _source(c), re.M)
        compared += re.findall(r'\bcompare\("(.+?)"', _source(c))
    assert all(name in compared for name in names), f"a prediction never compared with its run: {names}"
    return names


@pytest.mark.parametrize("path", COURSE, ids=lambda p: p.stem)
def test_every_exercise_carries_its_points_and_a_rubric(path):
    """As a course's homework states them: the points of each exercise, and what earns them."""
    for cell in _cells(path):
        text = _source(cell)
        if cell["cell_type"] != "markdown" or not re.search(r"^## Exercise", text, re.M):
            continue
        body, _, rubric = text.partition("**Rubric.**")
        items = dict(re.findall(r"^(\d+)\. .*?\((\d+) points?\)", body, re.M))
        numbered = re.findall(r"^(\d+)\. ", body, re.M)
        assert sorted(items) == sorted(numbered), f"{path.name}: an exercise without its points: {numbered}"
        if not numbered:
            heading = re.search(r"^## Exercise.*\((\d+) points?\)", text, re.M)
            assert heading, f"{path.name}: the exercise's heading gives its points"
            items = {"1": heading[1]}
        assert rubric, f"{path.name}: a **Rubric.** after the exercises says what earns their points"
        graded = dict(re.findall(r"^- \*\*(\d+)\*\* \((\d+) points?\)", rubric, re.M))
        assert graded == items, f"{path.name}: the rubric's points {graded} are not the exercises' {items}"


@pytest.mark.parametrize("path", COURSE, ids=lambda p: p.stem)
def test_the_rendered_course_is_in_step_with_the_notebooks(path):
    """docs/course/ holds every notebook run top to bottom (`make course`), for reading without installing:
    the teacher's copy without its quiz's key and hidden tests, which students read there."""
    from fragnb.course.rendered import relink, without_key

    rendered = ROOT / "docs" / "course" / path.name
    assert rendered.exists(), f"{rendered.relative_to(ROOT)} is missing: run `make course`"
    teachers = {"cells": _cells(path)}
    quiz = _quiz(teachers["cells"])
    assert without_key(teachers) == len(quiz["solution"]) - 1 + len(quiz["tests"]) - 1  # all but answers and the check
    relink(teachers["cells"])  # its links written from docs/course/, where GitHub shows it
    source, copy = teachers["cells"], _cells(rendered)
    text = json.dumps(copy)
    assert "# HIDDEN" not in text and "# The quiz's key" not in text, f"{rendered.name} shows the quiz's key"
    intro = next(_source(c) for c in copy if _source(c).startswith("## Quiz"))
    assert "key follows it" not in intro and "cells below" not in " ".join(intro.split()), "it promises a key"
    links = [link for c in copy if c["cell_type"] == "markdown" for link in re.findall(r"\]\(([^)#\s]+)", _source(c))]
    broken = [link for link in links if "://" not in link and not (rendered.parent / link).exists()]
    assert not broken, f"{rendered.name} links {broken}, which do not resolve from docs/course/"
    assert [(c["cell_type"], _source(c)) for c in copy] == [(c["cell_type"], _source(c)) for c in source], (
        f"{rendered.relative_to(ROOT)} is older than {path.relative_to(ROOT)}: run `make course`"
    )
    for c in copy:
        if c["cell_type"] == "code":
            assert c["execution_count"] is not None, f"a cell of {rendered.name} never ran: {_source(c)[:60]}"
            assert not [o for o in c["outputs"] if o["output_type"] == "error"], (
                f"{rendered.name} failed: {_source(c)[:60]}"
            )


@pytest.fixture(scope="module")
def handouts(tmp_path_factory):
    from fragnb.course.handouts import write_handouts

    out = tmp_path_factory.mktemp("handouts")
    write_handouts([str(p) for p in COURSE], str(out))
    return out


@pytest.mark.parametrize("path", COURSE, ids=lambda p: p.stem)
def test_a_handout_holds_no_key_and_its_autograder_every_test(path, handouts):
    """`make handouts`: the students' copy has no solution, no key and no hidden test, an answers cell they can
    edit and a check of it; the autograder's zip has every test of the quiz."""
    import zipfile

    student = json.loads((handouts / path.stem / "student" / path.name).read_text())
    text = json.dumps(student)
    key = next(_source(c) for c in _quiz(_cells(path))["solution"] if _source(c).startswith("# The quiz's key"))
    assert key.splitlines()[-1] not in text and "same(answers" not in text and "# HIDDEN" not in text
    assert not [c for c in student["cells"] if "solution" in c["metadata"].get("tags", [])]
    intro = next(_source(c) for c in student["cells"] if _source(c).startswith("## Quiz"))
    assert "key follows it" not in intro and "its key is in the teacher's copy" in intro  # no key follows here
    sources = [_source(c) for c in student["cells"]]
    at = next(i for i, t in enumerate(sources) if t.startswith("answers = {"))
    assert student["cells"][at]["metadata"].get("editable", True) and sources[at + 1] == 'grader.check("quiz")'
    public = student["metadata"]["otter"]["tests"]["quiz"]["suites"][0]["cases"]
    assert [c["hidden"] for c in public] == [False]
    (zipped,) = (handouts / path.stem / "autograder").glob("*.zip")
    tests = zipfile.ZipFile(zipped).read("tests/quiz.py").decode()
    assert tests.count("'hidden': True") == len(_quiz(_cells(path))["tests"]) - 1


def test_no_link_from_the_course_page_or_the_readme_reaches_a_teachers_copy():
    """Issue 72: the course page linked every week to `notebooks/NN.ipynb`, the teacher's copy with the quiz's key
    and hidden tests; a student's links lead to the rendered copies, which hold neither (the instructor guide
    links the teachers')."""
    teachers = {path.name for path in COURSE}
    for page in (ROOT / "README.md", ROOT / "notebooks" / "README.md"):
        links = re.findall(r"\]\(([^)#]+\.ipynb)\)", page.read_text())
        reached = [link for link in links if (page.parent / link).resolve().parent == ROOT / "notebooks"]
        assert not [link for link in reached if Path(link).name in teachers], (page, reached)
    rendered = ROOT / "docs" / "course"
    for path in COURSE:
        cells = json.loads((rendered / path.name).read_text())["cells"]
        sources = ["".join(c["source"]) for c in cells]
        assert not any(s.startswith("# HIDDEN") for s in sources), path.name
        assert not any(s.startswith("# The quiz's key") for s in sources), path.name


def test_the_course_page_lists_every_notebook_with_the_minutes_its_rendered_copy_ran():
    """The minutes a teacher plans with are the rendered copies' own (`make course` writes them), not typed."""
    from fragnb.course.rendered import course_minutes

    page = (ROOT / "notebooks" / "README.md").read_text()
    for path in COURSE:
        assert f"(../docs/course/{path.name})" in page, f"notebooks/README.md does not link {path.name}'s rendered copy"
    computed, taken = course_minutes(page, ROOT / "docs" / "course")
    assert sorted(taken) == [p.name for p in COURSE]
    assert page == computed, (
        "the course page's minutes are not its rendered copies': run `python -m fragnb.course minutes`"
    )


# -- what each notebook claims, checked by its own run -----------------------------------------------
# tests/claims/nNN.py quotes each sentence of notebook NN that states what its run measured or computed, with
# how the run checks it (claims/__init__.py says how). nbval runs every notebook, so a rerun that reverses an
# asserted claim fails; these tests keep the list and the notebooks in step.


def _asserts(path) -> list[str]:
    """The conditions of every assert in a notebook's code cells, as Python writes them back (magics dropped)."""
    import ast

    found = []
    quiz = _quiz(_cells(path))["tests"]  # the autograder's tests: one per quiz question, checked apart
    for c in _cells(path):
        if c["cell_type"] != "code" or c in quiz:
            continue
        lines = [line for line in _source(c).splitlines() if not line.lstrip().startswith(("%", "!"))]
        found += [ast.unparse(n.test) for n in ast.walk(ast.parse("\n".join(lines))) if isinstance(n, ast.Assert)]
    return found


@pytest.mark.parametrize("path", COURSE, ids=lambda p: p.stem)
def test_every_measured_sentence_of_a_notebook_is_listed_with_its_check(path):
    from claims import Explained, of, stale, unlisted

    cells, claims = _cells(path), of(path.name[:2])
    short = [q for q, _ in claims if len(q.split()) < 4]
    assert not short, f"quote at least four words, so that a quote names one sentence: {short}"
    gone = stale(cells, claims)
    assert not gone, f"{path.name} no longer says (update tests/claims/n{path.name[:2]}.py): {gone}"
    missing = unlisted(cells, claims)
    assert not missing, (
        f"{path.name} states what tests/claims/n{path.name[:2]}.py does not list (quote it with its check): {missing}"
    )
    vague = [q for q, check in claims if isinstance(check, Explained) and len(check.why.split()) < 3]
    assert not vague, f"say why these state no fact of the run: {vague}"


@pytest.mark.parametrize("path", COURSE, ids=lambda p: p.stem)
def test_every_asserted_claim_is_asserted_on_the_notebooks_own_run(path):
    from claims import Asserted, of

    conditions = [check.condition for _, check in of(path.name[:2]) if isinstance(check, Asserted)]
    asserts = _asserts(path)
    missing = [c for c in conditions if not any(c in a for a in asserts)]
    assert not missing, f"{path.name} no longer asserts: {missing}"
    unlisted = [a for a in asserts if not any(c in a for c in conditions)]
    assert not unlisted, (
        f"{path.name} asserts what tests/claims does not list (quote the sentence it checks): {unlisted}"
    )


@pytest.mark.parametrize("path", COURSE, ids=lambda p: p.stem)
def test_every_shown_claim_is_built_by_a_cell_that_showed_output_in_the_rendered_copy(path):
    from claims import Shown, of

    rendered = {_source(c): c for c in _cells(ROOT / "docs" / "course" / path.name) if c["cell_type"] == "code"}
    for quote, check in of(path.name[:2]):
        if not isinstance(check, Shown):
            continue
        cells = [c for source, c in rendered.items() if check.source in source]
        assert cells, f"{path.name}: no cell builds {quote!r} from the run (no source has {check.source!r})"
        assert any(c["outputs"] for c in cells), f"{path.name}: the cell that shows {quote!r} showed nothing"


def test_an_unlisted_measured_sentence_fails_the_claims_check():
    """A sentence typed into a notebook with a speed it measured once is caught; the same sentence listed is not."""
    from claims import Shown, of, unlisted

    path = next(p for p in COURSE if p.name.startswith("02"))
    cells, claims = _cells(path), of("02")
    planted = "Under `coarse` the run is 1.8x faster than `single` on this machine."
    typed = [*cells[:5], {"cell_type": "markdown", "metadata": {}, "source": ["Run it.\n", planted]}, *cells[5:]]
    before = unlisted(cells, claims)  # none once every sentence is listed
    assert [s for s in unlisted(typed, claims) if s not in before] == [planted]
    assert unlisted(typed, [*claims, ("the run is 1.8x faster", Shown("coarse"))]) == unlisted(cells, claims)


def _bar(state: dict, key: str, value: float, total: float, left: str, right: str) -> None:
    """A tqdm bar's widgets, as a rendered notebook saves them: an HBox of HTML, FloatProgress, HTML."""
    ids = [f"{key}-left", f"{key}-bar", f"{key}-right"]
    state[key] = {"model_name": "HBoxModel", "state": {"children": [f"IPY_MODEL_{i}" for i in ids]}}
    state[ids[0]] = {"model_name": "HTMLModel", "state": {"value": left}}
    state[ids[1]] = {"model_name": "FloatProgressModel", "state": {"value": value, "max": total}}
    state[ids[2]] = {"model_name": "HTMLModel", "state": {"value": right}}


def test_a_rendered_progress_bar_shows_how_it_ended_where_widgets_do_not_render():
    from fragnb.course import settle_progress_bars

    state: dict = {}
    _bar(state, "done", 146, 146, "ppo:\u2007100%", "\u2007146/146\u2007[00:13&lt;00:00]")
    _bar(state, "half", 2, 4, "seeds:\u200750%", "\u20072/4")
    state["box"] = {"model_name": "VBoxModel", "state": {"children": []}}  # the explorer: not a bar

    def output(model_id, text):
        view = {"model_id": model_id, "version_major": 2, "version_minor": 0}
        return {
            "output_type": "display_data",
            "data": {"application/vnd.jupyter.widget-view+json": view, "text/plain": [text]},
        }

    cell = {
        "cell_type": "code",
        "outputs": [output("done", "ppo:   0%|"), output("half", "0%"), output("box", "VBox()")],
    }
    notebook = {
        "cells": [cell],
        "metadata": {"widgets": {"application/vnd.jupyter.widget-state+json": {"state": state}}},
    }
    assert settle_progress_bars(notebook) == 2
    lines = [o["data"]["text/plain"] for o in cell["outputs"]]
    assert lines == [["ppo: 100%|██████████| 146/146 [00:13<00:00]"], ["seeds: 50%|█████     | 2/4"], ["VBox()"]]


@pytest.mark.parametrize("path", COURSE, ids=lambda p: p.stem)
def test_no_rendered_progress_bar_is_left_frozen_at_its_start(path):
    from fragnb.course import settle_progress_bars

    rendered = json.loads((ROOT / "docs" / "course" / path.name).read_text())
    before = json.dumps(rendered)
    settle_progress_bars(rendered)
    assert json.dumps(rendered) == before, f"run `make course` (or `python -m fragnb.course settle {path.name}`)"


@pytest.mark.parametrize("path", COURSE, ids=lambda p: p.stem)
def test_no_output_of_a_rendered_copy_loads_anything_from_the_internet(path):
    """The course works offline, in a lab without internet or on a hub behind a firewall: no output (the episode
    player, a figure, a table) links a script, stylesheet, font or picture from a server."""
    rendered = json.loads((ROOT / "docs" / "course" / path.name).read_text())
    outputs = [o for c in rendered["cells"] for o in c.get("outputs", [])]
    fetched = {
        url
        for o in outputs
        for kind, value in o.get("data", {}).items()
        if kind.startswith(("text/html", "image/svg", "application/javascript"))
        for url in re.findall(r"(?:src|href)\s*=\s*[\"'](https?://[^\"']+)", "".join(value))
    }
    assert not fetched, f"{path.name} loads {sorted(fetched)}: make course renders it offline"


@pytest.mark.parametrize("path", COURSE, ids=lambda p: p.stem)
def test_every_widget_of_a_rendered_copy_that_is_not_a_bar_has_a_picture(path):
    """Where a viewer without the widgets would show ``VBox(children=...)`` (04's explorer), the copy holds
    the picture ``make course`` put there."""
    from fragnb.course.rendered import _STATE, _VIEW, _bar_line

    rendered = json.loads((ROOT / "docs" / "course" / path.name).read_text())
    state = rendered["metadata"].get("widgets", {}).get(_STATE, {}).get("state", {})
    for cell in rendered["cells"]:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if _VIEW in data and _bar_line(state, data[_VIEW]["model_id"]) is None:
                assert "image/png" in data, f"{path.name}: a widget without its picture; run `make course`"


#: Figures the instructor guide may type without a run behind them: each is not a measurement (a tolerance,
#: a lesson's length, a setting), by the phrase it appears in.
GUIDE_FIGURES = {
    "within 5 %": "the autograder's tolerance for a number",
    "within 25 % of the measured median": "notebook 10's own yardstick, which its cell prints",
    "15 minutes": "a lesson plan's length",
    "waits 30 s": "drill 3's configured wait for a replacement worker",
    "exit status -9": "SIGKILL's number: what a killed process reports on any machine",
    "atol=1e-5": "a tolerance the student passes, not a measurement",
}


def guide_figures(text: str, pages: dict[str, str]) -> list[str]:
    """The measured figures ``text`` (the instructor guide) types with no source: each figure that is neither in
    a phrase of :data:`GUIDE_FIGURES` nor, in a paragraph that links a page of ``pages`` (link -> text), a
    figure that page states with the same unit."""
    from claims import FIGURE

    unsourced = []
    for paragraph in re.split(r"\n\s*\n", text):
        sources = [pages[link] for link in re.findall(r"\]\(([^)#]+\.md)", paragraph) if link in pages]
        flat = " ".join(paragraph.split())
        for found in FIGURE.finditer(flat):
            around = flat[max(0, found.start() - 40) : found.end() + 40]
            figure = found.group()  # the number with its unit, as the page would state it
            if any(phrase in around for phrase in GUIDE_FIGURES) or any(figure in " ".join(p.split()) for p in sources):
                continue
            unsourced.append(around)
    return unsourced


def test_the_instructor_guide_types_no_measured_figure_but_those_its_linked_pages_state():
    """Issue 72: a figure a teacher reads is the render's or a page's it names, never typed from a run that
    has since changed: the renders print their own (the guide says where)."""
    guide = ROOT / "notebooks" / "INSTRUCTOR.md"
    text = guide.read_text()
    pages = {
        link: (guide.parent / link).read_text()
        for link in set(re.findall(r"\]\(([^)#]+\.md)", text))
        if (guide.parent / link).exists()
    }
    assert guide_figures(text, pages) == []
    # shown failing: a figure typed from a rendered run, and one its linked page does not state
    assert guide_figures("Run it (about 20 seconds here).", pages) == ["Run it (about 20 seconds here)."]
    for typed in ("it found `0.0 of 2 cores free`", "about −61 against a hand-written −32", "by about 1e-2 here"):
        assert guide_figures(typed, pages), typed  # this term's review found each in the guide, from old renders
    linked = "It peaks at 953 MiB and 1,777 MiB ([docs/jupyterhub.md](../docs/jupyterhub.md))."
    assert len(guide_figures(linked, pages)) == 1 and "1,777 MiB" in guide_figures(linked, pages)[0]


def test_a_changed_message_makes_a_rendered_cell_behind_the_code_and_a_changed_number_does_not():
    """The check the root conftest.py runs on every notebook cell nbval runs (issue 72 item 2): what fragnb said in
    the rendered copy and in today's run are compared with numbers, addresses and a lost worker's replicas masked."""
    from fragnb.course.rendered import behind, messages

    cells = [c for c in _cells(ROOT / "docs" / "course" / "03_async_and_srl.ipynb") if c["cell_type"] == "code"]
    cell = next(c for c in cells if any("statistical run" in line for line in messages(c["outputs"])))
    outputs = cell["outputs"]
    assert behind(outputs, outputs) is None

    def changed(old: str, new: str) -> list[dict]:
        return [{**o, "text": "".join(o.get("text", "")).replace(old, new)} for o in outputs]

    said = behind(outputs, changed("statistical run", "exact run"))
    assert (
        said
        and 'the rendered copy says "fragnb: statistical run' in said
        and "today's code says \"fragnb: exact run" in said
    )
    assert behind(outputs, changed("up to 1 ", "up to 2 ")) is None  # a number: another machine's, not other code
    lost = [
        {
            "output_type": "stream",
            "name": "stderr",
            "text": "fragnb: lost the worker of replica actors[1] on tcp://127.0.0.1:4242 during the run (x)\n",
        }
    ]
    again = [
        {
            **lost[0],
            "text": "fragnb: lost the worker of replicas actors[0], learner[0] on tcp://10.0.0.2:99; the run (x)\n",
        }
    ]
    assert behind(lost, [{**lost[0], "text": lost[0]["text"].replace("4242", "5151")}]) is None
    assert behind(lost, again)  # during the run / went on: another ending
    starting = [{"output_type": "stream", "name": "stderr", "text": "fragnb: started 4 Dask workers in 1.2 s\n"}]
    assert behind([], starting) is None  # how fast this machine starts workers says nothing of the code
    small = (
        "fragnb: this kernel may use 2 cores and 1.5 GiB of free memory; the course is written for 2 cores and 4 GiB.\n"
    )
    assert behind([], [{"output_type": "stream", "name": "stderr", "text": small}]) is None  # a smaller machine's


@pytest.fixture(scope="module")
def slides(tmp_path_factory):
    """Every week's deck, as `make course` writes them (`python -m fragnb.course slides`)."""
    import urllib.error

    from fragnb.course.slides import write_slides

    out = tmp_path_factory.mktemp("slides")
    try:
        return out, write_slides(ROOT / "docs" / "course", out)
    except urllib.error.URLError as e:  # reveal.js and require.js come from npm's registry, once
        pytest.skip(f"npm's registry cannot be reached for reveal.js: {e}")


def test_each_weeks_slides_are_its_notebooks_sections_and_load_nothing_from_the_internet(slides):
    """Issue 72 item 5: a deck per rendered notebook, a slide per `##` section up to the exercises (none of the
    exercises, quiz or solutions), and every script and stylesheet it loads beside it."""
    from fragnb.course.slides import ASSETS

    out, decks = slides
    assert [d.stem for d in decks] == [p.stem for p in sorted((ROOT / "docs" / "course").glob("[0-9]*.ipynb"))]
    for path in decks:
        html = path.read_text()
        cells = _cells(ROOT / "docs" / "course" / f"{path.stem}.ipynb")
        sections, stop = [], ("## Exercise", "## Quiz", "## Solutions")
        for line in (line for c in cells if c["cell_type"] == "markdown" for line in _source(c).splitlines()):
            if line.startswith(stop):
                break
            if line.startswith("## "):
                sections.append(line[3:].strip())
        # the title's slide, then one a section (reveal.js: a <section> of vertical <section>s each)
        assert html.count("<section><section>") == len(sections) + 1, (path.name, sections)
        assert "BEGIN QUESTION" not in html and "answers = {" not in html and "Rubric" not in html, path.name
        loaded = re.findall(r'<(?:script|link)\b[^>]*\b(?:src|href)="([^"]+)"', html)
        assert loaded and all(url.startswith(ASSETS + "/") for url in loaded), (path.name, loaded)
        assert all((out / url).exists() for url in loaded), (path.name, loaded)
