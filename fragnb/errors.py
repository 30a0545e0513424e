"""The errors fragnb raises for a user's mistakes."""

__all__ = ["FragmentError", "ArgumentError", "ClusterError", "RenderingError"]


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

    Examples
    --------
    What capture raises for a cell it cannot turn into a graph:

    >>> import fragnb
    >>> try:
    ...     fragnb.capture("returns = []\\nx = y + 1", {})
    ... except fragnb.FragmentError as e:
    ...     error = e
    >>> print(error)
    line 2: `y` is not defined: it is not assigned in the cell nor in the notebook's namespace
        2 | x = y + 1
    >>> error.lineno, error.line
    (2, 'x = y + 1')

    Raising one, with the line at fault:

    >>> error = fragnb.FragmentError("`loss` is read before it is assigned", 7, "    opt.step(loss)")
    >>> print(error)
    line 7: `loss` is read before it is assigned
        7 | opt.step(loss)
    >>> isinstance(error, ValueError), error.line
    (True, 'opt.step(loss)')
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
    def in_source(cls, message: str, lineno: int | None, source: str) -> "FragmentError":
        """The error at 1-based ``lineno`` of the cell ``source``, quoting that line.

        Parameters
        ----------
        message : str
            What is wrong, as for the constructor.
        lineno : int or None
            The line at fault; None (or a line the source does not have) quotes nothing.
        source : str
            The cell's source (``FragmentGraph.source``).
        """
        lines = source.splitlines()
        return cls(message, lineno, lines[lineno - 1] if lineno is not None and 0 < lineno <= len(lines) else None)

    @classmethod
    def at(cls, message: str, origin: str) -> "FragmentError":
        """The error at a line as a plan's ``origin`` names it (``"line 7: loss = ..."``; may be empty)."""
        lineno, _, line = origin.removeprefix("line ").partition(": ")
        return cls(message, int(lineno) if lineno.isdigit() else None, line or None)

    def _render_traceback_(self):
        # IPython shows this instead of a traceback: a user's mistake is one message, not a stack.
        return [f"FragmentError: {self}"]


class ArgumentError(FragmentError, TypeError):
    """An argument of a fragnb function of the wrong type or out of range (:mod:`fragnb.arguments`): the
    message names the function, the argument and what it accepts. Both a ``ValueError`` and a
    ``TypeError``, as Python's own functions raise either for a bad argument."""


class ClusterError(RuntimeError):
    """A cluster fragnb cannot start or reach, or one without room for a run; the message names the fallback."""


class RenderingError(RuntimeError):
    """A picture fragnb cannot draw on this machine (no OpenGL for MuJoCo's offscreen renderer, a missing
    package); the message names what is missing and how to get it."""

    def _render_traceback_(self):
        # IPython shows this instead of a traceback: what to install is one message, not a stack.
        return [f"RenderingError: {self}"]
