"""The in-memory trace: one set of columns per event, built by appending whole arrays.

Scenarios emit events in vectorized batches (a whole phase of kernels at once), so a
million-event trace is a handful of numpy concatenations, not a million Python objects.
Times are integer nanoseconds relative to the trace's `base_time_ns`, which keeps the
export exact and byte-identical for the same seed.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np


class Kind(IntEnum):
    """How an event's args are rendered; see app.trace.kineto."""

    CPU = 0  # cpu_op / user_annotation / python_function: {"External id"}
    RUNTIME = 1  # cuda_runtime / cuda_driver: {"External id", "cbid", "correlation"}
    KERNEL = 2  # kernel: launch ids, stream, and the kernel's static launch config
    MEMORY = 3  # gpu_memcpy / gpu_memset: bytes and achieved bandwidth
    GPU_ANNOTATION = 4  # gpu_user_annotation: on the GPU pid/stream, no args.stream


@dataclass
class KernelInfo:
    """Launch configuration torch.profiler records for a kernel name."""

    grid: tuple[int, int, int] = (1, 1, 1)
    block: tuple[int, int, int] = (128, 1, 1)
    registers_per_thread: int = 32
    shared_memory: int = 0


# cbid values of the CUDA runtime callbacks Kineto records (cupti_runtime_cbid.h).
CBID = {
    "cudaLaunchKernel": 211,
    "cudaMemcpyAsync": 41,
    "cudaMemsetAsync": 51,
    "cudaStreamSynchronize": 131,
    "cudaStreamWaitEvent": 147,
    "cudaEventRecord": 135,
    "cudaDeviceSynchronize": 165,
    "cudaGraphLaunch": 311,
    "cudaLaunchKernelExC": 430,
    "cudaEventQuery": 136,
}


@dataclass
class Trace:
    """A finished trace: columns sorted by (ts, -dur), plus metadata."""

    base_time_ns: int
    top: dict  # top-level keys: deviceProperties, distributedInfo, ...
    names: list[str]
    cats: list[str]
    kind: np.ndarray
    cat: np.ndarray
    name: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    ts_ns: np.ndarray
    dur_ns: np.ndarray
    ext: np.ndarray
    corr: np.ndarray
    nbytes: np.ndarray
    extra: np.ndarray  # index into `extras`, -1 for none
    extras: list[dict]
    kernel_info: dict[int, KernelInfo]
    processes: list[tuple]  # (pid, name, label, sort_index)
    threads: list[tuple]  # (pid, tid, name, sort_index)
    instants: list[dict] = field(default_factory=list)  # ready Kineto dicts, ts in ns
    # Record function ids of the CPU events (0 elsewhere), in time order, where the builder
    # numbers them (`TraceBuilder.number_ops`); the export writes "Record function id" and
    # "Ev Idx" from it. None: version-1 style rows without them.
    rf_id: np.ndarray | None = None
    ev_idx_offset: int = 0
    # A kernel event's own launch configuration (index into `configs`, -1: its name's, from
    # `kernel_info`): a kernel name runs with the grid its shape needs, launch by launch.
    cfg: np.ndarray | None = None
    configs: list[KernelInfo] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ts_ns)

    def flow_count(self) -> int:
        """ac2g flow events the export adds: an f per GPU op whose launch is in the trace, an s
        per such launch (a CUDA graph's launch has one for all its kernels)."""
        li, gi = launch_pairs(self)
        return len(gi) + len(np.unique(self.corr[gi]))

    def memory_bytes(self) -> int:
        """What the columns hold in memory, plus a rough 200 bytes per args dict."""
        cols = (self.kind, self.cat, self.name, self.pid, self.tid, self.ts_ns, self.dur_ns, self.ext,
                self.corr, self.nbytes, self.extra, *((self.cfg,) if self.cfg is not None else ()))
        return sum(c.nbytes for c in cols) + 200 * (len(self.extras) + len(self.instants))

    def profiler_steps_ns(self) -> list[tuple[int, int]]:
        """The host's ProfilerStep# spans (start, end) in ns, in time order: the steps as
        torch.profiler marks them (its GPU-side copies left out)."""
        ids = [i for i, n in enumerate(self.names) if n.startswith("ProfilerStep#")]
        rows = np.flatnonzero(np.isin(self.name, ids) & (self.kind == Kind.CPU))
        return [(int(self.ts_ns[r]), int(self.ts_ns[r] + self.dur_ns[r])) for r in rows]

    def event_count(self) -> int:
        """Events the Kineto export writes: metadata, flows, and the profiler's own
        "Iteration Start" instant and "PyTorch Profiler (0)" span included."""
        return (len(self) + self.flow_count() + len(self.instants) + len(self.processes) * 3
                + len(self.threads) * 2 + 2)


