"""Serving measurements: `request-log` (vLLM benchmark_serving's summary and the
per-request log) and `itl-scatter` (each inter-token latency against the prefill tokens
the engine scheduled since that stream's previous token).

Both are computed from the instance's request log (per request: arrival, prompt and
output tokens, the emit time of every token in the profiled window) and its scheduler
iterations (prefill and decode tokens per ProfilerStep), the same records the trace's
iterations were emitted from.
"""

from __future__ import annotations

import numpy as np

from app import physics
from app.tools.base import Tool, ToolNotApplicable, table

SPIKE_MS = 100.0  # an ITL above this is a user-visible stall


def _log(inst) -> tuple[list[dict], list[dict]]:
    a = inst.artifacts
    if not a.get("request_log"):
        raise ToolNotApplicable("no serving requests in this instance: it is a training job or a single-stream "
                                "decode with no request log or concurrent prefill")
    return a["request_log"], a["iterations"]


def itl_samples(inst) -> dict:
    """Every ITL sample with the prefill tokens scheduled between its two tokens."""
    reqs, its = _log(inst)
    starts = np.array([it["start_ms"] for it in its])
    prefill = np.array([it["prefill_tokens"] for it in its])
    cum = np.concatenate([[0], np.cumsum(prefill)])  # prefill tokens in iterations [0, i)
    itl, pre, req = [], [], []
    for r in reqs:
        tt = np.asarray(r["token_times_ms"], float)
        if len(tt) < 2:
            continue
        it_idx = np.searchsorted(starts, tt, side="right") - 1
        itl.append(np.diff(tt))
        # prefill in the iterations after the previous token's, up to and including this token's
        pre.append(cum[it_idx[1:] + 1] - cum[it_idx[:-1] + 1])
        req += [r["request_id"]] * (len(tt) - 1)
    x = np.concatenate(pre).astype(int) if pre else np.empty(0, int)
    y = np.concatenate(itl) if itl else np.empty(0)
    return {"prefill_tokens": x, "itl_ms": y, "request_id": req}


def itl_series(inst) -> dict:
    """The worst ITL each iteration produced, over the window: the symptom as a time series."""
    reqs, its = _log(inst)
    starts = np.array([it["start_ms"] for it in its])
    worst = np.zeros(len(its))
    for r in reqs:
        tt = np.asarray(r["token_times_ms"], float)
        if len(tt) > 1:
            idx = np.searchsorted(starts, tt[1:], side="right") - 1
            np.maximum.at(worst, idx, np.diff(tt))
    keep = worst > 0
    return {"kind": "series", "title": "Worst inter-token latency per scheduler iteration",
            "x_label": "time in window", "x_unit": "ms", "y_label": "ITL", "y_unit": "ms",
            "x": np.round(starts[keep], 3).tolist(), "y": np.round(worst[keep], 3).tolist()}


def itl_chart(inst) -> dict:
    s = itl_samples(inst)
    return {"kind": "scatter", "x_label": "prefill tokens scheduled since the stream's previous token",
            "x_unit": "tokens", "y_label": "inter-token latency", "y_unit": "ms", "threshold_ms": SPIKE_MS,
            "x": s["prefill_tokens"].tolist(), "y": np.round(s["itl_ms"], 3).tolist()}


