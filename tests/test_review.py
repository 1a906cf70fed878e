"""Review in the domain (app/review/), on SQLite and PostgreSQL: the replay gives the
narration as it was saved at any moment; the blind rule decides whose scorecards a rater
sees; who may review a round; anchors and the gold set; candidate records and their
pseudonyms; candidates side by side."""

from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest

from app.accounts import AccessDenied
from app.review import access, anchors, compare, replay, view
from app.rounds import candidates, live
from tests.calibration import READS
from tests.test_rounds import staff_in, store  # noqa: F401 (store: the fixture, on SQLite and PostgreSQL)


@pytest.fixture
def team(store):
    return {"iv": staff_in(store, "iv@x.org", "interviewer"), "iv2": staff_in(store, "iv2@x.org", "interviewer"),
            "rv": staff_in(store, "rv@x.org", "reviewer"), "rv2": staff_in(store, "rv2@x.org", "reviewer"),
            "ad": staff_in(store, "ad@x.org", "admin"), "other": staff_in(store, "rv@y.org", "reviewer", "other")}


CARD = {c: 3 for c in live.CRITERIA}


def _ended(store, iv, text: str | None = None, scenario: str = "ddp", **kw):
    r, token = live.create(store, iv, scenario=scenario, seed="canonical", **kw)
    live.opened(store, token)
    if text is not None:
        live.save_narration(store, token, text)
    live.end(store, iv, r.public_id)
    return live.for_staff(store, iv, r.public_id), token


def test_the_replay_gives_the_narration_as_saved_at_each_moment(store, team):
    """Saved drafts, each followed by the time it was acknowledged: the replay at that
    time is that draft; just before the first, nothing."""
    iv = team["iv"]
    r, token = live.create(store, iv, scenario="ddp", seed="canonical")
    text = READS["ddp"]["strong"][0]
    drafts = [text[:30], text[:30] + " — no, wait", text[:90], text[:60], text, text.replace("step", "iteration", 1)]
    saved = []
    before = datetime.now(timezone.utc)
    for d in drafts:
        live.save_narration(store, token, d)
        saved.append((datetime.now(timezone.utc), d))
        live.candidate_event(store, token, "viewport", {"start_ns": 0, "end_ns": len(d) * 1e6})
        time.sleep(0.01)
    log = live.events(store, r.id)
    assert replay.narration_at(log, before) == ""
    for at, d in saved:
        assert replay.narration_at(log, at) == d
    st = replay.state_at(log, saved[2][0])
    assert st["viewport"]["end_ns"] == len(drafts[1]) * 1e6  # the view as it was then (sent after each save)
    assert replay.narration_at(log) == drafts[-1] == live.for_staff(store, iv, r.public_id).narration
    ax = replay.axis(log)
    assert ax["offsets_ms"] == sorted(ax["offsets_ms"]) and len(ax["offsets_ms"]) == len(log)
    assert ax["start"] == log[0]["at"]  # never opened: the axis starts at the creation


def test_the_replay_skips_idle_stretches():
    t = lambda s: datetime.fromtimestamp(1_700_000_000 + s, timezone.utc).isoformat()  # noqa: E731
    log = [{"id": i + 1, "at": t(s), "kind": "viewport", "actor": "candidate", "data": {}}
           for i, s in enumerate((0, 1, 2, 60, 61, 200))]
    ax = replay.axis(log)
    assert ax["idle"] == [[2000.0, 60000.0], [61000.0, 200000.0]] and ax["duration_ms"] == 200000.0
    # the axis runs from the opening to the end: what came before or after sits at its ends
    log = [{**e, "kind": k} for e, k in zip(log, ("created", "opened", "narration", "end", "scorecard", "note"))]
    ax = replay.axis(log)
    assert ax["start"] == t(1) and ax["end"] == t(60) and ax["duration_ms"] == 59000.0
    assert ax["offsets_ms"] == [0.0, 0.0, 1000.0, 59000.0, 59000.0, 59000.0] and ax["idle"] == [[1000.0, 59000.0]]


