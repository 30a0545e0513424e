"""What every area of the explorer shows things with: a placement drawn, an error, a picture, a byte count.

One :class:`Drawings` serves all three tabs, so a placement one tab has drawn is not drawn again in
another (graphviz takes longer than anything else a change of policy does).
"""

from __future__ import annotations

import html

import ipywidgets as W

from fragnb.text import human
from fragnb.ui.render import DOT_MISSING_HINT, svg

__all__ = ["Drawings", "picture", "error", "total", "size"]


class Drawings:
    """Placements as SVG for an ``HTML`` widget, each DOT source laid out once."""

    def __init__(self):
        self._svg: dict[str, str] = {}  # DOT source -> SVG

    def __call__(self, placement) -> str:
        """``placement`` drawn; without graphviz's ``dot``, its DOT source and how to install ``dot``."""
        dot = placement.render()
        if dot.source not in self._svg:
            drawn = svg(dot)
            if drawn is None:
                return f"<p>{html.escape(DOT_MISSING_HINT)}</p><pre>{html.escape(dot.source)}</pre>"
            self._svg[dot.source] = drawn
        return self._svg[dot.source]


def picture(image: W.Image, data: bytes) -> None:
    """Show ``data`` in ``image``, or hide it while there is none (an empty image shows as a broken one)."""
    image.value = data
    image.layout.display = "" if data else "none"


def error(e: BaseException) -> str:
    """``e`` as the explorer shows an error: its type and message, escaped."""
    return f"<div class='fragnb-error'>{html.escape(f'{type(e).__name__}: {e}')}</div>"


def total(placement) -> int | None:
    """The bytes per iteration of the edges that cross between processes; None where one is not measured."""
    sizes = [n for _, n in placement.traffic()]
    return None if None in sizes else sum(sizes)


def size(n: int | None) -> str:
    """A byte count as the tables write it."""
    return "not measured" if n is None else human(n)
