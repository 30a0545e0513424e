"""Sphinx configuration of fragnb's documentation site: ``make docs`` writes it to ``docs/_build/html``.

Sphinx with MyST-NB, numpydoc and the PyData theme, as Dask's site is built: pages are Markdown (MyST),
the reference is generated from the package's numpydoc docstrings, and the course's notebooks are rendered
with the outputs ``make course`` saved in ``docs/course/``, never executed here. The site shows students'
copies: ``learn/`` is written at each build from ``docs/course/`` and ``notebooks/`` without any solution,
quiz key or test (:func:`fragnb.course.rendered.for_site`), so a page cannot give away what a handout hides.
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))

import fragnb  # noqa: E402
from fragnb.course.rendered import write_site_course  # noqa: E402

project = "fragnb"
author = "the fragnb developers"
copyright = "2026, the fragnb developers"
release = version = fragnb.__version__

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "numpydoc",
    "sphinx.ext.intersphinx",
    "sphinx-mathjax-offline",  # MathJax copied into the site (_static/mathjax): no equation waits on a CDN
]

# The teacher's rendered copies (solutions in place) stay out of the site; learn/ holds the students' ones.
exclude_patterns = ["_build", "course", "**/.ipynb_checkpoints", "README.md", "**/_*.md"]
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb", ".rst": "restructuredtext"}

myst_enable_extensions = ["colon_fence", "deflist", "dollarmath", "attrs_inline"]
myst_heading_anchors = 3
# Notebooks are shown as `make course` ran them: a docs build never starts a kernel or a worker.
nb_execution_mode = "off"
# No widget manager from a CDN: the rendered copies carry a picture or a settled line for every widget.
nb_ipywidgets_js = {}
nb_merge_streams = True

autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}
autodoc_typehints = "none"
autodoc_member_order = "bysource"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

intersphinx_mapping = {}

html_theme = "pydata_sphinx_theme"
html_title = "fragnb"
html_static_path = []
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "footer_start": ["copyright"],
    "footer_end": [],
}
html_show_sourcelink = False


def _learn(app) -> None:
    write_site_course(ROOT, DOCS / "learn")


def _flags(app) -> None:
    """``reference/_flags.md``: every flag of ``%%fragment`` and ``%%setup`` as their parsers hold them, the
    registered policies' parameters included, so the reference cannot drift from the magic."""
    from fragnb.ui.magics import FragmentMagics, _parser

    def table(parser) -> str:
        rows = ["| flag | value | what it does |", "|---|---|---|"]
        for action in parser._actions:
            if action.dest == "help":
                continue
            flag = ", ".join(f"`{o}`" for o in action.option_strings) or f"`{action.dest.upper()}`"
            value = "" if action.nargs == 0 else f"`{action.metavar or action.dest.upper()}`"
            text = (action.help or "").replace("%%", "%").replace("|", "\\|")
            rows.append(f"| {flag} | {value} | {text} |")
        return "\n".join(rows)

    text = (
        "### `%%fragment NAME [flags]`\n\n" + table(_parser()[0]) + "\n\n"
        "### `%%setup NAME [--seed S]`\n\n" + table(FragmentMagics.setup.parser) + "\n"
    )
    _write(DOCS / "reference" / "_flags.md", text)


def _policies(app) -> None:
    """``reference/_policies.md``: every registered policy with what it mirrors, its mode and its parameters
    with their defaults, read from the registry."""
    from fragnb.policies import POLICIES

    rows = ["| policy | mirrors | what runs where | mode | parameters (default) |", "|---|---|---|---|---|"]
    for policy in POLICIES.values():
        params = ", ".join(f"`{k}={v!r}`" for k, v in policy.parameters.items()) or "none"
        cells = [f"`{policy.name}`", policy.mirrors, policy.description, f"`{policy.mode.name}`", params]
        rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    _write(DOCS / "reference" / "_policies.md", "\n".join(rows) + "\n")


def _write(target: Path, text: str) -> None:
    """Write a generated page only when it changes, so that Sphinx rebuilds only what changed."""
    if not target.exists() or target.read_text(encoding="utf-8") != text:
        target.write_text(text, encoding="utf-8")


def setup(app):
    app.connect("builder-inited", _learn)
    app.connect("builder-inited", _flags)
    app.connect("builder-inited", _policies)
