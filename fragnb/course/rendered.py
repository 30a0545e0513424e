"""The rendered copies of the course (``docs/course/``): progress bars written as they ended, and a picture
where a widget would show as text.

``python -m fragnb.course settle docs/course/*.ipynb`` (``make course`` runs it) rewrites, in each rendered
copy, the plain-text line of every tqdm bar to its final state. A viewer without the widgets (GitHub, nbviewer,
a diff) shows that line, which the kernel wrote when the bar started: ``0%|          | 0/146``. The widget's
final state is saved in the notebook's metadata; the line is made from it. Any other widget (04's explorer)
gets a picture of itself as JupyterLab draws it (:data:`WIDGET_PICTURES`). And the rendered copies are public,
students read them: each quiz's key and its hidden tests are left out (:func:`without_key`), which the
teacher's copies in ``notebooks/`` keep.
"""

from __future__ import annotations

import html
import json
import re
from collections import Counter

__all__ = [
    "settle_progress_bars",
    "picture_widgets",
    "without_key",
    "keyless",
    "relink",
    "KEYLESS",
    "for_site",
    "is_solution",
    "write_site_course",
    "minutes",
    "write_minutes",
    "WIDGET_PICTURES",
    "messages",
    "behind",
]


_VIEW = "application/vnd.jupyter.widget-view+json"
_STATE = "application/vnd.jupyter.widget-state+json"


#: The picture a rendered copy shows in place of a widget that is not a progress bar, by notebook (relative to
#: the repository): the explorer as ``tests/test_browser.py`` photographed it in JupyterLab.
WIDGET_PICTURES = {"04_explore_policies.ipynb": "docs/explorer.png"}


def is_solution(cell: dict) -> bool:
    """Whether a cell goes only to the teacher: tagged ``solution`` (an exercise's solution, a quiz's key), or the
    ``## Solutions`` heading that tells a reader of the teacher's copy the cells below it are collapsed."""
    tagged = "solution" in cell.get("metadata", {}).get("tags", [])
    return tagged or (cell["cell_type"] == "markdown" and "".join(cell.get("source", "")).startswith("## Solutions"))


def picture_widgets(notebook: dict, png: bytes) -> int:
    """Give every widget output of a rendered notebook that is not a progress bar the picture ``png``
    (``image/png``, which a viewer without the widgets shows instead of ``VBox(children=...)``); returns how many."""
    import base64

    state = notebook.get("metadata", {}).get("widgets", {}).get(_STATE, {}).get("state", {})
    pictured = 0
    for cell in notebook.get("cells", []):
        for output in cell.get("outputs", []):
            view = output.get("data", {}).get(_VIEW)
            if view and _bar_line(state, view["model_id"]) is None:
                output["data"]["image/png"] = base64.b64encode(png).decode()
                output["data"]["text/plain"] = ["(a widget: the picture shows it as JupyterLab draws it)"]
                pictured += 1
    return pictured


def settle_progress_bars(notebook: dict) -> int:
    """Rewrite, in a rendered notebook (as JSON), the ``text/plain`` of every tqdm bar's output to the bar's
    final state from the saved widget state; returns how many it rewrote. Other widgets are left alone."""
    state = notebook.get("metadata", {}).get("widgets", {}).get(_STATE, {}).get("state", {})
    settled = 0
    for cell in notebook.get("cells", []):
        for output in cell.get("outputs", []):
            view = output.get("data", {}).get(_VIEW)
            line = _bar_line(state, view["model_id"]) if view else None
            if line is not None:
                output["data"]["text/plain"] = [line]
                settled += 1
    return settled


