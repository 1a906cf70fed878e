"""Kineto (torch.profiler) JSON export of a columnar Trace.

Writes what a 2024+ torch.profiler writes (../shared/kineto-format.md): relative
timestamps `{us}.{ns:03}` against `baseTimeNanoseconds`, `X` events with Kineto's args,
`ac2g` flow pairs joined on correlation, `M` metadata naming processes, threads and
streams. Each event kind is formatted by one list comprehension over its columns, so
a million events format in about a second.
"""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path
from typing import IO

import numpy as np

from app.trace.builder import CBID, Kind, KernelInfo, Trace, launch_pairs

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


def _kernel_static(trace: Trace) -> dict[int, str]:
    """Per kernel name: the launch-config args torch.profiler records, pre-rendered."""
    props = (trace.top.get("deviceProperties") or [{}])[0]
    num_sms = props.get("numSms", 132)
    max_threads_per_sm = props.get("maxThreadsPerMultiprocessor", 2048)
    out = {}
    for nid, info in trace.kernel_info.items():
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
    n = len(trace)
    lines = np.empty(n, dtype=object)
    names = [json.dumps(s) for s in trace.names]
    cats = [json.dumps(c) for c in trace.cats]
    default_static = (
        '"registers per thread":32,"shared memory":0,"blocks per SM":1.0,"warps per SM":4.0,'
        '"grid":[1,1,1],"block":[128,1,1],"est. achieved occupancy %":0'
    )
    statics = _kernel_static(trace)
    for kind in Kind:
        idx = np.flatnonzero(trace.kind == kind)
        if len(idx) == 0:
            continue
        ts = _us(trace.ts_ns[idx])
        dur = _us(trace.dur_ns[idx])
        nm = trace.name[idx].tolist()
        ct = trace.cat[idx].tolist()
        pid = trace.pid[idx].tolist()
        tid = trace.tid[idx].tolist()
        ext = trace.ext[idx].tolist()
        extra = _extra_json(trace, trace.extra[idx])
        head = [
            f'{{"ph":"X","cat":{cats[c]},"name":{names[m]},"pid":{p},"tid":{t},"ts":{a},"dur":{d},'
            for c, m, p, t, a, d in zip(ct, nm, pid, tid, ts, dur)
        ]
        if kind in (Kind.CPU, Kind.GPU_ANNOTATION):
            body = [f'"args":{{"External id":{e}{x}}}}}' for e, x in zip(ext, extra)]
        elif kind == Kind.RUNTIME:
            cb = {nid: CBID.get(s, 0) for nid, s in enumerate(trace.names)}
            corr = trace.corr[idx].tolist()
            body = [f'"args":{{"External id":{e},"cbid":{cb[m]},"correlation":{c}{x}}}}}'
                    for e, m, c, x in zip(ext, nm, corr, extra)]
        elif kind == Kind.KERNEL:
            corr = trace.corr[idx].tolist()
            body = [
                f'"args":{{"External id":{e},"queued":0,"device":{p},"context":1,"stream":{t},'
                f'"correlation":{c},{statics.get(m, default_static)}{x}}}}}'
                for e, p, t, c, m, x in zip(ext, pid, tid, corr, nm, extra)
            ]
        else:  # MEMORY
            corr = trace.corr[idx].tolist()
            nb = trace.nbytes[idx]
            dur_s = np.maximum(trace.dur_ns[idx], 1) / 1e9
            bw = (nb / dur_s / 1e9).tolist()
            body = [
                f'"args":{{"External id":{e},"device":{p},"context":1,"stream":{t},"correlation":{c},'
                f'"bytes":{b},"memory bandwidth (GB/s)":{w!r}{x}}}}}'
                for e, p, t, c, b, w, x in zip(ext, pid, tid, corr, nb.tolist(), bw, extra)
            ]
        lines[idx] = [h + b for h, b in zip(head, body)]
    return lines.tolist()


def _flow_lines(trace: Trace) -> list[str]:
    li, gi = launch_pairs(trace)
    if len(li) == 0:
        return []
    corr = trace.corr[gi].tolist()
    s = [f'{{"ph":"s","id":{c},"pid":{p},"tid":{t},"ts":{a},"cat":"ac2g","name":"ac2g"}}'
         for c, p, t, a in zip(corr, trace.pid[li].tolist(), trace.tid[li].tolist(), _us(trace.ts_ns[li]))]
    f = [f'{{"ph":"f","id":{c},"pid":{p},"tid":{t},"ts":{a},"cat":"ac2g","name":"ac2g","bp":"e"}}'
         for c, p, t, a in zip(corr, trace.pid[gi].tolist(), trace.tid[gi].tolist(), _us(trace.ts_ns[gi]))]
    return [x for pair in zip(s, f) for x in pair]


