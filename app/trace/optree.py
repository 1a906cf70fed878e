"""The op tree torch.profiler records around each launching op (issue 13).

A flat trace, one cpu_op per kernel launch, is a tell: a real eager trace has two to five ops
per launch (HTA's traces: 2.0-5.3), because each aten op the model calls dispatches through
others, and views that launch nothing sit beside them: `aten::linear` holds `aten::t` (a
view: `aten::transpose` > `aten::as_strided`) and `aten::matmul` > `aten::mm`, which calls
cudaLaunchKernel; backward runs `autograd::engine::evaluate_function: MmBackward0` >
`MmBackward0` > its views and two `aten::mm`. With record_shapes every op carries "Input
Dims", "Input type" and "Concrete Inputs"; ops that make an autograd node carry a "Sequence
number" and "Fwd thread id", which their backward node repeats, and a `fwdbwd` flow joins the
two (the HTA trace in ../shared/fixtures/kineto shows each of these).

`tree_for(spec)` gives the tree of one launching op from its KernelSpec (its op name, and the
shapes: a GEMM's (M, N, K), an elementwise op's element count over the widths it may have);
`emit` lays the trees of a launch phase out inside the CPU time each op already has (the
op's framework time before its launch is shared among the ops above and beside the one that
launches, and the ops above close in the Python time after it), so the physics, each op's
CPU cost, is unchanged. `Autograd` carries the sequence numbers from a step's forward to its
backward.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from app.trace.builder import Kind, TraceBuilder
from app.workload import SDPA_BACKWARD, SDPA_FORWARD

EV = "autograd::engine::evaluate_function: "
BF16, F32 = "c10::BFloat16", "float"


@dataclass
class Op:
    name: str
    dims: list | None = None  # Input Dims (record_shapes)
    types: list | None = None
    children: list["Op"] = field(default_factory=list)
    launches: bool = False  # calls cudaLaunchKernel (one per tree)
    autograd: bool = False  # makes an autograd node (forward) or is one (backward): a Sequence number
    concrete: list | None = None  # Concrete Inputs where the op's scalars are known (a dtype's enum value)
    # the op's closes after its launch (an ancestor, a view of the result) come out of its own
    # start, so the thread's covered time stays the flat op's (a caller's key measures it)
    keep_cover: bool = False
    # The root is the previous launch's root, the same op still open (a custom op whose one call
    # launches twice, e.g. vLLM's unified attention: the KV-cache write, then the attention):
    # emit adds this tree's ops under the previous root's row and extends it, no second root.
    joins_previous: bool = False
    # what is computed once per op: a tree is shared by every launch of its kind (read-only)
    _memo: dict = field(default_factory=dict, repr=False, compare=False)

    def args(self) -> dict:
        """record_shapes' args (one dict per op, shared by its events: the export only reads it)."""
        if "args" not in self._memo:
            if self.dims is None:
                self._memo["args"] = {}
            else:
                types = self.types or [BF16 if d else "Scalar" for d in self.dims]
                concrete = self.concrete or ["" if d or t != "Scalar" else "1" for d, t in zip(self.dims, types)]
                self._memo["args"] = {"Input Dims": self.dims, "Input type": types, "Concrete Inputs": concrete}
        return self._memo["args"]


def forest(*ops: Op) -> Op:
    """Ops side by side with no op above them, the last one launching: the Python between two
    launching ops calls a view or two (`x.view(...)`, `.transpose(1, 2)`, a slice) before the
    op that launches, and the profiler records each at the top level. The unnamed root only
    holds them; emit leaves it out, lays the views out in the Python time before the launching
    op with its own gaps between them, and takes their time out of the launching op's start,
    so the thread's covered time is the flat op's."""
    return Op("", children=list(ops))


VIEW_NS = 900  # a view op's own time per op in it (aten::transpose > aten::as_strided: 1.8 µs)
FIRST_WINDOW_NS = 6_000  # before a phase's first op: how far back its views may sit


