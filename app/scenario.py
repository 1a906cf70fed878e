"""What a scenario is, and how (scenario, version, seed) becomes an instance.

Contract 1 of DESIGN.md: the tuple (scenario id, version, seed | canonical) determines
params, trace, artifacts and key. Each scenario module under `scenarios/` exports one
`Scenario`; this module holds the shared machinery: parameter declaration with units
and ranges, seeded draws, overrides, the answer-key shape (contract 3) and the
Kineto top-level metadata every trace carries.
"""

from __future__ import annotations

import re
import zlib
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Union, get_args, get_origin

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app import physics
from app.trace.builder import EventBudget, EventBudgetExceeded, Trace, TraceBuilder, spending

SeedLabel = Union[int, Literal["canonical"]]

# Kineto floors the system clock to a 3-month boundary for baseTimeNanoseconds
# (ChromeTraceBaseTime); 2026-10-01T00:00:00Z is such a boundary.
BASE_TIME_NS = 1_790_812_800 * 10**9

COMMON_OBSERVATIONS = ("step_ms", "expected_step_ms", "speedup")


class InstanceError(ValueError):
    """A request for an instance that cannot exist: the message is one line for the user."""


class InstanceTooLarge(InstanceError):
    """The instance's traces would hold more events than the caller may build."""


class UnknownVersion(InstanceError):
    """A version of a scenario this code does not build (a stored attempt or round from a
    version since retired, or one never made): the user is told which versions it builds."""


# The version of the scenario being built: a builder that changed between versions asks
# `building()` which to produce (contract 1: a stored (scenario, version, seed) keeps
# building the instance its user saw, after the scenario's current version moves on).
_BUILDING: ContextVar[int | None] = ContextVar("building_version", default=None)


def building() -> int:
    """The version of the instance being built (inside Scenario.instance and Instance.trace)."""
    v = _BUILDING.get()
    if v is None:
        raise RuntimeError("building() is asked outside a scenario's build")
    return v


@contextmanager
def _version(v: int):
    token = _BUILDING.set(v)
    try:
        yield
    finally:
        _BUILDING.reset(token)


# The trace after the fix (issue 13 item 5): the same instance, its params and physics, with
# the key's fix applied. A scenario whose `fixable` names the version being built asks
# `fixed()` and, when it is true, emits the trace as it runs once fixed; its key then
# describes that trace (its step is what the unfixed key expected).
_FIXED: ContextVar[bool] = ContextVar("fixed_build", default=False)


def fixed() -> bool:
    """Whether the build under way applies the fix (inside Scenario.instance and Instance.trace)."""
    return _FIXED.get()


@contextmanager
def _fixing(on: bool):
    token = _FIXED.set(on)
    try:
        yield
    finally:
        _FIXED.reset(token)


def param(default: Any, *, unit: str, ge: float | None = None, le: float | None = None,
          draw: tuple[float, float] | None = None, choices: list | None = None,
          description: str = "") -> Any:
    """A scenario parameter: its unit, its valid range, and the range seeded draws use.

    `draw=None` with no `choices` keeps the default on every seed (e.g. how many steps
    the trace shows), while still letting `--param` override it within [ge, le].
    """
    extra: dict[str, Any] = {"unit": unit}
    if draw is not None:
        extra["draw"] = list(draw)
    if choices is not None:
        extra["choices"] = list(choices)
    return Field(default, ge=ge, le=le, description=description, json_schema_extra=extra)


