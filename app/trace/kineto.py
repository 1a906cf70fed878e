"""Kineto (torch.profiler) JSON export of a columnar Trace.

Writes what a 2024+ torch.profiler writes (../shared/kineto-format.md): relative
timestamps `{us}.{ns:03}` against `baseTimeNanoseconds`, `X` events with Kineto's args,
`ac2g` flow pairs joined on correlation, `M` metadata naming processes, threads and
streams. Each event kind is formatted by one list comprehension over its columns, so
a million events format in about two seconds (python -m bench generate).
"""

from __future__ import annotations

import dataclasses
import gc
import gzip
import json
from pathlib import Path
from typing import IO

import numpy as np

from app.trace.builder import CBID, Kind, Trace, launch_pairs

_CHUNK = 200_000


def _us(values: np.ndarray) -> list[str]:
    """Integer ns -> Kineto's `{us}.{ns:03}` text."""
    whole, frac = np.divmod(values, 1000)
    return [f"{w}.{f:03d}" for w, f in zip(whole.tolist(), frac.tolist())]


def _extra_json(trace: Trace, idx: np.ndarray) -> list[str]:
    """`,"k":v...` fragments for events that carry extra args ("" for none)."""
    out = [""] * len(idx)
    for i, e in enumerate(idx.tolist()):
        if e >= 0:
            body = json.dumps(trace.extras[e], separators=(",", ":"))[1:-1]
            out[i] = "," + body if body else ""
    return out


def _kernel_static(trace: Trace, infos=None) -> dict[int, str]:
    """Per kernel name (or per launch configuration, given `infos`): the launch-config args
    torch.profiler records, pre-rendered."""
    props = (trace.top.get("deviceProperties") or [{}])[0]
    num_sms = props.get("numSms", 132)
    max_threads_per_sm = props.get("maxThreadsPerMultiprocessor", 2048)
    out = {}
    for nid, info in (trace.kernel_info if infos is None else infos).items():
        blocks = info.grid[0] * info.grid[1] * info.grid[2]
        threads = info.block[0] * info.block[1] * info.block[2]
        blocks_per_sm = blocks / num_sms
        warps_per_sm = blocks_per_sm * threads / 32
        # Kineto's estimate: resident warps over the SM's limit, capped at 100.
        occupancy = int(min(100, warps_per_sm * 32 / max_threads_per_sm * 100))
        out[nid] = (
            f'"registers per thread":{info.registers_per_thread},"shared memory":{info.shared_memory},'
            f'"blocks per SM":{blocks_per_sm:.6f},"warps per SM":{warps_per_sm:.6f},'
            f'"grid":[{info.grid[0]},{info.grid[1]},{info.grid[2]}],'
            f'"block":[{info.block[0]},{info.block[1]},{info.block[2]}],'
            f'"est. achieved occupancy %":{occupancy}'
        )
    return out


