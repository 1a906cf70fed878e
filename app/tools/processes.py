"""`nsys-processes`: what each process of the job did on the CPU, as Nsight Systems shows it.

torch.profiler records only the process it runs in; a DataLoader's workers are processes of
their own (`num_workers` forks), so their decode and augmentation never reach the Kineto
trace. Nsight Systems samples the whole process tree (`--sample=process-tree`) and lists
each process with its CPU use; NVTX ranges a dataset emits appear under the process that
pushed them. This tool prints that view from the instance: its step windows, and the
worker processes' batches the scenario ran (artifacts["dataloader"]["processes"]), the
same batches whose arrival the main thread waits for in the trace.
"""

from __future__ import annotations

import numpy as np

from app.tools.base import Tool, ToolNotApplicable, ns, program, step_windows_ns, table
from app.trace import intervals
from app.trace.builder import Kind

STAGE_SHARE_OF_IMAGE = 0.97  # the rest of __getitem__ is Python around the transforms


def summary(inst) -> dict:
    """Per process over the profiled steps: CPU busy share, batches and images finished,
    and per NVTX range (one per image stage) the time and instances in the window."""
    procs = inst.artifacts.get("dataloader", {}).get("processes")
    if not procs:
        raise ToolNotApplicable("no DataLoader worker processes outside the profiled one here (no input pipeline "
                                "of its own, or an older version of the case whose trace already shows the "
                                "pt_data_worker rows)")
    windows = step_windows_ns(inst)
    lo, hi = windows[0][0], windows[-1][1]
    span = hi - lo
    t = inst.trace(0)
    loader = [i for i, n in enumerate(t.names) if "DataLoader" in n and "__next__" in n]
    m = (t.kind == Kind.CPU) & np.isin(t.name, loader)
    wait = intervals.busy_ns(t.ts_ns[m], t.ts_ns[m] + t.dur_ns[m], lo, hi)
    rows = [{"pid": procs["main"]["pid"], "process": f"{procs['main']['name']} ({', '.join(procs['main']['threads'])})",
             "cpu_pct": 100.0 * (span - wait) / span, "batches": None, "images": None}]
    stages = {name: [0.0, 0] for name, _ in procs["image_stages"]}
    for w in procs["workers"]:
        mine = [bt for bt in procs["batches"] if bt["worker"] == w["worker_id"]]
        s = np.array([bt["start_us"] for bt in mine]) * 1e3
        e = np.array([bt["ready_us"] for bt in mine]) * 1e3
        busy = intervals.busy_ns(s.astype(np.int64), e.astype(np.int64), lo, hi) if mine else 0
        images, done = 0.0, 0
        for bt in mine:
            a, c = bt["start_us"] * 1e3, bt["collate_us"] * 1e3
            inside = max(0.0, min(c, hi) - max(a, lo)) / max(c - a, 1.0)
            images += bt["images"] * inside
            done += int(lo <= bt["ready_us"] * 1e3 < hi)
            img_ns = max(0.0, min(c, hi) - max(a, lo)) * STAGE_SHARE_OF_IMAGE
            for name, share in procs["image_stages"]:
                stages[name][0] += img_ns * share
                stages[name][1] += int(round(bt["images"] * inside))
        rows.append({"pid": w["pid"], "process": f"{w['name']} (pt_data_worker_{w['worker_id']})",
                     "cpu_pct": 100.0 * busy / span, "batches": done, "images": images,
                     "img_s": images / (span / 1e9)})
    workers = rows[1:]
    return {"window_s": span / 1e9, "steps": len(windows), "processes": rows,
            "workers": len(workers), "supply_img_s": sum(r["img_s"] for r in workers),
            "worker_cpu_pct": float(np.mean([r["cpu_pct"] for r in workers])),
            "stages": [{"range": k, "total_ns": v[0], "instances": v[1]} for k, v in stages.items()]}


def nsys_processes(inst) -> str:
    r = summary(inst)
    prow = [[str(x["pid"]), f"{x['cpu_pct']:.1f}", "-" if x["batches"] is None else str(x["batches"]),
             "-" if x["images"] is None else f"{x['images']:,.0f}",
             "-" if x["images"] is None else f"{x['img_s']:,.1f}", x["process"]] for x in r["processes"]]
    total = sum(s["total_ns"] for s in r["stages"]) or 1.0
    srow = [[f"{100 * s['total_ns'] / total:.1f}", ns(s["total_ns"]), f"{s['instances']:,}",
             ns(s["total_ns"] / max(s["instances"], 1)), s["range"]] for s in r["stages"]]
    return "\n".join([
        f"$ nsys profile --trace=cuda,nvtx,osrt --sample=process-tree --cpuctxsw=process-tree -o run {program(inst)}",
        f"$ nsys stats --report nvtx_sum run.nsys-rep   # and the timeline's per-process CPU rows, "
        f"{r['steps']} steps ({r['window_s']:.2f} s)", "",
        " Processes",
        table(["PID", "CPU (%)", "Batches", "Images", "Images/s", "Process"], prow, {5}), "",
        " NVTX ranges in the worker processes (per image)",
        table(["Time (%)", "Total Time (ns)", "Instances", "Avg (ns)", "Range"], srow, {4}), "",
        f" {r['workers']} worker processes, each {r['worker_cpu_pct']:.0f}% busy on one core, finish "
        f"{r['supply_img_s']:,.0f} images/s between them."])


TOOLS = (
    Tool("nsys-processes", "Nsight Systems: CPU use per process (main process and DataLoader workers)",
         "nsys profile --sample=process-tree python train.py", nsys_processes),
)
