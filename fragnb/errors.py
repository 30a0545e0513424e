"""The errors fragnb raises for a user's mistakes."""

__all__ = ["FragmentError"]


class FragmentError(ValueError):
    """A captured cell that fragnb cannot turn into a fragment graph or run.

    The message names the problem and, when there is one, the cell line and its
    source text, e.g. ``line 7: `loss` is read before it is assigned``.

    Parameters
    ----------
    message : str
        What is wrong, and how to fix it where that is known.
    lineno : int, optional
        1-based line in the cell.
    line : str, optional
        The source text of that line.
    """

    def __init__(self, message: str, lineno: int | None = None, line: str | None = None):
        self.problem = message
        self.lineno = lineno
        self.line = line.strip() if line else None
        text = message if lineno is None else f"line {lineno}: {message}"
        if self.line:
            text += f"\n    {lineno} | {self.line}"
        super().__init__(text)

    @classmethod
    def at(cls, message: str, origin: str) -> "FragmentError":
        """The error at a line as a plan's ``origin`` names it (``"line 7: loss = ..."``; may be empty)."""
        lineno, _, line = origin.removeprefix("line ").partition(": ")
        return cls(message, int(lineno) if lineno.isdigit() else None, line or None)

    def _render_traceback_(self):
        # IPython shows this instead of a traceback: a user's mistake is one message, not a stack.
        return [f"FragmentError: {self}"]
