"""The documentation site (`make docs`, docs/conf.py): it builds with warnings as errors, every link inside it
lands on a page and an anchor that exist, every public name of fragnb has a reference entry, and every public
class and function has an example in its docstring that runs. The site in a browser: tests/test_browser.py."""

from __future__ import annotations

import doctest
import importlib
import inspect
import re
import zlib
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

import fragnb
from conftest import ROOT, SPHINX


def public_names() -> list[str]:
    """Every public name: ``fragnb.__all__``, the ``__all__`` of each module it lists (and of theirs:
    ``fragnb.algos.ppo``), and the prediction's (``fragnb.predict``), which placements return."""
    names = []
    for name in fragnb.__all__:
        value = getattr(fragnb, name)
        if not inspect.ismodule(value):
            names.append(f"fragnb.{name}")
            continue
        for member in value.__all__:
            inner = getattr(value, member)
            if inspect.ismodule(inner):
                names += [f"fragnb.{name}.{member}.{leaf}" for leaf in inner.__all__]
            else:
                names.append(f"fragnb.{name}.{member}")
    predict = importlib.import_module("fragnb.predict")
    names += [f"fragnb.predict.{name}" for name in predict.__all__ if name != "profile"]  # fragnb.profile itself
    return names


def resolve(name: str):
    module, _, attribute = name.rpartition(".")
    return getattr(importlib.import_module(module), attribute)


def inventory(path: Path) -> set[str]:
    """The object names a Sphinx ``objects.inv`` holds (its header, then zlib-compressed lines)."""
    data = path.read_bytes()
    for _ in range(4):
        data = data[data.index(b"\n") + 1 :]
    return {line.split()[0] for line in zlib.decompress(data).decode().splitlines() if line.strip()}


def test_make_docs_runs_the_command_the_tests_build_with():
    recipe = (ROOT / "Makefile").read_text().split("\ndocs:", 1)[1].split("\n\n", 1)[0]
    assert "$(PY) " + " ".join(SPHINX) in recipe, recipe


def test_the_site_builds_with_warnings_as_errors(site):
    for page in ("index", "start/install", "guide/values", "reference/api", "learn/index", "benchmarks/index"):
        assert (site / f"{page}.html").is_file(), page
    # every notebook of the course, as a student's copy: no solution, no quiz key, no test
    notebooks = sorted(p.stem for p in (ROOT / "docs" / "course").glob("[0-9]*.ipynb"))
    assert len(notebooks) == 12  # the primer (week 0) and the eleven weeks
    for stem in notebooks:
        text = (site / "learn" / f"{stem}.html").read_text()
        assert "BEGIN SOLUTION" not in text and "# HIDDEN" not in text and "Solution (collapsed" not in text, stem
        assert "the cells below are collapsed" not in text, (
            f"{stem}: the teacher's Solutions heading, with nothing below"
        )


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids, self.links = set(), []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("name"):
            self.ids.add(attrs["name"])
        for key in ("href", "src") if tag in ("a", "img", "link", "script") else ():
            if attrs.get(key):
                self.links.append(attrs[key])


def broken_links(site: Path) -> list[str]:
    """Every link of the site's pages to a file or an anchor of the site that is not there."""
    pages = {}
    for path in site.rglob("*.html"):
        if "_static" in path.parts:  # the theme's templates, not pages
            continue
        page = _Page()
        page.feed(path.read_text(encoding="utf-8"))
        pages[path.resolve()] = page
    broken = []
    for path, page in pages.items():
        for link in page.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or link.startswith(("mailto:", "javascript:", "data:")):
                continue  # outside the site
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{path.relative_to(site.resolve())}: {link} (no such file)")
            elif parts.fragment and target.suffix == ".html" and unquote(parts.fragment) not in pages[target].ids:
                broken.append(f"{path.relative_to(site.resolve())}: {link} (no such anchor)")
    return broken


def test_the_site_loads_nothing_from_the_internet_and_renders_equations_with_its_own_mathjax(site):
    """A reader offline, or behind a firewall, sees every page whole (issue 72 item 6): no script or stylesheet
    comes from another host, and the equations (the primer's, the notebooks') are typeset by the MathJax the
    site carries (sphinx-mathjax-offline), as JupyterLab carries its own."""
    external: dict[str, str] = {}
    for page in site.rglob("*.html"):
        for found in re.finditer(r'<(?:script|link)\b[^>]*\b(?:src|href)="(https?://[^"]+)"', page.read_text()):
            external.setdefault(found[1], str(page.relative_to(site)))
    assert not external, external
    assert (site / "_static" / "mathjax" / "tex-chtml.js").stat().st_size > 100_000
    primer = (site / "learn" / "00_rl_primer.html").read_text()
    assert "_static/mathjax/tex-chtml.js" in primer and r"\gamma" in primer  # an equation, and what typesets it


