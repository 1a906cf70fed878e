"""The blind corpora's shape (tests/corpus/*/README.md): enough reads of every scenario,
seed and kind, valid labels, and each read in the part the split rule says. Nothing here
reads a text: the test part is seen only as aggregate figures (python -m bench corpus)."""

from __future__ import annotations

import importlib.util
import itertools
import json
from collections import Counter
from pathlib import Path

import pytest

import scenarios

ROOT = Path(__file__).resolve().parent / "corpus"
_spec = importlib.util.spec_from_file_location("corpus_split", ROOT / "split.py")
split = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(split)
# corpus -> (its kinds, at least this many reads, at least this many seeds per scenario)
CORPORA = {
    "blind": ({"expert", "terse_expert", "trap_endorsing", "entertain_then_correct", "disordered", "vague",
               "bullet_list", "spoken_transcript", "non_native", "hedging", "very_long", "very_short",
               "rejects_trap_in_other_words"}, 300, 4),
    "blind2": ({"expert", "trap_endorsing", "endorse_indirect", "endorse_obvious_move", "endorse_hedged",
                "endorse_wrong_cause", "endorse_bullets", "endorse_transcript", "entertain_then_correct",
                "rejects_trap_in_other_words", "reject_terse", "mention_only", "vague", "non_native_endorse"}, 250, 3),
    "blind3": ({"expert", "terse_expert", "reject_idiomatic", "entertain_then_correct", "expert_transcript",
                "expert_bullets", "non_native_expert", "hedged_expert", "mention_only", "trap_endorsing",
                "endorse_indirect", "endorse_fix_only", "endorse_hedged", "endorse_spoken_or_non_native",
                "endorse_after_considering_truth", "vague", "wrong_cause"}, 300, 3),
    "blind4": ({"expert", "terse_expert", "reject_idiomatic", "entertain_then_correct", "expert_transcript",
                "expert_bullets", "non_native_expert", "hedged_expert", "mention_only", "trap_endorsing",
                "endorse_indirect", "endorse_fix_only", "endorse_hedged", "endorse_spoken_or_non_native",
                "endorse_after_considering_truth", "vague", "wrong_cause", "disordered_expert", "very_short",
                "endorse_bullets"}, 350, 3),
}
# the third corpus's seventeen kinds, new instances and voices
CORPORA["blind5"] = CORPORA["blind6"] = CORPORA["blind7"] = CORPORA["blind8"] = (CORPORA["blind3"][0], 300, 3)
# written to fit the stance model on (app/scoring/stance.py), the same kinds
CORPORA["blind9"] = (CORPORA["blind3"][0], 300, 3)
# the kinds in full against the current versions: the seventeen, the disordered, very short
# and over-long timed reads
CORPORA["blind10"] = (CORPORA["blind3"][0] | {"disordered", "very_short", "very_long_timed"}, 350, 3)
STANCES = {"endorse", "reject", "entertain_then_reject", "mention", "none"}
# The scenarios a corpus was written for: the registry as it stood then. A case registered
# later is read by a corpus of its own, not missing from the old ones.
THE_FIRST_SIX = ("ddp", "dataloader", "launch-bound", "straggler", "prefill", "skinny-gemm")
COVERS = {name: THE_FIRST_SIX for name in CORPORA}


def _parts(name: str) -> dict[str, list[dict]]:
    here = ROOT / name
    if not (here / "test.jsonl").exists():
        pytest.skip(f"the {name} corpus is not split yet")
    return {p: [json.loads(line) for line in (here / f"{p}.jsonl").read_text().splitlines() if line.strip()]
            for p in ("dev", "test")}


@pytest.mark.parametrize("name", CORPORA)
def test_the_corpus_covers_every_scenario_seed_and_kind(name):
    kinds, least, seeds_each = CORPORA[name]
    reads = [r for rows in _parts(name).values() for r in rows]
    assert len(reads) >= least
    seeds = {sid: {r["seed"] for r in reads if r["scenario"] == sid} for sid in COVERS[name]}
    assert all(len(s) >= seeds_each for s in seeds.values()), seeds
    assert {r["scenario"] for r in reads} <= set(scenarios.REGISTRY)
    assert {r["kind"] for r in reads} == kinds
    assert all(r["band"] in (1, 2, 3, 4) and r["stance"] in STANCES and isinstance(r["timed"], bool) for r in reads)
    assert all(r["text"].strip() for r in reads)
    assert Counter(r["id"] for r in reads).most_common(1)[0][1] == 1


def test_every_corpus_has_its_split_rule():
    assert set(CORPORA) == set(split.RULES)


@pytest.mark.parametrize("name", CORPORA)
def test_each_read_sits_in_the_part_the_rule_gives_it(name):
    parts = _parts(name)
    for part, rows in parts.items():
        assert all(split.part(name, r["id"]) == part for r in rows)


def test_no_read_is_in_two_corpora():
    """A later corpus is new reads: none of its ids or texts repeats an earlier one's."""
    seen = [{(r["id"], r["text"]) for rows in _parts(name).values() for r in rows} for name in CORPORA]
    for a, b in itertools.combinations(seen, 2):
        assert not {i for i, _ in a} & {i for i, _ in b} and not {t for _, t in a} & {t for _, t in b}
