"""What each course notebook's text says, sentence by sentence, and how the notebook's own run checks it.

``tests/claims/nNN.py`` holds notebook NN's ``CLAIMS``: a list of ``(quote, check)``, the quote copied from a
sentence of its markdown and the check one of

- :class:`Asserted`: an assert of the notebook checks it on every run (a fragment of the assert's condition,
  as Python writes it back); only what holds on any machine is asserted (same weights, bounds, counts);
- :class:`Shown`: the sentence is about a figure or a line that a code cell builds from the run's values (a
  fragment of that cell's source); a measured speed, share or ratio is shown, never typed, since another
  program on the machine can turn it around;
- :class:`Explained`: the sentence states no fact of this notebook's run (a definition, a paper's design, an
  instruction, a property that holds by construction), with why.

:func:`measured` finds every sentence that reads like a statement of what a run measured: a number with a
unit, or a word of comparison or outcome. ``tests/test_notebooks.py`` fails on such a sentence that no quote
of its notebook's ``CLAIMS`` covers, on a quote that is no longer in the notebook, and on a check that does not
hold. The vocabulary is wide on purpose: a sentence that only explains costs one ``Explained`` line, a measured
sentence let through unchecked costs a student's trust.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Asserted:
    condition: str


@dataclass(frozen=True)
class Shown:
    source: str


@dataclass(frozen=True)
class Explained:
    why: str


#: A figure as a run would print it: a number with a unit, a signed number (a return), a difference in
#: scientific notation, "N of M" (cores free, seeds that solved) or an "about N".
FIGURE = re.compile(
    r"\d[\d,]*(?:\.\d+)?\s?(?:s|ms|µs|seconds?|minutes?|%|MiB|GiB|GB|steps/s)(?![\w/])"
    r"|\d+(?:\.\d+)?x(?!\w)"
    r"|(?<![\w.])[−-]\d+(?:\.\d+)?"
    r"|\d(?:\.\d+)?e-\d+"
    r"|\d+(?:\.\d+)? of \d+"
    r"|(?:about|around|roughly|nearly) [−-]?\d[\d,]*(?:\.\d+)?"
)

#: A number with a unit of time, speed, size, share or count of runs.
_UNIT = re.compile(
    r"\d[\d,.]*\s*(?:%|x\b|×|s\b|ms\b|µs\b|seconds?\b|minutes?\b|steps/s|MB\b|MiB|GiB|KiB|bytes?\b|episodes?\b"
    r"|iterations?\b|updates?\b|replicas?\b|processes\b|workers?\b|times\b)"
)
#: Words a sentence about a run's outcome uses: comparisons, bottlenecks, equalities, learning.
_WORDS = re.compile(
    r"\b(?:faster|slower|speed-?ups?|bottleneck|share of|flatten\w*|stops? gaining|same weights|the same|equal\w*"
    r"|identical|exact(?:ly)?|bit for bit|plain Python does|higher|lower|more than|less than|fewer|rises?|falls?"
    r"|grows?|drops?|costs?|takes|waits?|beats?|better|worse|learns?|solves?|reaches|stale|staleness|never"
    r"|always|most of|dominat\w*|wins?|loses?|pays?|cheaper|dearer|longest|shortest|slowest|fastest|largest"
    r"|smallest|improv\w*|trains?)\b",
    re.IGNORECASE,
)


def sentences(markdown: str) -> list[str]:
    """The sentences of a markdown cell, whitespace collapsed: code blocks, HTML tags and headings left out,
    each list item and paragraph split apart."""
    text = re.sub(r"```.*?```", " ", markdown, flags=re.S)
    text = re.sub(r"<[^>]+>", " ", text)
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    found = []
    for block in re.split(r"\n\s*\n|\n\s*(?:[-*]|\d+\.)\s+", text):
        block = " ".join(block.split())
        found += [s for s in re.split(r"(?<=[.!?:])\s+(?=[A-Z*_`($\"])", block) if s]
    return found


def measured(cells: list[dict]) -> list[str]:
    """The sentences of a notebook's markdown (its quiz's questions left out) that read like a statement of what a
    run measured; questions are not statements."""
    found = []
    for cell in cells:
        text = "".join(cell["source"])
        if cell["cell_type"] != "markdown" or text.startswith("## Quiz"):
            continue
        for s in sentences(text):
            if not s.endswith("?") and (_UNIT.search(s) or _WORDS.search(s)):
                found.append(s)
    return found


def unlisted(cells: list[dict], claims: list[tuple[str, object]]) -> list[str]:
    """The measured sentences of ``cells`` that no quote of ``claims`` covers."""
    quotes = [" ".join(q.split()) for q, _ in claims]
    return [s for s in measured(cells) if not any(q in s or s in q for q in quotes)]


def stale(cells: list[dict], claims: list[tuple[str, object]]) -> list[str]:
    """The quotes of ``claims`` that are no longer part of a sentence of ``cells``' markdown."""
    every = [s for c in cells if c["cell_type"] == "markdown" for s in sentences("".join(c["source"]))]
    quotes = [" ".join(q.split()) for q, _ in claims]
    return [q for q in quotes if not any(q in s or s in q for s in every)]


def of(notebook: str) -> list[tuple[str, object]]:
    """Notebook ``notebook``'s claims (``"01"`` reads ``tests/claims/n01.py``)."""
    return importlib.import_module(f"claims.n{notebook}").CLAIMS
