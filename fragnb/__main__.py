"""``python -m fragnb run NOTEBOOK.ipynb --cell NAME [OPTIONS]``: a notebook's cell as a batch job
(:mod:`fragnb.batch`)."""

import sys

from .batch import main

if __name__ == "__main__":
    if sys.argv[1:2] != ["run"]:
        print("usage: python -m fragnb run NOTEBOOK.ipynb --cell NAME [OPTIONS]  (python -m fragnb run --help)")
        raise SystemExit(2)
    raise SystemExit(main(sys.argv[2:]))
