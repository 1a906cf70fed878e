"""The scenario registry: every module in this package that exports `scenario` is one case.

Adding a seventh scenario is adding one file here; the CLI, the pages and the
registry-driven tests pick it up from `REGISTRY`.
"""

from __future__ import annotations

import importlib
import pkgutil

from app.scenario import DIFFICULTIES, FAMILIES, InstanceError, Scenario


def _discover() -> dict[str, Scenario]:
    found: dict[str, Scenario] = {}
    for mod in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if mod.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{mod.name}")
        scn = getattr(module, "scenario", None)
        if isinstance(scn, Scenario):
            if scn.id in found:
                raise RuntimeError(f"two scenarios claim the id {scn.id!r}")
            scn.module_doc = module.__doc__ or ""
            found[scn.id] = scn
    # The seed document's order (cases 1 to 6), then any newcomer alphabetically.
    order = ["ddp", "dataloader", "launch-bound", "straggler", "prefill", "skinny-gemm"]
    return dict(sorted(found.items(), key=lambda kv: (order.index(kv[0]) if kv[0] in order else 99, kv[0])))


REGISTRY: dict[str, Scenario] = _discover()


def get(scenario_id: str) -> Scenario:
    try:
        return REGISTRY[scenario_id]
    except KeyError:
        raise InstanceError(f"unknown scenario {scenario_id!r}; valid scenarios: {', '.join(REGISTRY)}") from None


def shelf(family: str | None = None, difficulty: str | None = None) -> list[Scenario]:
    """The registered cases of a family and a difficulty (either may be None: any), in the
    registry's order. An unknown family or difficulty is the asker's mistake, said as such."""
    if family and family not in FAMILIES:
        raise InstanceError(f"unknown family {family[:40]!r}; valid: {', '.join(FAMILIES)}")
    if difficulty and difficulty not in DIFFICULTIES:
        raise InstanceError(f"unknown difficulty {difficulty[:20]!r}; valid: {', '.join(DIFFICULTIES)}")
    return [s for s in REGISTRY.values()
            if (not family or s.family == family) and (not difficulty or s.difficulty == difficulty)]
