"""What an expert's one SQL query finds in a generated trace (issue 13), asked the way
`python -m bench realism` asks it: through the upload importer, in DuckDB. A scenario whose
current version draws its host timing as real traces show it (app/hosttime.MEASURED) must
not carry the constants version 1 did."""

from __future__ import annotations

import json

import numpy as np
import pytest

import scenarios
from app import hosttime
from app.analysis import fidelity
from app.trace import kineto
from bench.realism import measure

MEASURED_HOST = ["ddp", "launch-bound", "skinny-gemm", "dataloader", "straggler", "prefill"]  # current versions on hosttime.MEASURED(_2)


@pytest.mark.parametrize("sid", MEASURED_HOST)
def test_no_constant_a_query_would_find(sid):
    inst = scenarios.get(sid).instance("canonical")
    m = measure(kineto.dumps(inst.trace(0), inst.trace_name(0)).encode(), sid)
    gaps, calls, steps = m["kernel_gaps"], m["launch_call_us"], m["step_gaps"]
    assert gaps["n"] > 1000 and gaps["modal_share"] < 0.05  # real: 6-16% (µs-rounded clocks); v1: 99% at 1.2 µs
    assert m["touching_ops"]["zero_share"] < 0.01  # real: 0; v1: 99.9% of consecutive ops touching
    assert m["repeated_op_times"]["identical_share"] < 0.05  # real: 0-1%; v1: zero_grad 300 µs every step
    assert steps["distinct_values"] == steps["n"]  # v1: 15 µs between every pair of steps
    assert calls["n"] > 1000
    assert "tracedojo" not in m["trace_name"] and sid not in m["trace_name"]


def test_version_1_keeps_its_constants():
    """Not a wish: version 1 is what stored attempts and the corpora saw, tells and all."""
    inst = scenarios.get("ddp").instance("canonical", version=1)
    m = measure(kineto.dumps(inst.trace(0), inst.trace_name(0)).encode(), "ddp")
    assert m["kernel_gaps"]["modal_share"] > 0.9 and m["touching_ops"]["zero_share"] > 0.9


def test_measured_host_times_have_the_shape_of_real_ones():
    """The draws themselves (a trace's launch calls mix in calls waiting on a full queue):
    cudaLaunchKernel with a long tail and no hard edge, latencies and gaps that vary and are
    never zero, host rows around their nominal length."""
    rng = np.random.default_rng(1)
    calls = hosttime.MEASURED.launch_calls_ns(rng, 20_000) / 1e3
    p50, p99 = np.percentile(calls, [50, 99])
    assert 6 < p50 < 8.5 and 2 < p99 / p50 < 3.5 and calls.max() > 25  # real: p50 7-10, p99 20-25, max 44-76
    v1 = hosttime.V1.launch_calls_ns(rng, 20_000) / 1e3
    assert v1.max() < 8 and np.percentile(v1, 99) / np.percentile(v1, 50) < 1.4  # the hard edge it replaces
    for draw in (hosttime.MEASURED.kernel_gaps_ns, hosttime.MEASURED.launch_latency_ns,
                 hosttime.MEASURED.between_ops_ns):
        x = draw(rng, 5_000)
        assert x.min() > 0 and len(np.unique(x)) > 1_000
    zg = [hosttime.MEASURED.host_ns(rng, 300_000) for _ in range(200)]
    assert len(set(zg)) > 150 and 250_000 < np.median(zg) < 350_000


def test_some_kernels_start_before_their_launch_returns_never_before_it_began():
    """Real traces show small negative launch delays (sampled HTA traces: p10 -1 to -3 µs);
    MEASURED_2 draws a share of them, and the schedule keeps each kernel after its call began."""
    x = hosttime.MEASURED_2.launch_latency_ns(np.random.default_rng(2), 20_000) / 1e3
    assert 0.10 < (x < 0).mean() < 0.20 and x.min() > -2.6 and len(np.unique(x)) > 2_000
    inst = scenarios.get("launch-bound").instance("canonical")
    ev = json.loads(kineto.dumps(inst.trace(0), inst.trace_name(0)))["traceEvents"]
    calls = {e["args"]["correlation"]: e for e in ev if e.get("name") == "cudaLaunchKernel"}
    ks = [(e, calls[e["args"]["correlation"]]) for e in ev if e.get("cat") == "kernel"
          and e["args"].get("correlation") in calls]
    early = [k for k, c in ks if k["ts"] < c["ts"] + c["dur"]]
    assert len(early) > 0.05 * len(ks) and all(k["ts"] > c["ts"] for k, c in ks)


