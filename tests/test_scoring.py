"""The scorer: quantities as people say them, the calibration suite (every scenario), and
the report's contract."""

from __future__ import annotations

import functools
import re
import subprocess
import sys
from pathlib import Path

import pytest

import scenarios
from app.scoring.numbers import matches, quantities
from app.scoring.score import MAX_CHARS, NarrationError, score
from tests.calibration import INDEPENDENT, INDEPENDENT_2, READS

SEED_DOC = Path(__file__).resolve().parents[2] / "shared" / "seed" / "trace-reading-walkthroughs.md"
ORDER = ["ddp", "dataloader", "launch-bound", "straggler", "prefill", "skinny-gemm"]  # the seed's cases 1-6
IDS = ["discipline_order", "findings", "trap", "root_cause", "measurement", "fix_win"]


@functools.lru_cache(maxsize=None)
def key_of(sid: str, seed) -> dict:
    """Built once per case: a straggler instance is 3 s of eight ranks, and a calibration
    test scores a dozen reads of it (the scorer reads the key, never writes it)."""
    return scenarios.get(sid).instance(seed).key


def run(sid: str, text: str, seed="canonical", runs=None) -> dict:
    return score(key_of(sid, seed), scenarios.get(sid).rubric, text, runs)


def crit(report: dict, cid: str) -> dict:
    return next(c for c in report["criteria"] if c["id"] == cid)


# --- quantities ------------------------------------------------------------------------

@pytest.mark.parametrize("said,value,unit", [
    ("~175 ms", 175, "ms"), ("about 28%", 28, "%"), ("0.6 s", 600, "ms"), ("1,100 kernels", 1100, "kernels"),
    ("1.33x", 1.33, "x"), ("1.33×", 1.33, "x"), ("2.8 times", 2.8, "x"), ("15 µs", 0.015, "ms"), ("15 us", 0.015, "ms"),
    ("160 GB/s", 160, "GB/s"), ("3.35 TB/s", 3350, "GB/s"), ("228 FLOP/byte", 228, "FLOP/B"), ("1219 MHz", 1219, "MHz"),
    ("twenty-eight percent", 28, "%"), ("one point three three x", 1.33, "x"),
    ("a hundred and seventy-five milliseconds", 175, "ms"), ("six hundred twenty-two ms", 622, "ms"),
    ("800 img/s", 800, "img/s"), ("8,192 tokens", 8192, "tokens"), ("roughly 24 TFLOP/s", 24, "TFLOP/s"),
])
def test_quantities_as_people_say_them(said, value, unit):
    (q,) = quantities(f"it was {said} there")
    assert q.unit == unit and q.value == pytest.approx(value)


def test_ranges_arrows_and_names():
    q = quantities("175-180 ms, MFU 31→41%, 622 -> 473 ms on an H100 with bf16 and sm90 kernels")
    assert [(x.low, x.high, x.unit) for x in q[:1]] == [(175, 180, "ms")]
    assert [(x.value, x.unit) for x in q[1:]] == [(31, "%"), (41, "%"), (622, "ms"), (473, "ms")]


def test_matching_respects_units_and_tolerance():
    (q,) = quantities("about 160 ms")
    assert matches(q, 175, "ms") and not matches(q, 200, "ms") and not matches(q, 160, "%")
    (bare,) = quantities("it was 175 then")
    assert not matches(bare, 175, "ms"), "a bare number does not state a duration"


# --- the calibration suite ---------------------------------------------------------------

def seed_reads() -> dict[str, str]:
    text = SEED_DOC.read_text()
    return dict(zip(ORDER, re.findall(r"In the interview \(60 seconds\)\s*\n\s*“(.+?)”", text, re.S)))


# Where the model's canonical departs from the seed's after-fix arithmetic (DESIGN: the model wins),
# the seed's read says the model's figures there: prefill's mixed iterations run eager (vLLM graphs
# decode-only batches), launch-bound at 512-token chunks, ~54 ms rather than the seed's ~35, and ITL
# p99 after the fix ~56 ms rather than ~40 (scenarios/prefill.py docstring).
SEED_AFTER_FIX = {"prefill": (("iterations become ~35ms", "iterations become ~{mixed_iteration_ms:.0f}ms"),
                              ("ITL p99 drops to ~40ms", "ITL p99 drops to ~{expected_itl_p99_ms:.0f}ms"))}


@pytest.mark.skipif(not SEED_DOC.exists(), reason=f"the seed document is not at {SEED_DOC}")
@pytest.mark.parametrize("sid", ORDER)
def test_the_seeds_sixty_second_version_scores_high(sid):
    text = seed_reads()[sid]
    key = key_of(sid, "canonical")
    for seed_says, model_says in SEED_AFTER_FIX.get(sid, ()):
        assert seed_says in text
        text = text.replace(seed_says, model_says.format(**{o["id"]: o["value"] for o in key["observations"]}))
    r = run(sid, text)
    assert r["total"] >= 85 and not r["trap_endorsed"], r