class ScenarioParams(BaseModel):
    """Base of every scenario's Params: strict, immutable, drawn from a seed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @classmethod
    def canonical(cls) -> "ScenarioParams":
        """The seed document's case; subclasses override when it differs from the defaults."""
        return cls()

    @classmethod
    def draw(cls, rng: np.random.Generator) -> "ScenarioParams":
        """A random instance: each drawable field uniform over its draw range, in field order,
        then `adjust_draw` (before validation, so it can pull a draw back into the case)."""
        return cls.model_validate(cls.adjust_draw(cls._draw_values(rng)))

    @classmethod
    def adjust_draw(cls, values: dict[str, Any]) -> dict[str, Any]:
        """Hook for rules that tie params together (e.g. keep a draw launch-bound)."""
        return values

    def refusal(self) -> str | None:
        """Why a job with these params could not run at all (e.g. it needs more memory than its
        GPU has), as one line naming the figure, or None. Asked, inside the version being built,
        of every explicit override before any build work (apply_overrides), so an override past
        memory is a one-line InstanceError (a 400 on the web, exit 2 on the command line), not a
        build that raises deep inside or a trace no job could produce. Seeded draws are pulled
        into the feasible region by `adjust_draw` instead, and the canonical case fits."""
        return None

    @classmethod
    def _draw_values(cls, rng: np.random.Generator) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for name, f in cls.model_fields.items():
            extra = f.json_schema_extra or {}
            if "choices" in extra:
                values[name] = extra["choices"][int(rng.integers(len(extra["choices"])))]
            elif "draw" in extra:
                lo, hi = extra["draw"]
                if f.annotation is int:
                    values[name] = int(rng.integers(int(lo), int(hi) + 1))
                else:
                    values[name] = round(float(rng.uniform(lo, hi)), 4)
        return {**cls().model_dump(), **values}

    @classmethod
    def describe(cls) -> list[dict]:
        """Every field with its unit, range and choices: for the CLI's error messages and pages."""
        out = []
        for name, f in cls.model_fields.items():
            extra = f.json_schema_extra or {}
            lo = hi = None
            for m in f.metadata:
                lo = getattr(m, "ge", lo)
                hi = getattr(m, "le", hi)
            out.append({"name": name, "unit": extra.get("unit", ""), "min": lo, "max": hi,
                        "choices": extra.get("choices"), "default": f.default,
                        "description": f.description or ""})
        return out


def _coerce(cls: type[ScenarioParams], name: str, raw: str) -> Any:
    """Turn a `--param K=V` string into the field's type, with a one-line error."""
    f = cls.model_fields[name]
    ann = f.annotation
    if get_origin(ann) is Literal or (f.json_schema_extra or {}).get("choices"):
        choices = (f.json_schema_extra or {}).get("choices") or list(get_args(ann))
        if raw not in [str(c) for c in choices]:
            raise InstanceError(f"param {name}={raw!r} is not one of {', '.join(map(str, choices))}")
        return next(c for c in choices if str(c) == raw)
    try:
        if ann is int:
            return int(raw)
        if ann is float:
            return float(raw)
        if ann is bool:
            if raw.lower() in ("1", "true", "yes"):
                return True
            if raw.lower() in ("0", "false", "no"):
                return False
            raise ValueError
    except ValueError:
        raise InstanceError(f"param {name}={raw!r} is not a valid {ann.__name__}") from None
    return raw


def apply_overrides(cls: type[ScenarioParams], base: ScenarioParams, overrides: dict[str, Any]) -> ScenarioParams:
    unknown = sorted(set(overrides) - set(cls.model_fields))
    if unknown:
        raise InstanceError(f"unknown param {unknown[0]!r}; valid params: {', '.join(cls.model_fields)}")
    values = base.model_dump()
    for k, v in overrides.items():
        values[k] = _coerce(cls, k, v) if isinstance(v, str) else v
    try:
        params = cls.model_validate(values)
    except ValidationError as e:
        err = e.errors()[0]
        msg = err["msg"].removeprefix("Value error, ")
        loc = ".".join(str(x) for x in err["loc"])
        if not loc:  # a rule across several params (a model validator)
            raise InstanceError(f"params: {msg}") from None
        desc = {d["name"]: d for d in cls.describe()}.get(loc)
        rng = f" (valid: {desc['min']} to {desc['max']} {desc['unit']})" if desc and desc["min"] is not None else ""
        raise InstanceError(f"param {loc}: {msg}{rng}") from None
    reason = params.refusal() if overrides else None
    if reason:
        raise InstanceError(f"params: {reason}")
    return params


@dataclass(frozen=True)
class Hint:
    """One rung of a live round's hint ladder, which an interviewer may reveal to the
    candidate: where to look or what to measure, never the cause, the fix, the win or a
    number the candidate should read off the trace (app/rounds/guide.py)."""

    title: str
    text: str


@dataclass
class Built:
    """What a scenario's build returns: the key and artifacts now, traces on demand."""

    key: dict
    artifacts: dict
    trace_for_rank: Callable[[int], Trace]
    ranks: int = 1  # how many per-rank traces the instance exports


# The bank's shelves (practice filters, question tags): what kind of loss a case is, so a
# candidate can drill one family, and how hard the read is. Every scenario names one of each
# (tests/test_scenarios.py); a new family is added here on purpose, not by a module's typo.
FAMILIES = {
    "communication": "Communication exposed",
    "host-input": "Host and input bound",
    "multi-gpu-balance": "Balance across GPUs",
    "serving": "Serving and scheduling",
    "kernels-memory": "Kernels and memory",
}
# easy: one look at the gaps names it; medium: a trap that needs its arithmetic; hard: the
# timeline misleads (a healthy trace, a second-order cause) or the measurement is unusual.
DIFFICULTIES = ("easy", "medium", "hard")