def _event_lines(trace: Trace) -> list[str]:
    """One JSON text per X event, in the trace's (time) order.

    Each kind is one comprehension that writes the whole line, with ts/dur split into
    whole µs and ns remainder up front: the fastest pure-Python formatting found (about
    1 µs per event), since a million events must export in a few seconds.
    """
    n = len(trace)
    lines = np.empty(n, dtype=object)
    names = [json.dumps(s) for s in trace.names]
    cats = [json.dumps(c) for c in trace.cats]
    default_static = (
        '"registers per thread":32,"shared memory":0,"blocks per SM":1.0,"warps per SM":4.0,'
        '"grid":[1,1,1],"block":[128,1,1],"est. achieved occupancy %":0'
    )
    statics = _kernel_static(trace)
    cb = {nid: CBID.get(s, 0) for nid, s in enumerate(trace.names)}
    for kind in Kind:
        idx = np.flatnonzero(trace.kind == kind)
        if len(idx) == 0:
            continue
        tw, tf = (a.tolist() for a in np.divmod(trace.ts_ns[idx], 1000))
        dw, df = (a.tolist() for a in np.divmod(trace.dur_ns[idx], 1000))
        cn = [cats[c] + ',"name":' + names[m] for c, m in zip(trace.cat[idx].tolist(), trace.name[idx].tolist())]
        nm = trace.name[idx].tolist()
        pid = trace.pid[idx].tolist()
        tid = trace.tid[idx].tolist()
        ext = trace.ext[idx].tolist()
        corr = trace.corr[idx].tolist()
        extra = _extra_json(trace, trace.extra[idx])
        if kind == Kind.CPU and trace.rf_id is not None:  # numbered as the profiler numbers them
            off = trace.ev_idx_offset - 1
            extra = [f',"Record function id":{r},"Ev Idx":{r + off}{x}' for r, x in zip(trace.rf_id[idx].tolist(), extra)]
        cols = zip(cn, pid, tid, tw, tf, dw, df, ext, corr, nm, extra)
        if kind in (Kind.CPU, Kind.GPU_ANNOTATION):
            out = [f'{{"ph":"X","cat":{c},"pid":{p},"tid":{t},"ts":{a}.{af:03d},"dur":{d}.{dfr:03d},'
                   f'"args":{{"External id":{e}{x}}}}}'
                   for c, p, t, a, af, d, dfr, e, _, _, x in cols]
        elif kind == Kind.RUNTIME:
            out = [f'{{"ph":"X","cat":{c},"pid":{p},"tid":{t},"ts":{a}.{af:03d},"dur":{d}.{dfr:03d},'
                   f'"args":{{"External id":{e},"cbid":{cb[m]},"correlation":{k}{x}}}}}'
                   for c, p, t, a, af, d, dfr, e, k, m, x in cols]
        elif kind == Kind.KERNEL:
            if trace.cfg is not None:  # each launch's own configuration where it has one
                own = _kernel_static(trace, dict(enumerate(trace.configs)))
                conf = [own[g] if g >= 0 else statics.get(m, default_static)
                        for g, m in zip(trace.cfg[idx].tolist(), nm)]
            else:
                conf = [statics.get(m, default_static) for m in nm]
            out = [f'{{"ph":"X","cat":{c},"pid":{p},"tid":{t},"ts":{a}.{af:03d},"dur":{d}.{dfr:03d},'
                   f'"args":{{"External id":{e},"queued":0,"device":{p},"context":1,"stream":{t},'
                   f'"correlation":{k},{g}{x}}}}}'
                   for (c, p, t, a, af, d, dfr, e, k, m, x), g in zip(cols, conf)]
        else:  # MEMORY
            nb = trace.nbytes[idx]
            bw = (nb / (np.maximum(trace.dur_ns[idx], 1) / 1e9) / 1e9).tolist()
            out = [f'{{"ph":"X","cat":{c},"pid":{p},"tid":{t},"ts":{a}.{af:03d},"dur":{d}.{dfr:03d},'
                   f'"args":{{"External id":{e},"device":{p},"context":1,"stream":{t},"correlation":{k},'
                   f'"bytes":{b},"memory bandwidth (GB/s)":{w!r}{x}}}}}'
                   for (c, p, t, a, af, d, dfr, e, k, _, x), b, w in zip(cols, nb.tolist(), bw)]
        lines[idx] = out
    return lines.tolist()


ROW_FIELDS = ("kind", "cat", "name", "pid", "tid", "ts_ns", "dur_ns", "ext", "corr", "nbytes", "extra")


def event(trace: Trace, i: int) -> dict:
    """Row i exactly as the export writes it (its args included), for a slice's details."""
    one = dataclasses.replace(trace, **{f: getattr(trace, f)[i:i + 1] for f in ROW_FIELDS},
                              rf_id=None if trace.rf_id is None else trace.rf_id[i:i + 1],
                              cfg=None if trace.cfg is None else trace.cfg[i:i + 1])
    return json.loads(_event_lines(one)[0])


def _flow_lines(trace: Trace) -> list[str]:
    li, gi = launch_pairs(trace)
    if len(li) == 0:
        return []
    corr = trace.corr[gi].tolist()
    s = [f'{{"ph":"s","id":{c},"pid":{p},"tid":{t},"ts":{a},"cat":"ac2g","name":"ac2g"}}'
         for c, p, t, a in zip(corr, trace.pid[li].tolist(), trace.tid[li].tolist(), _us(trace.ts_ns[li]))]
    f = [f'{{"ph":"f","id":{c},"pid":{p},"tid":{t},"ts":{a},"cat":"ac2g","name":"ac2g","bp":"e"}}'
         for c, p, t, a in zip(corr, trace.pid[gi].tolist(), trace.tid[gi].tolist(), _us(trace.ts_ns[gi]))]
    # a launch with several GPU ops (a CUDA graph's kernels) starts its flow once
    started = set()
    out = []
    for c, a, b in zip(corr, s, f):
        if c not in started:
            out.append(a)
            started.add(c)
        out.append(b)
    return out


