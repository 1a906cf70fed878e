"""The one rule every blind corpus was split by (each corpus's README.md): a read is in the
development part when the first byte of sha256(salt + id) is below the corpus's share, else
in the test part. Each corpus has its own salt and share, fixed here when it is cut; a
corpus is cut once, and no read ever moves between its parts.

python tests/corpus/split.py blind7   # cut tests/corpus/blind7/raw/*.jsonl (refuses once cut)

Each corpus used to carry its own split.py with this rule; they were merged here on
2026-12-01 after checking that every read of every corpus keeps the part it was cut into.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# corpus -> (salt, first byte below which a read is in the development part, of 256)
RULES = {
    "blind": ("tracedojo-blind-2026-11:", 77),     # ~30%
    "blind2": ("tracedojo-blind2-2026-12:", 102),  # ~40%: written to tune stance on
    "blind3": ("tracedojo-blind3-2026-12:", 77),   # ~30%: mostly held out
    "blind4": ("tracedojo-blind4-2026-12:", 51),   # ~20%
    "blind5": ("tracedojo-blind5-2026-12:", 51),
    "blind6": ("tracedojo-blind6-2026-12:", 51),
    "blind7": ("tracedojo-blind7-2026-12:", 51),
    "blind8": ("tracedojo-blind8-2026-12:", 51),
    # written to fit the stance model on (app/scoring/stance.py): all development, no test part
    "blind9": ("tracedojo-blind9-2026-12:", 256),
    # written against the current versions (each read names its version) after the stance model's last change
    "blind10": ("tracedojo-blind10-2026-12:", 51),
}


def part(corpus: str, read_id: str) -> str:
    salt, dev_below = RULES[corpus]
    return "dev" if hashlib.sha256((salt + read_id).encode()).digest()[0] < dev_below else "test"


def cut(corpus: str) -> int:
    here = HERE / corpus
    if (here / "dev.jsonl").exists() or (here / "test.jsonl").exists():
        print("the corpus is split already; a split is made once", file=sys.stderr)
        return 2
    reads = [json.loads(line) for f in sorted((here / "raw").glob("*.jsonl"))
             for line in f.read_text().splitlines() if line.strip()]
    ids = [r["id"] for r in reads]
    assert len(ids) == len(set(ids)), "read ids must be unique"
    parts = {"dev": [], "test": []}
    for r in sorted(reads, key=lambda r: r["id"]):
        parts[part(corpus, r["id"])].append(r)
    for name, rows in parts.items():
        (here / f"{name}.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    for f in (here / "raw").glob("*.jsonl"):  # the parts are the corpus now; no second copy of the test reads
        f.unlink()
    print({name: len(rows) for name, rows in parts.items()})
    return 0


if __name__ == "__main__":
    raise SystemExit(cut(sys.argv[1]) if len(sys.argv) == 2 and sys.argv[1] in RULES else
                     print(f"usage: python tests/corpus/split.py CORPUS (one of {', '.join(RULES)}; a new corpus "
                           f"gets its salt and share in RULES first)", file=sys.stderr) or 2)
