"""The pictures the README and the docs show of fragnb in JupyterLab, kept as current as the code.

A browser test photographs a part of the page (the explorer, a live run) and hands it to :func:`keep` with
the text that part shows. ``docs/pictures.json`` holds, for every kept picture, that text as it was when the
picture was taken, with what changes from run to run masked (numbers). When today's code shows other text
(a renamed button, a new line in the status, another bottleneck's name), the picture is behind the code and
the test fails, naming the difference, until it is taken again::

    FRAGNB_RETAKE=1 .venv/bin/pytest tests/test_browser.py -m browser -k explorer

which writes the new picture into ``docs/`` and its text into ``docs/pictures.json``, to commit together.
Pixels are not compared: plots and timings differ on every run, what they say does not.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KEPT = ROOT / "docs" / "pictures.json"


def shows(text: str) -> str:
    """The text a picture shows, as :func:`keep` compares it: numbers (with their thousands commas and
    decimals) become ``#`` and runs of blank space one space."""
    text = re.sub(r"\d{1,3}(,\d{3})+(\.\d+)?|\d+(\.\d+)?", "#", text)
    return re.sub(r"\s+", " ", text).strip()


def behind(kept: str | None, now: str) -> str | None:
    """Why a kept picture whose text was ``kept`` (None: never taken) is behind a page that shows ``now`` (both
    as :func:`shows` gives them), or None when it is not: the first words where they part."""
    if kept is None:
        return "it was never taken"
    if kept == now:
        return None
    at = next((i for i, (a, b) in enumerate(zip(kept, now)) if a != b), min(len(kept), len(now)))
    start = max(0, kept.rfind(" ", 0, max(0, at - 40)) + 1)
    return f'the picture shows "…{kept[start : at + 60]}…", today\'s code "…{now[start : at + 60]}…"'


def keep(name: str, taken: Path, text: str) -> None:
    """Check the picture ``docs/<name>`` against the one just ``taken`` (a PNG file) showing ``text``: fail
    if its text differs; with ``FRAGNB_RETAKE=1`` in the environment, replace it and its text instead."""
    pictures = json.loads(KEPT.read_text(encoding="utf-8"))
    now = shows(text)
    if os.environ.get("FRAGNB_RETAKE") == "1":
        shutil.copyfile(taken, ROOT / "docs" / name)
        pictures[name] = now
        KEPT.write_text(json.dumps(pictures, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        return
    why = behind(pictures.get(name), now)
    assert why is None, (
        f"docs/{name} is behind the code: {why}. Take it again with FRAGNB_RETAKE=1 (see tests/pictures.py) "
        f"and commit the picture with docs/pictures.json"
    )