def _bar_line(state: dict, model_id: str) -> str | None:
    """``label|#####     | n/total [time]`` for tqdm's widget (an HBox of HTML, FloatProgress, HTML), else None."""
    box = state.get(model_id, {})
    children = [state.get(c.removeprefix("IPY_MODEL_"), {}) for c in box.get("state", {}).get("children", [])]
    kinds = [c.get("model_name") for c in children]
    if box.get("model_name") != "HBoxModel" or kinds != ["HTMLModel", "FloatProgressModel", "HTMLModel"]:
        return None
    left, bar, right = (c["state"] for c in children)
    done = min(1.0, bar.get("value", 0) / bar["max"]) if bar.get("max") else 0.0
    filled = round(10 * done)

    def text(value: str) -> str:
        return html.unescape(value).replace("\u2007", " ")

    return f"{text(left.get('value', ''))}|{'█' * filled}{' ' * (10 - filled)}|{text(right.get('value', ''))}"


#: What a quiz's introduction says in the teacher's copy, and what it says in a copy without the key (a rendered
#: copy, a student's handout), where no key and no hidden test follow it.
KEYLESS = (
    (r"the key follows it,\s+collapsed:\s+try first\.", "its key is in the teacher's copy."),
    (r"\s+\(the cells\s+below\)", ""),
)


def keyless(cells: list) -> None:
    """Word each quiz's introduction among ``cells`` (dicts or nbformat nodes) for a copy without its key."""
    for cell in cells:
        text = "".join(cell.get("source", ""))
        if cell["cell_type"] == "markdown" and text.startswith("## Quiz"):
            for teachers, students in KEYLESS:  # as the source breaks its lines
                text = re.sub(teachers, students, text)
            cell["source"] = text.splitlines(keepends=True) if isinstance(cell.get("source"), list) else text


#: A link the teacher's copy writes from ``notebooks/``, as its rendered copy in ``docs/course/`` must write it
#: (GitHub shows the rendered copies where they are; the site rewrites them again, :data:`_SITE_LINKS`).
_RENDERED_LINKS = {"](../docs/": "](../"}


def relink(cells: list) -> None:
    """Make the markdown links of ``cells`` (dicts) written from ``notebooks/`` resolve from ``docs/course/``."""
    for cell in cells:
        if cell["cell_type"] == "markdown":
            text = "".join(cell.get("source", ""))
            for old, new in _RENDERED_LINKS.items():
                text = text.replace(old, new)
            cell["source"] = text.splitlines(keepends=True)


def without_key(notebook: dict) -> int:
    """Drop, from a notebook (as JSON), each quiz's key (the cells tagged ``solution`` between otter's
    ``# BEGIN SOLUTION`` and ``# END SOLUTION``) and its hidden tests (``# HIDDEN`` cells between ``# BEGIN
    TESTS`` and ``# END TESTS``), and word the quiz's introduction for a copy without them (:func:`keyless`);
    returns how many cells it dropped. Exercise solutions, outside a quiz, stay."""
    kept, block = [], None
    for cell in notebook.get("cells", []):
        text = "".join(cell.get("source", "")).strip()
        if cell["cell_type"] == "raw" and text.startswith("# BEGIN "):
            block = text.removeprefix("# BEGIN ").split()[0]
        elif cell["cell_type"] == "raw" and text.startswith("# END "):
            block = None
        elif (block == "SOLUTION" and "solution" in cell.get("metadata", {}).get("tags", [])) or (
            block == "TESTS" and cell["cell_type"] == "code" and text.startswith("# HIDDEN")
        ):
            continue
        kept.append(cell)
    dropped = len(notebook.get("cells", [])) - len(kept)
    keyless(kept)
    notebook["cells"] = kept
    return dropped


def for_site(notebook: dict) -> int:
    """Make a rendered copy a student's copy for the documentation site, in place: drop every exercise
    solution (cells tagged ``solution``), otter's markers (raw cells) and every quiz test, public or hidden,
    and leave each widget output its picture or settled line (no widget manager loads on the site); returns
    how many cells it dropped."""
    kept, block = [], None
    for cell in notebook.get("cells", []):
        text = "".join(cell.get("source", "")).strip()
        if cell["cell_type"] == "raw":
            if text.startswith("# BEGIN "):
                block = text.removeprefix("# BEGIN ").split()[0]
            elif text.startswith("# END "):
                block = None
            continue
        if block == "TESTS" or is_solution(cell):
            continue
        for output in cell.get("outputs", []):
            output.get("data", {}).pop(_VIEW, None)
        kept.append(cell)
    dropped = len(notebook.get("cells", [])) - len(kept)
    notebook["cells"] = kept
    notebook.get("metadata", {}).pop("widgets", None)
    return dropped


