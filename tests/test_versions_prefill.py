"""Contract 1 for prefill: version 1 (the layer-grouped rows, a separate NCCL stream, constant
host timing) keeps building byte for byte after version 2 moved on: stored attempts, rounds and
the blind corpora name it."""

from __future__ import annotations

import hashlib
import json

import pytest

import scenarios
from app.trace import kineto

# sha256 of the Kineto export of rank 0 and of the key as sorted JSON, built before version 2 existed
PREFILL_V1 = {"canonical": ("1553fc50d3d487c9932b4e76e032d03718e0cff23a27c49b53213c7d6c172323",
                            "733ccc70d73e9efee029f393b5c1ad7fe9ea28e8ab74c0202b68864bf7119a28"),
              7: ("7f83653d7af8f683be141eb0d786f87c9bbd8cfb19721e7d9f14dbcf1b086e93",
                  "a832871ed9b642e048de38328bac6b754cb18f3a0526f3db4f8b0a09bd03a95c")}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.mark.parametrize("seed", list(PREFILL_V1))
def test_prefill_version_1_is_built_exactly_as_it_was(seed):
    trace_digest, key_digest = PREFILL_V1[seed]
    old = scenarios.get("prefill").instance(seed, version=1)
    assert old.version == 1 and old.key["version"] == 1
    assert sha(kineto.dumps(old.trace(0), old.trace_name(0))) == trace_digest
    assert sha(json.dumps(old.key, sort_keys=True)) == key_digest
