"""The blind corpus's shape (tests/corpus/blind/README.md): enough reads of every scenario,
seed and kind, valid labels, and each read in the part the split rule says. Nothing here
reads a text: the test part is seen only as aggregate figures (python -m bench corpus)."""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from pathlib import Path

import pytest

import scenarios

HERE = Path(__file__).resolve().parent / "corpus" / "blind"
KINDS = {"expert", "terse_expert", "trap_endorsing", "entertain_then_correct", "disordered", "vague", "bullet_list",
         "spoken_transcript", "non_native", "hedging", "very_long", "very_short", "rejects_trap_in_other_words"}
STANCES = {"endorse", "reject", "entertain_then_reject", "mention", "none"}


def _parts() -> dict[str, list[dict]]:
    return {p: [json.loads(line) for line in (HERE / f"{p}.jsonl").read_text().splitlines() if line.strip()]
            for p in ("dev", "test")}


pytestmark = pytest.mark.skipif(not (HERE / "test.jsonl").exists(), reason="the blind corpus is not split yet")


def test_the_corpus_covers_every_scenario_seed_and_kind():
    reads = [r for rows in _parts().values() for r in rows]
    assert len(reads) >= 300
    seeds = {sid: {r["seed"] for r in reads if r["scenario"] == sid} for sid in scenarios.REGISTRY}
    assert all(len(s) >= 4 for s in seeds.values()), seeds
    assert {r["kind"] for r in reads} == KINDS
    assert all(r["band"] in (1, 2, 3, 4) and r["stance"] in STANCES and isinstance(r["timed"], bool) for r in reads)
    assert all(r["text"].strip() for r in reads)
    assert Counter(r["id"] for r in reads).most_common(1)[0][1] == 1


def test_each_read_sits_in_the_part_the_rule_gives_it():
    spec = importlib.util.spec_from_file_location("split", HERE / "split.py")
    split = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(split)
    for name, rows in _parts().items():
        assert all(split.part(r["id"]) == name for r in rows)