def _meta_lines(trace: Trace, t0: str) -> list[str]:
    """Process and thread naming (`M` events), stamped at the trace's first timestamp."""
    def meta(kind: str, pid, tid, args: dict) -> str:
        return (f'{{"name":"{kind}","ph":"M","ts":{t0},"pid":{json.dumps(pid)},"tid":{json.dumps(tid)},'
                f'"args":{json.dumps(args, separators=(",", ":"))}}}')

    out = []
    for pid, name, label, sort in trace.processes:
        out += [meta("process_name", pid, 0, {"name": name}), meta("process_labels", pid, 0, {"labels": label}),
                meta("process_sort_index", pid, 0, {"sort_index": sort})]
    for pid, tid, name, sort in trace.threads:
        out += [meta("thread_name", pid, tid, {"name": name}), meta("thread_sort_index", pid, tid, {"sort_index": sort})]
    return out


def _instant_lines(trace: Trace) -> list[str]:
    out = []
    for ev in trace.instants:
        ev = dict(ev)
        ts = ev.pop("ts")
        text = json.dumps(ev, separators=(",", ":"))
        out.append(text[:-1] + f',"ts":{_us(np.array([ts]))[0]}}}')
    return out


def parts(trace: Trace, trace_name: str = ""):
    """The export as a sequence of text chunks (a few MB each), in file order."""
    t0_ns = int(trace.ts_ns.min()) if len(trace) else 0
    t1_ns = int((trace.ts_ns + trace.dur_ns).max()) if len(trace) else 0
    t0 = _us(np.array([t0_ns]))[0]
    head = {"schemaVersion": 1}
    head.update(trace.top)
    yield json.dumps(head, indent=2)[:-2] + ',\n  "traceEvents": [\n'
    span = (f'{{"ph":"X","cat":"Trace","ts":{t0},"dur":{_us(np.array([t1_ns - t0_ns]))[0]},'
            f'"pid":"Spans","tid":"PyTorch Profiler","name":"PyTorch Profiler (0)","args":{{"Op count":0}}}}')
    start = (f'{{"name":"Iteration Start: PyTorch Profiler","ph":"i","s":"g","pid":"Traces",'
             f'"tid":"Trace PyTorch Profiler","ts":{t0}}}')
    gc_was_on = gc.isenabled()
    gc.disable()  # millions of short-lived strings: the cyclic collector only costs time here
    try:
        lines = _meta_lines(trace, t0)
        lines += _event_lines(trace)
        lines += _flow_lines(trace)
        lines += _instant_lines(trace)
        lines += [start, span]
        for i in range(0, len(lines), _CHUNK):
            last = i + _CHUNK >= len(lines)
            yield "  " + ",\n  ".join(lines[i:i + _CHUNK]) + ("\n" if last else ",\n")
    finally:
        if gc_was_on:
            gc.enable()
    tail = {"traceName": trace_name, "displayTimeUnit": "ms", "baseTimeNanoseconds": trace.base_time_ns}
    yield "  ],\n" + json.dumps(tail, indent=2)[2:] + "\n"


def write(trace: Trace, fh: IO[str], trace_name: str = "") -> None:
    """Stream the trace as Kineto JSON into a text file handle."""
    for part in parts(trace, trace_name):
        fh.write(part)


def dumps(trace: Trace, trace_name: str = "") -> str:
    return "".join(parts(trace, trace_name))


def save(trace: Trace, path: str | Path, trace_name: str = "") -> int:
    """Write to `path` (gzip when it ends in .gz, mtime 0 so bytes repeat); returns bytes written."""
    path = Path(path)
    written = 0
    with open(path, "wb") as raw:
        out = gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=3, mtime=0, filename="") \
            if path.suffix == ".gz" else raw
        for part in parts(trace, trace_name):
            data = part.encode()
            out.write(data)
            written += len(data)
        if out is not raw:
            out.close()
    return written


__all__ = ["parts", "write", "dumps", "save"]