@pytest.mark.parametrize("sid", list(scenarios.REGISTRY))
def test_calibration(sid):
    sets = READS[sid]
    strong = [run(sid, t) for t in sets["strong"]]
    for r in strong:
        assert r["total"] >= 80 and not r["trap_endorsed"]
    best = max(r["total"] for r in strong)
    strong_order = min(crit(r, "discipline_order")["score"] for r in strong)
    for t in sets["trap"]:
        r = run(sid, t)
        assert r["trap_endorsed"] and r["total"] <= 40
    for t in sets["disorder"]:
        assert crit(run(sid, t), "discipline_order")["score"] < strong_order
    for t in sets["vague"]:
        r = run(sid, t)
        assert r["total"] <= best - 15 and crit(r, "findings")["score"] == 0


@pytest.mark.parametrize("sid", list(scenarios.REGISTRY))
@pytest.mark.parametrize("which", [1, 2])
def test_calibration_by_an_independent_author(sid, which):
    sets = (INDEPENDENT if which == 1 else INDEPENDENT_2)[sid]
    strong = [run(sid, t) for t in sets["strong"]]
    assert all(r["total"] >= 80 and not r["trap_endorsed"] for r in strong)
    assert all(run(sid, t)["trap_endorsed"] and run(sid, t)["total"] <= 40 for t in sets["trap"])
    order = min(crit(r, "discipline_order")["score"] for r in strong)
    assert all(crit(run(sid, t), "discipline_order")["score"] < order for t in sets["disorder"])
    best = max(r["total"] for r in strong)
    assert all(run(sid, t)["total"] <= best - 15 for t in sets["vague"])
    found = min(crit(r, "findings")["score"] for r in strong)
    for t in sets.get("wrong_numbers", []):  # the right story with the numbers wrong or misattributed
        r = run(sid, t)
        assert crit(r, "findings")["score"] < found and r["total"] <= best - 20
    for t in sets.get("partial", []):  # step and gaps right, then out of time: no cause, measurement or fix
        assert run(sid, t)["total"] <= best - 30


@pytest.mark.parametrize("sid", list(scenarios.REGISTRY))
@pytest.mark.parametrize("seed", [0, 3, 8, 21])
def test_model_answers_of_random_seeds_score_high(sid, seed):
    key = key_of(sid, seed)
    r = run(sid, key["model_answer"], seed)
    assert r["total"] >= 85 and not r["trap_endorsed"]


def test_every_scenario_has_a_rubric_for_each_trap_in_its_key():
    for sid, scn in scenarios.REGISTRY.items():
        key = key_of(scn.id, "canonical")
        assert scn.rubric is not None, sid
        assert {t["id"] for t in key["traps"]} <= set(scn.rubric.traps), sid


# --- the report ----------------------------------------------------------------------------

def test_report_contract_and_evidence_spans():
    text = READS["ddp"]["strong"][0]
    r = run("ddp", text)
    assert [c["id"] for c in r["criteria"]] == IDS
    assert abs(r["word_count"] - len(text.split())) < 10
    for c in r["criteria"]:
        assert 0 <= c["score"] <= c["max"]
        for e in c["evidence"]:
            assert text[e["start"]:e["end"]] == e["text"]
    assert sum(c["max"] for c in r["criteria"]) == 100


def test_misses_say_what_was_expected_in_the_instances_numbers():
    r = run("ddp", "The GPU is slow.")
    key = key_of("ddp", "canonical")
    fix = crit(r, "fix_win")
    assert any(f"{float(key['expected']['after_ms']):.0f}" in m for m in fix["missed"])
    assert any("nsys-kern-sum" in m for m in crit(r, "measurement")["missed"])
    assert r["total"] < 20


@pytest.mark.parametrize("rejection", [
    "I considered NCCL being slow but ruled it out: 28 GB in 175 ms is 160 GB/s.",
    "It's not NVLink: 160 GB/s busbw is fine for this size.",
    "A slow NCCL can't produce this, the ring moves 28 GB at 160 GB/s.",
    "Rather than blaming NCCL, note that 160 GB/s busbw is normal.",
    "Tempting to blame nccl-tests-style bandwidth, but 160 GB/s is healthy.",
])
def test_rejection_in_its_many_forms(rejection):
    r = run("ddp", "The step is 622 ms with a 175 ms idle gap. " + rejection)
    assert not r["trap_endorsed"] and crit(r, "trap")["score"] == 15


@pytest.mark.parametrize("endorsement", [
    "NCCL is the bottleneck here.", "The fix is to retune NCCL and check NVLink.", "We should run nccl-tests.",
])
def test_endorsing_the_trap_caps_the_total(endorsement):
    r = run("ddp", "The step is 622 ms and the last 175 ms is one all-reduce with the compute stream idle. " + endorsement)
    assert r["trap_endorsed"] and r["total"] <= 40