@dataclass
class Scenario:
    id: str
    version: int  # the current version: what new attempts, rounds and links get
    title: str
    signature: str  # one line: what the timeline shows
    Params: type[ScenarioParams]
    build: Callable[[ScenarioParams, np.random.Generator, SeedLabel], Built]
    observations: tuple[str, ...]  # ids this scenario's key must carry beyond the common ones
    # The seed document's headline numbers (observation id -> value) that the canonical
    # instance reproduces within 2%; tests/test_scenarios.py checks them.
    seed_headlines: dict[str, float] = field(default_factory=dict)
    # What an independent reader measures on the exported trace (metric -> observation
    # id it must match within 2%); the metrics are defined in tests/kineto_reader.py.
    reader_checks: dict[str, str] = field(default_factory=dict)
    # How a narration says this case's root cause, fix and traps (app/scoring/rubric.py).
    rubric: Any = None
    # The pointed end of the hint ladder, gentle to pointed: where to look in this case and,
    # last, the measurement to run. app/rounds/guide.py puts the generic discipline nudges
    # before them, and gives a scenario that defines none a default from its key.
    hints: tuple[Hint, ...] = ()
    module_doc: str = ""
    # Earlier versions this code still builds, exactly as they were: stored attempts and
    # rounds, and the blind corpora and calibration reads (which quote their numbers), name
    # them. A version dropped from here answers UnknownVersion.
    older: tuple[int, ...] = ()
    # Versions whose build can apply the key's fix (`fixed()`); the others answer that they cannot.
    fixable: tuple[int, ...] = ()
    # Counter tracks (SM clock, power, queue depth...) computed from the same physics as the
    # trace: (instance, rank) -> [{name, unit, ts_ns, values}], ts_ns on the trace's clock, each
    # value holding from its time to the next. A side channel beside the Kineto export, whose
    # bytes stay as they were (tests/test_versions.py); the viewer draws them as Perfetto does.
    counters: Callable[["Instance", int], list[dict]] | None = None
    family: str = ""  # a key of FAMILIES
    difficulty: str = ""  # one of DIFFICULTIES

    @property
    def versions(self) -> tuple[int, ...]:
        return (*self.older, self.version)

    def _checked(self, version: int | None) -> int:
        v = self.version if version is None else int(version)
        if v not in self.versions:
            raise UnknownVersion(f"{self.id} version {v} is not built here (this server builds version"
                                 f"{'s' if len(self.versions) > 1 else ''} {', '.join(map(str, self.versions))})")
        return v

    def rng(self, seed: SeedLabel, stream: int, version: int | None = None) -> np.random.Generator:
        """Independent, reproducible random streams per (scenario, version, seed, purpose)."""
        tag = 2**32 - 1 if seed == "canonical" else int(seed)
        v = self.version if version is None else version
        return np.random.default_rng([zlib.crc32(self.id.encode()), v, tag, stream])

    def params_for(self, seed: SeedLabel, overrides: dict[str, Any] | None = None,
                   version: int | None = None) -> ScenarioParams:
        v = self._checked(version)
        with _version(v):  # a version may draw its params differently, and refuse overrides differently
            base = self.Params.canonical() if seed == "canonical" else self.Params.draw(self.rng(seed, 0, v))
            return apply_overrides(self.Params, base, overrides or {})

    def instance(self, seed: SeedLabel, overrides: dict[str, Any] | None = None,
                 max_events: int | None = None, version: int | None = None, fixed: bool = False) -> "Instance":
        """The instance (of the current version unless `version` names an older one the
        scenario still builds); with `max_events`, refused (InstanceTooLarge) as soon as its
        traces, every rank counted, pass that many events, before the work and memory they
        would take. `fixed`: the same instance with its fix applied (its `key` is still the
        instance's own, the fixed trace's figures are `fixed_key`)."""
        v = self._checked(version)
        if fixed and v not in self.fixable:
            raise InstanceError(f"{self.id} version {v} has no build with its fix applied"
                                + (f" (versions {', '.join(map(str, self.fixable))} do)" if self.fixable else ""))
        params = self.params_for(seed, overrides, v)
        budget = EventBudget(max_events) if max_events is not None else None
        with _within(budget, overrides), _version(v):
            built = self.build(params, self.rng(seed, 1, v), seed)
            if fixed:
                with _fixing(True):
                    after = self.build(params, self.rng(seed, 1, v), seed)
                return Instance(self, seed, params, after, budget, dict(overrides or {}), version=v, fixed=True,
                                original=built)
        return Instance(self, seed, params, built, budget, dict(overrides or {}), version=v)


