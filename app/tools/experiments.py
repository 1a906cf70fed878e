"""The one-line experiments an engineer runs to confirm a hypothesis: `synthetic-data`,
`cuda-graph` and `ddp-debug`.

Each is a counterfactual computed from the instance's own trace: what the step would be
with in-memory batches is the step less the time the main thread waited on the loader;
what a captured decode step would take is its kernels back to back with a graph's
device-side gaps. Where the experiment has no physical meaning (CUDA graphs around a
training step with a DataLoader and collectives, DDP's logger on an FSDP job), the tool
says so instead of printing numbers.
"""

from __future__ import annotations

import numpy as np

from app import physics
from app.tools.base import Tool, ToolNotApplicable, program, step_windows_ns, table
from app.trace import intervals
from app.trace.builder import Kind


def _per_step(inst, mask: np.ndarray) -> np.ndarray:
    """Per step window: the time the masked events cover (their union, clipped), ns."""
    t = inst.trace(0)
    s, e = t.ts_ns[mask], t.ts_ns[mask] + t.dur_ns[mask]
    return np.array([intervals.busy_ns(s, e, lo, hi) for lo, hi in step_windows_ns(inst)], float)


def synthetic(inst) -> dict:
    t = inst.trace(0)
    loader = [i for i, n in enumerate(t.names) if "DataLoader" in n and "__next__" in n]
    if not loader:
        raise ToolNotApplicable("nothing in this trace reads a DataLoader: no training input pipeline to replace "
                                "with in-memory batches")
    windows = step_windows_ns(inst)
    step_ms = np.array([hi - lo for lo, hi in windows], float) / 1e6
    wait_ms = _per_step(inst, (t.kind == Kind.CPU) & np.isin(t.name, loader)) / 1e6
    busy_ms = _per_step(inst, t.kind == Kind.KERNEL) / 1e6
    idle_ms = step_ms - busy_ms
    # In-memory batches remove the loader wait from the critical path; the GPU's own work
    # and the rest of the host's are unchanged.
    syn_ms = step_ms - wait_ms
    return {"steps": len(windows), "step_ms_before": round(float(step_ms.mean()), 2),
            "step_ms_synthetic": round(float(syn_ms.mean()), 2),
            "dataloader_wait_ms_before": round(float(wait_ms.mean()), 2),
            "gpu_idle_ms_before": round(float(idle_ms.mean()), 2),
            "gpu_idle_ms_synthetic": round(float(np.maximum(idle_ms - wait_ms, 0).mean()), 2)}


def synthetic_data(inst) -> str:
    r = synthetic(inst)
    gain = r["step_ms_before"] / r["step_ms_synthetic"]
    rows = [["real data", f"{r['step_ms_before']:.2f}", f"{r['dataloader_wait_ms_before']:.2f}",
             f"{r['gpu_idle_ms_before']:.2f}"],
            ["synthetic data", f"{r['step_ms_synthetic']:.2f}", "0.00", f"{r['gpu_idle_ms_synthetic']:.2f}"]]
    return "\n".join([
        f"$ {program(inst)} --synthetic-data --steps {r['steps']}   # torch.randn batches already on the GPU, same "
        "model, batch and ranks", "",
        table(["Run", "Step (ms)", "DataLoader wait (ms/step)", "GPU idle (ms/step)"], rows, {0}), "",
        f" Step with synthetic data: {r['step_ms_synthetic']:.2f} ms vs {r['step_ms_before']:.2f} ms "
        f"({gain:.2f}x); the input pipeline accounts for {r['step_ms_before'] - r['step_ms_synthetic']:.2f} ms "
        "per step."])


