"""fragnb from a Python script rather than a notebook: a run started at the script's top level outside
`if __name__ == "__main__":` is refused within seconds, naming the line and the fix, instead of waiting two
minutes for workers that re-import the script and never start."""

import subprocess
import sys
import textwrap
from pathlib import Path

from fragnb.runtime.cluster.guard import unguarded_start

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """\
import sys
sys.path.insert(0, {tests!r})
from pathlib import Path
import fragnb
from fragnb.notebook import load_canonical

def main():
    canonical = load_canonical(Path({notebook!r}))
    ns = canonical.namespace()
    ns["iterations"] = 1
    graph = fragnb.capture(canonical.body, ns, name="script")
    result = fragnb.run(graph, "coarse", actors=2, progress=False, plot=False, check=False)
    print("ran", result.iterations)

{start}
"""


def _script(tmp_path, start: str) -> subprocess.CompletedProcess:
    path = tmp_path / "train.py"
    notebook = str(ROOT / "notebooks" / "01_first_fragment_graph.ipynb")
    path.write_text(SCRIPT.format(tests=str(ROOT / "tests"), notebook=notebook, start=start))
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300, cwd=tmp_path)


def test_a_script_without_the_main_guard_is_refused_within_seconds_naming_the_line_and_the_fix(tmp_path):
    done = _script(tmp_path, "main()")  # refused as it starts (about 4 s here; it waited 126 s for workers before)
    assert done.returncode != 0
    assert f"{tmp_path / 'train.py'}, line 15: this script starts a distributed run at its top level" in done.stderr
    assert 'if __name__ == "__main__":' in done.stderr and "Dask workers started" not in done.stderr


def test_the_same_script_with_the_guard_runs(tmp_path):
    done = _script(tmp_path, 'if __name__ == "__main__":\n    main()')
    assert done.returncode == 0 and "ran 1" in done.stdout, done.stderr[-2000:]


def test_a_script_read_from_standard_input_is_refused_within_seconds_naming_the_fix(tmp_path):
    # `python - < train.py`: the workers' processes would import "<stdin>" as the main script, and none came
    # up (a two-minute wait, then "only 0 of 3 Dask workers started")
    notebook = str(ROOT / "notebooks" / "01_first_fragment_graph.ipynb")
    source = SCRIPT.format(tests=str(ROOT / "tests"), notebook=notebook, start='if __name__ == "__main__":\n    main()')
    done = subprocess.run(
        [sys.executable, "-"], input=source, capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode != 0
    assert "this script was read from <stdin>, not a file" in done.stderr and "Save it as a .py file" in done.stderr
    assert "Dask workers started" not in done.stderr


def test_only_a_top_level_statement_outside_the_guard_counts():
    source = textwrap.dedent(
        """\
        import fragnb
        run()
        if __name__ == "__main__":
            run()
        if "__main__" == __name__:
            run()
        if __name__ != "__main__":
            run()
        """
    )
    assert [unguarded_start(source, line) for line in (2, 4, 6, 8)] == [True, False, False, True]
    assert not unguarded_start("def broken(:\n", 1)  # what cannot be parsed is not refused
