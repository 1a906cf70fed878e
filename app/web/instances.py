"""Resolve (scenario, seed, query-string params) to an instance, cached, with HTTP errors."""

from __future__ import annotations

from functools import lru_cache

from fastapi import HTTPException, Request

import scenarios
from app.cli import parse_seed
from app.scenario import Instance, InstanceError

# Query keys that are not scenario params.
RESERVED = {"rank", "format", "kernel", "testing"}  # kernel: ncu's -k; testing: the viewer's test hook


@lru_cache(maxsize=32)  # instances are pure functions of their tuple; pages and downloads share them
def cached(sid: str, seed, overrides: tuple[tuple[str, str], ...] = ()) -> Instance:
    return scenarios.get(sid).instance(seed, dict(overrides))


def resolve(sid: str, seed: str, request: Request) -> Instance:
    """404 for an unknown scenario, 400 naming the problem for a bad seed or param."""
    if sid not in scenarios.REGISTRY:
        raise HTTPException(404, f"unknown scenario {sid!r}; valid scenarios: {', '.join(scenarios.REGISTRY)}")
    try:
        label = parse_seed(None, True) if seed == "canonical" else parse_seed(seed, False)
        overrides = tuple(sorted((k, v) for k, v in request.query_params.items() if k not in RESERVED))
        return cached(sid, label, overrides)
    except InstanceError as e:
        raise HTTPException(400, str(e)) from None
