"""A small ROCm-shaped Kineto trace, made here (we hold no real one): what torch.profiler
writes on an MI250 through roctracer, as far as HTA's read depends on it.

- deviceProperties of an AMD GPU; the GPU is pid 2, its kernels on stream 0;
- hipLaunchKernel / hipMemcpyWithStream runtime events (cat cuda_runtime) carry the
  HIP stream as a pointer written as text, `"stream": "0x0"` (Kineto's
  RuntimeActivity<roctracerKernelRow>::metadataJson), beside the correlation id;
- kernels (cat "kernel") and copies (cat "gpu_memcpy") with a numeric stream and the
  launch's correlation id;
- several ProfilerStep#N, the last one 49 µs long (the profiler stopped right after it).
"""

from __future__ import annotations

import json

HOST_PID, GPU_PID, MAIN_TID = 1234, 2, 1234
STEPS = 4  # full steps; then a last one of LAST_STEP_US
STEP_US, LAST_STEP_US = 2_200.0, 49.0
KERNELS = [  # (name, duration µs): a Tensile GEMM, elementwise, a copy-named kernel
    ("Cijk_Alik_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN", 310.0),
    ("void at::native::elementwise_kernel<128, 4>(int, at::native::add_kernel)", 45.5),
    ("Cijk_Ailk_Bljk_HHS_BH_MT64x128x32_MI32x32x8x1_SN", 420.25),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>", 60.0),
    ("Cijk_Alik_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN", 640.125),
    ("void at::native::reduce_kernel<512, 1>(at::native::ReduceOp<float>)", 35.0),
]


def trace(base_us: float = 1_700_000_000_000.0) -> dict:
    """The trace as a JSON document (ts in µs with ns decimals, as Kineto writes them)."""
    ev: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": HOST_PID, "tid": 0, "args": {"name": "python3"}},
        {"ph": "M", "name": "thread_name", "pid": HOST_PID, "tid": MAIN_TID, "args": {"name": "python3"}},
        {"ph": "M", "name": "process_name", "pid": GPU_PID, "tid": 0, "args": {"name": "python3"}},
        {"ph": "M", "name": "process_labels", "pid": GPU_PID, "tid": 0, "args": {"labels": "GPU 2"}},
    ]
    corr = 1000
    t = base_us
    for step in range(STEPS + 1):
        last = step == STEPS
        length = LAST_STEP_US if last else STEP_US
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{10 + step}", "pid": HOST_PID,
                   "tid": MAIN_TID, "ts": round(t, 3), "dur": length, "args": {"External id": corr}})
        cpu = t + 4.125
        gpu = t + 30.0 if step else t + 30.0
        launches = [("hipMemcpyWithStream", "Memcpy HtoD (Host -> Device)", 18.0, "gpu_memcpy")] if not last else []
        launches += [("hipLaunchKernel", n, d, "kernel") for n, d in (KERNELS[:2] if last else KERNELS)]
        for api, name, dur, cat in launches:
            corr += 1
            ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm" if cat == "kernel" else "aten::copy_",
                       "pid": HOST_PID, "tid": MAIN_TID, "ts": round(cpu, 3), "dur": 9.5,
                       "args": {"External id": corr, "Sequence number": corr}})
            args = {"cid": 2, "correlation": corr, "stream": "0x0", "grid": [1024, 1, 1], "block": [256, 1, 1],
                    "shared memory": 0}
            if cat == "kernel":
                args = {"kernel": name, **args}
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": api, "pid": HOST_PID, "tid": MAIN_TID,
                       "ts": round(cpu + 1.25, 3), "dur": 6.375, "args": args})
            gpu = max(gpu, cpu + 12.0)
            ev.append({"ph": "X", "cat": cat, "name": name, "pid": GPU_PID, "tid": 0, "ts": round(gpu, 3), "dur": dur,
                       "args": {"device": GPU_PID, "stream": 0, "correlation": corr, "kernel": name,
                                "grid": [1024, 1, 1], "block": [256, 1, 1]}})
            ev.append({"ph": "f", "id": corr, "pid": GPU_PID, "tid": 0, "ts": round(gpu, 3), "cat": "ac2g",
                       "name": "ac2g", "bp": "e"})
            gpu += dur + 7.5  # the GPU's own dispatch gap
            cpu += 14.0
        t += length + (0.0 if last else 3.0)
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "AMD Instinct MI250X / MI250", "totalGlobalMem": 68702699520,
                              "computeMajor": 9, "computeMinor": 0, "maxThreadsPerBlock": 1024,
                              "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536, "warpSize": 64,
                              "sharedMemPerBlock": 65536, "numSms": 104}],
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
        "traceEvents": ev,
        "traceName": "./log/mi250-node_1234.1700000000000.pt.trace.json",
    }


def dumps() -> bytes:
    return json.dumps(trace()).encode()
