"""The policy explorer's front end (installed as ``fragnb.widgets``): ipywidgets, their layout, and
the stylesheet ``style.css`` beside this file. Start it with :func:`fragnb.explore`."""

from .explorer import Explorer

__all__ = ["Explorer"]