def launch_pairs(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """Indices (launch, gpu op) of events joined by correlation id."""
    is_launch = (trace.kind == Kind.RUNTIME) & (trace.corr > 0)
    is_gpu = ((trace.kind == Kind.KERNEL) | (trace.kind == Kind.MEMORY)) & (trace.corr > 0)
    li = np.flatnonzero(is_launch)
    gi = np.flatnonzero(is_gpu)
    if len(li) == 0 or len(gi) == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    order = np.argsort(trace.corr[li], kind="stable")
    li_sorted = li[order]
    keys = trace.corr[li_sorted]
    pos = np.searchsorted(keys, trace.corr[gi])
    pos = np.minimum(pos, len(keys) - 1)
    hit = keys[pos] == trace.corr[gi]
    return li_sorted[pos[hit]], gi[hit]



class EventBudgetExceeded(RuntimeError):
    """A build went past the event budget it runs under (see `spending`)."""


@dataclass
class EventBudget:
    """How many events the traces of one instance may hold in all (every rank counted)."""

    limit: int
    spent: int = 0

    def expect(self, n: int) -> None:
        """Refuse now a build that says it will add `n` more events past the limit."""
        if self.spent + n > self.limit:
            raise EventBudgetExceeded(f"over {self.limit:,} events")

    def spend(self, n: int) -> None:
        self.spent += n
        if self.spent > self.limit:
            raise EventBudgetExceeded(f"over {self.limit:,} events")


_BUDGET: ContextVar[EventBudget | None] = ContextVar("event_budget", default=None)


@contextmanager
def spending(budget: EventBudget | None):
    """Builders in this context count their events against `budget` and stop past it, so a
    request for a huge instance costs at most one batch beyond the budget, not the instance."""
    token = _BUDGET.set(budget)
    try:
        yield
    finally:
        _BUDGET.reset(token)


def expect_events(n: int) -> None:
    """A build that knows its size before the slow part says so here, and past the budget
    it is refused before it spends the time (launch-bound's op trees: 26 s for 2,000 tokens
    before the budget, counted as events were added, stopped it)."""
    if (budget := _BUDGET.get()) is not None:
        budget.expect(int(n))


class TraceBuilder:
    """Collects event batches; `build()` concatenates and sorts them once."""

    def __init__(self, base_time_ns: int, top: dict | None = None):
        self.base_time_ns = int(base_time_ns)
        self.top = dict(top or {})
        self._names: dict[str, int] = {}
        self._cats: dict[str, int] = {}
        self._chunks: list[tuple] = []
        self._extras: list[dict] = []
        self._kernel_info: dict[int, KernelInfo] = {}
        self._processes: list[tuple] = []
        self._threads: list[tuple] = []
        self._instants: list[dict] = []
        self._next_corr = 1
        self._next_ext = 1
        self._number_ops: int | None = None
        self._configs: dict[tuple, int] = {}

    # -- ids -------------------------------------------------------------
    def name_id(self, name: str) -> int:
        nid = self._names.get(name)
        if nid is None:
            nid = self._names[name] = len(self._names)
        return nid

    def name_ids(self, names) -> np.ndarray:
        return np.fromiter((self.name_id(n) for n in names), dtype=np.int32, count=len(names))

    def correlation_ids(self, n: int) -> np.ndarray:
        """Fresh CUPTI correlation ids, increasing in launch order as CUPTI assigns them."""
        ids = np.arange(self._next_corr, self._next_corr + n, dtype=np.int64)
        self._next_corr += n
        return ids

    def external_ids(self, n: int) -> np.ndarray:
        ids = np.arange(self._next_ext, self._next_ext + n, dtype=np.int64)
        self._next_ext += n
        return ids

    # -- metadata --------------------------------------------------------
    def process(self, pid: int, name: str, label: str, sort_index: int) -> None:
        self._processes.append((pid, name, label, sort_index))

    def thread(self, pid: int, tid: int, name: str, sort_index: int) -> None:
        self._threads.append((pid, tid, name, sort_index))

    def kernel(self, name: str, info: KernelInfo) -> int:
        nid = self.name_id(name)
        self._kernel_info.setdefault(nid, info)
        return nid

    def kernel_config(self, info: KernelInfo) -> int:
        """An id for one launch configuration, for `add(..., cfg=)` on kernel events."""
        key = (tuple(info.grid), tuple(info.block), info.registers_per_thread, info.shared_memory)
        return self._configs.setdefault(key, len(self._configs))

    def instant(self, event: dict) -> None:
        """An `i` event, ts in ns relative to base (rendered to µs on export)."""
        self._instants.append(event)

    def flow(self, cat: str, flow_id: int, start: tuple[int, int, int], end: tuple[int, int, int]) -> None:
        """A flow pair other than ac2g (which the export derives from correlation ids), e.g.
        fwdbwd from a forward op to its backward node: (pid, tid, ts_ns) at each end."""
        for ph, (pid, tid, ts) in (("s", start), ("f", end)):
            ev = {"ph": ph, "id": int(flow_id), "pid": pid, "tid": tid, "ts": int(ts), "cat": cat, "name": cat}
            if ph == "f":
                ev["bp"] = "e"
            self._instants.append(ev)

    def number_ops(self, first_ev_idx: int) -> None:
        """Number the CPU events as torch.profiler does ("Record function id" from 1 in time
        order, "Ev Idx" from `first_ev_idx`, the events the profiler held before them)."""
        self._number_ops = int(first_ev_idx)

    # -- events ----------------------------------------------------------
    def add(self, kind: Kind, cat: str, name, pid, tid, ts_ns, dur_ns, *, ext=0, corr=0,
            nbytes=0, extra: list[dict | None] | dict | None = None, cfg=-1) -> None:
        """Append a batch of complete (`X`) events; scalars broadcast over the batch.

        `name` is a string, a list of strings, or an array of ids from `name_id`.
        """
        ts = np.atleast_1d(np.asarray(ts_ns, dtype=np.int64))
        n = len(ts)
        if n == 0:
            return
        if (budget := _BUDGET.get()) is not None:
            budget.spend(n)
        if isinstance(name, str):
            names = np.full(n, self.name_id(name), np.int32)
        elif isinstance(name, np.ndarray) and name.dtype.kind in "iu":
            names = name.astype(np.int32)
        else:
            names = self.name_ids(list(name))
        if extra is None:
            extra_idx = np.full(n, -1, np.int32)
        else:
            items = [extra] * n if isinstance(extra, dict) else list(extra)
            extra_idx = np.full(n, -1, np.int32)
            for i, item in enumerate(items):
                if item:
                    extra_idx[i] = len(self._extras)
                    self._extras.append(item)
        cat_id = self._cats.setdefault(cat, len(self._cats))

        def col(v, dtype=np.int64):
            if isinstance(v, (int, np.integer)):  # a scalar for the batch (np.full: no broadcast_to overhead)
                return np.full(n, v, dtype)
            a = np.asarray(v, dtype=dtype)
            return np.full(n, a, dtype) if a.ndim == 0 else a

        dur = col(dur_ns)
        if np.any(dur < 0):
            raise ValueError(f"negative duration in a batch of {cat} events")
        self._chunks.append((
            np.full(n, int(kind), np.int8), np.full(n, cat_id, np.int16), names,
            col(pid), col(tid), ts, dur, col(ext), col(corr), col(nbytes), extra_idx, col(cfg, np.int32),
        ))

    def build(self) -> Trace:
        cols = [np.concatenate([c[i] for c in self._chunks]) if self._chunks else np.empty(0, np.int64)
                for i in range(12)]
        kind, cat, name, pid, tid, ts, dur, ext, corr, nbytes, extra, cfg = cols
        # Parents before children at equal start: longer first, as Kineto's viewers expect.
        order = np.lexsort((-dur, ts))
        rf_id = None
        if self._number_ops is not None:
            cpu = kind[order] == int(Kind.CPU)
            rf_id = np.where(cpu, np.cumsum(cpu), 0).astype(np.int64)
        return Trace(
            base_time_ns=self.base_time_ns, top=self.top,
            names=list(self._names), cats=list(self._cats),
            kind=kind[order], cat=cat[order], name=name[order], pid=pid[order], tid=tid[order],
            ts_ns=ts[order], dur_ns=dur[order], ext=ext[order], corr=corr[order],
            nbytes=nbytes[order], extra=extra[order], extras=self._extras,
            kernel_info=self._kernel_info, processes=self._processes, threads=self._threads,
            instants=self._instants, rf_id=rf_id, ev_idx_offset=self._number_ops or 0,
            cfg=cfg[order] if self._configs else None,
            configs=[KernelInfo(g, bl, r, sm) for (g, bl, r, sm) in self._configs],
        )