def test_every_link_inside_the_site_lands(site):
    broken = broken_links(site)
    assert not broken, f"{len(broken)} broken links:\n" + "\n".join(broken[:40])


def test_the_link_check_finds_a_planted_broken_link(site, tmp_path):
    import shutil

    copy = tmp_path / "html"
    shutil.copytree(site, copy)
    page = copy / "guide" / "values.html"
    page.write_text(page.read_text().replace("</body>", '<a href="seeds.html#no-such-heading">x</a></body>'))
    assert broken_links(copy) == ["guide/values.html: seeds.html#no-such-heading (no such anchor)"]


def test_every_public_name_has_a_reference_entry(site):
    documented = inventory(site / "objects.inv")
    missing = [name for name in public_names() if name not in documented]
    assert not missing, f"public names without a reference entry (docs/reference/): {missing}"


@pytest.mark.parametrize("name", public_names())
def test_every_public_name_has_an_example_that_runs(name, monkeypatch):
    # fragnb.debug()'s example shows what it says with no failed run to replay: not one an earlier test left
    monkeypatch.setattr("fragnb.runtime.replay._LAST", {})
    value = resolve(name)
    if not (inspect.isclass(value) or inspect.isroutine(value)):
        pytest.skip("a constant: its reference entry is its value and a comment")
    text = inspect.getdoc(value) or ""
    assert re.search(r"^Examples\n-{8}$", text, re.M), f"{name}'s docstring has no numpydoc Examples section"
    tests = doctest.DocTestFinder(recurse=False).find(value, name, module=inspect.getmodule(value))
    assert sum(len(t.examples) for t in tests) > 0, f"{name}'s Examples section has no >>> example"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in tests:
        runner.run(test, out=print)
    assert runner.summarize(verbose=False).failed == 0, f"{name}'s docstring example failed (printed above)"


def test_the_readme_is_short_and_every_link_in_it_lands():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200, "the README is the front page: details go to docs/"
    links = re.findall(r"\]\(([^)\s]+)\)", readme)
    missing = [link for link in links if "://" not in link and not (ROOT / link.split("#")[0]).exists()]
    assert links and not missing, missing


#: Figures the pages state that no run measured, by the phrase each appears in: settings and defaults, targets,
#: confidence levels, a paper's figure, what a fixed bug once did.
DOC_SETTINGS = {
    "fails within 10 s": "the address probe's timeout",
    "passes (5 minutes)": "Dask's worker-ttl default",
    "for **10 s**": "fragnb's silence bound (SILENT_S)",
    "nothing heard from it for 10 s": "the silence bound, as the run says it",
    "a line every 10 seconds": "the batch progress line's interval",
    "within 64 MiB": "the recorder's bound",
    "at most every 0.1 s": "the progress events' interval",
    "1 GiB each": "the memory fragnb gives a worker",
    "1 GiB of free memory each": "the memory fragnb gives a worker",
    "noticed within 10 s": "the bound a lost worker is noticed within",
    "under 5 % of the run's time": "the checkpoints' budget",
    "within 30 s": "the wait for a replacement worker",
    "solved in under 5 s": "a target, not a measurement",
    "after the 1e-5 check": "the safety net's tolerance",
    "95 %": "a confidence level",
    "20 ms by default": "Dask's default tick",
    "500 ms ticks, 1 s monitors": "fragnb's settings of Dask's clocks",
    "two cores and 4 GB of memory": "the machine the course is written for",
    "up to about 30 students": "a sizing for one machine, from TLJH's advice",
    "every gap over 25 %": "the project rubric's threshold",
    "(2.35-2.67x": "the paper's figure",
    "500 µs of work": "notebook 02's setting",
    "was silently 4e-3 apart": "what a fixed bug did, in the history of the issue that fixed it",
    "ended 1e-3 to 4e-3 apart": "what a fixed bug did, in the history of the issue that fixed it",
    "learning_rate=2.5e-4,1e-3": "an example setting in the magic's help",
}
#: A paragraph that names where its figures come from: a benchmark, a test, a rendered notebook, a dated run, a
#: measurement of a decision record (M3).
SOURCED = re.compile(r"benchmarks/|tests/|\.ipynb|[Nn]otebooks? \d|20\d\d-\d\d-\d\d|\(M\d+\)|rendered")


