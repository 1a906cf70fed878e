"""Cut the authors' raw files into dev.jsonl and test.jsonl, once (README.md beside this).

python tests/corpus/blind/split.py   # refuses to run when the parts exist already
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SALT = "tracedojo-blind-2026-11:"
DEV_BELOW = 77  # of 256: about 30% in the development part


def part(read_id: str, salt: str = SALT, dev_below: int = DEV_BELOW) -> str:
    return "dev" if hashlib.sha256((salt + read_id).encode()).digest()[0] < dev_below else "test"


def main(here: Path = HERE, salt: str = SALT, dev_below: int = DEV_BELOW) -> int:
    """Later corpora call this with their own folder, salt and share (../blind2/split.py)."""
    if (here / "dev.jsonl").exists() or (here / "test.jsonl").exists():
        print("the corpus is split already; a split is made once", file=sys.stderr)
        return 2
    reads = [json.loads(line) for f in sorted((here / "raw").glob("*.jsonl"))
             for line in f.read_text().splitlines() if line.strip()]
    ids = [r["id"] for r in reads]
    assert len(ids) == len(set(ids)), "read ids must be unique"
    parts = {"dev": [], "test": []}
    for r in sorted(reads, key=lambda r: r["id"]):
        parts[part(r["id"], salt, dev_below)].append(r)
    for name, rows in parts.items():
        (here / f"{name}.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    for f in (here / "raw").glob("*.jsonl"):  # the parts are the corpus now; no second copy of the test reads
        f.unlink()
    print({name: len(rows) for name, rows in parts.items()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