@pytest.mark.parametrize("endorsement", [
    "NCCL is the bottleneck here.", "The fix is to retune NCCL and check NVLink.", "We should run nccl-tests.",
])
def test_a_trap_endorsed_beside_the_true_fix_and_measurement_asks_a_reader(endorsement):
    """A strong read (the fix, the decisive measurement) that also endorses the trap
    contradicts itself or is misread by us: review, the trap's points lost, no cap (a cap
    on a strong read costs far more than a missed one on a weak read: issue 12)."""
    r = run("ddp", READS["ddp"]["strong"][0] + " " + endorsement)
    assert not r["trap_endorsed"] and r["needs_review"] and crit(r, "trap")["score"] == 0


def test_a_number_said_of_the_wrong_quantity_earns_nothing():
    """175 is the all-reduce; said of the step it is not a finding about the all-reduce."""
    key = key_of("ddp", "canonical")
    good = run("ddp", "The all-reduce takes 175 ms.")
    wrong = run("ddp", "The step takes 175 ms.")
    said = lambda r: {e["reason"].split(":")[0] for e in crit(r, "findings")["evidence"]}  # noqa: E731
    label = next(o["label"] for o in key["observations"] if o["id"] == "allreduce_ms")
    assert label in said(good) and label not in said(wrong)


def test_a_measurement_run_but_never_named_is_a_note_not_points():
    """Running the decisive tool earned 10/10 while the read never named it (issue 12)."""
    text = "The step is 622 ms and the compute stream is idle 175 ms at the end of each step."
    assert crit(run("ddp", text), "measurement")["score"] == 0
    ran = crit(run("ddp", text, runs=[{"tool": "nsys-kern-sum", "since_open_s": 42}]), "measurement")
    assert ran["score"] == 0 and "42 s" in ran["evidence"][0]["reason"] and "does not say" in ran["evidence"][0]["reason"]
    named = run("ddp", text + " nsys stats cuda_gpu_kern_sum shows 612 NCCL kernel instances per step.",
                runs=[{"tool": "nsys-kern-sum"}])
    assert crit(named, "measurement")["score"] == 10


def test_bad_narrations_get_a_clear_error_and_html_is_just_text():
    with pytest.raises(NarrationError, match="empty"):
        run("ddp", "   ")
    with pytest.raises(NarrationError, match="200,000 characters; the limit is"):
        run("ddp", "x" * 200_000)
    assert MAX_CHARS < 200_000
    html = "<script>alert(1)</script> Step is <b>622 ms</b>."
    ev = crit(run("ddp", html), "findings")["evidence"]
    assert [e["text"] for e in ev] == ["622 ms"] and html[ev[0]["start"]:ev[0]["end"]] == "622 ms"  # plain text


