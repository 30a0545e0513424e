"""``python -m fragnb.course settle NOTEBOOK ...`` | ``python -m fragnb.course handouts [--out DIR] NOTEBOOK ...``"""

import sys

from .handouts import write_handouts
from .rendered import settle_files

USAGE = "usage: python -m fragnb.course settle NOTEBOOK.ipynb ... | handouts [--out DIR] NOTEBOOK.ipynb ..."

command, args = sys.argv[1:2], sys.argv[2:]
if command == ["settle"] and args:
    settle_files(args)
elif command == ["handouts"] and args:
    out = "handouts"
    if args[0] == "--out":
        out, args = args[1], args[2:]
    write_handouts(args, out)
else:
    sys.exit(USAGE)
