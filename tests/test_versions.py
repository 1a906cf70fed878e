"""Contract 1 across versions: (scenario, version, seed) keeps building the instance its user
saw after the scenario's current version moves on. ddp's version 2 changed its host timing
(app/hosttime.py); stored attempts and rounds, the blind corpora and the calibration reads
name version 1, which must still come out byte for byte as it did."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest

import scenarios
from app import instances, practice
from app.db.base import store_for, upgrade_to_head
from app.rounds import live
from app.scenario import UnknownVersion
from app.trace import kineto
from tests.test_rounds import staff_in

DDP = scenarios.get("ddp")

# ddp version 1 as it was built before version 2 existed (sha256 of the Kineto export of
# rank 0, and of the key as sorted JSON): a change here is a change to what users saw.
DDP_V1 = {"canonical": ("b5634424180620dd0ef222a577f814e43a2a3a5ad65aa8711b363605dadb9c30",
                        "59d2407d56b1f68f82df39451eec62c4c37be17c2949921ad9cf21caca67a898"),
          6: ("5ae7993c501283cbafc5d7b555656ec0339cf37076c547764f2266681b993a20", None)}


# launch-bound version 1 likewise
LAUNCH_BOUND_V1 = {"canonical": ("162acf2ab2ac196d8de7f668cb012707c64ae6e8e1c896a4fedeb4472af6ef0f",
                                 "aee485efe1a55fbb56b4985ea730d550b998a74c026bb9a97e30384c91f27910"),
                   3: ("4c0e9c8ae89a6a2c3eebc6bf4ea4b3a6156f4dedf6c7eba1b69e843b7d988fc1", None)}
# and its version 2 (measured host timing), held likewise once version 3 moved on
LAUNCH_BOUND_V2 = {"canonical": ("db04bd8a5baab79337b3811d5c3e17b2bc020674f017e98fc571708ea954b1b5",
                                 "d291d578a27fc596c03f403b48b635719ccbd95a46814030256d7fce7155a8d7"),
                   3: ("401625621a0689ea7ad175460edef31a9befdcd20ffeb5f9ed790f6b9b341e5e",
                       "79415955a3a8a9170a59ee7da4fb8680be5e201c1617fcc508f2a011e63c8a13")}


def export(inst) -> str:
    return kineto.dumps(inst.trace(0), inst.trace_name(0))


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.mark.parametrize("seed", list(DDP_V1))
def test_an_older_version_is_built_exactly_as_it_was(seed):
    trace_digest, key_digest = DDP_V1[seed]
    old = DDP.instance(seed, version=1)
    assert old.version == 1 and old.key["version"] == 1
    assert sha(export(old)) == trace_digest
    if key_digest:
        assert sha(json.dumps(old.key, sort_keys=True)) == key_digest
    new = DDP.instance(seed)
    assert new.version == DDP.version == 3 and new.key["version"] == 3
    assert export(new) != export(old)  # its own random streams and host timing; the physics is the same


@pytest.mark.parametrize("seed", list(LAUNCH_BOUND_V1))
def test_launch_bound_version_1_is_built_exactly_as_it_was(seed):
    scn = scenarios.get("launch-bound")
    trace_digest, key_digest = LAUNCH_BOUND_V1[seed]
    old = scn.instance(seed, version=1)
    assert sha(export(old)) == trace_digest
    if key_digest:
        assert sha(json.dumps(old.key, sort_keys=True)) == key_digest
    assert scn.instance(seed).version == scn.version == 3


@pytest.mark.parametrize("seed", list(LAUNCH_BOUND_V2))
def test_launch_bound_version_2_is_built_exactly_as_it_was(seed):
    trace_digest, key_digest = LAUNCH_BOUND_V2[seed]
    old = scenarios.get("launch-bound").instance(seed, version=2)
    assert sha(export(old)) == trace_digest
    assert sha(json.dumps(old.key, sort_keys=True)) == key_digest


def test_a_version_not_built_here_says_which_are():
    with pytest.raises(UnknownVersion, match=r"ddp version 4 is not built here .*versions 1, 2, 3"):
        DDP.instance("canonical", version=4)
    nxt = scenarios.get("prefill").version + 1
    with pytest.raises(UnknownVersion, match=f"prefill version {nxt} is not built here"):
        scenarios.get("prefill").instance(5, version=nxt)


@pytest.fixture
def fresh_cache(monkeypatch):
    monkeypatch.setattr(instances, "_CACHE", None)
    yield
    instances._CACHE = None


def test_a_stored_attempt_or_round_keeps_its_version_and_its_links_say_so(tmp_path, monkeypatch, fresh_cache):
    url = f"sqlite:///{tmp_path / 'v.db'}"
    upgrade_to_head(url)
    store = store_for(url)
    # made while version 1 was ddp's current one
    monkeypatch.setitem(scenarios.REGISTRY, "ddp", dataclasses.replace(DDP, version=1, older=()))
    a = practice.create(store, "owner", "ddp", seed="canonical")
    assert a.version == 1
    seen = practice.instance_of(a).key
    iv = staff_in(store, "iv@x.org", "interviewer")
    r, _ = live.create(store, iv, scenario="ddp", seed="canonical", candidate_name="Ada")
    monkeypatch.setitem(scenarios.REGISTRY, "ddp", DDP)  # version 2 lands
    instances._CACHE = None
    try:
        inst = practice.instance_of(practice.get(store, "owner", a.public_id))
        assert inst.version == 1 and inst.key == seen
        assert live.instance_of(r).key == seen  # a round made before the change, too
        practice.submit(store, "owner", a.public_id, "The step is 622 ms.")
        done = practice.public(practice.get(store, "owner", a.public_id))
        assert done["version"] == 1 and done["explorer_url"].endswith("?version=1")
        assert done["report"]["model_answer"] == seen["model_answer"]
        # a new attempt is made at the current version
        assert practice.create(store, "owner", "ddp", seed="canonical").version == 3
        assert instances.instance("ddp", "canonical").version == 3
        assert instances.instance("ddp", "canonical", version=1).key == seen
    finally:
        instances._CACHE = None


def test_the_explorer_opens_a_named_version_and_refuses_others(tmp_path_factory):
    from fastapi.testclient import TestClient

    from tests.conftest import sqlite_app

    with TestClient(sqlite_app(tmp_path_factory, "versions")) as client:
        assert client.get("/scenarios/ddp/canonical.json").json()["scenario"]["version"] == 3
        old = client.get("/scenarios/ddp/canonical.json?version=1")
        assert old.status_code == 200 and old.json()["scenario"]["version"] == 1
        assert "version=1" in old.json()["timeline_url"]  # the viewer's data come from the same version
        assert client.get("/api/scenarios/ddp/canonical/timeline.bin?version=1").status_code == 200
        gone = client.get("/scenarios/ddp/canonical.json?version=4")
        assert gone.status_code == 400 and "not built here" in gone.json()["error"]
        assert client.get("/scenarios/ddp/canonical.json?version=two").status_code == 400
