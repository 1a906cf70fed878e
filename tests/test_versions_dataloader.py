"""Contract 1 for dataloader: version 1 keeps building byte for byte after version 2 (measured
host timing, no worker rows in the profiler's export, nvidia-smi on NVML's definition)
moved on. Stored attempts, rounds and the blind corpora name version 1."""

from __future__ import annotations

import hashlib
import json

import pytest

import scenarios
from app.trace import kineto

# sha256 of the Kineto export of rank 0 and of the key as sorted JSON, as version 1 built
# them before version 2 existed: a change here is a change to what users saw.
DATALOADER_V1 = {"canonical": ("948309121a640202bc4ee10493df4d9955c01d831363be172914099bf36502bb",
                               "00e4b47a55f11c0b8fef6c05a6b0ad22919a2a5c967e18ca5ca3ba94e87d97cf"),
                 7: ("24176f4bea41dd83528be25c6193a35f95bc34d2fdd7f8cf30517a12bf714317",
                     "16fa14e1b601a3ad82f830914197eae5eae3a7d15457fdd4d86e6a54d7884398")}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.mark.parametrize("seed", list(DATALOADER_V1))
def test_dataloader_version_1_is_built_exactly_as_it_was(seed):
    trace_digest, key_digest = DATALOADER_V1[seed]
    old = scenarios.get("dataloader").instance(seed, version=1)
    assert old.version == 1 and old.key["version"] == 1
    assert sha(kineto.dumps(old.trace(0), old.trace_name(0))) == trace_digest
    assert sha(json.dumps(old.key, sort_keys=True)) == key_digest