def graphed(inst) -> dict:
    """Decode steps replayed from a CUDA graph: their kernels back to back with the
    graph's device-side gap, plus the replay's host work; host time before the first
    kernel (a serving scheduler's) stays. Iterations that carry prefill are not captured
    (their token count changes every time), so they keep their eager time, and iterations
    whose forward is already a `cudaGraphLaunch` (vLLM without --enforce-eager) have nothing
    left to capture: they keep theirs too."""
    a = inst.artifacts
    if "decode" not in a and "serving" not in a:
        raise ToolNotApplicable("CUDA graphs here capture an inference decode step; this is a training step with a "
                                "DataLoader, collectives and an optimizer, which the experiment does not replay")
    t = inst.trace(0)
    k = t.kind == Kind.KERNEL
    ks, ke = t.ts_ns[k], t.ts_ns[k] + t.dur_ns[k]
    prefill = [it["prefill_tokens"] for it in a.get("iterations", [])] or [0] * len(a["steps"])
    replay = [i for i, n in enumerate(t.names) if n == "cudaGraphLaunch"]
    gs = t.ts_ns[(t.kind == Kind.RUNTIME) & np.isin(t.name, replay)]
    rows = []
    for (lo, hi), pre in zip(step_windows_ns(inst), prefill):
        already = bool(((gs >= lo) & (gs < hi)).any())
        inside = (ks >= lo) & (ks < hi)
        n = int(inside.sum())
        busy = intervals.busy_ns(ks[inside], ke[inside], lo, hi)
        first = ks[inside].min()
        eager = hi - lo
        if pre or already:
            after = eager
        else:
            after = (first - lo) + busy + n * physics.CUDA_GRAPH_NODE_GAP_US * 1e3 + physics.CUDA_GRAPH_HOST_MS * 1e6
            after = min(after, eager)  # the eager tail after the last kernel (the sync) is in the host share
        rows.append({"eager_ms": eager / 1e6, "graphed_ms": after / 1e6, "kernels": n, "busy_ms": busy / 1e6,
                     "captured": not pre, "already": already})
    cap = [r for r in rows if r["captured"]]
    out = {"unit": "token" if "decode" in a else "iteration", "steps": len(rows), "captured": len(cap),
           "already_graphed": sum(r["already"] for r in cap),
           "kernels_per_step": round(float(np.mean([r["kernels"] for r in cap or rows])), 1),
           "eager_ms": round(float(np.mean([r["eager_ms"] for r in cap or rows])), 3),
           "graphed_ms": round(float(np.mean([r["graphed_ms"] for r in cap or rows])), 3),
           "busy_ms": round(float(np.mean([r["busy_ms"] for r in cap or rows])), 3),
           "longest_eager_ms": round(max(r["eager_ms"] for r in rows), 3),
           "longest_graphed_ms": round(max(r["graphed_ms"] for r in rows), 3)}
    fused = a.get("experiments", {}).get("cuda_graph", {})
    if "token_ms_graphed_fused" in fused:
        out["fused_ms"] = fused["token_ms_graphed_fused"]
        out["kernels_after_fusion"] = fused["kernels_after_fusion"]
    return out


