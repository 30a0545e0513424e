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
    assert len(hidden) == questions and all("assert same(answers.get(" in _source(c) for c in hidden), (
        "one hidden test per question, computing its answer from the notebook's objects"
    )
    solutions = [c for c in cells if "solution" in c["metadata"].get("tags", [])]
    for c in solutions:  # collapsed where a student opens them: JupyterLab and GitHub
        if c["cell_type"] == "code":
            assert c["metadata"].get("jupyter", {}).get("source_hidden"), _source(c)[:60]
        else:
            assert _source(c).startswith(("<details>", "**Quiz.**")), _source(c)[:60]


@pytest.mark.parametrize("path", COURSE, ids=lambda p: p.stem)
def test_the_rendered_course_is_in_step_with_the_notebooks(path):
    """docs/course/ holds every notebook run top to bottom (`make course`), for reading without installing:
    the teacher's copy without its quiz's key and hidden tests, which students read there."""
    from fragnb.course.rendered import without_key

    rendered = ROOT / "docs" / "course" / path.name
    assert rendered.exists(), f"{rendered.relative_to(ROOT)} is missing: run `make course`"
    teachers = {"cells": _cells(path)}
    quiz = _quiz(teachers["cells"])
    assert without_key(teachers) == len(quiz["solution"]) - 1 + len(quiz["tests"]) - 1  # all but answers and the check
    source, copy = teachers["cells"], _cells(rendered)
    text = json.dumps(copy)
    assert "# HIDDEN" not in text and "# The quiz's key" not in text, f"{rendered.name} shows the quiz's key"
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
    sources = [_source(c) for c in student["cells"]]
    at = next(i for i, t in enumerate(sources) if t.startswith("answers = {"))
    assert student["cells"][at]["metadata"].get("editable", True) and sources[at + 1] == 'grader.check("quiz")'
    public = student["metadata"]["otter"]["tests"]["quiz"]["suites"][0]["cases"]
    assert [c["hidden"] for c in public] == [False]
    (zipped,) = (handouts / path.stem / "autograder").glob("*.zip")
    tests = zipfile.ZipFile(zipped).read("tests/quiz.py").decode()
    assert tests.count("'hidden': True") == len(_quiz(_cells(path))["tests"]) - 1


