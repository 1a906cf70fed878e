"""Cut the authors' raw files into dev.jsonl and test.jsonl, once (README.md beside this),
by the first corpus's rule (../blind/split.py) with this corpus's own salt and share.

python tests/corpus/blind6/split.py   # refuses to run when the parts exist already
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

HERE = Path(__file__).resolve().parent
SALT = "tracedojo-blind6-2026-12:"
DEV_BELOW = 51  # of 256: about 20% in the development part; this corpus exists to be held out

_spec = importlib.util.spec_from_file_location("blind_split", HERE.parent / "blind" / "split.py")
_first = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_first)


def part(read_id: str) -> str:
    return _first.part(read_id, SALT, DEV_BELOW)


if __name__ == "__main__":
    raise SystemExit(_first.main(HERE, SALT, DEV_BELOW))
