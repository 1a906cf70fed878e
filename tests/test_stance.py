"""The read's stance taken whole (app/scoring/stance.py): the stored model, its fit, its
decisions, and what they change in a score report."""

from __future__ import annotations

import json

import pytest

import scenarios
from app.scoring import stance
from app.scoring.score import TRAP_CAP, score


def run(sid: str, text: str, seed="canonical") -> dict:
    scn = scenarios.get(sid)
    return score(scn.instance(seed).key, scn.rubric, text)


def features(**set_) -> dict[str, float]:
    return {**dict.fromkeys(stance.FEATURES, 0.0), **set_}


def test_the_stored_model_weighs_every_feature_and_says_what_it_was_fitted_on():
    m = stance.stored()
    assert set(m["weights"]) == set(stance.FEATURES)
    assert m["trained_on"] and all(n > 0 for n in m["trained_on"].values())
    assert set(m["held_out"]) >= {"false_endorsement", "missed_endorsement"}


def test_a_model_that_does_not_match_the_features_refuses_to_judge(tmp_path, monkeypatch):
    m = json.loads(stance.MODEL_PATH.read_text())
    del m["weights"]["rule_cap"]
    bad = tmp_path / "stance_model.json"
    bad.write_text(json.dumps(m))
    monkeypatch.setattr(stance, "MODEL_PATH", bad)
    stance.stored.cache_clear()
    try:
        with pytest.raises(RuntimeError, match="refit"):
            stance.judge(features())
    finally:
        monkeypatch.undo()
        stance.stored.cache_clear()


def test_the_fit_is_deterministic_and_learns_the_direction_of_the_evidence():
    rows = [(features(endorsed=e, tail_cause=t), bool(e) and not t) for e in (0.0, 0.7, 1.1) for t in (0.0, 1.0)] * 5
    a, b = stance.fit(rows), stance.fit(rows)
    assert a == b
    assert a["weights"]["endorsed"] > 0 > a["weights"]["tail_cause"]
    assert a["weights"]["hedge"] == 0  # a feature that never varies learns nothing


def test_the_decision_bands_and_the_story_gate():
    m = {"weights": dict.fromkeys(stance.FEATURES, 0.0) | {"endorsed": 1.0}, "bias": 0.0}
    # p = sigmoid(endorsed): 0.5 and 0.27 are review, 0.73 the cap, 0.12 nothing
    assert stance.judge(features(endorsed=0.0), m).decision == "review"
    assert stance.judge(features(endorsed=-1.0), m).decision == "review"
    assert stance.judge(features(endorsed=1.0), m).decision == "endorse"
    assert stance.judge(features(endorsed=-2.0), m).decision == "none"
    # a confident lean is sent to a reader, not capped, where the read names the true fix
    # and the decisive measurement or the whole true cause
    assert stance.judge(features(endorsed=1.0, fix=1.0, measurement=1.0), m).decision == "review"
    assert stance.judge(features(endorsed=1.0, fix=1.0, root_cause=1.0), m).decision == "review"
    assert stance.judge(features(endorsed=1.0, fix=1.0, root_cause=0.5), m).decision == "endorse"
    j = stance.judge(features(endorsed=1.0), m)
    assert j.leaning_on == (stance.FEATURES["endorsed"],) and j.against == ()


def test_the_rules_doubt_goes_to_a_reader_unless_the_read_taken_whole_clears_it():
    m = {"weights": dict.fromkeys(stance.FEATURES, 0.0) | {"endorsed": 1.0}, "bias": 0.0}
    sure_not = stance.judge(features(endorsed=-4.0), m)  # p = 0.018
    unsure = stance.judge(features(endorsed=-2.0), m)  # p = 0.12
    assert sure_not.decision == unsure.decision == "none"
    assert not stance.reviewed(sure_not, rule_cap=False, rule_review=True)
    assert stance.reviewed(unsure, rule_cap=False, rule_review=True)
    assert not stance.reviewed(unsure, rule_cap=False, rule_review=False)
    # the rules' cap overruled always goes to a reader, however sure the model is
    assert stance.reviewed(sure_not, rule_cap=True, rule_review=False)


# A good read that entertains the trap and turns from it: the rules see an endorsement taken
# back and asked a reader (issue 12: "my first thought was X ... actually no"); the read
# taken whole is sure it endorses nothing, so nobody is asked.
ENTERTAINED_AND_TURNED = (
    "Step is 622 ms and the all-reduce alone is ~175 ms. On NVLink 4 with 8 ranks that looks wrong to me, so I'm "
    "thinking NVLink is the problem: 28 GB of ring traffic in 0.175 s is ~160 GB/s, well under 370. Hmm, but that's "
    "not what costs us the step. The compute stream is idle for the whole all-reduce, because it only starts after "
    "backward: kern_sum shows one NCCL kernel per step where the reducer should fire ~612 buckets. The hooks are "
    "being bypassed, so nothing overlaps. Remove the wrapper and let the buckets fire during backward; the all-reduce "
    "hides under 270 ms of backward and the step drops to ~473 ms, 1.3x.")


