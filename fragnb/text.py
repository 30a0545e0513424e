"""How fragnb writes sizes and counts in drawings, reprs and tables."""

__all__ = ["human", "workers"]


def workers(n: int) -> str:
    """``n worker(s)``, for drawings and reprs."""
    return f"{n} worker{'s' if n != 1 else ''}"


def human(n: int) -> str:
    """``n`` bytes, e.g. ``49 kB``."""
    for unit in ("B", "kB", "MB"):
        if n < 1000:
            return f"{n:.0f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"