def itl_scatter(inst) -> str:
    s = itl_samples(inst)
    x, y = s["prefill_tokens"], s["itl_ms"]
    edges = [0, 1, 1025, 4097, None]
    rows = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        m = (x >= lo) & (x < hi) if hi else (x >= lo)
        label = "0" if hi == 1 else (f"{lo:,}-{hi - 1:,}" if hi else f">= {lo:,}")
        if m.any():
            v = y[m].tolist()
            rows.append([label, f"{int(m.sum()):,}", f"{physics.percentile(v, 50):.2f}",
                         f"{physics.percentile(v, 99):.2f}", f"{max(v):.2f}"])
        else:
            rows.append([label, "0", "-", "-", "-"])
    above = y > SPIKE_MS
    out = ["$ python itl_scatter.py request_log.jsonl   # each ITL sample vs prefill tokens scheduled since the "
           "stream's previous token", "",
           table(["Prefill tokens", "Samples", "ITL p50 (ms)", "ITL p99 (ms)", "ITL max (ms)"], rows, {0}), "",
           f" {len(y):,} samples; ITL p50 {physics.percentile(y.tolist(), 50):.2f} ms, "
           f"p99 {physics.percentile(y.tolist(), 99):.2f} ms."]
    if above.any():
        out.append(f" {int(above.sum())} samples above {SPIKE_MS:.0f} ms; the prefill behind them: "
                   f"{int(x[above].min()):,}-{int(x[above].max()):,} tokens. The largest ITL at or below "
                   f"{SPIKE_MS:.0f} ms: {y[~above].max():.2f} ms." if (~above).any() else "")
    else:
        out.append(f" No sample above {SPIKE_MS:.0f} ms.")
    out.append(" (data for the chart: the JSON twin's `chart`, one point per sample)")
    return "\n".join(out)


def request_log(inst) -> str:
    reqs, its = _log(inst)
    steps = inst.artifacts["steps"]  # the last iteration may be cut by the profiler: use the window
    window_s = (steps[-1]["end_us"] - steps[0]["start_us"]) / 1e6
    ttft = [r["ttft_ms"] for r in reqs if r["ttft_ms"] is not None]
    itl = itl_samples(inst)["itl_ms"].tolist()
    tpot = [float(np.mean(np.diff(r["token_times_ms"]))) for r in reqs if len(r["token_times_ms"]) > 1]
    gen = sum(len(r["token_times_ms"]) for r in reqs)
    inp = sum(r["prompt_tokens"] for r in reqs if r["ttft_ms"] is not None)

    def block(title, name, v):
        if not v:
            return [f"{title:-^50}", f"{'Mean ' + name + ' (ms):':<40} -"]
        return [f"{title:-^50}", f"{'Mean ' + name + ' (ms):':<40} {np.mean(v):.2f}",
                f"{'Median ' + name + ' (ms):':<40} {physics.percentile(v, 50):.2f}",
                f"{'P99 ' + name + ' (ms):':<40} {physics.percentile(v, 99):.2f}"]

    out = ["$ python benchmark_serving.py --save-result   # the profiled window of the running server", "",
           f"{' Serving Benchmark Result ':=^50}",
           f"{'Requests in window:':<40} {len(reqs)}",
           f"{'Requests admitted in window:':<40} {len(ttft)}",
           f"{'Profiled window (s):':<40} {window_s:.2f}",
           f"{'Total input tokens (admitted):':<40} {inp:,}",
           f"{'Total generated tokens:':<40} {gen:,}",
           f"{'Output token throughput (tok/s):':<40} {gen / window_s:.2f}"]
    out += block("Time to First Token", "TTFT", ttft)
    out += block("Time per Output Token (excl. 1st token)", "TPOT", tpot)
    out += block("Inter-token Latency", "ITL", itl)
    out += ["=" * 50, ""]
    rows = []
    for r in reqs:
        d = np.diff(r["token_times_ms"])
        rows.append([r["request_id"], f"{r['arrival_ms']:.1f}", f"{r['prompt_tokens']:,}", f"{len(r['token_times_ms'])}",
                     f"{r['ttft_ms']:.1f}" if r["ttft_ms"] is not None else "-",
                     f"{np.median(d):.2f}" if len(d) else "-", f"{d.max():.2f}" if len(d) else "-"])
    out.append(table(["Request", "Arrival (ms)", "Prompt tokens", "Tokens in window", "TTFT (ms)",
                      "ITL median (ms)", "ITL max (ms)"], rows, {0}))
    return "\n".join(out)


TOOLS = (
    Tool("request-log", "Serving: request log with TTFT, TPOT and ITL", "python benchmark_serving.py", request_log),
    Tool("itl-scatter", "Serving: ITL against prefill tokens per iteration", "python itl_scatter.py", itl_scatter,
         itl_chart),
)
