"""How fragnb writes sizes and counts in drawings, reprs and tables."""

__all__ = ["human", "workers"]


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