def test_who_may_review(store, team):
    iv, iv2, rv, ad, other = team["iv"], team["iv2"], team["rv"], team["ad"], team["other"]
    r, token = live.create(store, iv, scenario="ddp", seed="canonical")
    assert access.for_review(store, iv, r.public_id).id == r.id  # its interviewer, as it runs
    assert access.for_review(store, ad, r.public_id).id == r.id
    with pytest.raises(access.NotYet):
        access.for_review(store, rv, r.public_id)
    with pytest.raises(live.NoRound):
        access.for_review(store, other, r.public_id)
    with pytest.raises(AccessDenied):  # an interviewer who had no part in it
        access.for_review(store, iv2, r.public_id)
    live.add_note(store, iv2, r.public_id, "watched the second half")
    assert access.for_review(store, iv2, r.public_id).id == r.id  # took part
    live.save_narration(store, token, READS["ddp"]["strong"][0])
    live.end(store, iv, r.public_id)
    assert access.for_review(store, rv, r.public_id).id == r.id


@pytest.mark.parametrize("rule", ["after_own", "always", "never"])
def test_the_blind_rule(store, team, rule):
    iv, rv, rv2, ad = team["iv"], team["rv"], team["rv2"], team["ad"]
    access.set_visibility(store, ad, iv.team_id("gpu"), rule)
    r, _ = _ended(store, iv, READS["ddp"]["strong"][0])
    live.put_scorecard(store, iv, r.public_id, {**CARD, "trap": 4}, 4, "sharp")
    before = view.review(store, rv, r)
    assert before["scorecards"]["own"] is None
    if rule == "always":
        assert [c["by"] for c in before["scorecards"]["others"]] == ["iv@x.org"] and before["auto_score"]
    else:
        assert before["scorecards"]["others"] == [] and before["scorecards"]["hidden"] == 1
        assert before["auto_score"] is None and before["auto_score_hidden"]
        assert all(not s["criteria"] for s in before["final"]["segments"])  # no evidence before your own
        assert "sharp" not in str(before)
    live.put_scorecard(store, rv, r.public_id, CARD, 3)
    after = view.review(store, rv, r)
    assert after["scorecards"]["own"]["by"] == "rv@x.org"
    assert bool(after["scorecards"]["others"]) == (rule != "never")
    assert after["auto_score"]["total"] == r.auto_total  # the machine shows once yours is in, under every rule
    rows = {row["id"]: row for row in after["who_said_what"]}
    assert rows["trap"]["raters"][0] == {"by": "rv@x.org", "level": 3}
    if rule != "never":
        assert rows["trap"]["raters"][1] == {"by": "iv@x.org", "level": 4} and rows["trap"]["spread"] == 1
    # an admin who has not scored is under the same rule as anyone
    assert bool(view.review(store, ad, r)["scorecards"]["others"]) == (rule == "always")
    with pytest.raises(AccessDenied):
        access.set_visibility(store, rv2, rv2.team_id("gpu"), "always")