# -- every scenario against the real traces (issue 13, item 2) -------------------------------

# The versions built before the fidelity bounds existed, each with the quantities it still has
# outside them and what takes them away. Keyed by version, so a scenario's next version is held
# to every bound: the list only shrinks.
_V1_HOST = "version 1's host timing: constant kernel gaps and ops touching (hosttime.V1)"
KNOWN_OUT = {
    ("ddp", 2): {"kernel_gap_us": "hosttime.MEASURED's gaps lack the real 3-20 µs tail: p90 2.2 µs, real 7-16; "
                                  "MEASURED_2 has it"},
    ("dataloader", 1): {"kernel_gap_us": _V1_HOST, "between_ops_us": _V1_HOST,
                        "launch_call_us": "version 1's cudaLaunchKernel on a µs grid with hard edges"},
    ("straggler", 1): {"kernel_gap_us": _V1_HOST, "between_ops_us": _V1_HOST},
    ("prefill", 1): {"kernel_gap_us": _V1_HOST, "between_ops_us": _V1_HOST,
                     "launch_delay_us": "version 1 starts a kernel 3 µs after its launch onto an idle GPU"},
    ("skinny-gemm", 1): {"kernel_gap_us": "version 1's gaps, 0.3-0.5 µs, under the real p10-p50",
                         "between_ops_us": _V1_HOST,
                         "launch_delay_us": "version 1 starts a kernel 3 µs after its launch onto an idle GPU"},
}


@pytest.mark.parametrize("sid", list(scenarios.REGISTRY))
@pytest.mark.parametrize("seed", ["canonical", 1])
def test_timing_lies_within_the_real_traces_bounds(sid, seed):
    """No timing quantity with one value holding over 5% of its mass, and the p10/p50/p90 of
    kernel gaps, launch delays, launch calls and the time between ops within the bounds
    app/analysis/fidelity.py states against the real traces (the fidelity page's verdict)."""
    inst = scenarios.get(sid).instance(seed)
    rep = fidelity.report(inst)
    known = KNOWN_OUT.get((sid, inst.version), {})
    out = {q: why for q, why in rep["tells"].items() if q not in known}
    assert not out, f"{sid} v{inst.version} seed {seed}: {out}"


def test_known_out_names_only_what_is_still_out():
    """An entry whose quantity came back inside the bounds goes, so the list says what is true."""
    for (sid, version), quantities in KNOWN_OUT.items():
        scn = scenarios.get(sid)
        tells = set()
        for seed in ("canonical", 1):
            tells |= set(fidelity.report(scn.instance(seed, version=version))["tells"])
        assert set(quantities) <= tells, (sid, version, set(quantities) - tells)


def test_the_reference_is_what_the_real_traces_give():
    """fidelity_reference.json (the yardstick a server without the fixtures uses) holds the
    figures the real traces give today."""
    if not fidelity.FIXTURES.is_dir():
        pytest.skip(f"the real traces are absent ({fidelity.FIXTURES})")
    stored = fidelity.reference()
    for f in sorted(fidelity.FIXTURES.glob("*.json*")):
        assert stored["traces"][f.name.split(".")[0]] == fidelity.measure_trace(f, f.name)


def test_a_constant_is_marked_and_a_measured_draw_is_not():
    """The judge itself: version 1's constants are tells; MEASURED_2's gaps are not."""
    v1 = fidelity.report(scenarios.get("ddp").instance("canonical", version=1))
    assert "one value holds" in " ".join(v1["tells"]["kernel_gap_us"])
    rng = np.random.default_rng(3)
    gaps = hosttime.MEASURED_2.kernel_gaps_ns(rng, 5_000) / 1e3
    s = fidelity._summary(gaps[gaps < 20])
    lo_hi = fidelity.bounds("kernel_gap_us")
    assert s["modal_share"] < 0.01 and all(lo <= s[p] <= hi for p, (lo, hi) in lo_hi.items())
