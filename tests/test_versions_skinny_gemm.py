"""Contract 1 for skinny-gemm: version 1 (stored attempts, rounds and the blind corpora name it)
keeps building byte for byte after version 2 moved its host timing and physics."""

from __future__ import annotations

import hashlib
import json

import pytest

import scenarios
from app.trace import kineto

SKINNY = scenarios.get("skinny-gemm")

# skinny-gemm version 1 as it was built before version 2 existed (sha256 of the Kineto export
# of rank 0, and of the key as sorted JSON): a change here is a change to what users saw.
SKINNY_GEMM_V1 = {"canonical": ("c378e2e9d941cbbb5d140a87405f46bb69e6d15dce2af473f6a7059a1305515b",
                                "980d2ee31d4ff562c70ad734fbeb9dcb2fce04f3a7b799f4b43359e1f99046d0"),
                  4: ("e4f6d80431d8c6badd816d4a4c49617d24764d34eccc464ff84a14ddeeb80957",
                      "a07ac00d4c9915ce81612da2b6de1b27294df6bc7a38a2d2b681a37e76bf505f")}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.mark.parametrize("seed", list(SKINNY_GEMM_V1))
def test_skinny_gemm_version_1_is_built_exactly_as_it_was(seed):
    trace_digest, key_digest = SKINNY_GEMM_V1[seed]
    old = SKINNY.instance(seed, version=1)
    assert old.version == 1 and old.key["version"] == 1
    assert sha(kineto.dumps(old.trace(0), old.trace_name(0))) == trace_digest
    assert sha(json.dumps(old.key, sort_keys=True)) == key_digest
