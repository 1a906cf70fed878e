"""Cut the authors' raw files into dev.jsonl and test.jsonl, once (README.md beside this).

python tests/corpus/blind/split.py   # refuses to run when the parts exist already
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SALT = "tracedojo-blind2-2026-12:"
DEV_BELOW = 102  # of 256: about 40% in the development part (this corpus exists to tune stance on)


def part(read_id: str) -> str:
    return "dev" if hashlib.sha256((SALT + read_id).encode()).digest()[0] < DEV_BELOW else "test"


def main() -> int:
    if (HERE / "dev.jsonl").exists() or (HERE / "test.jsonl").exists():
        print("the corpus is split already; a split is made once", file=sys.stderr)
        return 2
    reads = [json.loads(line) for f in sorted((HERE / "raw").glob("*.jsonl"))
             for line in f.read_text().splitlines() if line.strip()]
    ids = [r["id"] for r in reads]
    assert len(ids) == len(set(ids)), "read ids must be unique"
    parts = {"dev": [], "test": []}
    for r in sorted(reads, key=lambda r: r["id"]):
        parts[part(r["id"])].append(r)
    for name, rows in parts.items():
        (HERE / f"{name}.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    for f in (HERE / "raw").glob("*.jsonl"):  # the parts are the corpus now; no second copy of the test reads
        f.unlink()
    print({name: len(rows) for name, rows in parts.items()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