def test_score_command_line(tmp_path):
    f = tmp_path / "read.txt"
    f.write_text(READS["straggler"]["strong"][0])
    out = subprocess.run([sys.executable, "-m", "app", "score", "straggler", "--canonical", str(f)],
                         capture_output=True, text=True, timeout=120)
    import json

    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["total"] >= 80
    f.write_text("")
    bad = subprocess.run([sys.executable, "-m", "app", "score", "straggler", "--canonical", str(f)],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "empty" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_evidence_quotes_the_narration_as_written():
    text = "Step is ~622 ms. It’s not NCCL: 160 GB/s busbw is fine for 16 GB, the ring moves 28 GB in 175 ms."
    r = run("ddp", text)
    for c in r["criteria"]:
        for e in c["evidence"]:
            assert text[e["start"]:e["end"]] == e["text"]
    assert crit(r, "trap")["score"] == 15 and "It’s not NCCL" in crit(r, "trap")["evidence"][0]["text"]


def test_a_timed_read_past_a_spoken_minute_is_over_time():
    """A 367-word read in the 60-second mode scored 100 with no word on the overrun."""
    from app.scoring.score import TIMED_WORDS, score

    inst = scenarios.get("ddp").instance("canonical")
    answer = inst.key["model_answer"]
    long_read = " ".join([answer] * 3)
    words = len(long_read.split())
    assert words > 2 * TIMED_WORDS
    untimed = score(inst.key, inst.scenario.rubric, long_read)
    timed = score(inst.key, inst.scenario.rubric, long_read, timed=True)
    assert not untimed["over_time"] and timed["over_time"] and timed["timed"]
    disc = {c["id"]: c for c in timed["criteria"]}["discipline_order"]
    assert disc["score"] == 0 and any("over time" in m for m in disc["missed"])
    assert timed["total"] <= untimed["total"] - 15
    short = score(inst.key, inst.scenario.rubric, answer, timed=True)  # a model answer fits a minute
    assert not short["over_time"] and short["total"] == score(inst.key, inst.scenario.rubric, answer)["total"]


def test_times_read_off_the_ruler_are_not_findings():
    """ "from 334 ms to 409 ms" was credited as the step after the fix and as compute per
    step (issue 12); the same numbers said as a change, or a difference said as a duration,
    still count."""
    key = key_of("ddp", "canonical")
    after = float(key["expected"]["after_ms"])
    step = next(o["value"] for o in key["observations"] if o["id"] == "step_ms")
    ruler = run("ddp", f"The idle stretch runs from {after:.0f} ms to {step:.0f} ms on the ruler.")
    assert crit(ruler, "findings")["score"] == 0 and crit(ruler, "fix_win")["score"] == 0
    change = run("ddp", f"Overlapping the all-reduce cuts the step from {step:.0f} ms to {after:.0f} ms.")
    assert crit(change, "fix_win")["score"] > 0
    gap = run("ddp", f"The step is {step:.0f} ms; idle from t=100 ms until 275 ms, 175 ms of compute idle per step.")
    assert crit(gap, "findings")["score"] > 0


def test_a_ratio_is_the_speedup_only_when_said_of_the_win():
    """A straggler's max/median equal to the expected speedup was credited as the win."""
    key = key_of("straggler", "canonical")
    sp = float(key["expected"]["speedup"])
    ratio = run("straggler", f"Per-rank compute: the slowest rank over the median is {sp:.2f}x.")
    assert not any("speedup" in e["reason"] for e in crit(ratio, "fix_win")["evidence"])
    win = run("straggler", f"Restoring the clock makes the step {sp:.2f}x faster.")
    assert any("speedup" in e["reason"] for e in crit(win, "fix_win")["evidence"])


# -- stance: a judgment of the whole read, with a review where it cannot tell (issue 12) ----

def test_a_concession_turned_by_a_contrast_rejects_the_trap():
    r = run("ddp", "I'd be tempted to blame NCCL here, but the bus bandwidth is close to what NVLink gives; "
                   "the problem is that the all-reduce is not overlapped with backward.")
    assert not r["trap_endorsed"]


def test_a_read_that_takes_the_trap_back_is_not_capped():
    r = run("ddp", "My first thought was that NCCL is the problem and we should retune it. Actually no: 16 GB "
                   "over the ring at 370 GB/s is about 175 ms, exactly what it takes, so the link is fine and the "
                   "all-reduce is simply not overlapped with backward.")
    assert not r["trap_endorsed"]


def test_a_hedged_endorsement_asks_for_review_instead_of_capping():
    r = run("dataloader", "The step has a gap at its start. It could possibly be the host-to-device copy, I'm not sure.")
    assert not r["trap_endorsed"] and r["needs_review"] and "host-to-device" in r["review_reason"]


def test_denying_the_true_cause_while_naming_the_traps_evidence_endorses_it():
    r = run("dataloader", "nvidia-smi shows 100% utilization the whole run, so the GPU is saturated and the data "
                          "loading can't be what's holding us back; the time goes inside the kernels.")
    assert r["trap_endorsed"] and r["total"] <= 40


def test_in_a_run_on_transcript_only_the_words_near_a_mention_decide_its_stance():
    filler = " ".join(["and um the stream is busy"] * 12)
    r = run("ddp", f"so the step is about six hundred milliseconds {filler} you might think nccl but no the link "
                   f"runs at full speed {filler} um the fix is to overlap the all reduce with backward")
    assert not r["trap_endorsed"]


def test_one_said_number_states_one_observation():
    """Straggler version 2's wait (194.79 ms) and excess compute (194.9 ms) are the same number
    to a speaker: "195 ms" is credited once, to the observation its clause is about."""
    scn = scenarios.get("straggler")
    r = score(scn.instance("canonical", version=2).key, scn.rubric,
              "Every other rank waits 195 ms inside the all-reduce for rank 3. The step is 612 ms.")
    findings = crit(r, "findings")["evidence"]
    said = [e["text"] for e in findings]
    assert said.count("195 ms") == 1, findings
    assert "wait" in next(e["reason"] for e in findings if e["text"] == "195 ms")


# -- stance, second pass (issue 12): each case written here, not taken from a corpus -------

STRONG_DDP_TAIL = (" The all-reduce is not overlapped with backward: DDP's bucket hooks never fire, so the fix is "
                   "to restore bucketing so 175 ms of comm hides under the 270 ms backward, 622 to about 447 ms.")


@pytest.mark.parametrize("rejection", [
    "I'd set the NCCL-is-slow theory aside quickly: 28 GB over the ring in 175 ms is 160 GB/s, a healthy ring.",
    "A slow NCCL is a red herring here, 160 GB/s is what the ring should give.",
    "Blaming NCCL is the wrong call, the bandwidth is fine at 160 GB/s.",
    "its not nccl the ring does 160 gigs a second which is fine.",
])
def test_rejections_that_wrap_or_drop_their_words(rejection):
    r = run("ddp", "The step is 622 ms with a 175 ms idle gap. " + rejection + STRONG_DDP_TAIL)
    assert not r["trap_endorsed"] and crit(r, "trap")["score"] >= 10, r["review_reason"]


@pytest.mark.parametrize("endorsement", [
    "The obvious move is to retune NCCL: NCCL_ALGO=Tree and more channels.",
    "Action: run nccl-tests and fix the NCCL configuration.",
    "I suggest to check NVLink and tune NCCL, the interconnect is the problem.",
    "the team is right nccl got slow so id run nccl tests and retune it",
    "NCCL came back misconfigured after the driver update; retune NCCL_PROTO and the all-reduce drops to 80 ms.",
])
def test_endorsements_said_as_a_course_or_a_fault(endorsement):
    r = run("ddp", "The step is 622 ms and the last 175 ms is one all-reduce. " + endorsement)
    assert r["trap_endorsed"] and r["total"] <= 40


@pytest.mark.parametrize("posed", [
    "Is NCCL slow here? I'd want more data first.",
    "One thing I'd check later is whether NCCL is performing as expected, maybe with nccl-tests.",
    "Open question: could the NVLink topology matter?",
])
def test_a_trap_posed_as_a_question_or_a_check_is_not_endorsed(posed):
    r = run("ddp", "The step is 622 ms with a 175 ms all-reduce at the end. " + posed)
    assert not r["trap_endorsed"]


def test_a_rejection_in_a_later_sentence_takes_the_first_instinct_back():
    """No "actually", no "wait": the later arithmetic is the correction."""
    r = run("ddp", "My instinct was to retune NCCL because the all-reduce takes 175 ms. 28 GB through the ring "
                   "in 175 ms is 160 GB/s, which NVLink does easily, so the link is not the problem." + STRONG_DDP_TAIL)
    assert not r["trap_endorsed"]


def test_instead_of_negates_only_what_follows_it():
    """"INT4 instead of INT8" prefers INT4: the GEMV course endorsed, not rejected."""
    r = run("launch-bound", "One token takes 34 ms. The obvious move is to quantize the weights to INT4 instead of "
                            "INT8 so each token reads half the bytes.")
    assert r["trap_endorsed"]


@pytest.mark.parametrize("sid,read", [
    # a belief said softly, with the trap's course, and nothing else on offer
    ("straggler", "The step is about 590 ms and the all-reduce on rank 0 is 163 ms. I suspect the NVLink fabric came "
                  "back degraded after the reprovision, probably a switch tray that didn't train properly. My guess "
                  "is nccl-tests would show busbw well under the normal 350 GB/s."),
    # a quality denied is a fault asserted, not the trap rejected
    ("straggler", "The all-reduce is 215 ms, likely a sign that NVLink isn't at full bandwidth on the reprovisioned "
                  "node. I'd probably start with nccl-tests and re-image the node."),
])
def test_a_hedged_trap_that_is_the_reads_only_hypothesis_is_endorsed(sid, read):
    r = run(sid, read)
    assert r["trap_endorsed"] and r["total"] <= 40, r["review_reason"]


def test_a_hedged_trap_beside_the_true_cause_still_asks_for_review():
    r = run("straggler", "Rank 3 computes slower than the others and they all wait for it in the all-reduce. "
                         "I suspect the NVLink fabric might be degraded too, maybe.")
    assert not r["trap_endorsed"]


@pytest.mark.parametrize("read", [
    # the cause's evidence seen, then ruled out: the read's last word on it is the denial
    "Step's ~510 ms. I see DataLoader.__next__ on the main thread at the start of the step, but with nvidia-smi "
    "reporting 100% utilization it can't be that the GPUs are sitting around waiting for images. So I'd rule out "
    "the input pipeline and focus on the GEMM tile choices.",
])
def test_ruling_out_the_true_cause_after_seeing_its_evidence_endorses_the_trap(read):
    r = run("dataloader", read)
    assert r["trap_endorsed"] and r["total"] <= 40


def test_what_a_fix_no_longer_waits_on_is_not_a_rejection():
    r = run("dataloader", "- Step: ~510 ms\n- The batch transfer is the bottleneck: the GPU waits for it\n"
                          "- Fix: pinned memory and non_blocking copies\n- Expected: GPU no longer waiting on the transfer")
    assert r["trap_endorsed"]


def test_a_hedged_hypothesis_the_read_says_it_has_not_settled_is_not_endorsed():
    r = run("straggler", "The all-reduce on rank 0 is 163 ms. I suspect the NVLink fabric came back degraded after the "
                         "reprovision. I don't know yet; more data first.")
    assert not r["trap_endorsed"] and r["needs_review"]


def test_a_correction_that_turns_to_the_true_cause_takes_the_trap_back_without_naming_it():
    r = run("ddp", "The step is 622 ms. NCCL is the bottleneck, so I'd retune NCCL_ALGO. Actually, looking again, "
                   "the compute stream sits idle for the whole 175 ms all-reduce: it is not overlapped with backward.")
    # seen as an endorsement taken back; whether a reader is asked is the stance model's call
    assert not r["trap_endorsed"] and r["stance"]["features"]["retracted"] > 0


@pytest.mark.parametrize("sid,read", [
    ("launch-bound", "Token time is 31 ms. The .item() call in end of each token is the reason of slow."),
    ("prefill", "p99 of ITL is 630 ms. Garbage collector of Python is stopping whole engine loop, so all streams freeze."),
])
def test_endorsements_in_plain_non_native_words(sid, read):
    r = run(sid, read)
    assert r["trap_endorsed"] and r["total"] <= 40


def test_a_rejected_trap_named_again_in_the_fix_sentence_is_not_capped():
    r = run("ddp", "The step is 622 ms and the last 175 ms is one all-reduce with the compute stream idle. Someone "
                   "will blame NCCL, but 175 ms for those gradients is the bus bandwidth we expect, so it's not NCCL. "
                   "Fix: overlap the all-reduce with backward; NCCL is the bottleneck only because it runs alone.")
    assert not r["trap_endorsed"] and r["needs_review"]


@pytest.mark.parametrize("sid,read", [
    # a counterfactual rejects
    ("ddp", "The last 175 ms of the 622 ms step is one all-reduce with nothing overlapping it. I'd be surprised if "
            "NCCL were the bottleneck: the bus bandwidth is what two H100s give."),
    # a rejection answered in the next sentence without "the", then the trap kept as a later follow-on
    ("launch-bound", "1,100 kernels a token with launch-sized gaps between them. The LM head GEMV invites 'quantize it "
                     "to INT8'. Arithmetic says no: it already runs at 89% of DRAM bandwidth. Fix: CUDA graphs. "
                     "Quantization is a reasonable follow-on after that."),
    # the trap first, then a sentence opening with "But" turns to the true cause
    ("skinny-gemm", "The top GEMM reaches 185 TFLOP/s of 989, which smells like a bad tile choice; I was ready to "
                    "autotune. But ncu shows DRAM at 78% and SM at 19%: the shape is the problem, M=192 is "
                    "memory-bound, so the fix is a bigger micro-batch."),
])
def test_strong_reads_that_entertain_or_defer_the_trap_are_not_capped(sid, read):
    r = run(sid, read)
    assert not r["trap_endorsed"], r["criteria"][2]["evidence"]


@pytest.mark.parametrize("sid,read", [
    ("launch-bound", "Each token ends in a cudaStreamSynchronize of half a millisecond; that sync is the bottleneck, so "
                     "keep the sampled token on the GPU."),
    ("launch-bound", "The LM head GEMV is the longest kernel. I'd go straight to weight-only INT8 for it."),
    ("straggler", "The others wait 200 ms for rank 3. I'd go straight to the interconnect on GPU 3: read its NVLink "
                  "error counters, check lspci, and reseat it."),
    ("skinny-gemm", "A 96%-busy timeline at 18% MFU means the profiler is inflating the step time. Rerun with the "
                    "profiler off and recount the FLOPs."),
    ("dataloader", "The idle is communication: 14 all-reduce calls per step across 8 GPUs. Set bucket_cap_mb to 100 "
                   "to cut the collective overhead."),
])
def test_a_trap_said_by_its_parts_and_its_course(sid, read):
    """The trap named the way practitioners name its parts (the sync call, weight-only
    quantization, the link's counters, the profiler's overhead, DDP buckets)."""
    r = run(sid, read)
    assert r["trap_endorsed"] and r["total"] <= 40, r["criteria"][2]["evidence"]


def test_cutting_the_communication_to_unstarve_the_gemms_endorses_the_comm_trap():
    r = run("skinny-gemm", "The reduce-scatter runs 80% of the micro-step and is hammering HBM under the GEMMs, which "
                           "is what's slowing them. I'd reduce the comm with bigger buckets.")
    assert r["trap_endorsed"]


@pytest.mark.parametrize("sid,read", [
    ("dataloader", "Step is 510 ms with a gap at the start. nvidia-smi reports 100%, which I don't fully trust, so I'd "
                   "look at the timeline first."),
    ("prefill", "p99 ITL spikes to 600 ms. Could be GC, could be the prefill; I'd line up the spikes with the request log."),
    ("skinny-gemm", "MFU is 18% on a 96% busy timeline. Before anything I'd double-check the MFU math, then look at the GEMM."),
    ("ddp", "First instinct: the interconnect. Retune NCCL, run nccl-tests. Hmm, no. The bandwidth is fine; what's wrong "
            "is that the all-reduce is not overlapped with backward, so the compute stream idles for 175 ms."),
])
def test_distrust_alternatives_checks_and_a_bare_no_are_not_endorsements(sid, read):
    r = run(sid, read)
    assert not r["trap_endorsed"], r["criteria"][2]["evidence"]


@pytest.mark.parametrize("sid,read", [
    ("ddp", "Step 622 ms. Gradient sync is the last 175 ms. Someone left model.no_sync() in the loop; take it out."),
    ("straggler", "Rank 3 is slow because its shard has longer sequences; rebalance the data with a length-grouped sampler."),
    ("prefill", "The prefill is slow because the TP all-reduce is slow; switch on the custom all-reduce and it'll go away."),
])
def test_a_trap_stated_as_plain_fact_with_a_course_and_no_other_cause_is_endorsed(sid, read):
    r = run(sid, read)
    assert r["trap_endorsed"] and r["total"] <= 40


def test_a_trap_seen_in_a_read_that_has_not_decided_is_not_endorsed():
    r = run("launch-bound", "One token is around 24 ms with a lot of tiny kernels. There's also an .item() call every "
                            "token. I'm not sure yet what matters; I'd gather a couple more reports before deciding.")
    assert not r["trap_endorsed"]


@pytest.mark.parametrize("sid,read", [
    ("ddp", "The step is 622 ms. The all-reduce at the end goes over NVLink. The optimizer step is the real problem; "
            "switch to fused AdamW."),
    ("dataloader", "nvidia-smi shows 100% and the step is 510 ms. The model is too big for the batch size; I'd use "
                   "gradient accumulation."),
])
def test_a_read_with_a_wrong_cause_of_its_own_does_not_endorse_a_trap_it_only_saw(sid, read):
    r = run(sid, read)
    assert not r["trap_endorsed"]


@pytest.mark.parametrize("sid,read", [
    ("dataloader", "nvidia-smi pegged at 100% is the oldest lie in the book; the compute stream is empty for 190 ms of "
                   "each 510 ms step while the main thread sits in __next__. Two workers can't keep up. More workers, "
                   "~325 ms."),
    ("ddp", "I think the step is about 620 ms, and probably the last ~175 ms is the all-reduce running alone. NCCL seems "
            "fine to me, roughly 150 GB/s busbw, though I'd maybe run nccl-tests to be sure. My guess is the bucketing "
            "isn't kicking in; if so, overlapping it with backward should get us to ~470 ms."),
])
def test_a_cause_said_in_the_negative_and_a_check_to_be_sure_are_not_endorsements(sid, read):
    r = run(sid, read)
    assert not r["trap_endorsed"] and crit(r, "root_cause")["score"] > 0


@pytest.mark.parametrize("sid,read,cid,reason", [
    ("prefill", "Iterations run 34 ms until an 8,539-token prompt gets prefilled alone: 946 ms with zero decode tokens.",
     "root_cause", "root cause"),
    ("prefill", "A couple of iterations carry the whole prompt and no decode tokens.", "root_cause", "root cause"),
    ("dataloader", "Fix is 16 workers, pin memory, prefetch factor 4.", "fix_win", "names the fix"),
])
def test_the_cause_and_fix_as_strong_reads_say_them(sid, read, cid, reason):
    assert any(e["reason"] == reason for e in crit(run(sid, read), cid)["evidence"])


@pytest.mark.parametrize("sid,read", [
    ("ddp", "The all-reduce is 175 ms. Could NCCL be misconfigured? Possibly. I'd compare against nccl-tests numbers to know."),
    ("dataloader", "There's idle time before each forward. Maybe the host-to-device copy, maybe the loader. We should "
                   "look at the memcpy rows and the worker threads next."),
    ("launch-bound", "Lots of tiny kernels per token. The GEMVs are the biggest ones; we should find out if they're "
                     "efficient, and whether the .item() call matters."),
    ("straggler", "The all-reduce got longer after the reprovision. It might be NVLink or it might be one rank being "
                  "slow; I'd pull per-rank timings and nccl-tests to tell."),
    ("prefill", "The p99 spikes could be GC or something in the scheduler. I'd check the Python row for GC pauses and "
                "the iteration args."),
    ("skinny-gemm", "MFU 18% with the GPU 96% busy is odd. Either the kernels are slow or the MFU math is off; ncu on "
                    "the top GEMM would tell."),
])
def test_a_trap_raised_only_to_be_measured_is_not_capped(sid, read):
    """Middling reads that raise the trap as something to look at (the corpora's mention_only
    reads were the largest source of false caps)."""
    assert not run(sid, read)["trap_endorsed"]


def test_measuring_a_trap_the_read_says_is_the_cause_is_its_course():
    r = run("ddp", "Only 160 GB/s of bus bandwidth where NVLink 4 gives 370, so something is off in the interconnect or "
                   "the NCCL configuration. I'd run nccl-tests, look at NCCL_ALGO and NCCL_PROTO, and make sure NVLink "
                   "isn't falling back to PCIe.")
    assert r["trap_endorsed"] and r["total"] <= 40


@pytest.mark.parametrize("sid,read", [
    ("straggler", "Rank 4's own all-reduce runs at 132 GB/s where NVSwitch should give 350. So NCCL is slow on every "
                  "rank, and that's a fabric problem. I'd go after NCCL first."),
    ("ddp", "I suspect the interconnect. About 240 ms of the 860 ms step is the all-reduce, only 85 GB/s. Probably "
            "NCCL isn't using NVLink for all the pairs."),
    ("skinny-gemm", "The GEMM sits on its roofline, so the 21% MFU must come from outside: communication is eating "
                    "the step. Reduce the ZeRO-2 traffic with bigger buckets."),
    ("dataloader", "I think problem is communication. GPU is waiting at begin of step for the gradients of other "
                   "ranks. Set bigger bucket so there is less of calls."),
])
def test_conclusions_and_faults_said_plainly_endorse(sid, read):
    r = run(sid, read)
    assert r["trap_endorsed"] and r["total"] <= 40, r["criteria"][2]["evidence"]


def test_what_youd_think_and_then_refute_is_not_endorsed():
    r = run("skinny-gemm", "so the kernels are back to back ninety eight percent busy and youd think oh the mfu math "
                           "is off or the profiler is adding overhead but i did the math its right and ncu says the "
                           "top gemm is memory bound so micro batch four")
    assert not r["trap_endorsed"]


def test_a_fix_named_only_to_be_denied_does_not_lift_the_cap():
    r = run("dataloader", "nvidia-smi shows 100% utilization, so the GPU is saturated and the data loading can't be "
                          "what's holding us back; a synthetic data run would change nothing and more workers won't "
                          "help. The time goes inside the kernels.")
    assert r["trap_endorsed"] and r["total"] <= 40


@pytest.mark.parametrize("sid,read", [
    ("ddp", "The last 175 ms of the step is one all-reduce. My plan: bump the nccl channels and switch the protocol."),
    ("prefill", "p99 ITL is 600 ms. Step one: stand up a second TP=8 instance behind the load balancer."),
    ("dataloader", "Step is 510 ms. I'd start optimizing the gemms and the attention kernels."),
    ("skinny-gemm", "MFU is 18%. Let me run a cuBLASLt heuristic sweep over all algos for this shape."),
])
def test_a_plan_that_is_the_traps_course_endorses_it(sid, read):
    assert run(sid, read)["trap_endorsed"]


@pytest.mark.parametrize("sid,read", [
    ("launch-bound", "Token 24 ms. Let me measure the time spent in cudaStreamSynchronize per token."),
    ("prefill", "p99 is 600 ms. I'd note capacity as a candidate and rule it in or out with a load sweep."),
    ("straggler", "The all-reduce is 200 ms. Let me check the NVLink counters on all GPUs."),
])
def test_measuring_a_trap_is_not_endorsing_it(sid, read):
    assert not run(sid, read)["trap_endorsed"]


def test_a_negation_past_a_comma_belongs_to_the_next_predicate():
    r = run("ddp", "- Comm is serialized, the GPU isn't starving.\n- Tuning NCCL to the 370 GB/s ceiling would still "
                   "leave it serialized.\n- Action: find what bypasses the reducer hooks and fix it.")
    assert not r["trap_endorsed"]


@pytest.mark.parametrize("sid,read", [
    ("dataloader", "The step is 510 ms. My guess is the collective: DDP synchronization costs us the gap."),
    ("launch-bound", "Token 24 ms. The matmul kernels are the bottleneck: at M=1 they can't use the tensor cores."),
    ("prefill", "p99 is 600 ms. The replica is overloaded, so streams freeze."),
    ("straggler", "Rank 3 is slow. The sampler is the culprit: rank 3 keeps drawing the long sequences."),
])
def test_the_traps_subject_blamed_in_its_own_words_endorses_it(sid, read):
    assert run(sid, read)["trap_endorsed"]


@pytest.mark.parametrize("sid,read", [
    ("dataloader", "At the start of each step the GPU is idle while Python is too slow issuing kernels."),
    ("straggler", "Blaming the fabric here is shooting the messenger: the others wait for rank 3."),
    ("skinny-gemm", "DRAM is 83% busy, so the kernel is limited by memory; tuning can't help much."),
])
def test_a_subject_that_is_blamed_for_nothing_is_not_the_trap(sid, read):
    assert not run(sid, read)["trap_endorsed"]


@pytest.mark.parametrize("sid,read,endorsed", [
    ("straggler", "Compute on rank 0 is healthy, so the only thing left is the collective, which means the interconnect "
                  "is underdelivering. I'd take this straight to the fabric.", True),
    ("ddp", "The compute stream idles for the 256 ms all-reduce after backward: the bucketing hooks never fire, so fix "
            "the wrapper and it overlaps. I'd then revisit NCCL tuning for the last few points, in that order.", False),
    ("straggler", "The all-reduce is 146 ms. One thing to check is whether NVLink got worse after the reprovision; "
                  "nccl-tests on the node would settle that either way.", False),
])
def test_blame_a_later_follow_on_and_a_check_that_settles(sid, read, endorsed):
    assert run(sid, read)["trap_endorsed"] is endorsed


def test_the_compiled_patterns_outlive_the_re_modules_cache():
    """The scorer's patterns outnumber re's 512-entry cache: they are compiled once
    (text.rx), so a narration does not recompile hundreds of them (median 15 -> 8.5 ms)."""
    from app.scoring.text import rx
    run("ddp", "The step is 622 ms and the last 175 ms is one all-reduce.")
    before = rx.cache_info().misses
    run("ddp", "The step is 622 ms and the last 175 ms is one all-reduce, not overlapped with backward.")
    assert rx.cache_info().misses == before
