"""How fragnb writes sizes and counts in drawings, reprs and tables, and its caveats before a run."""

import sys

__all__ = ["human", "workers", "caveat"]

_said: list = [None, set()]  # the notebook cell run the caveats below were said in, and what was said


def caveat(note: str) -> None:
    """Say ``note`` (``fragnb: ...`` on stderr) once per notebook cell run: a cell that runs a loop nine times,
    once per seed and policy, printed the same paragraph nine times above its table (notebook 03: 42 times).
    Outside a Jupyter kernel (a script, a terminal, the tests' shell) each run says its own."""
    cell = _cell_run()
    if cell is not None:
        if _said[0] != cell:
            _said[:] = [cell, set()]
        if note in _said[1]:
            return
        _said[1].add(note)
    print(f"fragnb: {note}", file=sys.stderr)


def _cell_run():
    """An id of the Jupyter kernel's cell run under way (its shell and the execute request's id), or None
    elsewhere. Not the execution count alone: a frontend that stores no history (nbval, a script's kernel
    client) runs every cell at the same count, and a caveat said in one cell went unsaid in the next."""
    ip = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    if ip is None or not type(ip).__module__.startswith("ipykernel"):
        return None
    header = getattr(ip, "parent_header", None) or {}
    return id(ip), header.get("msg_id") or ip.execution_count


def workers(n: int) -> str:
    """``n worker(s)``, for drawings and reprs."""
    return f"{n} worker{'s' if n != 1 else ''}"


def human(n: int) -> str:
    """``n`` bytes, e.g. ``49 kB``.

    Parameters
    ----------
    n : int
        A number of bytes.

    Returns
    -------
    str
        In decimal units (B, kB, MB, GB), as placements label their edges.

    Examples
    --------
    >>> from fragnb.policies import human
    >>> human(512), human(36620), human(3_200_000_000)
    ('512 B', '37 kB', '3.2 GB')
    """
    for unit in ("B", "kB", "MB"):
        if n < 1000:
            return f"{n:.0f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"
