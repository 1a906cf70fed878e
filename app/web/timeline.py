"""The timeline's data: one trace as compact columns for the browser's canvas.

Binary, little-endian: a uint32 header length, the header as UTF-8 JSON (string tables,
tracks, steps, column offsets), zero padding to 8 bytes, then each column as a typed
array. One row per slice, sorted by track then start, so the browser can binary-search a
track's visible range without building an object per slice. Flows are the correlation
id shared by a launch and its GPU op (column `corr`; 0 for none).

Two sources give the same columns: a generated instance (`from_trace`) and an uploaded
Kineto file in the importer's DuckDB (`from_import`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import numpy as np

from app.trace.builder import Kind, Trace, launch_pairs

NCCL = re.compile(r"^nccl", re.I)
TEXT_TID = 10**12  # codes from here up stand for non-numeric tids
RANK_STRIDE = 10**9  # stacked ranks: source id = rank * RANK_STRIDE + row


@dataclass
class Slices:
    """Neutral columns, one row per complete slice."""

    names: list[str]
    cats: list[str]
    name: np.ndarray  # int32 into names
    cat: np.ndarray  # uint8 into cats
    pid: np.ndarray  # int64 process code (sorts host processes before GPUs)
    tid: np.ndarray  # int64 thread id, or the stream on a GPU
    ts_ns: np.ndarray  # float64, relative to t0_ns
    dur_ns: np.ndarray  # float64
    corr: np.ndarray  # int32, nonzero only on a launch and the GPU op it launched
    gpu: np.ndarray  # bool: a GPU op (kernel, copy, set, GPU-side annotation)
    api: np.ndarray  # bool: a CUDA runtime/driver call
    t0_ns: int
    source: np.ndarray  # float64: the row's id in its source, for its args (see source_ref)
    process_label: dict[int, str] = field(default_factory=dict)
    thread_name: dict[tuple[int, int], str] = field(default_factory=dict)
    process_order: dict[int, tuple] = field(default_factory=dict)  # pid -> sort key; default host, then GPUs
    ranks: list[int] = field(default_factory=lambda: [0])  # the ranks drawn, in stacking order
    process_rank: dict[int, int] = field(default_factory=dict)  # stacked ranks: pid -> its rank


def from_trace(t: Trace) -> Slices:
    li, gi = launch_pairs(t)
    corr = np.zeros(len(t), np.int32)
    corr[li] = t.corr[li]
    corr[gi] = t.corr[gi]
    t0 = int(t.ts_ns.min()) if len(t) else 0
    gpu = (t.kind == Kind.KERNEL) | (t.kind == Kind.MEMORY) | (t.kind == Kind.GPU_ANNOTATION)
    return Slices(
        names=t.names, cats=t.cats, name=t.name.astype(np.int32), cat=t.cat.astype(np.uint8),
        pid=t.pid.astype(np.int64), tid=t.tid.astype(np.int64), ts_ns=(t.ts_ns - t0).astype(np.float64),
        dur_ns=t.dur_ns.astype(np.float64), corr=corr, gpu=gpu, api=t.kind == Kind.RUNTIME, t0_ns=t0,
        source=np.arange(len(t), dtype=np.float64),
        process_label={p: label for p, _, label, _ in t.processes},
        thread_name={(p, tid): name for p, tid, name, _ in t.threads})


GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation")


def from_import(tr) -> Slices:
    """An uploaded trace (app.trace.importer.ImportedTrace): its complete events. Strings
    stay in DuckDB: rows come back as dictionary ids, the dictionaries once."""
    con = tr.con
    con.execute(f"""
        CREATE OR REPLACE TEMP VIEW tl_rows AS
        SELECT coalesce(pid, '') AS pid, CASE WHEN cat IN {GPU_CATS} AND stream IS NOT NULL
                                              THEN CAST(stream AS VARCHAR) ELSE coalesce(tid, '') END AS tid,
               coalesce(cat, '') AS cat, coalesce(name, '') AS name, ts, dur, cat IN {GPU_CATS} AS gpu,
               cat IN ('cuda_runtime', 'cuda_driver') AS api, correlation, idx
        FROM events WHERE ph = 'X' AND ts IS NOT NULL AND dur IS NOT NULL""")
    names = [r[0] for r in con.execute("SELECT DISTINCT name FROM tl_rows ORDER BY name").fetchall()]
    cats = [r[0] for r in con.execute("SELECT DISTINCT cat FROM tl_rows ORDER BY cat").fetchall()]
    keys = con.execute("SELECT DISTINCT pid, tid, gpu, api FROM tl_rows ORDER BY ALL").fetchall()
    rows = con.execute("""
        SELECT dense_rank() OVER (ORDER BY name) - 1 AS name_id, dense_rank() OVER (ORDER BY cat) - 1 AS cat_id,
               dense_rank() OVER (ORDER BY pid, tid, gpu, api) - 1 AS key_id, ts, dur, correlation, idx
        FROM tl_rows ORDER BY ts""").fetchnumpy()
    # Processes: host ones first, then GPUs, each in numeric order where they are numbers.
    procs = sorted({(p, bool(g)) for p, _, g, _ in keys}, key=lambda pg: (pg[1], _num(pg[0])))
    code: dict[str, int] = {}
    for p, _ in procs:
        code.setdefault(p, len(code))
    tid_code: dict[str, int] = {}
    for i, (_, t, _, _) in enumerate(sorted(keys, key=lambda k: _num(k[1]))):
        n = _num(t)
        # text tids ("PyTorch Profiler") sort last, and so do numbers past TEXT_TID, which would
        # collide with their codes (or overflow int64)
        tid_code.setdefault(t, n[1] if n[0] == 0 and n[1] < TEXT_TID else TEXT_TID + i)
    key_pid = np.array([code[p] for p, _, _, _ in keys], np.int64)
    key_tid = np.array([tid_code[t] for _, t, _, _ in keys], np.int64)
    key_gpu = np.array([bool(g) for _, _, g, _ in keys])
    key_api = np.array([bool(a) for _, _, _, a in keys])
    k = rows["key_id"].astype(np.int64)
    gpu, api = key_gpu[k], key_api[k]
    ts = rows["ts"].astype(np.float64) * 1e3
    t0 = float(ts.min()) if len(ts) else 0.0
    # A tid that is no small thread number (Kineto writes a 64-bit system tid cut to int32,
    # so it can be negative, or text) is named as Perfetto names an anonymous thread: "thread
    # N", N small and stable (the order of such tids), unless thread_name metadata names it.
    odd = sorted({t for _, t, _, _ in keys if tid_code[t] >= TEXT_TID and _numeric(t)}, key=lambda t: tid_code[t])
    odd_n = {t: i + 1 for i, t in enumerate(odd)}
    thread_name = {(code[p], tid_code[t]): (f"thread {odd_n[t]}" if t in odd_n else t)
                   for p, t, _, _ in keys}
    plabel: dict[int, str] = {}
    pname: dict[int, str] = {}
    for kind, p, t, n, labels in con.execute("""
            SELECT name, pid, tid, args ->> 'name', args ->> 'labels' FROM events
            WHERE ph = 'M' AND name IN ('thread_name', 'process_name', 'process_labels')""").fetchall():
        if p not in code:
            continue
        if kind == "thread_name" and t in tid_code and n:
            thread_name[(code[p], tid_code[t])] = n
        elif kind == "process_labels" and labels:
            plabel[code[p]] = labels
        elif kind == "process_name" and n:
            pname[code[p]] = n
    labels = {code[p]: plabel.get(code[p]) or (f"GPU {p}" if g else f"{pname.get(code[p], 'process')} {p}")
              for p, g in procs}
    return Slices(names=names, cats=cats, name=rows["name_id"].astype(np.int32), cat=rows["cat_id"].astype(np.uint8),
                  pid=key_pid[k], tid=key_tid[k], ts_ns=ts - t0,
                  dur_ns=np.maximum(rows["dur"].astype(np.float64), 0) * 1e3,
                  corr=_paired(rows["correlation"], gpu, api), gpu=gpu, api=api, t0_ns=int(t0),
                  source=rows["idx"].astype(np.float64),  # events.idx
                  process_label=labels, thread_name=thread_name)


def memory_from_import(tr, shift_ns: int = 0) -> list[dict]:
    """Memory in use as counters, from the `[memory]` instant events torch.profiler writes with
    profile_memory=True (args "Total Allocated" in bytes after each allocation or free, "Device
    Id" -1 for the CPU): one counter per device, in MiB, ts on the file's clock (+ `shift_ns`)."""
    rows = tr.con.execute("""
        SELECT TRY_CAST(args ->> 'Device Id' AS BIGINT) AS dev, ts, TRY_CAST(args ->> 'Total Allocated' AS DOUBLE) AS b
        FROM events WHERE name = '[memory]' AND ts IS NOT NULL AND isfinite(ts)
              AND TRY_CAST(args ->> 'Total Allocated' AS DOUBLE) IS NOT NULL
        ORDER BY dev, ts, idx""").fetchall()
    out: dict[int, dict] = {}
    for dev, ts, b in rows:
        dev = -1 if dev is None else int(dev)
        c = out.setdefault(dev, {"name": "memory allocated · " + ("CPU" if dev < 0 else f"GPU {dev}"), "unit": "MiB",
                                 "ts_ns": [], "values": []})
        c["ts_ns"].append(float(ts) * 1e3 + shift_ns)
        c["values"].append(b / 2**20)
    return [out[d] for d in sorted(out, key=lambda d: (d < 0, d))]  # GPUs first


def stack(ranks: list[Slices], rank_ids: list[int] | None = None) -> Slices:
    """Several ranks' slices on one clock, each rank's processes labelled and ordered
    "rank R · host" then "rank R · GPU", rank by rank (the straggler view). R is the rank's
    position unless `rank_ids` names them (an upload of ranks 4-7)."""
    names: dict[str, int] = {}
    cats: dict[str, int] = {}
    parts, labels, order, thread_name, process_rank = [], {}, {}, {}, {}
    ids = list(rank_ids) if rank_ids else list(range(len(ranks)))
    t0 = min(r.t0_ns for r in ranks)
    for k, r in enumerate(ranks):
        name_map = np.array([names.setdefault(n, len(names)) for n in r.names], np.int32)
        cat_map = np.array([cats.setdefault(c, len(cats)) for c in r.cats], np.uint8)
        pids = np.unique(r.pid)
        base = k * 10_000
        remap = {int(p): base + i for i, p in enumerate(pids)}
        for p, code in remap.items():
            on_gpu = bool(r.gpu[r.pid == p].any())
            labels[code] = f"rank {ids[k]} · " + (r.process_label.get(p, f"GPU {p}") if on_gpu else "host")
            order[code] = (k, on_gpu, code)
            process_rank[code] = ids[k]
        pid = base + np.searchsorted(pids, r.pid).astype(np.int64)
        parts.append((r, name_map[r.name], cat_map[r.cat], pid, r.ts_ns + (r.t0_ns - t0), r.source + k * RANK_STRIDE))
        thread_name.update({(remap[p], t): n for (p, t), n in r.thread_name.items() if p in remap})

    def cat(i):
        return np.concatenate([x[i] for x in parts])

    return Slices(names=list(names), cats=list(cats), name=cat(1), cat=cat(2), pid=cat(3),
                  tid=np.concatenate([x[0].tid for x in parts]), ts_ns=cat(4),
                  dur_ns=np.concatenate([x[0].dur_ns for x in parts]),
                  corr=np.concatenate([x[0].corr for x in parts]),
                  gpu=np.concatenate([x[0].gpu for x in parts]), api=np.concatenate([x[0].api for x in parts]),
                  t0_ns=t0, source=cat(5), process_label=labels, thread_name=thread_name, process_order=order,
                  ranks=ids, process_rank=process_rank)


def source_ref(src: float) -> tuple[int, int]:
    """A stacked row's (rank, row in that rank's trace); a single rank's rows are rank 0."""
    rank, row = divmod(int(src), RANK_STRIDE)
    return rank, row


def _num(s: str) -> tuple[int, int | str]:
    """Sort key: numbers by value, then text ("stream 7" in legacy files keeps its number)."""
    m = re.fullmatch(r"(?:stream )?(\d+)", s)
    return (0, int(m.group(1))) if m else (1, s)


def _numeric(s: str) -> bool:
    """A tid written as a number, however large or negative (not a name like "PyTorch Profiler")."""
    return re.fullmatch(r"-?\d+", s.strip()) is not None


def _paired(corr, gpu: np.ndarray, api: np.ndarray) -> np.ndarray:
    """Correlation ids kept only where one launch and one GPU op share them."""
    c = np.asarray(corr, dtype=float)
    c = np.where(np.isnan(c), 0, c).astype(np.int64)
    out = np.zeros(len(c), np.int32)
    if not len(c):
        return out
    lk, gk = set(c[api & (c > 0)].tolist()), set(c[gpu & (c > 0)].tolist())
    both = np.array(sorted(lk & gk), np.int64)
    keep = (api | gpu) & np.isin(c, both)
    out[keep] = c[keep]
    return out


def _stream_roles(s: Slices) -> dict[tuple[int, int], str]:
    """Each GPU stream's role as people name it: compute (most non-NCCL kernel time on
    its GPU), NCCL, copies, or plain kernels."""
    roles: dict[tuple[int, int], str] = {}
    kernel_cat = s.cats.index("kernel") if "kernel" in s.cats else -1
    is_nccl = np.array([bool(NCCL.match(n)) for n in s.names])[s.name] if len(s.name) else np.empty(0, bool)
    compute_time: dict[tuple[int, int], float] = {}
    for pid, tid in sorted(set(zip(s.pid[s.gpu].tolist(), s.tid[s.gpu].tolist()))):
        m = s.gpu & (s.pid == pid) & (s.tid == tid)
        kern = m & (s.cat == kernel_cat)
        if not kern.any():
            roles[(pid, tid)] = "copies" if m.any() else "kernels"
        elif is_nccl[kern].mean() > 0.5:
            roles[(pid, tid)] = "NCCL"
        else:
            compute_time[(pid, tid)] = float(s.dur_ns[kern & ~is_nccl].sum())
            roles[(pid, tid)] = "kernels"
    best: dict[int, tuple[int, int]] = {}
    for key, v in compute_time.items():
        if key[0] not in best or v > compute_time[best[key[0]]]:
            best[key[0]] = key
    for key in best.values():
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
    if tid >= TEXT_TID:  # a text tid ("PyTorch Profiler"), or "thread N" for an odd number, is its own name
        return {"pt_main_thread": "main thread"}.get(n, n)
    if n == str(tid) or not n:
        return f"thread {tid}"
    return {"pt_main_thread": "main thread"}.get(n, n) + f" · {tid}"


def _row_codes(s: Slices) -> tuple[np.ndarray, np.ndarray]:
    """Each row's (pid, tid, is CUDA API) as one int64, and one row index per distinct code.
    (np.unique over int64 is fast; over row triples it sorts structured rows, 40x slower.)"""
    _, pid_i = np.unique(s.pid, return_inverse=True)
    tids, tid_i = np.unique(s.tid, return_inverse=True)
    code = (pid_i.astype(np.int64) * len(tids) + tid_i) * 2 + s.api
    _, rows = np.unique(code, return_index=True)
    return code, rows


def tracks(s: Slices) -> tuple[list[dict], np.ndarray]:
    """Tracks in display order and each row's track index. Host threads first (the main
    thread first), each thread's CUDA API calls on their own row beneath it, then each GPU
    with its compute stream first, NCCL next, copies last."""
    roles = _stream_roles(s)
    code, rows = _row_codes(s)
    keys = {(int(s.pid[i]), int(s.tid[i]), bool(s.api[i])): bool(s.gpu[i]) for i in rows}

    def order(k):
        pid, tid, api = k
        proc = s.process_order.get(pid, (keys[k], pid))
        if keys[k]:
            role = {"compute": 0, "kernels": 1, "NCCL": 2, "copies": 3}.get(roles.get((pid, tid), ""), 4)
            return (proc, role, tid, api)
        name = s.thread_name.get((pid, tid), "")
        rank = 0 if "main" in name else 1 if "autograd" in name else 3 if "data_worker" in name else 2
        return (proc, rank, tid, api)

    out: list[dict] = []
    index: dict[tuple, int] = {}
    for k in sorted(keys, key=order):
        pid, tid, api = k
        gpu = keys[k]
        if gpu:
            label = f"stream {tid} · {roles.get((pid, tid), 'kernels')}"
            group = s.process_label.get(pid, f"GPU {pid}")
        else:
            label = _thread_label(s.thread_name.get((pid, tid), f"thread {tid}"), tid)
            if api:
                label = f"CUDA API · {label.split(' · ')[0]}"
            group = s.process_label.get(pid, "process")
            group = "Host process" if group == "CPU" else group if group.startswith("rank ") else f"Host: {group}"
        index[k] = len(out)
        track = {"id": len(out), "group": group, "label": label, "gpu": gpu,
                 "role": roles.get((pid, tid)) if gpu else ("api" if api else "thread")}
        if pid in s.process_rank:  # stacked: the row says its rank even with its group folded or scrolled away
            track["rank"] = s.process_rank[pid]
            track["label"] = f"rank {track['rank']} · {label}"
        out.append(track)
    uniq, inverse = np.unique(code, return_inverse=True)
    first = np.zeros(len(uniq), np.int64)
    first[inverse[::-1]] = np.arange(len(code))[::-1]  # a row of each code, to read its key
    lookup = np.array([index[(int(s.pid[i]), int(s.tid[i]), bool(s.api[i]))] for i in first], np.int32)
    return out, lookup[inverse]


def encode(s: Slices, title: str, steps_ns: list[tuple[float, float]] | None = None,
           counters: list[dict] | None = None) -> bytes:
    """The binary the viewer decodes (static/timeline/data.js). `steps_ns` are absolute, and so
    are the `ts_ns` of `counters` ({name, unit, ts_ns, values}: a step chart, each value holding
    until the next sample), which ride in the header: a few hundred samples, not columns."""
    track_list, track = tracks(s)
    order = np.lexsort((-s.dur_ns, s.ts_ns, track))
    cols = {
        "ts": s.ts_ns[order], "dur": s.dur_ns[order], "name": s.name[order], "track": track[order],
        "corr": s.corr[order], "cat": s.cat[order],
        "src": s.source[order],  # the row in its source, for a slice's args
    }
    header = {"title": title, "t0_ns": s.t0_ns, "count": int(len(s.ts_ns)), "ranks": list(s.ranks),
              "names": list(s.names),
              "cats": list(s.cats), "tracks": track_list,
              "steps": [{"start_ns": a - s.t0_ns, "end_ns": b - s.t0_ns} for a, b in (steps_ns or [])],
              # stacked ranks open with their host threads folded: the GPUs are the comparison
              "collapsed": sorted({t["group"] for t in track_list if t["group"].startswith("rank ")
                                   and t["group"].endswith("· host")}
                                  # many counters (every rank's) would push the GPUs off the screen
                                  | ({"Counters"} if len(counters or []) > 4 else set())),
              "counters": [{"name": c["name"], "unit": c["unit"], "ts_ns": [float(t) - s.t0_ns for t in c["ts_ns"]],
                            "values": [float(v) for v in c["values"]]} for c in (counters or [])],
              "columns": []}
    offset = 0
    for name, a in cols.items():
        header["columns"].append({"name": name, "dtype": a.dtype.name, "offset": offset, "length": int(len(a))})
        offset += a.nbytes + (-a.nbytes) % 8
    head = json.dumps(header, separators=(",", ":")).encode()
    parts = [len(head).to_bytes(4, "little"), head, b"\0" * ((-(4 + len(head))) % 8)]
    for a in cols.values():
        b = np.ascontiguousarray(a, a.dtype.newbyteorder("<")).tobytes()
        parts += [b, b"\0" * ((-len(b)) % 8)]
    return b"".join(parts)
