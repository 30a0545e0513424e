"""``python -m fragnb.course settle NOTEBOOK ...`` | ``minutes`` | ``slides [OUT]`` | ``handouts [--out DIR] NOTEBOOK ...`` |
``binder``"""

import sys
from pathlib import Path

from .handouts import write_handouts
from .pins import write_binder
from .rendered import settle_files, write_minutes

USAGE = (
    "usage: python -m fragnb.course settle NOTEBOOK.ipynb ... | minutes | slides [OUT] | handouts [--out DIR] NOTEBOOK.ipynb ..."
    " | binder"
)

command, args = sys.argv[1:2], sys.argv[2:]
if command == ["settle"] and args:
    settle_files(args)
elif command == ["minutes"] and not args:  # the course page's minutes, from docs/course's rendered copies
    for name, spent in write_minutes("notebooks/README.md", "docs/course").items():
        print(f"{name}: {spent:.1f} minutes")
elif command == ["slides"] and len(args) <= 1:  # each week's presentation, from docs/course's rendered copies
    from .slides import write_slides

    for deck in write_slides("docs/course", args[0] if args else "docs/_build/slides"):
        print(deck)
elif command == ["handouts"] and args:
    out = "handouts"
    if args[0] == "--out":
        out, args = args[1], args[2:]
    write_handouts(args, out)
elif command == ["binder"] and not args:
    write_binder(Path.cwd())
else:
    sys.exit(USAGE)