@pytest.mark.slow
def test_the_autograder_grades_a_handed_in_handout_answer_by_answer(handouts, tmp_path):
    """`otter run` on notebook 06's handout answered with its key but one wrong answer: every test runs in a
    kernel on the student's run, and the score is one short of full."""
    import subprocess
    import sys

    path = next(p for p in COURSE if p.name.startswith("06"))
    key = next(_source(c) for c in _quiz(_cells(path))["solution"] if _source(c).startswith("# The quiz's key"))
    answers = eval(key.splitlines()[-1].split("=", 1)[1])  # noqa: S307 - the key's dict literal
    answers[4] = "ValueError"  # wrong: placing that policy raises a FragmentError
    student = json.loads((handouts / path.stem / "student" / path.name).read_text())
    cell = next(c for c in student["cells"] if _source(c).startswith("answers = {"))
    cell["source"] = f"answers = {answers!r}"
    handed_in = tmp_path / path.name
    handed_in.write_text(json.dumps(student))
    (zipped,) = (handouts / path.stem / "autograder").glob("*.zip")
    otter = [sys.executable, "-m", "otter", "run", "-a", str(zipped), "-o", str(tmp_path), str(handed_in)]
    done = subprocess.run(otter, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    results = json.loads((tmp_path / "results.json").read_text())
    quiz = next(t for t in results["tests"] if t["name"] == "quiz")
    assert (quiz["score"], quiz["max_score"]) == (len(answers) - 1, len(answers)), quiz["output"][-2000:]


def test_the_course_page_lists_every_notebook_with_its_minutes():
    page = (ROOT / "notebooks" / "README.md").read_text()
    for path in COURSE:
        row = next((line for line in page.splitlines() if f"({path.name})" in line), None)
        assert row is not None, f"notebooks/README.md does not link {path.name}"
        assert row.rstrip(" |").rsplit("|", 1)[-1].strip().replace(".", "", 1).isdigit(), f"no minutes in: {row}"


# -- what each notebook claims, checked by its own run -----------------------------------------------
#: Per notebook, each claim its text makes about what it measured or computed, with the assert that
#: checks it on the notebook's own run (a fragment of the assert's condition as Python writes it back).
#: nbval runs every notebook, so a rerun that reverses a claim fails; this list keeps the asserts from
#: going missing, and a new assert from going in without the claim it checks being written down here.
#: Only what holds on any machine that can run the notebook is a claim (same weights, bounded staleness,
#: counts, exact equalities); a measured speed, ratio, share or bottleneck is printed with the sentence
#: built from it, since another program on the machine can turn it around (`pytest --busy=2` checks this).
CLAIMS = {
    "01": [
        ("capturing runs nothing: the cell's variables do not exist yet", "'returns' not in dir()"),
        ("the roles of the nine fragments", "[f.role for f in ppo.fragments] =="),
        ("four seeds ran side by side, none failed", "not sweep.failed and len(sweep.runs) == 4"),
        ("the sweep's seed 0 is the notebook's own run, episode for episode", "seed0.values['returns'] == returns"),
        ("exercise 1: another batch shape keeps the graph's shape", "shape(again) == shape(ppo)"),
        ("exercise 3: bookkeeping goes to the driver", "role_of(with_seen, 'seen =') == 'driver'"),
        ("exercise 4: two learning rates over four seeds each ran", "not grid.failed and all("),
    ],
    "02": [
        ("coarse leaves single's weights", "(weights['coarse'] - weights['single']).abs().max() < 1e-05"),
        ("fine leaves single's weights", "(weights['fine'] - weights['single']).abs().max() < 1e-05"),
        ("coarse and fine return single's episodes, in its order", "returned['coarse'] == returned['single'] and"),
        ("any bookkeeping, same answer", "distributed == (episodes, log['value_loss'])"),
    ],
    "03": [
        ("the design table's SEED RL row, checked on a placement", "facts['SEED RL']['inference'] =="),
        ("the design table's IMPALA, SRL and DD-PPO rows", "facts['IMPALA']['sync'] == facts['SRL']['sync']"),
        ("Anakin sends nothing", "facts['Anakin']['crosses'] == ['nothing']"),
        ("coarse with both edges relaxed is async's placement", "relaxed.transfers == ppo.place('async'"),
        ("one edge at a time: no update trains on data older than the bound", "max(a) <= 1 for a in ages"),
        ("one edge at a time: coarse exact, a relaxed edge statistical", "[runs[0].guarantee for runs in one_edge"),
        ("the sweep: no run trained on data older than its bound", "a <= bound for (bound, _), runs in sweep.items()"),
        ("the sweep: at bound 0 nothing trained on was stale", "mean_staleness(r) == 0 for n in (1, 2)"),
    ],
    "04": [
        ("the explorer's run iterated as the result says", "it == explorer.result.iterations - 1"),
        ("srl's ring choices at 16 actors", "choices(ppo, 'srl', 'ring', actors=16) == [1, 2]"),
        ("a composed policy keeps single's weights", "(weights['buffer_with_learner'] - weights['single'])"),
    ],
    "05": [
        ("the remote cluster trains the same weights", "same and trained"),
        ("the drill: one worker lost, resumed, the same returns", "len(drill.lost_workers) == 1 and same"),
        ("an async actor lost: the run goes on to the end", "len(drill_async.lost_workers) == 1 and"),
        ("no capacity left: plain Python's state at the last checkpoint is kept", "(kept_it + 1) % 2 == 0 and kept"),
        ("a bug only one replica meets, replayed in the kernel in its frame", "frame.f_globals['it'] == 3 and 20 in"),
        ("shutting down leaves no process", "all((proc.poll() is not None for proc in"),
        ("ending the session ends every process", "all((session_ended(proc) for proc in"),
        ("the drills killed every worker: each exited on SIGKILL", "proc.returncode == -signal.SIGKILL"),
    ],
    "06": [
        ("your own policy keeps the invariant", "invariant"),
        ("the buffer's edge becomes an exchange", "operator(placed, 'buffer@it', 'learner') == 'exchange'"),
        ("a policy that cannot run a loop refuses it", "refusal(logged, 'own_buffer', actors=2) == 'FragmentError'"),
        ("a rewritten fine places as fine", "shape(ppo.place('my_fine', actors=2)) =="),
        ("exercise: own_buffer keeps single's weights to 1e-5", "torch.allclose(mine[k], v, atol=1e-05) for k, v in"),
    ],
    "07": [
        ("MAPPO's fragments and roles", "[f.role for f in mappo.fragments] =="),
        ("MAPPO trains 10 above its baseline", "trained > baseline + 10"),
        ("coarse leaves single's weights and returns", "(w_single - w_coarse).abs().max() < 1e-05 and r_single"),
        ("exercise: more agents keep the graph's shape", "shape(regraph) == shape(mappo)"),
        ("exercise 4: multi_learner's weights are not single's", "(w_single - w_data_parallel).abs().max() > 1e-05"),
    ],
    "08": [
        ("coarse leaves single's weights and returns", "(w_single - w_coarse).abs().max() < 1e-05 and r_single"),
        ("collect-then-train: coarse leaves single's weights", "(wc_single - wc_coarse).abs().max() < 1e-05"),
        ("the replay-ratio sweep ran every seed", "not grid.failed"),
        (
            "Ape-X without a bound: the loop's own 8 samples per insert, never ahead",
            "r['ahead'] == 0 and r['per insert'] == 8",
        ),
        (
            "Ape-X bound at 16: within the bound, and an iteration ahead of insertion inserts nothing",
            "r['per insert'] <= 16 and r['inserted'] == (iterations - r['ahead']) * per_iteration",
        ),
        ("prioritised replay's update goes with the learner", "placed.fragments[fragment.name].group =="),
        ("exercise 1: build(prioritized=True) reaches the buffer", "buffer.prioritized and (buffer.alpha, buffer"),
    ],
    "09": [
        ("writer has the loop's episodic returns, the result none from Gymnasium", "episodic and (not cleanrl"),
        ("CleanRL's loop under coarse: statistical, every step taken", "statistical.guarantee == 'statistical'"),
        ("under fine: exact", "cleanrl_fine.guarantee == 'exact'"),
        ("with streams: exact", "exact.guarantee == 'exact'"),
        ("the agent's weights equal single's", "torch.allclose(single_weights[k], v, atol=1e-05) for k, v in agent"),
        ("the logs equal single's", "[(tag, step) for tag, _, step in writer] =="),
        ("a REINFORCE loop's returns equal single's", "returns == single_returns"),
        ("its policy's weights equal single's", "torch.allclose(single_weights[k], v, atol=1e-05) for k, v in policy"),
        ("the REINFORCE loop under fine: exact", "fine.guarantee == 'exact'"),
    ],
    "10": [  # its other claims are predictions and timings: printed from the run, not asserted
        (
            "no point of either scaling sweep beats Amdahl's bound or the cores' worth of single on its batch",
            "p.seconds_per_iteration >= p.bound_seconds and p.env_steps_per_s <= cores_worth",
        ),
        (
            "exercise: from the cores' count on, more coarse actors are never predicted faster",
            "predicted[b].env_steps_per_s <= predicted[a].env_steps_per_s",
        ),
    ],
    "11": [
        ("the reward: right 1, one digit wrong partial, a bad token 0", "rewards_demo[0] == 1.0"),
        ("GRPO raises the reward and the exact match", "last > first and after > before"),
        ("the staleness bound holds", "table['async, η=1']['staleness'][1] <= 1"),
        ("async with η=0 is the colocated run, reward for reward", "eta0_is_colocated"),
        ("async with η=0 leaves the colocated run's weights", "weight_gap < 1e-05"),
        ("exercise 1: a learning rate of 3e-3 loses the warm-up's accuracy", "accuracy(policy, env) < start"),
        ("exercise 2: the sparse reward leaves more groups flat", "flat['exact'] > flat['partial']"),
    ],
}


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
def test_every_claim_a_notebook_makes_is_asserted_on_its_own_run(path):
    claims = CLAIMS[path.name[:2]]
    asserts = _asserts(path)
    missing = [claim for claim, condition in claims if not any(condition in a for a in asserts)]
    assert not missing, f"{path.name} no longer asserts: {missing}"
    unlisted = [a for a in asserts if not any(condition in a for _, condition in claims)]
    assert not unlisted, f"{path.name} asserts what CLAIMS does not list (write down the claim it checks): {unlisted}"


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
