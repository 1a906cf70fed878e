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

# The versions pinned when a later one replaced them (sha256 of rank 0's Kineto export, and of
# the key as sorted JSON): stored attempts, rounds and corpora name them.
PINNED = {
    ("ddp", 2): {
        "canonical": ("dcca5763e319108d22724044a75453e15b228d7ce53fb9e83073c3038a786591",
            "7abe9fe574d3dbfbf2de0c26b2d623b0d8ba29a387f1488790809be7eb6a940c"),
        6: ("4b8e456a630ee8c8a649f32c4ddf717ebef559406e6e66f1cefe300e0f8d1d52",
            "3206feb0369f158c42ca970a1b96abd937e3a9714c543f46037b1ceda944416b"),
    },
    ("dataloader", 1): {
        "canonical": ("948309121a640202bc4ee10493df4d9955c01d831363be172914099bf36502bb",
            "00e4b47a55f11c0b8fef6c05a6b0ad22919a2a5c967e18ca5ca3ba94e87d97cf"),
        7: ("24176f4bea41dd83528be25c6193a35f95bc34d2fdd7f8cf30517a12bf714317",
            "16fa14e1b601a3ad82f830914197eae5eae3a7d15457fdd4d86e6a54d7884398"),
    },
    ("prefill", 1): {
        "canonical": ("1553fc50d3d487c9932b4e76e032d03718e0cff23a27c49b53213c7d6c172323",
            "733ccc70d73e9efee029f393b5c1ad7fe9ea28e8ab74c0202b68864bf7119a28"),
        7: ("7f83653d7af8f683be141eb0d786f87c9bbd8cfb19721e7d9f14dbcf1b086e93",
            "a832871ed9b642e048de38328bac6b754cb18f3a0526f3db4f8b0a09bd03a95c"),
    },
    ("skinny-gemm", 1): {
        "canonical": ("c378e2e9d941cbbb5d140a87405f46bb69e6d15dce2af473f6a7059a1305515b",
            "980d2ee31d4ff562c70ad734fbeb9dcb2fce04f3a7b799f4b43359e1f99046d0"),
        4: ("e4f6d80431d8c6badd816d4a4c49617d24764d34eccc464ff84a14ddeeb80957",
            "a07ac00d4c9915ce81612da2b6de1b27294df6bc7a38a2d2b681a37e76bf505f"),
    },
    ("straggler", 2): {  # pinned when version 3 drew fused AdamW as multi_tensor_apply launches it
        "canonical": ("4899435e22d10a0f13617f36ba25dbc6fe293cde6d29d00a06ab46f5978dc2b9",
            "acd19ec2aa4422cfd1a9db23c54f83c3e1d0f62c23b5fe2649af0cd518b4f1fa"),
        7: ("84872ac716811e88a07ed2aba0c71ce6d710e7f47c3beeeae6d4a35d259cbe50",
            "fd321e3c735286b3d63042bbfdbfd491f2c1c4b522825ad77913cc53ef798b81"),
    },
    ("straggler", 1): {
        "canonical": ("53b34f50021adfe2f43bb26a66a4ab8e4406ca417288cd7cfcdbfd5478416988",
            "f5a53162e8fa374a834e16e35ad825656f646368e634c102aea0811f704c7ce2"),
        7: ("3069a98f944a9e799703c4d4af15d7718c49132fb9051d8fd3809a9247d8e6e9",
            "687b23df73c188a77b36f83fca871651b15eef055955d3fcd79b56bd50169e0f"),
    },
}


@pytest.mark.parametrize(("sid", "version", "seed"), [(s, v, seed) for (s, v), d in PINNED.items() for seed in d])
def test_a_replaced_version_is_built_exactly_as_it_was(sid, version, seed):
    trace_digest, key_digest = PINNED[(sid, version)][seed]
    old = scenarios.get(sid).instance(seed, version=version)
    assert old.version == version and old.key["version"] == version
    assert sha(export(old)) == trace_digest
    assert sha(json.dumps(old.key, sort_keys=True)) == key_digest



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