def cuda_graph(inst) -> str:
    r = graphed(inst)
    u = r["unit"]
    rows = [["eager", f"{r['kernels_per_step']:,.0f}", f"{r['kernels_per_step']:,.0f}", f"{r['eager_ms']:.3f}",
             f"{r['busy_ms']:.3f}"],
            ["CUDA graph", "1", f"{r['kernels_per_step']:,.0f}", f"{r['graphed_ms']:.3f}", f"{r['busy_ms']:.3f}"]]
    if r["already_graphed"] and r["already_graphed"] == r["captured"]:
        rows[0][:2] = ["as profiled (graphed)", "1"]
    if "fused_ms" in r:
        rows.append(["graph + fusion", "1", f"{r['kernels_after_fusion']:,}", f"{r['fused_ms']:.3f}", "-"])
    if "serving" in inst.artifacts and r["already_graphed"]:
        cmd = "vllm serve MODEL   # as profiled: decode batches already replay captured CUDA graphs"
    elif "serving" in inst.artifacts:
        cmd = "vllm serve MODEL   # as profiled, minus --enforce-eager: decode batches replay captured CUDA graphs"
    else:
        cmd = f"{program(inst)} --cuda-graph   # torch.cuda.graphs: capture the decode step once, replay per {u}"
    lines = [f"$ {cmd}", "",
             table(["Mode", f"Launches/{u}", f"Kernels/{u}", f"Time/{u} (ms)", "GPU busy (ms)"], rows, {0}), "",
             f" Captured {r['captured']} of {r['steps']} {u}s; mean {u} {r['eager_ms']:.3f} -> {r['graphed_ms']:.3f} ms "
             f"({r['eager_ms'] / r['graphed_ms']:.2f}x)."]
    if r["already_graphed"]:
        lines.append(f" {r['already_graphed']} of those {r['captured']} already replay a CUDA graph in the trace "
                     f"(one cudaGraphLaunch each): nothing is left to capture, so their time stays as measured.")
    if r["captured"] < r["steps"]:
        lines.append(f" {r['steps'] - r['captured']} iterations carry prefill and run eager (a new token count every "
                     f"time): the longest stays {r['longest_eager_ms']:.3f} ms -> {r['longest_graphed_ms']:.3f} ms.")
    return "\n".join(lines)


def ddp_debug(inst) -> str:
    d = inst.artifacts.get("ddp")
    if not d:
        raise ToolNotApplicable("no DistributedDataParallel reducer in this job (single GPU, serving, or gradients "
                                "reduced by FSDP's sharded collectives): TORCH_DISTRIBUTED_DEBUG=DETAIL logs no "
                                "DDP buckets here")
    t = inst.trace(0)
    ar = [i for i, n in enumerate(t.names) if n.startswith(("ncclKernel_AllReduce", "ncclDevKernel_AllReduce"))]
    m = (t.kind == Kind.KERNEL) & np.isin(t.name, ar)
    windows = step_windows_ns(inst)
    per_step = [int(((t.ts_ns[m] >= lo) & (t.ts_ns[m] < hi)).sum()) for lo, hi in windows]
    sizes = d["bucket_bytes"]
    shown = ", ".join(str(b) for b in sizes[:6]) + (f", ... ({len(sizes)} buckets)" if len(sizes) > 6 else "")
    log = [
        "$ TORCH_DISTRIBUTED_DEBUG=DETAIL torchrun --nproc-per-node "
        f"{d['world_size']} train.py 2>&1 | grep -A14 'DDP Initialized'", "",
        "[I logger.cpp] [Rank 0]: DDP Initialized with: ",
        "broadcast_buffers: 1",
        f"bucket_cap_bytes: {int(d['bucket_cap_mb'] * 2**20)}",
        "find_unused_parameters: 0",
        "gradient_as_bucket_view: 0",
        "is_multi_device_module: 0",
        "rank: 0",
        f"total_parameter_size_bytes: {int(d['grad_bytes'])}",
        f"world_size: {d['world_size']}",
        "backend_name: nccl",
        f"bucket_sizes: {shown}",
        "device_ids: 0",
        f"dtypes: {d['grad_dtype']}",
        "",
        f"# profiler, same run: all-reduce kernels per step on rank 0: {', '.join(map(str, per_step))} "
        f"(the reducer has {len(sizes)} buckets)",
    ]
    return "\n".join(log)


TOOLS = (
    Tool("synthetic-data", "Experiment: the step with synthetic in-memory data", "python train.py --synthetic-data",
         synthetic_data),
    Tool("cuda-graph", "Experiment: the decode step captured in a CUDA graph", "python decode.py --cuda-graph",
         cuda_graph),
    Tool("ddp-debug", "Experiment: DDP's buckets under TORCH_DISTRIBUTED_DEBUG=DETAIL",
         "TORCH_DISTRIBUTED_DEBUG=DETAIL torchrun train.py", ddp_debug),
)
