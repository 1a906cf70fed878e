"""`nsys stats` reports over an instance's trace (rank 0 for multi-rank instances, the
trace the brief hands over): cuda_gpu_kern_sum, cuda_api_sum, nvtx_sum and the two
memory-operation summaries. Columns as ../shared/tool-formats.md lists them; rows by
total time, descending; Time (%) is a share of the rows listed."""

from __future__ import annotations

import numpy as np

from app.tools.base import Tool, ToolNotApplicable, ns, ns1, table
from app.trace.builder import Kind

_MEM_OPS = {"HtoD": "[CUDA memcpy Host-to-Device]", "DtoH": "[CUDA memcpy Device-to-Host]",
            "DtoD": "[CUDA memcpy Device-to-Device]"}


def _summary(names: list[str], name_ids: np.ndarray, dur_ns: np.ndarray) -> list[dict]:
    """Per name: total, instances, avg, median, min, max, sample stddev (ns)."""
    ids, inverse = np.unique(name_ids, return_inverse=True)
    out = []
    for k, nid in enumerate(ids):
        d = dur_ns[inverse == k].astype(float)
        out.append({"name": names[nid], "total": d.sum(), "n": len(d), "avg": d.mean(), "med": float(np.median(d)),
                    "min": d.min(), "max": d.max(), "std": float(d.std(ddof=1)) if len(d) > 1 else 0.0})
    out.sort(key=lambda r: -r["total"])
    total = sum(r["total"] for r in out) or 1.0
    for r in out:
        r["pct"] = 100 * r["total"] / total
    return out


def _rows(summary: list[dict], limit: int) -> list[list]:
    return [[f"{r['pct']:.1f}", ns(r["total"]), f"{r['n']:,}", ns1(r["avg"]), ns1(r["med"]), ns(r["min"]),
             ns(r["max"]), ns1(r["std"]), r["name"]] for r in summary[:limit]]


def _header(inst, report: str, title: str) -> str:
    rank = f", rank 0 of {inst.ranks}" if inst.ranks > 1 else ""
    return (f"$ nsys stats --report {report} report.nsys-rep   # {inst.trace_name(0)}{rank}\n\n"
            f" ** {title} ({report}):\n\n")


def _time_sum(inst, kind: Kind, report: str, title: str, count: str, limit: int) -> str:
    """cuda_gpu_kern_sum and cuda_api_sum: the same table over kernels or API calls."""
    t = inst.trace(0)
    m = t.kind == kind
    s = _summary(t.names, t.name[m], t.dur_ns[m])
    head = ["Time (%)", "Total Time (ns)", count, "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)", "StdDev (ns)", "Name"]
    more = f"\n ({len(s) - limit} more rows)" if len(s) > limit else ""
    return _header(inst, report, title) + table(head, _rows(s, limit), {8}) + more


def kern_sum(inst, limit: int = 20) -> str:
    return _time_sum(inst, Kind.KERNEL, "cuda_gpu_kern_sum", "CUDA GPU Kernel Summary", "Instances", limit)


def api_sum(inst, limit: int = 20) -> str:
    return _time_sum(inst, Kind.RUNTIME, "cuda_api_sum", "CUDA API Summary", "Num Calls", limit)


def nvtx_sum(inst, limit: int = 20) -> str:
    t = inst.trace(0)
    m = (t.kind == Kind.CPU) & (t.cat == t.cats.index("user_annotation")) if "user_annotation" in t.cats else None
    if m is None or not m.any():
        raise ToolNotApplicable("this trace has no annotation ranges (record_function / NVTX) to summarize")
    s = _summary(t.names, t.name[m], t.dur_ns[m])
    head = ["Time (%)", "Total Time (ns)", "Instances", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)",
            "StdDev (ns)", "Style", "Range"]
    rows = [r[:8] + ["PushPop", r[8]] for r in _rows(s, limit)]
    return _header(inst, "nvtx_sum", "NVTX Range Summary") + table(head, rows, {8, 9})


def mem_sum(inst) -> str:
    t = inst.trace(0)
    m = t.kind == Kind.MEMORY
    if not m.any():
        raise ToolNotApplicable("no memory copies or sets on the GPU in this trace")
    ops = [next((v for k, v in _MEM_OPS.items() if k in t.names[n]), "[CUDA memset]") for n in t.name[m]]
    op_names = sorted(set(ops))
    op_ids = np.array([op_names.index(o) for o in ops])
    s = _summary(op_names, op_ids, t.dur_ns[m])
    head = ["Time (%)", "Total Time (ns)", "Count", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)",
            "StdDev (ns)", "Operation"]
    time_part = _header(inst, "cuda_gpu_mem_time_sum", "CUDA GPU MemOps Summary (by Time)") + table(
        head, _rows(s, 10), {8})
    mb = t.nbytes[m] / 1e6
    size_rows = []
    for k, op in enumerate(op_names):
        v = mb[op_ids == k]
        size_rows.append([f"{v.sum():,.3f}", f"{len(v):,}", f"{v.mean():,.3f}", f"{np.median(v):,.3f}",
                          f"{v.min():,.3f}", f"{v.max():,.3f}", f"{v.std(ddof=1) if len(v) > 1 else 0.0:,.3f}", op])
    size_rows.sort(key=lambda r: -float(r[0].replace(",", "")))
    size_part = ("\n\n ** CUDA GPU MemOps Summary (by Size) (cuda_gpu_mem_size_sum):\n\n" + table(
        ["Total (MB)", "Count", "Avg (MB)", "Med (MB)", "Min (MB)", "Max (MB)", "StdDev (MB)", "Operation"],
        size_rows, {7}))
    return time_part + size_part


TOOLS = (
    Tool("nsys-kern-sum", "Nsight Systems: GPU kernel summary", "nsys stats --report cuda_gpu_kern_sum", kern_sum),
    Tool("nsys-api-sum", "Nsight Systems: CUDA API summary", "nsys stats --report cuda_api_sum", api_sum),
    Tool("nsys-nvtx-sum", "Nsight Systems: annotation ranges", "nsys stats --report nvtx_sum", nvtx_sum),
    Tool("nsys-mem-sum", "Nsight Systems: memory operations", "nsys stats --report cuda_gpu_mem_time_sum,"
         "cuda_gpu_mem_size_sum", mem_sum),
)
