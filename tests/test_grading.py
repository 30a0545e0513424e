"""Grading outside the developer's environment: the autograder zip that `make handouts` writes carries fragnb's
wheel and the pinned environment, and a fresh virtual environment built from the zip alone grades a handout."""

import json
import os
import resource
import subprocess
import sys
import time
import zipfile
from importlib.metadata import version

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.version import Version

from conftest import ROOT, hand_in

NOTEBOOK_06 = ROOT / "notebooks" / "06_your_own_policy.ipynb"


@pytest.fixture(scope="module")
def handout(tmp_path_factory):
    """Notebook 06's handout and autograder zip, as `make handouts` writes them."""
    from fragnb.course.handouts import write_handouts

    out = tmp_path_factory.mktemp("handouts")
    (student,) = write_handouts([str(NOTEBOOK_06)], str(out))
    (zipped,) = (out / NOTEBOOK_06.stem / "autograder").glob("*.zip")
    return student, zipped


def _requirements(zipped) -> list[str]:
    text = zipfile.ZipFile(zipped).read("requirements.txt").decode()
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def test_the_autograder_zip_carries_fragnbs_wheel_and_the_course_environment_pinned(handout):
    """requirements.txt installs fragnb from the wheel inside and pins every other package to the version
    installed here; environment.yml has the same pins on this Python, the wheel found where Gradescope and
    `otter grade` unpack it."""
    from fragnb.course.handouts import SOURCE, WHEELS

    _, zipped = handout
    names = zipfile.ZipFile(zipped).namelist()
    (wheel,) = [n for n in names if n.endswith(".whl")]
    assert wheel == f"{WHEELS}/fragnb-{version('fragnb')}-py3-none-any.whl"
    with zipfile.ZipFile(zipped).open(wheel) as f, zipfile.ZipFile(f) as whl:
        assert "fragnb/course/handouts.py" in whl.namelist() and "fragnb/widgets/style.css" in whl.namelist()

    lines = _requirements(zipped)
    assert lines[:2] == [f"--find-links {WHEELS}", f"fragnb=={version('fragnb')}"]
    pins = {Requirement(line).name.lower(): Requirement(line) for line in lines[1:]}
    for name, req in pins.items():
        (spec,) = req.specifier  # every package pinned, to the release installed here
        assert spec.operator == "==" and spec.version == Version(version(name)).public, req
    for needed in ("torch", "gymnasium", "dask", "distributed", "ipykernel", "otter-grader", "tensorboard"):
        assert needed in pins, f"{needed} is not in the autograder's requirements.txt"
    assert str(pins["torch"]) == f"torch=={Version(version('torch')).public}"  # 2.13.0, not 2.13.0+cpu
    assert not {"pytest", "ruff", "stable-baselines3", "mujoco"} & set(pins), "only what grading needs"

    env = yaml.safe_load(zipfile.ZipFile(zipped).read("environment.yml"))
    assert f"python={sys.version_info.major}.{sys.version_info.minor}" in env["dependencies"]
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert pip == [f"--find-links {SOURCE}/{WHEELS}", f"--find-links {SOURCE}", *lines[1:]]


def _errors(done: subprocess.CompletedProcess) -> str:
    """pip's and otter's ERROR lines first (this machine's pip prints a warning per package), then the tail."""
    text = done.stdout + done.stderr
    errors = [line for line in text.splitlines() if "ERROR" in line or "Error" in line]
    return "\n".join(errors[-20:]) + "\n...\n" + text[-3000:]


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_a_fresh_venv_built_from_the_zip_alone_grades_a_handout_answer_by_answer(handout, tmp_path):
    """What a teacher, `otter grade` or Gradescope does with the zip, without Docker: a virtual environment
    with nothing but the zip's requirements.txt (fragnb's wheel inside it, a cold pip cache), its own kernel,
    and `otter run` from it on notebook 06's handout with one wrong answer: the score is one short of full,
    and the kernel that ran the submission is the fresh environment's."""
    student, zipped = handout
    unzipped, venv = tmp_path / "autograder", tmp_path / "venv"
    zipfile.ZipFile(zipped).extractall(unzipped)
    developer_bin = os.path.dirname(sys.executable)
    env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "JUPYTER_PATH"}}
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and p != developer_bin]
    env.update(
        PATH=os.pathsep.join([str(venv / "bin"), *path]),
        PIP_CACHE_DIR=str(tmp_path / "pip-cache"),  # cold, as on a fresh CI machine or a grading server
        JUPYTER_DATA_DIR=str(tmp_path / "jupyter"),  # no kernel of the user's (~/.local/share/jupyter)
    )
    seconds = {}  # per step, wall and CPU (its processes'): a busy machine stretches the first only

    def step(name, command, timeout):
        start, cpu = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)
        used = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = used.ru_utime + used.ru_stime - cpu.ru_utime - cpu.ru_stime
        seconds[name] = f"{time.monotonic() - start:.0f} s wall, {cpu:.0f} s CPU"
        if done.returncode:
            pytest.fail(f"{name} failed in the fresh venv (exit {done.returncode}):\n{_errors(done)}", pytrace=False)
        return done

    step("venv", [sys.executable, "-m", "venv", str(venv)], 120)  # this Python, as the pins are for it
    assert "include-system-site-packages = false" in (venv / "pyvenv.cfg").read_text()
    python = str(venv / "bin" / "python")
    step("pip install", [python, "-m", "pip", "install", "-r", str(unzipped / "requirements.txt")], 1200)
    step("kernel", [python, "-m", "ipykernel", "install", "--prefix", str(venv), "--name", "python3"], 120)

    kernel_record = tmp_path / "kernel_prefix.txt"
    handed_in, graded = hand_in(student, tmp_path, {4: "ValueError"}, kernel_record)  # wrong: a FragmentError
    otter = [str(venv / "bin" / "otter"), "run", "-a", str(zipped), "-o", str(tmp_path), str(handed_in)]
    step("otter run", otter, 900)
    print(f"\nfresh-venv grading, seconds: {seconds}")

    assert kernel_record.read_text() == str(venv), "the submission ran in another Python than the fresh venv's"
    results = json.loads((tmp_path / "results.json").read_text())
    quiz = next(t for t in results["tests"] if t["name"] == "quiz")
    assert (quiz["score"], quiz["max_score"]) == (graded - 1, graded), quiz["output"][-2000:]
