"""Calibration reads for the scorer, per scenario, written for each canonical instance in
other words than the seed's and the model answer's:

- strong: the discipline in order, the numbers, the trap rejected with arithmetic, the
  measurement, the fix and its win;
- trap: a plausible read that buys the trap hypothesis as the cause or the fix;
- disorder: a read with the right story that jumps to the kernels before the gaps;
- vague: the right story told without a single number.

tests/test_scoring.py asserts strong >= 80, trap <= 40 and flagged, disorder below strong
on discipline_order, vague at least 15 below strong.

calibration_independent.json holds a second set (plus "wrong_numbers" reads) written by a
separate author from the keys alone, without seeing the scorer; it was held out once, and
its misses (a posed hypothesis answered by "No.", "nowhere near", trap fixes said as
imperatives, ".item()" breaking sentences) improved the rules. Write a fresh held-out set
before the next round of tuning: this one is now seen.
"""

import json
from pathlib import Path

INDEPENDENT = json.loads((Path(__file__).with_name("calibration_independent.json")).read_text())
# A second independent set (terse, chatty, self-correcting and non-native styles, plus
# "partial" reads that run out of time), scored once held out, then used like the first.
INDEPENDENT_2 = json.loads((Path(__file__).with_name("calibration_independent_2.json")).read_text())