def test_a_doubt_of_the_rules_the_read_taken_whole_clears_asks_nobody():
    r = run("ddp", ENTERTAINED_AND_TURNED)
    assert r["stance"]["features"]["rule_review"] == 1.0  # the rules alone ask a reader
    assert r["stance"]["p_endorse"] < stance.CLEAR_P
    assert not r["trap_endorsed"] and not r["needs_review"] and r["review_reason"] is None


def test_unfitted_judges_nothing_and_restores_the_stored_model():
    f = features(rule_cap=1.0, endorsed=2.0, last_endorse=1.0)
    assert stance.judge(f).decision == "endorse"
    with stance.unfitted():
        assert stance.judge(f).decision == "none"
    assert stance.judge(f).decision == "endorse"


# A course proposed only in a trap's direction, with no word of blame the rules know: the
# rules alone let these pass (issue 12: "the obvious move is to ...", "we should tune ...").
COURSE_ONLY = [
    ("prefill", "First thing I'd do is take the long iteration into Nsight Compute. The FP8 GEMM alone is about a "
                "third of the kernel time, and the attention forward adds a few percent more. I'd try bigger tiles and "
                "the cooperative schedule for the long-M shapes, make sure FP8 attention is really on, and re-profile. "
                "Every millisecond shaved off those kernels comes straight off the stall."),
]


@pytest.mark.parametrize("sid,read", COURSE_ONLY)
def test_a_course_only_in_the_traps_direction_is_an_endorsement(sid, read):
    r = run(sid, read)
    assert r["trap_endorsed"] and r["total"] <= TRAP_CAP
    assert r["stance"]["decision"] == "endorse" and r["stance"]["p_endorse"] >= stance.CAP_P
    trap = next(c for c in r["criteria"] if c["id"] == "trap")
    ev = trap["evidence"][0]
    assert "taken whole" in ev["reason"] and read[ev["start"]:ev["end"]] == ev["text"]


# A strong read whose one slip of wording the rules take for the trap ("swap the card" is the
# bad-link trap's course, said here as the true fix's alternative): capped at 40 before.
STRONG_WITH_A_SLIP = (
    "Rank 0's step is 612 ms per ProfilerStep. Its compute stream idles after backward for ~215 ms while one "
    "all-reduce runs: nothing overlaps it. The longest kernel is that all-reduce, and blaming NCCL is tempting, but a "
    "collective includes its wait: the ring moves 2.8 GB per GPU, ~19 ms at a modest 150 GB/s, so 215 ms would be "
    "13 GB/s on NVLink 4. The per-rank view decides it: the healthy ranks compute in ~393 ms, rank 3 in 587 ms, and "
    "rank 3's own all-reduce, which waits for nobody, takes 20 ms, so the wire is fine; same kernels and shapes on "
    "rank 3, so not more data. DCGM says SM clock 1219 of 1980 MHz, SW Thermal Slowdown at 87 C; 1980/1219 = 1.62x, "
    "which is the slowdown. Fix the cooling on that tray, or swap the card. Step back to ~418 ms, 612/418 = 1.46x.")


def test_a_rule_cap_the_read_as_a_whole_does_not_bear_goes_to_a_reader():
    r = run("straggler", STRONG_WITH_A_SLIP)
    assert r["stance"]["features"]["rule_cap"] == 1.0  # the rules alone cap it
    assert not r["trap_endorsed"] and r["total"] > TRAP_CAP + 15
    assert r["needs_review"] and "swap the card" in r["review_reason"] and "p=" in r["review_reason"]
    assert r["stance"]["decision"] != "endorse"


def test_the_report_says_how_sure_it_is_and_why():
    r = run("ddp", "The step is 622 ms and the last 175 ms is one all-reduce after backward with nothing overlapping "
                   "it. NCCL is fine; the bucketing hooks never fire. Fix the DDP wrapper and it overlaps.")
    s = r["stance"]
    assert 0 <= s["p_endorse"] <= 1 and s["decision"] == "none"
    assert s["cap_at"] == stance.CAP_P and s["review_from"] == stance.REVIEW_P
    assert set(s["features"]) == set(stance.FEATURES)
    assert all(isinstance(x, str) for x in s["leaning_on"] + s["against"])


def test_the_stored_model_is_what_the_development_parts_fit():
    """A change to the rules or the lexicon moves the features the model weighs: refit
    (python -m bench stance --fit) in the same change, or the weights judge features they
    were not fitted on."""
    from bench.stance import development_reads, featurise
    with stance.unfitted():
        rows = [r for reads in development_reads().values() for r in featurise(reads)]
    refit = stance.fit([(r["features"], r["endorse"]) for r in rows], stance.stored()["lambda"])
    stored = stance.stored()
    drift = {k: v - stored["weights"][k] for k, v in refit["weights"].items() if abs(v - stored["weights"][k]) > 1e-3}
    assert not drift and abs(refit["bias"] - stored["bias"]) < 1e-3, f"refit: python -m bench stance --fit ({drift})"


@pytest.mark.timed
def test_judging_is_cheap_beside_the_rules():
    import time
    f = features(rule_cap=1.0, endorsed=1.0)
    t = time.perf_counter()
    for _ in range(10_000):
        stance.judge(f)
    assert (time.perf_counter() - t) / 10_000 < 1e-3