def _meta_lines(trace: Trace, t0: str) -> list[str]:
    out = []
    for pid, name, label, sort in trace.processes:
        out.append(json.dumps({"name": "process_name", "ph": "M", "ts": 0, "pid": pid, "tid": 0,
                               "args": {"name": name}}, separators=(",", ":")).replace('"ts":0', f'"ts":{t0}'))
        out.append(json.dumps({"name": "process_labels", "ph": "M", "ts": 0, "pid": pid, "tid": 0,
                               "args": {"labels": label}}, separators=(",", ":")).replace('"ts":0', f'"ts":{t0}'))
        out.append(json.dumps({"name": "process_sort_index", "ph": "M", "ts": 0, "pid": pid, "tid": 0,
                               "args": {"sort_index": sort}}, separators=(",", ":")).replace('"ts":0', f'"ts":{t0}'))
    for pid, tid, name, sort in trace.threads:
        out.append(json.dumps({"name": "thread_name", "ph": "M", "ts": 0, "pid": pid, "tid": tid,
                               "args": {"name": name}}, separators=(",", ":")).replace('"ts":0', f'"ts":{t0}'))
        out.append(json.dumps({"name": "thread_sort_index", "ph": "M", "ts": 0, "pid": pid, "tid": tid,
                               "args": {"sort_index": sort}}, separators=(",", ":")).replace('"ts":0', f'"ts":{t0}'))
    return out


def _instant_lines(trace: Trace) -> list[str]:
    out = []
    for ev in trace.instants:
        ev = dict(ev)
        ts = ev.pop("ts")
        text = json.dumps(ev, separators=(",", ":"))
        out.append(text[:-1] + f',"ts":{_us(np.array([ts]))[0]}}}')
    return out


def write(trace: Trace, fh: IO[str], trace_name: str = "") -> None:
    """Stream the trace as Kineto JSON into a text file handle."""
    t0_ns = int(trace.ts_ns.min()) if len(trace) else 0
    t1_ns = int((trace.ts_ns + trace.dur_ns).max()) if len(trace) else 0
    t0 = _us(np.array([t0_ns]))[0]
    head = {"schemaVersion": 1}
    head.update(trace.top)
    fh.write(json.dumps(head, indent=2)[:-2] + ',\n  "traceEvents": [\n')
    span = (f'{{"ph":"X","cat":"Trace","ts":{t0},"dur":{_us(np.array([t1_ns - t0_ns]))[0]},'
            f'"pid":"Spans","tid":"PyTorch Profiler","name":"PyTorch Profiler (0)","args":{{"Op count":0}}}}')
    start = (f'{{"name":"Iteration Start: PyTorch Profiler","ph":"i","s":"g","pid":"Traces",'
             f'"tid":"Trace PyTorch Profiler","ts":{t0}}}')
    lines = _meta_lines(trace, t0) + _event_lines(trace) + _flow_lines(trace) + _instant_lines(trace)
    lines += [start, span]
    for i in range(0, len(lines), _CHUNK):
        chunk = lines[i:i + _CHUNK]
        fh.write("  " + ",\n  ".join(chunk))
        fh.write(",\n" if i + _CHUNK < len(lines) else "\n")
    tail = {"traceName": trace_name, "displayTimeUnit": "ms", "baseTimeNanoseconds": trace.base_time_ns}
    fh.write("  ],\n" + json.dumps(tail, indent=2)[2:] + "\n")


def dumps(trace: Trace, trace_name: str = "") -> str:
    buf = io.StringIO()
    write(trace, buf, trace_name)
    return buf.getvalue()


def save(trace: Trace, path: str | Path, trace_name: str = "") -> int:
    """Write to `path` (gzip when it ends in .gz, mtime 0 so bytes repeat); returns bytes written."""
    path = Path(path)
    text = dumps(trace, trace_name).encode()
    if path.suffix == ".gz":
        with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=3, mtime=0,
                                                     filename="") as gz:
            gz.write(text)
    else:
        path.write_bytes(text)
    return len(text)


__all__ = ["write", "dumps", "save", "KernelInfo"]
