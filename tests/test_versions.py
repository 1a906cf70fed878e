"""Contract 1 across versions: (scenario, version, seed) keeps building the instance its user
saw after the scenario's current version moves on (issue 13 changes the generators, and
stored attempts and rounds, the blind corpora and the calibration reads name version 1).

The scenario here is ddp with a second version added the way a generator change adds one:
`older=(1,)`, and the builder asking `building()` which version it makes."""

from __future__ import annotations

import dataclasses

import pytest

import scenarios
from app import instances, practice
from app.rounds import live
from app.db.base import store_for, upgrade_to_head
from app.scenario import UnknownVersion, building
from app.trace import kineto
from tests.test_rounds import staff_in

DDP = scenarios.get("ddp")


def _build(params, rng, seed):
    built = DDP.build(params, rng, seed)
    if building() == 2:  # what a version's change looks like to its builder
        built.key["brief"] += " (second version)"
    return built


@pytest.fixture
def bumped(monkeypatch):
    """ddp at version 2, still building version 1; a fresh instance cache either side."""
    scn = dataclasses.replace(DDP, version=2, older=(1,), build=_build)
    monkeypatch.setitem(scenarios.REGISTRY, "ddp", scn)
    monkeypatch.setattr(instances, "_CACHE", None)
    yield scn
    instances._CACHE = None


def export(inst) -> str:
    return kineto.dumps(inst.trace(0), inst.trace_name(0))


def test_an_older_version_is_built_exactly_as_it_was(bumped):
    old = DDP.instance("canonical")
    again = bumped.instance("canonical", version=1)
    assert again.version == 1 and again.key == old.key and export(again) == export(old)
    new = bumped.instance("canonical")
    assert new.version == 2 and new.key["version"] == 2 and new.key["brief"].endswith("(second version)")
    assert export(new) != export(old)  # its own random streams: new jitter, same physics


def test_a_version_not_built_here_says_which_are(bumped):
    with pytest.raises(UnknownVersion, match=r"ddp version 3 is not built here .*versions 1, 2"):
        bumped.instance("canonical", version=3)
    with pytest.raises(UnknownVersion, match="builds version 1"):
        DDP.instance(5, version=2)


def test_a_stored_attempt_or_round_keeps_its_version_and_its_links_say_so(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'v.db'}"
    upgrade_to_head(url)
    store = store_for(url)
    a = practice.create(store, "owner", "ddp", seed="canonical")
    assert a.version == 1
    seen = practice.instance_of(a).key
    iv = staff_in(store, "iv@x.org", "interviewer")
    r, _ = live.create(store, iv, scenario="ddp", seed="canonical", candidate_name="Ada")
    scn = dataclasses.replace(DDP, version=2, older=(1,), build=_build)
    monkeypatch.setitem(scenarios.REGISTRY, "ddp", scn)
    monkeypatch.setattr(instances, "_CACHE", None)
    try:
        inst = practice.instance_of(practice.get(store, "owner", a.public_id))
        assert inst.version == 1 and inst.key == seen
        assert live.instance_of(r).key == seen  # a round made before the change, too
        practice.submit(store, "owner", a.public_id, "The step is 622 ms.")
        done = practice.public(practice.get(store, "owner", a.public_id))
        assert done["version"] == 1 and done["explorer_url"].endswith("?version=1")
        assert done["report"]["model_answer"] == seen["model_answer"]
        # a new attempt is made at the current version
        assert practice.create(store, "owner", "ddp", seed="canonical").version == 2
        assert instances.instance("ddp", "canonical").version == 2
        assert instances.instance("ddp", "canonical", version=1).key == seen
    finally:
        instances._CACHE = None


def test_the_explorer_opens_a_named_version_and_refuses_others(bumped, tmp_path_factory):
    from fastapi.testclient import TestClient

    from tests.conftest import sqlite_app

    with TestClient(sqlite_app(tmp_path_factory, "versions")) as client:
        assert client.get("/scenarios/ddp/canonical.json").json()["scenario"]["version"] == 2
        old = client.get("/scenarios/ddp/canonical.json?version=1")
        assert old.status_code == 200 and old.json()["scenario"]["version"] == 1
        assert "version=1" in old.json()["timeline_url"]  # the viewer's data come from the same version
        assert client.get("/api/scenarios/ddp/canonical/timeline.bin?version=1").status_code == 200
        gone = client.get("/scenarios/ddp/canonical.json?version=3")
        assert gone.status_code == 400 and "not built here" in gone.json()["error"]
        assert client.get("/scenarios/ddp/canonical.json?version=two").status_code == 400
