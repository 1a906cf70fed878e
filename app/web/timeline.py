"""The timeline's data: one trace as compact columns for the browser's canvas.

Binary, little-endian: a uint32 header length, the header as UTF-8 JSON (string tables,
tracks, column offsets), zero padding to 8 bytes, then each column as a typed array.
One row per slice, sorted by track then start, so the browser can binary-search a track's
visible range without building an object per slice. Flows are the shared correlation id
of a launch and its kernel (column `corr`; 0 for none).
"""

from __future__ import annotations

import json
import re

import numpy as np

from app.trace.builder import Kind, Trace, launch_pairs

NCCL = re.compile(r"^nccl", re.I)


def _stream_roles(t: Trace) -> dict[tuple[int, int], str]:
    """Each GPU stream's role as people name it: compute (most non-NCCL kernel time),
    NCCL, copies, or plain."""
    roles: dict[tuple[int, int], str] = {}
    gpu = (t.kind == Kind.KERNEL) | (t.kind == Kind.MEMORY)
    keys = sorted(set(zip(t.pid[gpu].tolist(), t.tid[gpu].tolist())))
    nccl_ids = np.array([bool(NCCL.match(n)) for n in t.names])
    compute_time: dict[tuple[int, int], float] = {}
    for pid, tid in keys:
        m = gpu & (t.pid == pid) & (t.tid == tid)
        kern = m & (t.kind == Kind.KERNEL)
        is_nccl = nccl_ids[t.name[kern]] if kern.any() else np.empty(0, bool)
        if kern.any() and is_nccl.mean() > 0.5:
            roles[(pid, tid)] = "NCCL"
        elif not kern.any():
            roles[(pid, tid)] = "copies"
        else:
            compute_time[(pid, tid)] = float(t.dur_ns[kern][~is_nccl].sum())
            roles[(pid, tid)] = "kernels"
    by_gpu: dict[int, tuple[int, int]] = {}
    for key, v in compute_time.items():
        if key[0] not in by_gpu or v > compute_time[by_gpu[key[0]]]:
            by_gpu[key[0]] = key
    for key in by_gpu.values():
        roles[key] = "compute"
    return roles


def _thread_label(name: str, tid: int) -> str:
    """Thread names as a trace reader says them: main thread, autograd, dataloader worker N."""
    inner = re.search(r"\((.*)\)", name)
    n = inner.group(1) if inner else name
    m = re.match(r"pt_data_worker_(\d+)", n)
    if m:
        return f"dataloader worker {m.group(1)}"
    if re.match(r"pt_autograd_\d+$", n):
        return f"autograd (backward) · {tid}"
    return {"pt_main_thread": "main thread"}.get(n, n) + f" · {tid}"


def _row_codes(t: Trace) -> tuple[np.ndarray, np.ndarray]:
    """Each row's (pid, tid, is CUDA API) as one int64, and one row index per distinct code.
    (np.unique over int64 is fast; over row triples it sorts structured rows, 40x slower.)"""
    _, pid_i = np.unique(t.pid, return_inverse=True)
    tids, tid_i = np.unique(t.tid, return_inverse=True)
    code = (pid_i.astype(np.int64) * len(tids) + tid_i) * 2 + (t.kind == Kind.RUNTIME)
    _, rows = np.unique(code, return_index=True)
    return code, rows


def tracks(t: Trace) -> tuple[list[dict], np.ndarray]:
    """Tracks in display order and each row's track index. CPU threads first (the main
    thread first), each thread's CUDA API calls on their own row beneath it, then each
    GPU with its compute stream first."""
    roles = _stream_roles(t)
    proc = {p[0]: p for p in t.processes}
    thread_name = {(p, tid): name for p, tid, name, _ in t.threads}
    code, rows = _row_codes(t)
    keys = sorted({(int(t.pid[i]), int(t.tid[i]), bool(t.kind[i] == Kind.RUNTIME)) for i in rows})
    out: list[dict] = []

    def order(k):
        pid, tid, api = k
        is_gpu = any((pid, tid) == r for r in roles) or not (proc.get(pid, (0, "", "CPU"))[2] or "").startswith("CPU")
        if is_gpu:
            role = roles.get((pid, tid), "")
            return (1, pid, {"compute": 0, "kernels": 1, "NCCL": 2, "copies": 3}.get(role, 4), tid, api)
        name = thread_name.get((pid, tid), "")
        rank = 0 if "main" in name else 1 if "autograd" in name else 3 if "data_worker" in name else 2
        return (0, pid, rank, tid, api)

    index: dict[tuple, int] = {}
    for k in sorted(keys, key=order):
        pid, tid, api = k
        gpu = order(k)[0] == 1
        if gpu:
            role = roles.get((pid, tid), "kernels")
            label = f"stream {tid} · {role}"
            group = f"GPU {pid}"
        else:
            label = _thread_label(thread_name.get((pid, tid), f"thread {tid}"), tid)
            if api:
                label = f"CUDA API · {label.split(' · ')[0]}"
            group = f"Host process {pid}"
        index[k] = len(out)
        out.append({"id": len(out), "group": group, "label": label, "pid": int(pid), "tid": int(tid),
                    "gpu": gpu, "role": roles.get((pid, tid)) if gpu else ("api" if api else "thread")})
    uniq, inverse = np.unique(code, return_inverse=True)
    first = np.zeros(len(uniq), np.int64)
    first[inverse[::-1]] = np.arange(len(code))[::-1]  # a row of each code, to read its triple
    lookup = np.array([index[(int(t.pid[i]), int(t.tid[i]), bool(t.kind[i] == Kind.RUNTIME))] for i in first], np.int32)
    return out, lookup[inverse]


def encode(t: Trace, title: str, steps_us: list[dict] | None = None) -> bytes:
    """The binary the viewer decodes (static/timeline/data.js)."""
    track_list, track = tracks(t)
    order = np.lexsort((-t.dur_ns, t.ts_ns, track))
    t0 = int(t.ts_ns.min()) if len(t) else 0
    # Only launches and GPU ops that pair up carry a flow id.
    li, gi = launch_pairs(t)
    corr = np.zeros(len(t), np.int32)
    corr[li] = t.corr[li]
    corr[gi] = t.corr[gi]
    cols = {
        "ts": (t.ts_ns[order] - t0).astype(np.float64),
        "dur": t.dur_ns[order].astype(np.float64),
        "name": t.name[order].astype(np.int32),
        "track": track[order],
        "corr": corr[order],
        "cat": t.cat[order].astype(np.uint8),
    }
    header = {"title": title, "t0_ns": t0, "count": int(len(t)), "names": t.names, "cats": t.cats,
              "tracks": track_list, "steps": [{"start_ns": int(s["start_us"] * 1e3) - t0,
                                               "end_ns": int(s["end_us"] * 1e3) - t0} for s in (steps_us or [])],
              "columns": []}
    offset = 0
    for name, a in cols.items():
        header["columns"].append({"name": name, "dtype": a.dtype.name, "offset": offset, "length": int(len(a))})
        offset += a.nbytes
        offset += (-offset) % 8
    head = json.dumps(header, separators=(",", ":")).encode()
    start = 4 + len(head)
    pad = (-start) % 8
    parts = [len(head).to_bytes(4, "little"), head, b"\0" * pad]
    for a in cols.values():
        b = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        parts.append(b)
        parts.append(b"\0" * ((-len(b)) % 8))
    return b"".join(parts)
