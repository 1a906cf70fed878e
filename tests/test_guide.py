"""The live-round guide (app/rounds/guide.py), registry-driven: every scenario, its canonical
instance and two seeds. A new scenario file is tested here without new test code.

The hints carry the strictest checks: an interviewer reveals them to the candidate, so none
may say the cause, the fix, the win, a sentence of the model answer or a number of the key.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import re

import pytest

import scenarios
from app import tools
from app.instances import instance
from app.rounds import guide
from app.scoring.read import LABELS

SEEDS = ["canonical", 1, 2]
CASES = [(sid, seed) for sid in scenarios.REGISTRY for seed in SEEDS]
CRITERIA = ["discipline_order", "findings", "trap", "root_cause", "measurement", "fix_win"]  # contract 4's order
LEVEL_NAMES = ["poor", "mixed", "good", "excellent"]
NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")


@functools.lru_cache(maxsize=None)
def inst(sid, seed):
    return instance(sid, seed)


@functools.lru_cache(maxsize=None)
def live(sid, seed):
    return guide.live_key(inst(sid, seed))


@functools.lru_cache(maxsize=None)
def rubric(sid, seed):
    return guide.anchored_rubric(inst(sid, seed))


def said_numbers(text: str) -> list[tuple[float, int]]:
    """(value, decimals) of every number a text says."""
    out = []
    for m in NUMBER.finditer(text):
        raw = m.group().replace(",", "")
        out.append((float(raw), len(raw.split(".")[1]) if "." in raw else 0))
    return out


def equals_within_rounding(n: float, decimals: int, value: float) -> bool:
    """`n` is `value` as someone rounding to `decimals` places (or to two significant figures) says it."""
    value = float(value)
    return (abs(n - value) <= 0.5 * 10 ** -decimals + 1e-9
            or (abs(value) < 1 and n == float(f"{value:.2g}")))


def sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z])", text.strip()) if s]


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


# -- live_key ------------------------------------------------------------------------

@pytest.mark.parametrize("sid,seed", CASES)
def test_live_key_lays_out_the_whole_key(sid, seed):
    key, lk = inst(sid, seed).key, live(sid, seed)
    assert list(lk) == ["scenario", "seed", "brief", "observations", "discipline", "traps", "decisive", "root_cause",
                        "fix", "win", "model_answer"]
    assert lk["scenario"] == {"id": sid, "title": scenarios.get(sid).title, "version": scenarios.get(sid).version}
    for field in ("seed", "brief", "root_cause", "fix", "model_answer"):
        assert lk[field] == key[field]

    obs = lk["observations"]
    assert sorted(o["id"] for o in obs) == sorted(o["id"] for o in key["observations"])
    by_id = {o["id"]: o for o in key["observations"]}
    for o in obs:
        assert set(o) == {"id", "label", "value", "unit", "text", "headline"}
        assert (o["label"], o["value"], o["unit"]) == (by_id[o["id"]]["label"], by_id[o["id"]]["value"],
                                                        by_id[o["id"]]["unit"])
        (n, d), = said_numbers(o["text"])[:1]
        assert equals_within_rounding(n, d, o["value"]), o
    assert obs[0]["id"] == "step_ms" and obs[0]["text"].endswith(" ms")
    flags = [o["headline"] for o in obs]
    assert flags[0] and flags == sorted(flags, reverse=True), "headline observations come first"
    assert {o["id"] for o in obs if o["headline"]} >= {"step_ms", *scenarios.get(sid).observations} - {
        "expected_step_ms", "speedup"} - {i for i in scenarios.get(sid).observations if i.startswith("expected_")}

    assert [d["stage"] for d in lk["discipline"]] == ["step_boundary", "gaps", "overlap", "longest_kernel"]
    assert [d["finds"] for d in lk["discipline"]] == [key["discipline"][d["stage"]] for d in lk["discipline"]]

    assert [t["id"] for t in lk["traps"]] == [t["id"] for t in key["traps"]]
    for t, kt in zip(lk["traps"], key["traps"]):
        assert (t["hypothesis"], t["why_wrong"]) == (kt["claim"], kt["why_wrong"])
        assert all(a in kt["why_wrong"] and re.search(r"\d", a) for a in t["arithmetic"])

    d = lk["decisive"]
    assert d["tool"] == key["decisive_measurement"] and d["title"] == tools.TOOLS[d["tool"]].title
    assert d["confirmation"] == key["confirmation"]
    assert d["output"] == tools.run(d["tool"], inst(sid, seed))  # what the candidate sees when they run it

    exp, win = key["expected"], lk["win"]
    assert (win["before"], win["after"], win["speedup"], win["unit"]) == (exp["before_ms"], exp["after_ms"],
                                                                          exp["speedup"], exp["unit"])
    assert win["arithmetic"] == exp["arithmetic"]


# -- anchored_rubric -----------------------------------------------------------------

@pytest.mark.parametrize("sid,seed", CASES)
def test_rubric_has_four_anchored_levels_per_criterion(sid, seed):
    rows = rubric(sid, seed)
    assert [r["id"] for r in rows] == CRITERIA
    for r in rows:
        assert r["label"] == LABELS[r["id"]]
        assert [lv["level"] for lv in r["levels"]] == [1, 2, 3, 4]
        assert [lv["name"] for lv in r["levels"]] == LEVEL_NAMES
        says = [lv["says"] for lv in r["levels"]]
        assert len(set(says)) == 4, f"{r['id']}: two levels say the same"
        for s in says:
            # a glance in a 45-minute round: one or two sentences (a quoted key sentence counts as one)
            assert s and len(sentences(s)) <= 3 and len(s.split()) <= 90, (r["id"], s)


@pytest.mark.parametrize("sid,seed", CASES)
def test_every_findings_level_says_a_number_of_the_key(sid, seed):
    values = [o["value"] for o in inst(sid, seed).key["observations"]]
    findings = next(r for r in rubric(sid, seed) if r["id"] == "findings")
    for lv in findings["levels"]:
        said = said_numbers(lv["says"])
        assert any(equals_within_rounding(n, d, v) for n, d in said for v in values), lv


@pytest.mark.parametrize("sid,seed", CASES)
def test_rubric_names_the_traps_the_tool_and_the_win(sid, seed):
    key = inst(sid, seed).key
    by_id = {r["id"]: " ".join(lv["says"] for lv in r["levels"]) for r in rubric(sid, seed)}
    for t in key["traps"]:
        assert re.split(r": |; ", t["claim"])[0].rstrip(".") in by_id["trap"], t["id"]
    assert key["decisive_measurement"] in by_id["measurement"]
    excellent = next(r for r in rubric(sid, seed) if r["id"] == "fix_win")["levels"][3]["says"]
    exp = key["expected"]
    for value in (exp["before_ms"], exp["after_ms"], exp["speedup"]):
        assert any(equals_within_rounding(n, d, value) for n, d in said_numbers(excellent)), (value, excellent)


# -- hints ---------------------------------------------------------------------------

def check_hints_do_not_give_it_away(i, ladder):
    key, rb = i.key, i.scenario.rubric
    secrets = [key["root_cause"], key["fix"], key["model_answer"]]
    runs = {tuple(w[k:k + 8]) for s in secrets for w in [words(s)] for k in range(len(w) - 7)}
    for h in ladder:
        text = f"{h['title']}. {h['text']}"
        low = text.lower()
        for secret in (key["root_cause"], key["fix"], *sentences(key["model_answer"])):
            assert secret.lower().rstrip(".") not in low, (h, secret)
        w = words(text)
        shared = [" ".join(w[k:k + 8]) for k in range(len(w) - 7) if tuple(w[k:k + 8]) in runs]
        assert not shared, f"hint {h['index']} repeats the key: {shared[0]!r}"
        for o in key["observations"]:
            v = float(o["value"])
            forms = {f"{v:.1f}"} | ({f"{round(v)}", f"{round(v):,}"} if abs(v) >= 10 else set())
            for f in forms:
                assert not re.search(rf"(?<![\w.,]){re.escape(f)}(?!\d|[.,]\d)", text), \
                    f"hint {h['index']} says {f}, the key's {o['id']}"
        # the scorer's own words: a candidate who repeats the hint must not earn the fix or the cause
        assert not any(re.search(p, text, re.I) for p in rb.fix), f"hint {h['index']} names the fix"
        assert not rb.root_cause or not all(any(re.search(p, text, re.I) for p in group) for group in rb.root_cause), \
            f"hint {h['index']} states the root cause"


@pytest.mark.parametrize("sid,seed", CASES)
def test_hints_climb_from_discipline_to_the_case_without_giving_it_away(sid, seed):
    i = inst(sid, seed)
    ladder = guide.hints(i)
    assert 4 <= len(ladder) <= 5
    assert [h["index"] for h in ladder] == list(range(len(ladder)))  # the position a round reveals
    for h in ladder:
        assert set(h) == {"index", "title", "text"} and h["title"] and h["text"]
    assert "step" in ladder[0]["text"].lower()  # the gentle end: the discipline's first stage
    check_hints_do_not_give_it_away(i, ladder)


@pytest.mark.parametrize("sid", list(scenarios.REGISTRY))
def test_a_scenario_without_hints_gets_a_default_ladder(sid):
    i = inst(sid, "canonical")
    bare = dataclasses.replace(i, scenario=dataclasses.replace(i.scenario, hints=()))
    ladder = guide.hints(bare)
    assert 4 <= len(ladder) <= 5 and [h["index"] for h in ladder] == list(range(len(ladder)))
    assert i.key["decisive_measurement"] in ladder[-1]["text"]
    check_hints_do_not_give_it_away(bare, ladder)


def test_the_guide_is_domain_code():
    """It is called by the web layer, never the reverse (DESIGN: imports point down)."""
    tree = ast.parse(inspect.getsource(guide))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not {m for m in imported if m and (m.startswith("app.web") or m.startswith("app.cli"))}