@contextmanager
def _within(budget: EventBudget | None, overrides: dict[str, Any] | None):
    try:
        with spending(budget):
            yield
    except EventBudgetExceeded:
        asked = f" with {', '.join(f'{k}={v}' for k, v in overrides.items())}" if overrides else ""
        raise InstanceTooLarge(f"this instance{asked} would hold over {budget.limit:,} events, the budget for a "
                               f"request; ask for fewer steps, tokens or iterations") from None


@dataclass
class Instance:
    scenario: Scenario
    seed: SeedLabel
    params: ScenarioParams
    built: Built
    budget: EventBudget | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    version: int = 0  # set by Scenario.instance
    fixed: bool = False  # the trace after the fix: `built` is the fixed build, `original` the instance's
    original: Built | None = None
    _traces: dict[int, Trace] = field(default_factory=dict)

    @property
    def key(self) -> dict:
        """The instance's answer key (of the trace as it is, also for the fixed build)."""
        return (self.original or self.built).key

    @property
    def fixed_key(self) -> dict | None:
        """What the fixed build's trace measures (its step, its figures), or None."""
        return self.built.key if self.fixed else None

    @property
    def artifacts(self) -> dict:
        return self.built.artifacts

    @property
    def ranks(self) -> int:
        return self.built.ranks

    @property
    def brief_rank(self) -> int:
        """The rank whose trace the brief hands over ("Here is rank 0's trace"): the one a
        multi-rank case opens on, so the other ranks are a step the candidate takes. The
        brief says it; a brief that names no rank in range hands over rank 0."""
        m = BRIEF_RANK.search(self.key.get("brief", ""))
        return int(m.group(1)) if m and int(m.group(1)) < self.ranks else 0

    def trace(self, rank: int = 0) -> Trace:
        if not 0 <= rank < self.ranks:
            raise InstanceError(f"rank {rank} is outside this instance's {self.ranks} exported "
                                f"rank(s): valid ranks 0 to {self.ranks - 1}")
        if rank not in self._traces:
            with _within(self.budget, self.overrides), _version(self.version), _fixing(self.fixed):
                self._traces[rank] = self.built.trace_for_rank(rank)
        return self._traces[rank]

    def counters(self, rank: int = 0) -> list[dict]:
        """The rank's counter tracks where the scenario has them (Scenario.counters), else none."""
        hook = self.scenario.counters
        if hook is None:
            return []
        with _version(self.version), _fixing(self.fixed):
            return hook(self, rank)

    def memory_bytes(self) -> int:
        """The traces built so far (the bulk of an instance) and a rough figure for the rest."""
        return 2**20 + sum(t.memory_bytes() for t in self._traces.values())

    def trace_name(self, rank: int = 0) -> str:
        """The file torch.profiler's tensorboard_trace_handler would have written
        ({hostname}_{pid}.{time_ms}.pt.trace.json). Nothing in it names the scenario or
        the seed: a practice round keeps both secret until its report."""
        t = self.trace(rank)
        host_pid = next((p[0] for p in t.processes if p[2] == "CPU"), t.processes[0][0] if t.processes else 0)
        start_ms = (t.base_time_ns + (int(t.ts_ns[0]) if len(t) else 0)) // 10**6
        return f"./log/gpu-node-{rank // 8:02d}_{host_pid}.{start_ms}.pt.trace.json"


# "Here is rank 3's trace", "rank 3's profile": the rank a brief hands over
BRIEF_RANK = re.compile(r"\brank (\d{1,5})'s (?:trace|profile)\b", re.I)


# -- the answer key (contract 3) ------------------------------------------------

def obs(id: str, label: str, value: float, unit: str, digits: int = 2) -> dict:
    return {"id": id, "label": label, "value": round(float(value), digits), "unit": unit}


