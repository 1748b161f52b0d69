"""Signal family: Fft and Stft through the FFT plans of signal_fft.py; LogMel, LogMelBackward and
WelchPeaks through their own kernels (signal_mel.py, signal_welch.py); ComplexView is a word copy.

F64 data (WGSL has no f64) and an Fft or Stft without its plan table (a graph that skipped the unfuse
pass) run as host steps.
"""

from __future__ import annotations

from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Graph, Node
from rlxpy.ir.shape import normalize_axis
from rlxpy.wgpu_backend.host_step import host_steps
from rlxpy.wgpu_backend.lowering.elementwise import copy_step
from rlxpy.wgpu_backend.lowering.signal_fft import (
    FftJob,
    Lines,
    Source,
    axis_lines,
    fft_steps,
    scale_of,
    scratch_words,
)
from rlxpy.wgpu_backend.lowering.signal_mel import log_mel_backward_steps, log_mel_steps, mel_scratch, on_gpu
from rlxpy.wgpu_backend.lowering.signal_welch import welch_peaks_steps, welch_scratch
from rlxpy.wgpu_backend.schedule import DeviceFacts, LowerCtx, Step, lowers

#: The WebGPU minimum of workgroup memory: scratch is sized for it (a larger device needs less).
_MIN_FACTS = DeviceFacts()


def _fft_lines(node: Node, x: Node) -> tuple[int, int]:
    """(transform length, number of lines) of an Fft node on input ``x``."""
    op: ops.Fft = node.op  # type: ignore[assignment]
    n = op.length(x.type)
    axis_len = x.shape[normalize_axis(op.axis, x.rank)]
    if x.dtype is not DType.C64 and not op.real:
        axis_len = 2 * n  # block layout: a row of 2N words is one line
    return n, x.numel // max(1, axis_len)


def fft_scratch(node: Node, graph: Graph) -> int:
    x = graph.nodes[node.inputs[0]]
    if isinstance(node.op, ops.Stft):
        lines = node.numel // node.shape[-1]
        return 4 * scratch_words(node.op.n_fft, lines, _MIN_FACTS)
    n, lines = _fft_lines(node, x)
    return 4 * scratch_words(n, lines, _MIN_FACTS)


@lowers(ops.Fft, scratch=fft_scratch)
def lower_fft(node: Node, ctx: LowerCtx) -> list[Step]:
    """torch.fft.fft / ifft / rfft / irfft along any axis (see ops.Fft)."""
    op: ops.Fft = node.op  # type: ignore[assignment]
    inputs = ctx.inputs(node)
    x = inputs[0]
    if x.dtype is DType.F64 or len(inputs) < 2:
        return host_steps(node, ctx)
    n, lines = _fft_lines(node, x)
    if lines == 0:
        return []
    axis = normalize_axis(op.axis, x.rank)
    if not op.real and x.dtype is DType.F32:  # the block layout: re block, then im block, per row
        source = Source("complex", Lines(ctx.offset(x), outer=2 * n, elem=1, im=n))
        store, target, out_len = "complex", Lines(ctx.offset(node), outer=2 * n, elem=1, im=n), n
    elif not op.real:
        source = Source("complex", axis_lines(ctx.offset(x), x.shape, axis, True))
        store, target, out_len = "complex", axis_lines(ctx.offset(node), node.shape, axis, True), n
    elif not op.inverse:
        source = Source("real", axis_lines(ctx.offset(x), x.shape, axis, False))
        target = axis_lines(ctx.offset(node), node.shape, axis, True)
        store, out_len = "complex", node.shape[axis]
    else:
        source = Source("hermitian", axis_lines(ctx.offset(x), x.shape, axis, True),
                        {"n_full": n, "bins": x.shape[axis]})
        store, target, out_len = "real", axis_lines(ctx.offset(node), node.shape, axis, False), n
    job = FftJob(node, inputs[1], n, lines, source, store, target, out_len, op.inverse,
                 scale_of(n, op.inverse, op.norm))
    return fft_steps(job, ctx)


@lowers(ops.Stft, scratch=fft_scratch)
def lower_stft(node: Node, ctx: LowerCtx) -> list[Step]:
    """torch.stft (framing, padding and window in the FFT's loader; see ops.Stft)."""
    op: ops.Stft = node.op  # type: ignore[assignment]
    inputs = ctx.inputs(node)
    if len(inputs) < 3:
        return host_steps(node, ctx)
    signal, window, table = inputs
    frames, bins = node.shape[-2], node.shape[-1]
    lines = node.numel // bins
    if lines == 0:
        return []
    length = signal.shape[-1]
    source = Source("frame", Lines(ctx.offset(signal), inner=frames, outer=length, inner_w=op.hop, elem=1,
                                   im=0),
                    {"n_full": length, "pad": op.padding(), "pad_mode": int(op.pad_mode == "reflect"),
                     "window": ctx.offset(window)})
    target = Lines(ctx.offset(node), outer=2 * bins)
    job = FftJob(node, table, op.n_fft, lines, source, "complex", target, bins, False,
                 scale_of(op.n_fft, False, op.norm))
    return fft_steps(job, ctx)


@lowers(ops.ComplexView)
def lower_complex_view(node: Node, ctx: LowerCtx) -> list[Step]:
    """c64 <-> f32 pairs: the bytes are the same, so a copy of the words."""
    (x,) = ctx.inputs(node)
    return [copy_step(node, ctx, x, node, node.nbytes)] if node.numel else []


@lowers(ops.LogMel, scratch=mel_scratch)
def lower_log_mel(node: Node, ctx: LowerCtx) -> list[Step]:
    """Whisper's log-mel of spectra, the floor per frame or per spectrogram (see ops.LogMel)."""
    return log_mel_steps(node, ctx) if on_gpu(node, ctx.graph) else host_steps(node, ctx)


@lowers(ops.LogMelBackward, scratch=mel_scratch)
def lower_log_mel_backward(node: Node, ctx: LowerCtx) -> list[Step]:
    """LogMel's gradient wrt the spectrum, the floor held constant (see ops.LogMelBackward)."""
    return log_mel_backward_steps(node, ctx) if on_gpu(node, ctx.graph) else host_steps(node, ctx)


@lowers(ops.WelchPeaks, scratch=welch_scratch)
def lower_welch_peaks(node: Node, ctx: LowerCtx) -> list[Step]:
    """The k strongest bins of each batch row's Welch PSD (see ops.WelchPeaks)."""
    return welch_peaks_steps(node, ctx)