def _place(tree: Op, s: int, l0: int, e: int, slack: int, close_div: int, last_end: int | None) -> list:
    """A forest's ops, or a tree with keep_cover: (op, start, end, depth) as _layout gives them,
    the views of a forest in the Python time between `last_end` (where the thread's previous
    op closed) and `s`, evenly apart, and the launching tree starting late by the views' time
    and by how far its closes reach past `e` (at most 60% of its time before the launch)."""
    pre, core = (tree.children[:-1], tree.children[-1]) if not tree.name else ([], tree)
    extend = 0
    if core.keep_cover:
        extend = max(0, max(z for _, _, z, _ in _layout(core, s, l0, e, slack, close_div)) - e)
    budget = int(0.6 * max(0, l0 - s))
    lo = s - FIRST_WINDOW_NS if last_end is None else min(last_end, s)
    dv = [VIEW_NS * size(v) for v in pre]
    room = min(budget - extend, (s - lo) // 2)  # the views shrink to the op's time and the Python's
    if sum(dv) > room:
        dv = [int(d * max(0, room) / sum(dv)) for d in dv]
    shift = min(budget, sum(dv) + extend)
    out = []
    if pre:
        gap = (s - lo - sum(dv)) / (len(pre) + 1)
        t = lo + gap
        for v, d in zip(pre, dv):
            out.extend(_nest(v, int(t), int(t + d), 0))
            t += d + gap
    return out + _layout(core, s + shift, l0, e, slack, close_div)


def _views(w: list[int], forward: bool = True) -> Op:
    """`.t()` of a weight: a view, no kernel (in forward it makes a node: TBackward0)."""
    n, k = w
    return Op("aten::t", [w], [BF16], autograd=forward, children=[
        Op("aten::transpose", [w, [], []], [BF16, "Scalar", "Scalar"], children=[
            Op("aten::as_strided", [[k, n], [], [], []], [BF16, "ScalarList", "ScalarList", ""])])])


def _rows(elems: int, widths: tuple[int, ...]) -> list[int]:
    """An activation's shape from its element count: [1, rows, width] for the first width
    that divides it (the model's hidden, FFN and vocabulary sizes), else flat."""
    for w in widths:
        if w and elems % w == 0 and elems // w > 0:
            return [1, elems // w, w]
    return [elems]


# Backward nodes: the aten op that launches inside each (and a view beside it where it has one).
_BACKWARD_ATEN = {
    "MulBackward0": "aten::mul", "AddBackward0": "aten::add", "SiluBackward0": "aten::silu_backward",
    "RsqrtBackward0": "aten::mul", "MeanBackward1": "aten::div", "PowBackward0": "aten::mul",
    "ToCopyBackward0": "aten::_to_copy", "NativeLayerNormBackward0": "aten::native_layer_norm_backward",
    "LogSoftmaxBackward0": "aten::_log_softmax_backward_data", "EmbeddingBackward0": "aten::embedding_dense_backward",
    "FlashAttnFuncBackward": "flash_attn::_flash_attn_backward", "CatBackward0": "aten::neg",
    "GeluBackward0": "aten::gelu_backward", "NegBackward0": "aten::neg",
}
_GEMM_BACKWARD = ("MmBackward0", "AddmmBackward0")

# FlashAttention-3 (Dao-AILab/flash-attention hopper/): FlashAttnFunc (an autograd.Function, the
# same name as FA2's) calls the custom ops flash_attn_interface.py registers with
# torch.library.custom_op, flash_attn_3::_flash_attn_forward and ::_flash_attn_backward, and they the
# ops flash_api.cpp registers in TORCH_LIBRARY(flash_attn_3), flash_attn_3::fwd and ::bwd, which
# launch the kernels; torch.profiler records each dispatcher call. FA2's are flash_attn::*. The one
# bwd call launches the preprocess, main and postprocess kernels (and GQA's dK/dV conversions).
FA3_FORWARD, FA3_BACKWARD = "flash_attn_3::_flash_attn_forward", "flash_attn_3::_flash_attn_backward"


def _fa3(kernel: str) -> bool:
    """An FA3 kernel: cutlass::device_kernel<flash::...Sm90...> (FA2's are flash::flash_*_kernel)."""
    return kernel.startswith("void cutlass::device_kernel<flash::")


# F.scaled_dot_product_attention's flash backend (PyTorch 2.x, CUDA): the composite
# aten::scaled_dot_product_attention picks the backend and calls
# aten::_scaled_dot_product_flash_attention, the op with the derivative (tools/autograd/
# derivatives.yaml: query, key, value from _scaled_dot_product_flash_attention_backward, so its
# node is ScaledDotProductFlashAttentionBackward0); its CUDA kernel
# (transformers/cuda/attention.cu) transposes q, k, v to [B, N, heads, D], calls
# aten::_flash_attention_forward, which launches pytorch_flash::flash_fwd_kernel, and transposes
# the output back. Backward (attention_backward.cu) transposes grad_out, q, k, v and out, and its
# one aten::_flash_attention_backward call launches the dot(dO, O), dQ/dK/dV and convert-dQ
# kernels (pytorch_flash::mha_bwd). The names: app/workload.py (SDPA_FORWARD, SDPA_BACKWARD).

# Backward nodes whose one call launches several kernels: (node, the op that launches them).
# A tree per kernel comes in; emit folds a node's later kernels into its first tree's op.
_ONE_CALL_BACKWARD = {("FlashAttnFuncBackward", "flash_attn_3::bwd"),
                      (SDPA_BACKWARD, "aten::_flash_attention_backward")}
_ONE_CALL_NODES = {n for n, _ in _ONE_CALL_BACKWARD}


def _transpose(d: list) -> Op:
    """`.transpose(1, 2)`: a view, no kernel, no node (under the op's autograd kernel)."""
    return Op("aten::transpose", [d, [], []], [BF16, "Scalar", "Scalar"], children=[
        Op("aten::as_strided", [d, [], [], []], [BF16, "ScalarList", "ScalarList", ""])])


def tree_for(spec, widths: tuple[int, ...] = ()) -> Op:
    """The tree of ops around one launching op (a KernelSpec from app/workload.py). A step
    launches the same few hundred specs every layer and step: each tree is made once and
    shared (emit only reads it)."""
    return _tree(spec.op, spec.kernel, spec.flops, tuple(spec.shape) if spec.shape else None, tuple(widths))


@lru_cache(maxsize=4096)
def _tree(op: str, kernel: str, flops: float, shape: tuple | None, widths: tuple[int, ...]) -> Op:
    spec = _Spec(op, kernel, flops, shape)
    ty = F32 if spec.kernel.endswith("<float>") or "float>" in spec.kernel.split("(")[0][-12:] else BF16
    if op.startswith(EV):
        node = op[len(EV):]
        if node in _GEMM_BACKWARD and spec.shape:
            m, n, k = spec.shape
            mm = Op("aten::mm", [[m, k], [k, n]], [BF16, BF16], launches=True)
            return Op(op, autograd=True, children=[Op(node, [[m, n]], [BF16], autograd=True, children=[
                _views([n, k], forward=False), mm])])
        if node == "FlashAttnFuncBackward" and _fa3(kernel):
            d = _rows(int(spec.flops) or 1, widths)
            return Op(op, autograd=True, children=[Op(node, [d], [BF16], autograd=True, children=[
                Op(FA3_BACKWARD, [d] * 6, [BF16] * 5 + [F32], children=[
                    Op("flash_attn_3::bwd", [d] * 6, [BF16] * 5 + [F32], launches=True)])])])
        if node == SDPA_BACKWARD:
            d = _rows(int(spec.flops) or 1, widths)
            return Op(op, autograd=True, children=[Op(node, [d], [BF16], autograd=True, children=[
                Op("aten::_scaled_dot_product_flash_attention_backward", [d] * 6 + [[]] * 9,
                   [BF16] * 5 + [F32] + ["", "", "Scalar", "Scalar", "Scalar", "Scalar", "", "", "Scalar"], children=[
                       *[_transpose(d)] * 5,
                       Op("aten::_flash_attention_backward", [d] * 6 + [[]] * 9,
                          [BF16] * 5 + [F32] + ["", "", "Scalar", "Scalar", "Scalar", "Scalar", "", "", "Scalar"],
                          launches=True)])])])
        aten = _BACKWARD_ATEN.get(node)
        if aten is None:
            return Op(op, None, launches=True)
        d = _rows(int(spec.flops) or 1, widths)
        inner = Op(aten, [d, d], [ty, ty], launches=True)
        if node == "ToCopyBackward0":
            inner = Op("aten::to", [d, [], [], [], []], [ty, "Scalar", "Scalar", "Scalar", "Scalar"], children=[
                Op("aten::_to_copy", [d, [], [], [], [], []], [ty, "Scalar", "", "", "", "Scalar"], children=[
                    Op("aten::empty_strided", [[], [], [], [], [], []], ["ScalarList"] * 2 + [""] * 4),
                    Op("aten::copy_", [d, d, []], [BF16, ty, "Scalar"], launches=True)])])
        return Op(op, autograd=True, children=[Op(node, [d], [ty], autograd=True, children=[inner])])
    if op in ("aten::mm", "aten::addmm") and spec.shape:
        m, n, k = spec.shape
        x, w = [1, m, k], [n, k]
        if op == "aten::addmm":
            return Op("aten::linear", [x, w, [n]], [BF16] * 3, autograd=True, children=[
                _views(w), Op("aten::addmm", [[n], [m, k], [k, n], [], []], [BF16, BF16, BF16, "Scalar", "Scalar"],
                              launches=True, autograd=True)])
        return Op("aten::linear", [x, w, []], [BF16, BF16, ""], autograd=True, children=[
            _views(w),
            Op("aten::matmul", [x, [k, n]], [BF16, BF16], autograd=True, children=[
                Op("aten::view", [x, []], [BF16, "ScalarList"]),
                Op("aten::mm", [[m, k], [k, n]], [BF16, BF16], launches=True),
                Op("aten::_unsafe_view", [[m, n], []], [BF16, "ScalarList"])])])
    d = _rows(int(spec.flops) or 1, widths)
    if op == "aten::embedding":
        ids = [1, d[1] if len(d) == 3 else d[0]]
        return Op("aten::embedding", [[widths[-1] if widths else 1, d[-1]], ids, [], [], []],
                  [BF16, "long int", "Scalar", "Scalar", "Scalar"], autograd=True, children=[
                      Op("aten::reshape", [ids, []], ["long int", "ScalarList"], children=[
                          Op("aten::view", [ids, []], ["long int", "ScalarList"])]),
                      Op("aten::index_select", [[widths[-1] if widths else 1, d[-1]], [], [ids[1]]],
                         [BF16, "Scalar", "long int"], launches=True),
                      Op("aten::view", [[ids[1], d[-1]], []], [BF16, "ScalarList"])])
    if op == "aten::native_layer_norm":
        return Op("aten::layer_norm", [d, [], [d[-1]], [d[-1]], [], []], [ty, "ScalarList", ty, ty, "Scalar", "Scalar"],
                  autograd=True, children=[Op(op, [d, [], [d[-1]], [d[-1]], []], [ty, "ScalarList", ty, ty, "Scalar"],
                                              launches=True)])
    if op == "aten::_log_softmax":
        return Op("aten::log_softmax", [d, [], []], [F32, "Scalar", ""], autograd=True, children=[
            Op(op, [d, [], []], [F32, "Scalar", "Scalar"], launches=True)])
    if op == SDPA_FORWARD:
        return Op(op, [d, d, d, [], [], [], [], []], [BF16] * 3 + ["", "Scalar", "Scalar", "", "Scalar"],
                  autograd=True, children=[
                      Op("aten::_scaled_dot_product_flash_attention", [d, d, d, [], [], [], []],
                         [BF16] * 3 + ["Scalar", "Scalar", "Scalar", ""], autograd=True, children=[
                             *[_transpose(d)] * 3,
                             Op("aten::_flash_attention_forward", [d, d, d] + [[]] * 8,
                                [BF16] * 3 + ["", "", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar", ""],
                                launches=True),
                             _transpose(d)])])
    if op == "FlashAttnFunc":
        if _fa3(kernel):
            return Op("FlashAttnFunc", autograd=True, children=[
                Op(FA3_FORWARD, [d, d, d], [BF16] * 3, children=[Op("flash_attn_3::fwd", [d, d, d], [BF16] * 3,
                                                                     launches=True)])])
        return Op("FlashAttnFunc", autograd=True, children=[
            Op("flash_attn::_flash_attn_forward", [d, d, d], [BF16] * 3, launches=True)])
    if op.startswith("aten::"):
        return Op(op, [d, d], [ty, ty], launches=True, autograd=True)
    return Op(op, None, launches=True)


# The forward op whose backward node each is (the root of its forward tree).
_FORWARD_OF = {"MmBackward0": "aten::linear", "AddmmBackward0": "aten::linear", "MulBackward0": "aten::mul",
               "AddBackward0": "aten::add", "SiluBackward0": "aten::silu", "RsqrtBackward0": "aten::rsqrt",
               "MeanBackward1": "aten::mean", "PowBackward0": "aten::pow", "NegBackward0": "aten::neg",
               "CatBackward0": "aten::cat", "GeluBackward0": "aten::gelu", "EmbeddingBackward0": "aten::embedding",
               "LogSoftmaxBackward0": "aten::log_softmax", "NativeLayerNormBackward0": "aten::layer_norm",
               "FlashAttnFuncBackward": "FlashAttnFunc", SDPA_BACKWARD: SDPA_FORWARD}


class _Spec(NamedTuple):  # what of a KernelSpec its tree depends on (KernelSpec itself is unhashable)
    op: str
    kernel: str
    flops: float
    shape: tuple | None


class Autograd:
    """A step's sequence numbers: each forward tree that makes an autograd node takes the
    next; a backward node takes back the latest forward op of its kind not yet taken
    (backward runs the graph in reverse), and a fwdbwd flow joins the pair. A node whose
    forward op the trace does not show (a dtype cast inside a fused op) takes a number of
    its own, with no flow."""

    def __init__(self, b: TraceBuilder, first: int, recompute_first: int = 0):
        self.b = b
        self.next = int(first)
        # The autograd thread's own counter (at::sequence_number is thread_local): what forward
        # ops rerun in backward under activation checkpointing take (`recompute`).
        self.recompute_next = int(recompute_first)
        # forward trees not yet taken, by root name: (seq, pid, tid, ts), latest last
        self.made: dict[str, list[tuple[int, int, int, int]]] = {}

    def forward(self, name: str, pid: int, tid: int, ts: int) -> int:
        seq = self.next
        self.next += 1
        self.made.setdefault(name, []).append((seq, pid, tid, ts))
        return seq

    def recompute(self) -> int:
        """A forward op rerun inside backward by activation checkpointing. torch/utils/checkpoint.py
        (non-reentrant) reruns the layer in the saved-tensor unpack hook under
        torch.autograd.enable_grad(), on the autograd thread: each op records the sequence number
        the dispatcher peeks when grad mode is on (Dispatcher::sequenceNumberForRunningRecordFunction)
        from that thread's counter (ATen/SequenceNumber.cpp: thread_local), its "Fwd thread id" is
        0 as for any forward op, and no flow leaves it: the recomputed graph's nodes never run
        backward (the original forward's nodes do, with the recomputed tensors)."""
        seq = self.recompute_next
        self.recompute_next += 1
        return seq

    def backward(self, node: str, pid: int, tid: int, ts: int) -> int:
        waiting = self.made.get(_FORWARD_OF.get(node))
        if waiting:
            seq, fpid, ftid, fts = waiting.pop()
            self.b.flow("fwdbwd", seq, (fpid, ftid, fts), (pid, tid, ts))
            return seq
        seq = self.next
        self.next += 1
        return seq


def emit(b: TraceBuilder, trees: list[Op], *, pid: int, tid: int, op_start: np.ndarray, launch_start: np.ndarray,
         op_end: np.ndarray, next_start: np.ndarray, ext: np.ndarray, autograd: Autograd | None = None,
         backward: bool = False, close_div: int = 3, keep_cover: bool = False) -> np.ndarray:
    """Lay out and add each launching op's tree: the op that launches keeps the phase's
    External id and ends where the flat op ended; the others get their own. A backward GEMM's
    two launches (data and weight gradients) share one evaluate_function and node; an FA3
    backward node's launches all sit in its one flash_attn_3::bwd, an SDPA flash node's in its
    one aten::_flash_attention_backward (_ONE_CALL_BACKWARD). In backward, a tree that is
    not a backward node is a forward op rerun by activation checkpointing (Autograd.recompute).
    What follows the launching op and each ancestor's close take at most 1/close_div of the
    Python time after the op (a caller whose host draws leave little of it keeps more as a gap).
    Returns each launch's External id (a launch inside an earlier launch's op takes that op's)."""
    ext = np.array(ext, copy=True)
    rows: list[list] = []  # [op, start, end, launch ext or -1, seq or None, fwd thread id]
    pair_head = None  # rows index of the open pair's evaluate_function
    one_call = None  # rows indices of the open one-call backward node's path (evaluate_function first)
    root_row = None  # rows index where the latest tree starts (a tree that joins_previous extends its op)
    last_end = None  # keep_cover: where the thread's last op closed
    for i, tree in enumerate(trees):
        s, l0, e = int(op_start[i]), int(launch_start[i]), int(op_end[i])
        slack = max(0, int(next_start[i]) - e)
        node = tree.name[len(EV):] if tree.name.startswith(EV) else None
        gemm_bwd = backward and node in _GEMM_BACKWARD
        path = _path(tree) if backward and node in _ONE_CALL_NODES else None
        fused = path is not None and (node, path[-1].name) in _ONE_CALL_BACKWARD
        if fused and one_call is not None:  # the same call's next kernel (flash_attn_3::bwd, _flash_attention_backward)
            chain = [rows[j] for j in one_call]
            ext[i] = chain[-1][3]
            step = max(1, min(400, slack // 6))
            for depth, r in enumerate(reversed(chain)):
                r[2] = max(r[2], e + depth * step)
            continue
        one_call = None
        if gemm_bwd and pair_head is not None and rows[pair_head][0].name == tree.name:
            body = _layout(Op("", children=tree.children[0].children), s, l0, e, slack, close_div)[1:]  # a new root
            rows.extend([op, a, z, int(ext[i]) if op.launches else -1, None, 0] for op, a, z, _ in body)
            close = max(r[2] for r in rows[pair_head:])
            rows[pair_head + 1][2] = close + max(1, min(400, slack // 6))
            rows[pair_head][2] = close + 2 * max(1, min(400, slack // 6))
            pair_head = None
            continue
        seq, fwd_tid = None, 0
        if autograd is not None and numbered(tree):
            if not backward:
                seq = autograd.forward(tree.name, pid, tid, s)
            elif node is None:  # recomputed under checkpointing: a forward op on this thread
                seq = autograd.recompute()
            else:
                seq, fwd_tid = autograd.backward(node, pid, tid, s), 1
        pair_head = len(rows) if gemm_bwd else None
        if keep_cover:  # forests and keep_cover trees placed apart (_place)
            laid = _place(tree, s, l0, e, slack, close_div, last_end)
            last_end = max(z for _, _, z, _ in laid)
        else:
            laid = _layout(tree, s, l0, e, slack, close_div)
        if tree.joins_previous and root_row is not None:  # the previous root still open: its ops under it
            head = next(j for j in range(len(rows) - 1, root_row - 1, -1) if rows[j][0].name == tree.name)
            rows[head][2] = max(rows[head][2], laid[0][2])
            rows.extend([op, a, z, int(ext[i]) if op.launches else -1, None, 0] for op, a, z, _ in laid[1:])
            continue
        root_row = len(rows)
        if fused:  # the path's rows, the views beside it left out
            one_call = [len(rows) + j for j, (op, _, _, _) in enumerate(laid) if any(op is p for p in path)]
        rows.extend([op, a, z, int(ext[i]) if op.launches else -1, seq if op.autograd else None, fwd_tid]
                    for op, a, z, _ in laid)
    fresh = iter(b.external_ids(sum(1 for r in rows if r[3] < 0)).tolist())
    extras = []
    for op, _, _, _, seq, fwd_tid in rows:
        args = op.args()
        if seq is not None:
            args = {**args, "Sequence number": seq, "Fwd thread id": fwd_tid}
        extras.append(args or None)
    b.add(Kind.CPU, "cpu_op", [r[0].name for r in rows], pid, tid, [r[1] for r in rows],
          [max(r[2] - r[1], 1) for r in rows], ext=[r[3] if r[3] >= 0 else next(fresh) for r in rows], extra=extras)
    return ext


def numbered(tree: Op) -> bool:
    """Whether the tree makes (forward) or is (backward) an autograd node: it takes a sequence number."""
    return any(op.autograd for op in _walk(tree))


def _walk(op: Op):
    yield op
    for c in op.children:
        yield from _walk(c)


def _layout(tree: Op, s: int, l0: int, e: int, slack: int, close_div: int = 3) -> list[tuple[Op, int, int, int]]:
    """(op, start, end, depth) for each op of the tree: the path to the launching op starts in
    turn across the first 55% of the time before the launch, the ops beside it that come
    first (views) share that time, the launching op runs to `e` as the flat op did, what
    comes after it (a view of the result) and each ancestor's close take the Python time
    after, at most a third of it."""
    path, idx, units, n_after, after_size = _shape(tree)
    before_ns = max(0, int((l0 - s) * 0.55))
    unit = before_ns / units
    after_ns = min(slack // close_div, 2_000 * (n_after + len(path)))
    a_unit = after_ns / (after_size + len(path)) if after_ns else 0
    out: list = []
    t = float(s)
    for depth, (node, i) in enumerate(zip(path, idx)):
        out.append([node, int(t), None, depth])
        t += unit
        for c in node.children[:i]:  # siblings a little apart, never touching
            n = size(c)
            out.extend(_nest(c, int(t + unit * 0.1), int(t + unit * (n - 0.1)), depth + 1))
            t += unit * n
    out.append([path[-1], int(t), e, len(path) - 1])
    if path[-1].children:  # what the launching op calls before it launches (its output's allocation)
        inner = (l0 - t) / (sum(size(c) for c in path[-1].children) + 1)
        u = t + inner / 2
        for c in path[-1].children:
            out.extend(_nest(c, int(u + inner * 0.1), int(u + inner * (size(c) - 0.1)), len(path)))
            u += inner * size(c)
    t = float(e)
    for depth in range(len(path) - 2, -1, -1):  # close each ancestor, after the ops that follow its child
        node = path[depth]
        for c in node.children[idx[depth] + 1:]:
            n = size(c)
            out.extend(_nest(c, int(t + a_unit * 0.2), int(t + a_unit * n), depth + 1))
            t += a_unit * n
        t += max(a_unit, 1)
        next(r for r in out if r[0] is node)[2] = int(t)
    return [tuple(r) for r in out]


def _shape(tree: Op) -> tuple:
    """The path to the launching op, the place of each step of it among its parent's children,
    the time units before the launch, and the count and size of the ops after it (worked out
    once per tree, as _path and size are: the builders share each tree across its launches)."""
    if "shape" not in tree._memo:
        path = _path(tree)
        idx = [node.children.index(nxt) for node, nxt in zip(path, path[1:])]
        units = sum(1 + sum(size(c) for c in node.children[:i]) for node, i in zip(path, idx)) or 1
        after = [c for node, i in zip(path, idx) for c in node.children[i + 1:]]
        tree._memo["shape"] = (path, idx, units, len(after), sum(size(c) for c in after))
    return tree._memo["shape"]


def _path(tree: Op) -> list[Op]:
    if "path" not in tree._memo:
        tree._memo["path"] = _find_path(tree)
    return tree._memo["path"]


def _find_path(tree: Op) -> list[Op]:
    if tree.launches:
        return [tree]
    for c in tree.children:
        p = _find_path(c)
        if p:
            return [tree, *p]
    return []


def size(op: Op) -> int:
    """How many events the tree emits: the op and every op under it (a forest's root none)."""
    if "size" not in op._memo:
        op._memo["size"] = (1 if op.name else 0) + sum(size(c) for c in op.children)
    return op._memo["size"]


def events(tree: Op) -> int:
    """How many cpu_op events the tree emits (a root that joins the previous launch's emits none)."""
    return size(tree) - tree.joins_previous


def _nest(op: Op, a: int, z: int, depth: int) -> list:
    """An op with no launch (a view) over [a, z], its children nested inside it in turn."""
    out = [[op, a, max(z, a + 1), depth]]
    if op.children:
        pad = max(1, (z - a) // 10)
        span = (z - a - 2 * pad) / max(1, len(op.children))
        for j, c in enumerate(op.children):
            out.extend(_nest(c, int(a + pad + j * span), int(a + pad + (j + 0.9) * span), depth + 1))
    return out
