"""(scenario, version, seed, params) -> a built instance: seed and param syntax, and the
cache every page, download, tool and practice round shares.

Instances are pure functions of their tuple (contract 1), so one cache serves them all.
It is bounded in bytes, and a request builds at most `max_events` events: a query string
asking for 2,000 decode tokens is refused before it allocates gigabytes.
"""

from __future__ import annotations

import re

import scenarios
from app.config import get_settings
from app.lru import ByteLRU
from app.scenario import Instance, InstanceError, SeedLabel

# Seeds are integers JavaScript and JSON carry exactly (2**53 - 1): public seeds are
# small numbers people type; practice rounds draw theirs from the whole range, where
# nobody can find a round's instance by trying seeds.
MAX_SEED = 2**53 - 1
_DIGITS = re.compile(r"[0-9]{1,16}")  # ASCII only: int() also takes "+7", " 5", "5_000", "٥"


class UnknownScenario(InstanceError):
    """No scenario by that id (HTTP 404)."""


def parse_seed(raw: str | None, canonical: bool = False) -> SeedLabel:
    """`canonical`, or a seed written as plain ASCII digits within [0, MAX_SEED]."""
    if canonical:
        if raw is not None:
            raise InstanceError("give --seed N or --canonical, not both")
        return "canonical"
    if raw is None:
        return 0
    if raw == "canonical":
        return "canonical"
    if not _DIGITS.fullmatch(raw) or int(raw) > MAX_SEED:
        raise InstanceError(f"seed must be a non-negative integer written in digits (0 to {MAX_SEED}) or "
                            f"canonical, got {clip(raw)!r}")
    return int(raw)


def parse_params(items: list[str] | None) -> dict[str, str]:
    """`--param K=V` items as a dict."""
    out: dict[str, str] = {}
    for item in items or []:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise InstanceError(f"--param wants KEY=VALUE, got {clip(item)!r}")
        out[k.strip()] = v.strip()
    return out


def clip(text: str, limit: int = 80) -> str:
    """User input as an error message may quote it: at most `limit` characters."""
    return text if len(text) <= limit else text[:limit] + "…"


_CACHE: ByteLRU[Instance] | None = None


def _cache() -> ByteLRU[Instance]:
    global _CACHE
    if _CACHE is None:
        _CACHE = ByteLRU(get_settings().instance_cache_bytes, Instance.memory_bytes)
    return _CACHE


def instance(sid: str, seed: SeedLabel, overrides: dict[str, str] | None = None,
             version: int | None = None, fixed: bool = False) -> Instance:
    """The instance, cached: of the scenario's current version, or of the `version` a stored
    attempt or round names (contract 1). InstanceError (one line) for an unknown scenario or
    version, a bad param, or one past the settings' event budget for a request
    (InstanceTooLarge). The command line builds without the cache or the budget: its user is
    the operator. `fixed`: the trace after the key's fix, where the scenario builds one."""
    if sid not in scenarios.REGISTRY:
        raise UnknownScenario(f"unknown scenario {clip(sid)!r}; valid scenarios: {', '.join(scenarios.REGISTRY)}")
    scn = scenarios.get(sid)
    v = scn.version if version is None else int(version)
    budget = get_settings().max_instance_events
    key = (sid, v, seed, tuple(sorted((overrides or {}).items())), fixed)
    return _cache().get(key, lambda: scn.instance(seed, dict(overrides or {}), budget, version=v, fixed=fixed))
