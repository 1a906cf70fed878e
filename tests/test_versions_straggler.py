"""Contract 1 for straggler: version 1 (one exposed all-reduce per step, constant host timing)
keeps building byte for byte after the scenario's current version moves on: stored attempts,
rounds, the blind corpora and the calibration reads name it."""

from __future__ import annotations

import hashlib
import json

import pytest

import scenarios
from app.trace import kineto

# sha256 of rank 0's Kineto export and of the key (sorted JSON), built with version=1
STRAGGLER_V1 = {"canonical": ("53b34f50021adfe2f43bb26a66a4ab8e4406ca417288cd7cfcdbfd5478416988",
                              "f5a53162e8fa374a834e16e35ad825656f646368e634c102aea0811f704c7ce2"),
                7: ("3069a98f944a9e799703c4d4af15d7718c49132fb9051d8fd3809a9247d8e6e9",
                    "687b23df73c188a77b36f83fca871651b15eef055955d3fcd79b56bd50169e0f")}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.mark.parametrize("seed", list(STRAGGLER_V1))
def test_straggler_version_1_is_built_exactly_as_it_was(seed):
    trace_digest, key_digest = STRAGGLER_V1[seed]
    old = scenarios.get("straggler").instance(seed, version=1)
    assert old.version == 1 and old.key["version"] == 1
    assert sha(kineto.dumps(old.trace(0), old.trace_name(0))) == trace_digest
    assert sha(json.dumps(old.key, sort_keys=True)) == key_digest