def unsourced_figures(text: str) -> list[str]:
    """The figures a page states (:data:`claims.FIGURE`, code left out: a setting in code is the reader's) in a
    paragraph that names no source, and in no phrase of :data:`DOC_SETTINGS`."""
    from claims import FIGURE

    text = re.sub(r"```.*?```", "", text, flags=re.S)
    found = []
    for paragraph in re.split(r"\n\s*\n", text):
        flat = " ".join(re.sub(r"`[^`]*`", "CODE", paragraph).split())
        if SOURCED.search(" ".join(paragraph.split())):
            continue
        for figure in FIGURE.finditer(flat):
            around = flat[max(0, figure.start() - 50) : figure.end() + 50]
            if not any(phrase in around for phrase in DOC_SETTINGS):
                found.append(around)
    return found


def test_every_figure_the_pages_state_names_where_it_was_measured():
    """Issue 72's done-when: the README's and the docs' figures are the renders' or the benchmarks', and say so.
    The benchmark pages (docs/benchmarks/) give each figure's command, machine and date; the instructor guide has
    its own test (tests/test_notebooks.py)."""
    pages = [p for p in (ROOT / "docs").rglob("*.md") if not {"benchmarks", "learn", "_build"} & set(p.parts)]
    pages += [p for p in (ROOT / "notebooks").glob("*.md") if p.name != "INSTRUCTOR.md"] + [ROOT / "README.md"]
    unsourced = {str(p.relative_to(ROOT)): found for p in pages if (found := unsourced_figures(p.read_text()))}
    assert not unsourced, unsourced
    # shown failing: figures this term's pages typed from a run without naming it
    for typed in ("an idle cluster of 3 workers took 19 % of a core here", "(11 notebooks, about 11 minutes of cells)"):
        assert unsourced_figures(typed), typed
    assert not unsourced_figures("(about 55 s when `tests/test_hosts.py`'s cut link ran with the bound off)")


def test_the_readmes_pictures_are_the_kept_ones_and_a_changed_text_puts_one_behind():
    """Issue 72 item 6: the README shows the explorer and a live run as tests/test_browser.py took them, each with
    the text it showed kept in docs/pictures.json (tests/pictures.py); a page that shows other text is ahead of
    the picture, whatever its numbers."""
    import json

    import pictures

    kept = json.loads(pictures.KEPT.read_text())
    shown = set(re.findall(r"\]\(docs/([\w.]+\.png)\)", (ROOT / "README.md").read_text()))
    assert shown == set(kept) == {"explorer.png", "live_run.png"}, (shown, set(kept))
    for name, text in kept.items():
        assert (ROOT / "docs" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and text == pictures.shows(text)
    status = "running ppo (fine): iteration 17/146, env_steps 17408, return 147.2, idle envs 87% learner 59%"
    assert pictures.shows(status) == kept["live_run.png"]
    assert pictures.behind(kept["live_run.png"], pictures.shows(status.replace("1", "9"))) is None  # numbers
    later = pictures.behind(kept["live_run.png"], pictures.shows(status.replace("idle", "waiting")))
    assert later and "idle" in later and "waiting" in later  # shown failing: a changed status line
    assert pictures.behind(None, kept["live_run.png"]) == "it was never taken"


def test_the_readmes_ppo_figures_are_those_of_the_pages_and_the_render_they_name():
    """Issue 72 item 1: a figure the README types names where it comes from and is that source's. Notebook 01's seeds
    are read from its rendered run (the sweep's "env steps to 475 per seed"); the benchmark's, from the page that
    states them with their command and date (docs/start/first-cell.md)."""
    import json

    readme, page = (ROOT / "README.md").read_text(), (ROOT / "docs" / "start" / "first-cell.md").read_text()
    flat = " ".join(page.split())
    rendered = json.loads((ROOT / "docs" / "course" / "01_first_fragment_graph.ipynb").read_text())
    printed = "".join(
        "".join(o.get("text", "")) for c in rendered["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])
    )
    seeds = [
        int(n.replace(",", "")) for n in re.search(r"env steps to 475 per seed: ([\d, ]+)", printed)[1].split(", ")
    ]
    first = seeds[:3]  # seeds 0-2, as the README and the page quote them
    assert f"{first[0]:,}, {first[1]:,} and {first[2]:,} steps for seeds 0-2 in its rendered run" in flat, first
    said = re.search(r"notebook 01's seeds, seeded by its own setup cell,\s+solve at (\d+)k-(\d+)k", readme)
    assert said and (int(said[1]), int(said[2])) == (round(min(first) / 1000), round(max(first) / 1000)), (said, first)
    # the benchmark's figures, as the page that names the command and the date states them
    bench = re.search(r"PPO solves CartPole in (\d+k-\d+k) environment steps, a median of ([\d.]+ s) on one", readme)
    assert bench and f"in about {bench[1]} environment steps" in flat and f"a median of {bench[2]} on one" in flat
