"""Each week's presentation, made from its rendered notebook: ``python -m fragnb.course slides`` (``make course``).

The instructor guide plans about 15 minutes of presentation a week; these are its slides. A deck is the rendered
copy's (``docs/course/NN.ipynb``, already without the quiz's key) prose and pictures, up to its exercises: one
slide per ``##`` section, the markdown as written (equations included) and each code cell's figures, not its
code or printed text, which the class runs in the notebook; each further markdown cell of a section a slide below
it (reveal.js's vertical slides). nbconvert's reveal.js exporter writes them.

Offline, as the notebooks are: a deck loads nothing from the internet. reveal.js and require.js come from npm's
registry once (kept in ``~/.cache/fragnb/npm``), pinned and checked against their published SHA-512, into
``ASSETS`` beside the decks; MathJax is
the copy the documentation site carries (sphinx-mathjax-offline), configured for the notebooks' ``$...$``.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import shutil
import tarfile
import urllib.request
from pathlib import Path

__all__ = ["deck", "write_slides", "ASSETS"]

#: The folder, beside the decks, that holds what they load.
ASSETS = "_assets"
#: npm packages a deck loads: name -> (version, the registry's SHA-512 integrity, files kept from its tarball).
_PACKAGES = {
    "reveal.js": (
        "4.6.1",
        "1CW0auaXNPmwmvQ7TwpszwVxMi2Xr5cTS3J3EBC/HHgbPF32Dn7aiu/LKWDOGjMbaDwKQiGmfqcoGQ74HUHCMw==",
        ("dist/", "plugin/notes/"),
    ),
    "requirejs": (
        "2.3.7",
        "DouTG8T1WanGok6Qjg2SXuCMzszOo0eHeH9hDZ5Y4x8Je+9JB38HdTLT4/VA8OaUhBa0JPVHJ0pyBkM1z+pDsw==",
        ("require.js",),
    ),
}
#: Sections a presentation leaves to the students' own time.
_STOP = ("## Exercise", "## Quiz", "## Solutions")
#: MathJax 3 reads this before it loads: the notebooks' inline ``$...$`` as JupyterLab reads it.
_MATHJAX_CONFIG = (
    "<script>window.MathJax = {tex: {inlineMath: [['$', '$'], ['\\\\(', '\\\\)']], processEscapes: true}};</script>\n"
)


#: The exporter's template typesets a new slide with MathJax 2's API; MathJax 3 has typesetPromise instead.
_MATHJAX2_UPDATE = """          if(MathJax.Hub.getAllJax(Reveal.getCurrentSlide())){
            MathJax.Hub.Rerender(Reveal.getCurrentSlide());
          }"""
_MATHJAX3_UPDATE = """          if(window.MathJax && MathJax.typesetPromise){
            MathJax.typesetPromise([Reveal.getCurrentSlide()]);
          }"""


def deck(notebook: dict) -> dict:
    """The slides' notebook: the prose and the figures of ``notebook`` up to its exercises, a slide per ``##``
    section (the title cell the first slide), code and printed text left out."""
    cells: list[dict] = []
    for cell in notebook["cells"]:
        text = "".join(cell["source"])
        if "solution" in cell.get("metadata", {}).get("tags", []):
            continue
        if cell["cell_type"] == "markdown":  # a section's heading may come in the middle of a cell
            for part in re.split(r"(?m)^(?=## )", text):
                if part.startswith(_STOP):
                    return _notebook(cells)
                if part.strip():
                    # a cell a screen: a section's further cells go below its first (reveal.js's vertical slides)
                    kind = "slide" if not cells or part.startswith("## ") else "subslide"
                    meta = {"slideshow": {"slide_type": kind}}
                    cells.append({"cell_type": "markdown", "id": f"s{len(cells)}", "metadata": meta, "source": part})
        elif cell["cell_type"] == "code":
            pictures = [o for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
            if pictures:
                outputs = [
                    {"output_type": "display_data", "metadata": {}, "data": {"image/png": o["data"]["image/png"]}}
                    for o in pictures
                ]
                cells.append(
                    {
                        "cell_type": "code",
                        "id": f"s{len(cells)}",
                        "execution_count": None,
                        "metadata": {"slideshow": {"slide_type": "-"}},
                        "outputs": outputs,
                        "source": "",
                    }
                )
    return _notebook(cells)


def _notebook(cells: list[dict]) -> dict:
    return {"cells": cells, "metadata": {"language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5}


def _fetch(assets: Path) -> None:
    """reveal.js and require.js into ``assets``, once; each tarball checked against its published hash."""
    for name, (version, integrity, keep) in _PACKAGES.items():
        target = assets / name
        if (target / ".version").exists() and (target / ".version").read_text() == version:
            continue
        url = f"https://registry.npmjs.org/{name}/-/{name}-{version}.tgz"
        cached = (
            Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fragnb" / "npm" / url.rsplit("/", 1)[1]
        )
        if cached.exists():
            data = cached.read_bytes()
        else:
            with urllib.request.urlopen(url, timeout=60) as response:
                data = response.read()
        if base64.b64encode(hashlib.sha512(data).digest()).decode() != integrity:
            raise RuntimeError(f"{url} does not match its published SHA-512: not using it")
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_bytes(data)
        shutil.rmtree(target, ignore_errors=True)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for member in tar.getmembers():
                inner = member.name.removeprefix("package/")
                if member.isfile() and inner.startswith(keep):
                    (target / inner).parent.mkdir(parents=True, exist_ok=True)
                    (target / inner).write_bytes(tar.extractfile(member).read())
        (target / ".version").write_text(version)


def _mathjax() -> Path:
    """The MathJax the documentation site carries (sphinx-mathjax-offline's copy)."""
    from importlib.metadata import files

    found = next(f for f in files("sphinx-mathjax-offline") if str(f).endswith("static/mathjax/tex-chtml.js"))
    return Path(found.locate()).parent


def write_slides(rendered, out) -> list[Path]:
    """A deck for each rendered notebook in ``rendered`` (``docs/course``), written to ``out`` as ``NN_name.html``
    with the assets it loads in ``out/_assets``. Returns the decks written."""
    import nbformat
    from nbconvert import SlidesExporter
    from traitlets.config import Config

    out = Path(out)
    assets = out / ASSETS
    _fetch(assets)
    if not (assets / "mathjax").exists():
        shutil.copytree(_mathjax(), assets / "mathjax")
    config = Config()
    config.SlidesExporter.reveal_url_prefix = f"{ASSETS}/reveal.js"
    config.SlidesExporter.reveal_theme = "white"  # its font ships with reveal.js ("simple" loads Google's)
    config.SlidesExporter.require_js_url = f"{ASSETS}/requirejs/require.js"
    config.SlidesExporter.mathjax_url = f"{ASSETS}/mathjax/tex-chtml.js"
    config.SlidesExporter.jquery_url = ""
    exporter = SlidesExporter(config=config)
    written = []
    for path in sorted(Path(rendered).glob("[0-9]*.ipynb")):
        slides = deck(json.loads(path.read_text(encoding="utf-8")))
        html, _ = exporter.from_notebook_node(nbformat.from_dict(slides))
        script = f'<script src="{ASSETS}/mathjax/tex-chtml.js">'
        html = html.replace(script, _MATHJAX_CONFIG + script, 1).replace(_MATHJAX2_UPDATE, _MATHJAX3_UPDATE, 1)
        html = re.sub(r'<script type="module">\s*import mermaid from [^<]*</script>\s*', "", html)  # no diagrams here
        target = out / f"{path.stem}.html"
        target.write_text(html, encoding="utf-8")
        written.append(target)
    return written
