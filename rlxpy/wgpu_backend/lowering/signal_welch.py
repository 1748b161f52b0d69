"""WelchPeaks on the GPU: the averaged one-sided PSD, one invocation per (batch, bin), into arena scratch
(signal_welch_psd), then the k best bins per batch row, one workgroup per row picking k times like
reduce_topk (signal_welch_topk; rounds split over dispatches within lavapipe's loop budget)."""

from __future__ import annotations

import math

from rlxpy.errors import LimitError, where
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Graph, Node
from rlxpy.ir.ops.signal import spectrum_length
from rlxpy.wgpu_backend.kernels.contract import accepts
from rlxpy.wgpu_backend.kernels.params import U32, kernel, params
from rlxpy.wgpu_backend.lowering.reduce import chunks, row_lanes, steps_per_dispatch
from rlxpy.wgpu_backend.schedule import LowerCtx, Step

_IN = accepts((DType.F32, DType.C64), out=DType.F32)
SIGNAL_WELCH_PSD = kernel("signal_welch_psd", params(
    "SignalWelchPsdParams", batch=U32, bins=U32, segments=U32, n_fft=U32, spec=U32, spec_row=U32,
    spec_elem=U32, spec_im=U32, psd=U32), dtypes=_IN)
SIGNAL_WELCH_TOPK = kernel("signal_welch_topk", params(
    "SignalWelchTopkParams", batch=U32, bins=U32, k=U32, round_start=U32, round_count=U32, psd=U32, y=U32),
    dtypes=_IN, shared_bytes=lambda s: 8 * int(s["WG"]))


def welch_scratch(node: Node, graph: Graph) -> int:
    """Bytes of the PSD [batch, n_fft//2 + 1]."""
    spectrum = graph.nodes[node.inputs[0]]
    n_fft = spectrum_length(spectrum.type, "welch_peaks")
    return 4 * node.shape[0] * (n_fft // 2 + 1)


def welch_peaks_steps(node: Node, ctx: LowerCtx) -> list[Step]:
    (spectrum,) = ctx.inputs(node)
    op = node.op
    n_fft = spectrum_length(spectrum.type, "welch_peaks")
    bins, batch, k = n_fft // 2 + 1, node.shape[0], op.k  # type: ignore[attr-defined]
    if batch == 0:
        return []
    if spectrum.dtype is DType.C64:
        row, elem, im = 2 * n_fft, 2, 1
    else:
        row, elem, im = 2 * n_fft, 1, n_fft
    base, size = ctx.scratch
    if 4 * batch * bins > size or base < ctx.window_base:
        raise LimitError(f"{where(node)}: needs {4 * batch * bins} B of arena scratch for the PSD, {size} B "
                         "are free in its binding")
    psd = (base - ctx.window_base) // 4
    steps_per_dispatch(node, op.n_segments, 16, "WelchPeaks")  # type: ignore[attr-defined]
    steps = [ctx.dispatch(SIGNAL_WELCH_PSD, node, ctx.grid_1d(batch * bins), scalable=False, batch=batch,
                          bins=bins, segments=op.n_segments, n_fft=n_fft, spec=ctx.offset(spectrum),  # type: ignore
                          spec_row=row, spec_elem=elem, spec_im=im, psd=psd)]
    lanes = row_lanes(bins)
    per_round = math.ceil(bins / lanes) + int(math.log2(lanes)) + 1
    rounds = steps_per_dispatch(node, per_round, 16, "WelchPeaks")
    return steps + [ctx.dispatch(SIGNAL_WELCH_TOPK, node, ctx.grid_rows(batch), {"WG": lanes}, scalable=False,
                                 batch=batch, bins=bins, k=k, round_start=start, round_count=count, psd=psd,
                                 y=ctx.offset(node))
                    for start, count in chunks(k, rounds)]