#: The course's links that point out of ``notebooks/``, and where they point on the site (in this order: the
#: rendered copies are the site's own pages, anything else of ``docs/`` is one folder up from ``learn/``).
_SITE_LINKS = {"](../docs/course/)": "](index.md)", "](../docs/course/": "](", "](../docs/": "](../"}


def write_site_course(root, out) -> list:
    """Write the site's course into ``out``: the course page (``notebooks/README.md``) as its index, the course's
    other pages (``notebooks/*.md``: the project, ...), and a student's copy (:func:`for_site`) of every rendered
    notebook in ``docs/course/`` and of the unnumbered notebooks of ``notebooks/`` (the project's starter); the
    index lists them and the teacher's page, ``docs/jupyterhub.md``.
    Returns the paths written; a file that would not change is left alone, so Sphinx rebuilds only
    what changed."""
    from pathlib import Path

    root, out = Path(root), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    files = {}
    page = (root / "notebooks" / "README.md").read_text(encoding="utf-8")
    title, _, rest = page.partition("\n")  # the site's navigation bar names the section in one word
    files["index.md"] = f"# Course\n\n**{title.lstrip('# ')}**\n{rest}"
    # the course's other pages (the project, the glossary, ...) as they are; then the teacher's page, docs/jupyterhub.md
    pages = sorted(p for p in (root / "notebooks").glob("*.md") if p.name != "README.md")
    for path in pages:
        files[path.name] = path.read_text(encoding="utf-8")
    # the rendered course, then the notebooks a student starts from (the project's starter), which have no outputs
    notebooks = sorted((root / "docs" / "course").glob("[0-9]*.ipynb"))
    notebooks += sorted(p for p in (root / "notebooks").glob("*.ipynb") if not p.name[0].isdigit())
    for name in files:
        for old, new in _SITE_LINKS.items():
            files[name] = files[name].replace(old, new)
    listed = "\n".join([p.stem for p in notebooks] + [p.stem for p in pages] + ["../jupyterhub"])
    files["index.md"] += f"\n```{{toctree}}\n:hidden:\n\n{listed}\n```\n"
    for path in notebooks:
        notebook = json.loads(path.read_text(encoding="utf-8"))
        for_site(notebook)
        for cell in notebook["cells"]:  # a notebook's links to docs/ land on the site's pages too
            if cell["cell_type"] == "markdown":
                text = "".join(cell["source"])
                for old, new in _SITE_LINKS.items():
                    text = text.replace(old, new)
                cell["source"] = text
        files[path.name] = json.dumps(notebook, indent=1, ensure_ascii=False) + "\n"
    written = []
    for name, text in files.items():
        target = out / name
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
        written.append(target)
    return written


def settle_files(paths: list[str]) -> None:
    """Settle the bars and picture the widgets of rendered notebooks, in place."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    for path in paths:
        with open(path, encoding="utf-8") as f:
            notebook = json.load(f)
        n = settle_progress_bars(notebook)
        without_key(notebook)
        relink(notebook["cells"])
        picture = WIDGET_PICTURES.get(Path(path).name)
        if picture:
            picture_widgets(notebook, (root / picture).read_bytes())
        with open(path, "w", encoding="utf-8") as f:
            json.dump(notebook, f, indent=1, ensure_ascii=False)
            f.write("\n")
        print(f"{path}: {n} progress bar{'s' if n != 1 else ''} written as they ended")


def minutes(notebook: dict) -> tuple[float, str]:
    """How long a rendered copy's cells ran, from the first cell's start to the last one's reply, in minutes, and
    the day (UTC) it ran: the times the kernel recorded in each cell's ``execution`` metadata."""
    from datetime import datetime

    times = [
        datetime.fromisoformat(t.replace("Z", "+00:00"))
        for cell in notebook.get("cells", [])
        for t in cell.get("metadata", {}).get("execution", {}).values()
    ]
    if not times:
        raise ValueError("the notebook holds no execution times: render it with `make course`")
    return (max(times) - min(times)).total_seconds() / 60, min(times).date().isoformat()