def make_key(scn: Scenario, params: ScenarioParams, seed: SeedLabel, *, brief: str,
             observations: list[dict], discipline: dict, root_cause: str, traps: list[dict],
             decisive_measurement: str, confirmation: str, fix: str, expected: dict,
             model_answer: str, marks: dict | None = None) -> dict:
    """Assemble the key and check it carries every observation its scenario promises."""
    ids = [o["id"] for o in observations]
    missing = [i for i in COMMON_OBSERVATIONS + scn.observations if i not in ids]
    if missing:
        raise AssertionError(f"{scn.id} key lacks observations {missing}")
    assert set(discipline) == {"step_boundary", "gaps", "overlap", "longest_kernel"}
    return {
        "scenario": scn.id, "version": building(), "seed": seed, "params": params.model_dump(),
        "brief": brief, "observations": observations, "discipline": discipline,
        "root_cause": root_cause, "traps": traps, "decisive_measurement": decisive_measurement,
        "confirmation": confirmation, "fix": fix, "expected": expected,
        # plain floats: a numpy float64 here made the report's "ok" a numpy bool, which the
        # database's JSON column refused (a 500 on submit)
        "model_answer": model_answer,
        "marks": {k: {f: float(v) for f, v in m.items()} for k, m in (marks or {}).items()},
    }


def observation(key: dict, id: str) -> float:
    return next(o["value"] for o in key["observations"] if o["id"] == id)


# -- Kineto top level -----------------------------------------------------------

def device_properties(gpu: physics.Gpu, count: int) -> list[dict]:
    """`deviceProperties` as torch.profiler writes it, one entry per visible GPU."""
    smem = {"sm90": (49152, 233472, 232448), "sm80": (49152, 167936, 166912), "sm89": (49152, 102400, 101376)}[gpu.arch]
    return [{"id": i, "name": gpu.name, "totalGlobalMem": gpu.total_mem_bytes,
             "computeMajor": gpu.compute_major, "computeMinor": gpu.compute_minor,
             "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048 if gpu.arch != "sm89" else 1536,
             "regsPerBlock": 65536, "regsPerMultiprocessor": 65536, "warpSize": 32,
             "sharedMemPerBlock": smem[0], "sharedMemPerMultiprocessor": smem[1],
             "numSms": gpu.num_sms, "sharedMemPerBlockOptin": smem[2]} for i in range(count)]


def distributed_info(rank: int, world: int, backend: str = "nccl") -> dict:
    return {"backend": backend, "rank": rank, "world_size": world, "pg_count": 1,
            "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl",
                           "pg_size": world, "ranks": list(range(world))}],
            "nccl_version": "2.21.5"}


def new_builder(rng: np.random.Generator, gpu: physics.Gpu, rank: int = 0, world: int = 1,
                visible_gpus: int | None = None) -> tuple[TraceBuilder, int, int]:
    """A builder with the top-level keys set; returns (builder, host pid, trace start ns)."""
    top = {"deviceProperties": device_properties(gpu, visible_gpus or 1)}
    if world > 1:
        top["distributedInfo"] = distributed_info(rank, world)
    top.update({"cupti_version": 24, "cuda_runtime_version": 12040, "cuda_driver_version": 12040,
                "record_shapes": 1})
    start_ns = trace_start_ns(rng)
    host_pid = int(rng.integers(100_000, 3_000_000))
    return TraceBuilder(BASE_TIME_NS, top), host_pid, start_ns


def trace_start_ns(rng: np.random.Generator) -> int:
    """A seeded moment some weeks into the quarter (relative to BASE_TIME_NS), so ts values
    look like real relative Kineto timestamps (~2-7e12 µs); multi-rank scenarios draw one
    and share it, since all ranks share a clock."""
    return int(rng.integers(20, 80)) * 86_400 * 10**9 + int(rng.integers(0, 86_400 * 10**6)) * 1000


def gpu_clock_report(gpu: physics.Gpu, count: int, rng: np.random.Generator,
                     overrides: dict[int, dict] | None = None, util_pct: float = 100.0) -> list[dict]:
    """What nvidia-smi -q -d PERFORMANCE,CLOCK and DCGM read per GPU: healthy unless overridden."""
    out = []
    for i in range(count):
        row = {"index": i, "name": gpu.name, "sm_clock_mhz": gpu.max_sm_clock_mhz,
               "max_sm_clock_mhz": gpu.max_sm_clock_mhz, "mem_clock_mhz": gpu.mem_clock_mhz,
               "temperature_c": int(rng.integers(52, 68)), "power_w": round(float(gpu.tdp_w * rng.uniform(0.72, 0.9)), 1),
               "power_limit_w": gpu.tdp_w, "utilization_pct": util_pct, "throttle_reasons": [],
               "performance_state": "P0"}
        row.update((overrides or {}).get(i, {}))
        out.append(row)
    return out
