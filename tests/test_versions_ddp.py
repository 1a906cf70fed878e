"""ddp's versions held to what they built (contract 1): version 2 (hosttime.MEASURED, the
physics of version 1) is named by stored attempts, rounds and corpora made while it was
current, so it must keep building byte for byte after version 3 moved on."""

from __future__ import annotations

import hashlib
import json

import pytest

import scenarios
from app.trace import kineto

DDP = scenarios.get("ddp")

# sha256 of the Kineto export of rank 0, and of the key as sorted JSON, of version 2.
DDP_V2 = {"canonical": ("dcca5763e319108d22724044a75453e15b228d7ce53fb9e83073c3038a786591",
                        "7abe9fe574d3dbfbf2de0c26b2d623b0d8ba29a387f1488790809be7eb6a940c"),
          6: ("4b8e456a630ee8c8a649f32c4ddf717ebef559406e6e66f1cefe300e0f8d1d52",
              "3206feb0369f158c42ca970a1b96abd937e3a9714c543f46037b1ceda944416b")}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.mark.parametrize("seed", list(DDP_V2))
def test_ddp_version_2_is_built_exactly_as_it_was(seed):
    trace_digest, key_digest = DDP_V2[seed]
    old = DDP.instance(seed, version=2)
    assert old.version == 2 and old.key["version"] == 2
    assert sha(kineto.dumps(old.trace(0), old.trace_name(0))) == trace_digest
    assert sha(json.dumps(old.key, sort_keys=True)) == key_digest