#: The course page's sentence that gives the day and the total (``write_minutes`` rewrites it).
_TOTAL = r"on (\d{4}-\d{2}-\d{2}(?: to \d{4}-\d{2}-\d{2})?): ([\d.]+) minutes for the twelve"


def course_minutes(page: str, rendered) -> tuple[str, dict[str, float]]:
    """``page`` (``notebooks/README.md``) with each notebook's row ending in its rendered copy's minutes
    (``rendered``: the folder of copies) and the total's sentence computed from them; and those minutes."""
    import re
    from pathlib import Path

    taken, days, lines = {}, [], []
    for line in page.splitlines():
        link = re.search(r"\]\((?:\.\./docs/course/)?(\d\d_[^)]+\.ipynb)\)", line)  # a week's rendered copy
        if link and line.rstrip().endswith("|"):
            spent, day = minutes(json.loads((Path(rendered) / link[1]).read_text(encoding="utf-8")))
            taken[link[1]], days = spent, [*days, day]
            cells = line.rstrip().rstrip("|").rsplit("|", 1)
            line = f"{cells[0]}| {spent:.1f} |"
        lines.append(line)
    text = "\n".join(lines) + "\n"
    span = min(days) if min(days) == max(days) else f"{min(days)} to {max(days)}"
    total = sum(round(m, 1) for m in taken.values())
    return re.sub(_TOTAL, f"on {span}: {total:.1f} minutes for the twelve", text), taken


def write_minutes(page, rendered) -> dict[str, float]:
    """Rewrite the course page's minutes from the rendered copies (``python -m fragnb.course minutes``)."""
    from pathlib import Path

    text, taken = course_minutes(Path(page).read_text(encoding="utf-8"), rendered)
    Path(page).write_text(text, encoding="utf-8")
    return taken


#: fragnb's lines that say what this machine is or how fast it starts workers, not what the code does: left out of
#: :func:`messages` (a kernel with less than the course assumes is told so in its first cell)
_MACHINE = (
    "fragnb: starting Dask workers",
    "fragnb: started ",
    "fragnb: waiting for the Dask cluster",
    "fragnb: this kernel may use ",
)


def messages(outputs: list[dict]) -> list[str]:
    """What fragnb said in a cell's ``outputs`` (its ``fragnb: ...`` lines: guarantees, caveats, refusals, a
    lost worker), with what changes from run to run or machine to machine masked: numbers, addresses, and
    which replicas shared a lost worker. A rendered copy whose cell said other things is behind the code."""
    said = []
    for out in outputs:
        text = "".join(out.get("text", "")) if out.get("output_type") == "stream" else ""
        for line in re.split(r"[\r\n]", text):
            line = line.strip()
            if not line.startswith("fragnb:") or line.startswith(_MACHINE):
                continue
            line = re.sub(r"tcp://\S+?(?=[;:)\s]|$)", "ADDRESS", line)
            line = re.sub(r"\d+(\.\d+)?", "#", line)
            line = re.sub(r"replicas? \w+\[#\](, \w+\[#\])*", "replica R", line)
            said.append(line)
    return said


def behind(rendered: list[dict], run: list[dict]) -> str | None:
    """How a rendered cell's :func:`messages` differ from those of the same cell run with today's code (in
    any order: a distributed run's lines interleave), or None where they agree."""
    then, now = Counter(messages(rendered)), Counter(messages(run))
    if then == now:
        return None
    gone, new = sorted((then - now).elements()), sorted((now - then).elements())
    return "; ".join(
        [f'the rendered copy says "{line}", which today\'s code does not' for line in gone]
        + [f'today\'s code says "{line}", which the rendered copy does not' for line in new]
    )
