"""A script that starts a distributed run at its top level, outside ``if __name__ == "__main__":``.

fragnb's local workers are new processes (a forkserver's children), and a new process imports the
main script again, as ``__mp_main__``: a run started at the script's top level without the guard is
started again in each of them, which multiprocessing refuses there, so no worker comes up and the run
waited for them for two minutes before saying only that none had started. The notebook (whose main
module is its kernel's launcher), ``python -c`` and the REPL have no such file: they are never refused.
A script read from standard input names a file that is not one (``<stdin>``): refused too, as no worker
could import it.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

__all__ = ["refuse_unguarded", "where_unguarded", "unguarded_start", "guarded"]


def guarded(test: ast.expr) -> bool:
    """Whether an ``if`` test is the main guard (``__name__ == "__main__"``, either way round)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = {ast.dump(test.left), ast.dump(test.comparators[0])}
    return sides == {ast.dump(ast.Name("__name__", ast.Load())), ast.dump(ast.Constant("__main__"))}


def unguarded_start(source: str, lineno: int) -> bool:
    """Whether the statement at ``lineno`` of a script's ``source`` runs at its top level outside the main
    guard (a script that cannot be parsed is given the benefit of the doubt)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    return not any(
        isinstance(node, ast.If) and guarded(node.test) and node.lineno <= lineno <= (node.end_lineno or node.lineno)
        for node in ast.walk(tree)
    )


def where_unguarded() -> tuple[str, int] | None:
    """(script, line) where this process's main script, still running its top level, started the run outside
    the main guard; None when it did not (or there is no script: a notebook, ``python -c``, the REPL)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not path or not str(path).endswith(".py"):
        return None
    frame = sys._getframe(1)
    while frame is not None and not (frame.f_globals is vars(main) and frame.f_code.co_name == "<module>"):
        frame = frame.f_back
    if frame is None:  # the script's top level has run: something it set up calls later
        return None
    try:
        source = Path(path).read_text()
    except OSError:
        return None
    return (str(path), frame.f_lineno) if unguarded_start(source, frame.f_lineno) else None


def refuse_unguarded() -> None:
    """Raise RuntimeError, before any worker starts, naming the line and the fix, for a run started at a
    script's top level outside the main guard (see the module's docstring), or by a script that has no
    file for the workers to import (read from standard input: ``python - < train.py``)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if path and getattr(main, "__spec__", None) is None and not Path(path).is_file():
        # multiprocessing's new processes import the main script from its path: "<stdin>" is none, and
        # no worker came up (two minutes' wait, then "only 0 of 3 Dask workers started")
        raise RuntimeError(
            f"this script was read from {path}, not a file: fragnb's workers are new processes that import the "
            "main script again, and cannot import this one. Save it as a .py file (what starts the run under "
            '`if __name__ == "__main__":`) and run that, run it in a notebook, or connect to a running cluster '
            "(fragnb.run(..., cluster=...))"
        )
    found = where_unguarded()
    if found is not None:
        path, line = found
        raise RuntimeError(
            f"{path}, line {line}: this script starts a distributed run at its top level, outside "
            '`if __name__ == "__main__":`. fragnb\'s workers are new processes that import the script again, '
            "and would start the run again themselves: none would come up. Put what starts the run under the guard:\n\n"
            '    if __name__ == "__main__":\n        main()'
        )