def test_anchors_and_the_gold_set(store, team):
    iv, rv, ad = team["iv"], team["rv"], team["ad"]
    text = READS["ddp"]["strong"][0]
    r, _ = _ended(store, iv, text)
    with pytest.raises(AccessDenied):
        anchors.set_anchor(store, iv, r.public_id, "findings", 4)
    with pytest.raises(live.InstanceError):
        anchors.set_anchor(store, rv, r.public_id, "charm", 4)
    anchors.set_anchor(store, rv, r.public_id, "findings", 3, "numbers for every stage")
    anchors.set_anchor(store, ad, r.public_id, "findings", 4, "every number, in order")  # replaces
    got = anchors.for_scenario(store, r.team_id, "ddp")
    assert list(got) == ["findings"] and list(got["findings"]) == [4]
    shelf = got["findings"][4][0]
    assert shelf["note"] == "every number, in order" and shelf["excerpt"] and shelf["excerpt"].split(" … ")[0] in text
    rubric = view.review(store, rv, r)["rubric"]
    levels = next(c for c in rubric if c["id"] == "findings")["levels"]
    assert [len(lv["anchors"]) for lv in levels] == [0, 0, 0, 1]
    assert anchors.for_scenario(store, r.team_id, "dataloader") == {}
    assert anchors.remove_anchor(store, rv, r.public_id, "findings")["removed"]
    assert anchors.for_scenario(store, r.team_id, "ddp") == {}
    assert anchors.set_gold(store, rv, r.public_id, True)["gold"] and live.for_staff(store, rv, r.public_id).gold
    running, _ = live.create(store, iv, scenario="ddp", seed="canonical")
    with pytest.raises(live.RoundClosed):
        anchors.set_gold(store, ad, running.public_id, True)


def test_every_round_has_a_candidate_and_reviewers_see_a_pseudonym(store, team):
    iv, rv = team["iv"], team["rv"]
    r1, _ = _ended(store, iv, READS["ddp"]["strong"][0], candidate_name="Ada Lovelace")
    c = candidates.of_round(store, r1)
    assert c.name == "Ada Lovelace" and len(c.code) == 4 and c.code == c.code.upper()
    r2, _ = _ended(store, iv, READS["ddp"]["vague"][0], candidate_code=c.code.lower())
    assert r2.candidate_id == c.id and r2.candidate_name == "Ada Lovelace"
    nameless, _ = live.create(store, iv, scenario="ddp", seed="canonical")
    assert nameless.candidate_id is not None and nameless.candidate_id != c.id
    with pytest.raises(candidates.NoCandidate):
        live.create(store, iv, scenario="ddp", seed="canonical", candidate_code="ZZZZ")
    seen_by_rv = view.review(store, rv, r1)["candidate"]
    assert seen_by_rv["display"] == f"Candidate {c.code}" and seen_by_rv["name"] is None
    assert "Ada" not in str(seen_by_rv)
    assert view.review(store, iv, r1)["candidate"]["name"] == "Ada Lovelace"
    assert [x.public_id for x in candidates.rounds_of(store, c)] == [r1.public_id, r2.public_id]
    with pytest.raises(candidates.NoCandidate):
        candidates.by_code(store, team["other"], c.code)


def test_candidates_side_by_side(store, team):
    iv, rv, ad = team["iv"], team["rv"], team["ad"]
    from app.rounds import questions

    q = questions.for_team(store, iv, iv.team_id("gpu"))[0]
    made = []
    for i, quality in enumerate(("strong", "vague")):
        r, token = live.create(store, iv, question_id=q.id, candidate_name=f"Person {i}")
        live.save_narration(store, token, READS[q.scenario][quality][0])
        live.end(store, iv, r.public_id)
        live.put_scorecard(store, iv, r.public_id, {c: (4 if quality == "strong" else 1) for c in live.CRITERIA},
                           4 if quality == "strong" else 1)
        made.append(r.public_id)
    out = compare.side_by_side(store, rv, question_id=q.id)
    assert [row["round"] for row in out["rounds"]] == made[::-1]
    assert all(row["human_levels"]["findings"] is None and row["raters_hidden"] == 1 for row in out["rounds"])
    assert all(row["candidate"]["display"].startswith("Candidate ") for row in out["rounds"])
    access.set_visibility(store, ad, ad.team_id("gpu"), "always")
    out = compare.side_by_side(store, rv, question_id=q.id)
    by = {row["round"]: row for row in out["rounds"]}
    assert by[made[0]]["human_levels"]["findings"] == 4 and by[made[1]]["human_levels"]["findings"] == 1
    assert by[made[0]]["auto_total"] > by[made[1]]["auto_total"]
    with pytest.raises(live.InstanceError):
        compare.side_by_side(store, rv)