READS = {
    "ddp": {
        "strong": [
            "First the iteration: ProfilerStep gives a period of about 622 ms. Then the idle time on the compute "
            "stream: there is a 175 ms hole at the tail of each step, roughly 28% of it, and during that hole the "
            "NCCL stream runs a single all-reduce. So the communication is serialized after backward, nothing "
            "overlaps. I did consider that NCCL or NVLink is just slow, but 16 GB of gradients over the ring is "
            "about 28 GB per GPU, and 28 GB in 175 ms is 160 GB/s of bus bandwidth: unremarkable, and a perfect "
            "all-reduce that still runs serialized would only buy a few points of MFU. The kernels inside the busy "
            "part look normal. The real problem is that DDP's bucketing is bypassed: the reducer hooks never fire "
            "during backward, so all gradients go out in one flat all-reduce. I'd prove it with nsys stats "
            "cuda_gpu_kern_sum: one all-reduce instance per step instead of hundreds of buckets. Fix the wrapper so "
            "the bucket all-reduces overlap with backward; backward is 270 ms, enough to hide the comm, so the step "
            "should land near 473 ms, about 1.31x.",
        ],
        "trap": [
            "The step takes 622 ms and at the end the compute stream sits idle for 175 ms while the NCCL all-reduce "
            "runs. That all-reduce is far too slow for NVLink; NCCL is the bottleneck here, probably a misconfigured "
            "topology. I'd run nccl-tests and retune the NCCL settings so the 175 ms comes down, which should give "
            "us back most of that time.",
        ],
        "disorder": [
            "The longest kernel in this trace is the ncclDevKernel all-reduce at 175 ms, and the GEMMs look fine. "
            "Looking at overlap, the all-reduce is serialized after backward. The step is 622 ms and the compute "
            "stream is idle for that same 175 ms, 28% of the step. NCCL isn't slow: 16 GB at 160 GB/s busbw is "
            "reasonable. The DDP reducer hooks are bypassed so the buckets never fire during backward. Confirm with "
            "nsys stats kernel counts; restore the bucketed overlap and expect about 473 ms, 1.31x.",
        ],
        "vague": [
            "I find one training iteration first, then look at where the compute stream is idle. There is a big hole "
            "at the end of every step while the NCCL stream runs one huge all-reduce, so communication is "
            "serialized after backward instead of overlapping with it. It is tempting to blame NCCL, but the "
            "bandwidth is not the problem; the serialization is. The kernels themselves look normal. DDP's "
            "bucketing is being bypassed: the reducer hooks aren't firing. I would check the kernel summary in nsys "
            "stats and then fix the wrapper so bucketed all-reduces overlap with backward; that should recover most "
            "of the idle time.",
        ],
    },
    "dataloader": {
        "strong": [
            "Iteration first: the ProfilerStep period is about 509 ms. Then gaps: every step opens with roughly "
            "188 ms where the compute stream does nothing, while the main thread sits inside DataLoader __next__ and "
            "both loader workers are busy decoding images. I don't trust the 100% nvidia-smi utilization, because "
            "that counter only asks whether any kernel was resident in the sample; it can't see a 188 ms gap. The "
            "12 ms host-to-device copy is real but it can't explain 188 ms either. Overlap is fine: the all-reduce "
            "hides under backward, and inside the 320 ms of busy time the kernels are healthy. So this is input "
            "starvation: two workers supply about 504 images/s while the GPU eats 800. A synthetic-data run would "
            "confirm it, the step should fall to about 323 ms. Fix: num_workers 2 to 16, pin_memory, more prefetch. "
            "Expect around 324 ms per step, 1.57x.",
        ],
        "trap": [
            "nvidia-smi shows the GPU at 100% utilization, so the GPU is busy the whole time and the problem must be "
            "slow kernels. The step is 509 ms; I'd start by optimizing the biggest GEMMs and the attention kernels "
            "because the GPU is clearly saturated.",
        ],
        "disorder": [
            "The top kernels are the bf16 GEMMs at about 82 ms each per step, and they look efficient. Comm overlaps "
            "with backward. The step is 509 ms and the GPU is idle for the first 188 ms of it while the CPU waits in "
            "DataLoader __next__. nvidia-smi's 100% is misleading, since any resident kernel counts. Two workers "
            "give ~504 images/s for a GPU that needs 800: starvation. Run with synthetic data to confirm, then raise "
            "num_workers to 16 and pin memory; about 324 ms, 1.57x.",
        ],
        "vague": [
            "I start from one step, then look for idle time. At the start of every step the GPU sits idle while the "
            "main thread waits for the next batch from the DataLoader and the workers are pegged decoding images. "
            "nvidia-smi's utilization is misleading here and the host-to-device copy is too small to matter. "
            "Communication overlaps with backward and the kernels are healthy. The input pipeline can't keep up: too "
            "few workers. A synthetic data run would confirm it; the fix is more workers, pinned memory and "
            "prefetching.",
        ],
    },
    "launch-bound": {
        "strong": [
            "One token is one ProfilerStep, about 28 ms. Adding up the kernels gives only about 10.8 ms of GPU time, "
            "so roughly 17 ms per token the GPU is idle, in tiny gaps: some 1,100 kernels per token, each around "
            "10 µs, separated by about 15 µs of nothing. The CPU can't issue launches as fast as the GPU retires "
            "them: launch-bound, eager mode, with the unfused elementwise ops multiplying the launches. One could "
            "be tempted to optimize the GEMMs, but they already run at the weight-bandwidth floor, 6.9 GB of int8 "
            "weights at 864 GB/s is 8 ms, so there's nothing to win inside them. I'd confirm with nsys stats "
            "cuda_api_sum: 1,100 cudaLaunchKernel calls per token. Capture the decode step in a CUDA graph and fuse "
            "the elementwise kernels with torch.compile; expect about 10 ms per token, 2.8x.",
        ],
        "trap": [
            "Decode takes 28 ms per token. The GEMMs are the slow part here, so I'd tune the tile sizes and "
            "quantize the weights further to make the small GEMMs faster; that should bring the token time down.",
        ],
        "disorder": [
            "The longest kernels are the weight-only GEMVs, about 8.8 ms per token, already at the bandwidth floor, "
            "so no win there. Each token is 28 ms, and the GPU is idle about 17 ms of it: 1,100 kernels of roughly "
            "10 µs with 15 µs gaps. Launch-bound: the CPU can't keep up. Check cuda_api_sum, then CUDA graphs and "
            "fusion: about 10 ms per token, 2.8x.",
        ],
        "vague": [
            "I take one decode token as the step, then look at the gaps. The GPU timeline is a picket fence: "
            "thousands of tiny kernels with idle gaps between them, while the CPU thread is busy launching the whole "
            "time. The kernels are shorter than the launch overhead, so this is launch-bound eager decode with lots "
            "of unfused elementwise ops. Tuning the GEMMs won't help since they are already bandwidth bound. I'd "
            "check the CUDA API summary in nsys, then capture the step in a CUDA graph and fuse the elementwise ops.",
        ],
    },
    "straggler": {
        "strong": [
            "The step is about 612 ms. On rank 0 the compute stream then goes idle while one all-reduce runs for "
            "215 ms, so the collective is exposed, not overlapped. But a collective's duration includes waiting for "
            "the slowest rank. It is tempting to say NCCL degraded after the reprovision; but a 1.6 GB bucket moves "
            "2.8 GB per GPU on the ring, 19 ms even at 150 GB/s, so the wire can't explain 215 ms. Comparing "
            "per-rank compute: seven ranks at about 393 ms, rank 3 at 587 ms; the 194 ms difference is exactly what "
            "the others wait, and rank 3's own all-reduce takes the true 20 ms. Same kernels, uniformly slower: "
            "that's a throttled GPU, and DCGM shows rank 3's SM clock at 1219 MHz against 1980, thermal slowdown. "
            "Fix the cooling on that node, no code change; the step should drop to about 418 ms, 1.46x.",
        ],
        "trap": [
            "Rank 0 spends 215 ms of its 612 ms step in an all-reduce. That is NCCL degraded after the reprovision; "
            "the NVLink bandwidth must have dropped. I'd retune NCCL_ALGO, run nccl-tests and check the switch to "
            "get the all-reduce back to normal.",
        ],
        "disorder": [
            "The GEMMs on rank 3 are 1.6x slower than on the other ranks, the slowest kernels in the job. The step "
            "is 612 ms and rank 0 idles in a 215 ms all-reduce that is mostly waiting for the slowest rank. Rank 3 "
            "computes 587 ms against 393 ms elsewhere, so the others wait about 195 ms; NCCL is not slow, a 1.6 GB "
            "bucket takes about 19 ms. DCGM: rank 3 is thermally throttled at 1219 MHz. Fix the cooling; about "
            "418 ms, 1.46x.",
        ],
        "vague": [
            "I find the step first, then see that on rank 0 the compute stream sits idle while a long all-reduce "
            "runs. The collective is not slow on the wire; it waits for a late rank. Comparing the ranks, one GPU "
            "computes much more slowly than its peers with the same kernels, so everyone else waits for it at every "
            "all-reduce. That pattern points to a thermally throttled GPU with a low SM clock rather than NCCL or "
            "data skew. I'd compare per-rank step times and check the clocks with DCGM, then fix the cooling on "
            "that node.",
        ],
    },
    "prefill": {
        "strong": [
            "A healthy scheduler iteration takes about 22 ms, and p50 ITL matches at 22 ms; p99 is 485 ms. Looking "
            "for gaps, there are none to speak of: during the stall the GPU is 99% busy, running a single 463 ms "
            "iteration of pure prefill for an 8,192-token prompt, with no decode tokens in it. So the tail is not GC "
            "jitter: the longest GC pause is under 5 ms, nowhere near 485 ms, and it isn't a capacity problem "
            "either. The 463 ms iteration plus one decode iteration gives 485 ms, which is the p99. Every in-flight "
            "stream waits for someone else's whole prefill: the scheduler is prefill-first with no chunking. I'd "
            "plot ITL against prefill tokens per iteration as a scatter to confirm. Fix it with chunked prefill, "
            "512-token chunks mixed with the decode batch; iterations become about 38 ms and the ITL p99 drops to "
            "about 40 ms, roughly 12x better, while the long prompt's TTFT rises 32%, from 464 to 614 ms.",
        ],
        "trap": [
            "p50 ITL is 22 ms and p99 is 485 ms. Those p99 spikes look like Python GC pauses and scheduler jitter "
            "on the CPU side; that is the cause of the tail. We should tune the garbage collector, and if that isn't "
            "enough, add a second replica because we are out of capacity.",
        ],
        "disorder": [
            "The longest kernels are the prefill GEMMs in a 463 ms iteration, running at 63% MFU, so they are fine. "
            "Decode iterations are 22 ms and p99 ITL is 485 ms. The GPU is 99% busy in the stall, so it is not GC "
            "jitter. Every decode stream waits for the whole 8,192-token prefill: no chunked prefill. A scatter of "
            "ITL against prefill tokens confirms it. Chunked prefill brings p99 to about 40 ms, TTFT up 32%.",
        ],
        "vague": [
            "I take one scheduler iteration as the unit first. Most iterations are short and healthy decode "
            "batches, but now and then one huge iteration of pure prefill runs while every stream's next token "
            "waits. The GPU is busy during the stall, so it isn't jitter or garbage collection and it isn't a "
            "capacity problem; it's scheduling: prefill-first with no chunking. I'd confirm with a scatter of ITL "
            "against prefill tokens per iteration, then enable chunked prefill so long prompts are split and mixed "
            "with decode, accepting a somewhat longer time to first token.",
        ],
    },
    "skinny-gemm": {
        "strong": [
            "The micro-step is about 210 ms and the trace is healthy by the usual checks: gaps are only about 3% of "
            "the step, the reduce-scatters are hidden under compute, and the CPU launches well ahead. Yet MFU is 22%, "
            "so the time goes inside the kernels. The dominant GEMM family takes 31% of GPU time. Someone might say "
            "the profiler or the MFU formula is off, but 6 x 30.2B params x 256 tokens over 210 ms is 22% of peak, "
            "and the step time without the profiler matches. Nsight Compute on that GEMM shows 82% DRAM throughput "
            "and 24% tensor pipe: memory-bound. With M = 256 from micro-batch 1, the arithmetic intensity is about "
            "228 FLOP/byte, under the H100 ridge near 295. Tuning the kernel can't change that; the shape can. "
            "Raise the micro-batch to 4 so M = 1024, intensity around 683, compute-bound; expect about 102 ms per "
            "256-token equivalent, 2.0x, MFU near 46%.",
        ],
        "trap": [
            "The timeline is 97% busy but MFU is only 22%, which means the profiler's overhead is distorting the "
            "picture or the MFU math is wrong. I'd also autotune the GEMM tiles and try another cuBLAS algorithm to "
            "get the kernels faster.",
        ],
        "disorder": [
            "The dominant GEMM is memory-bound: Nsight Compute shows 82% DRAM and 24% tensor pipe, intensity 228 "
            "FLOP/byte under the 295 ridge, because M = 256. The step is 210 ms with about 3% gaps, and the comm is "
            "hidden. MFU is 22%; the profiler isn't wrong, the GEMMs are memory-bound by shape. Raise the "
            "micro-batch to 4 for M = 1024; expect about 102 ms per 256 tokens, 2.0x.",
        ],
        "vague": [
            "First one step, then the gaps: there are hardly any, communication is hidden and the CPU is ahead, so "
            "the timeline looks healthy while MFU is low. The loss must be inside the kernels. The profiler isn't "
            "lying; the dominant GEMMs are skinny because the micro-batch is one sequence, which puts them below the "
            "ridge point: memory-bound. Nsight Compute on the top GEMM would show high DRAM throughput and a mostly "
            "idle tensor pipe. Tuning the kernel won't fix a shape; raise the micro-batch so M grows and the GEMMs "
            "become compute-bound.",
        ],
    },
}
