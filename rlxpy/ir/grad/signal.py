"""Gradient rules of the signal family: Fft (every kind and norm), Stft, LogMel, WelchPeaks, ComplexView.

A complex tensor's gradient is complex, ``dL/d re + i dL/d im`` (torch's convention for a real
loss), so a C-linear map ``y = c A z`` has the adjoint ``dz = c A^H dy``. The DFT matrix is
symmetric, so A^H is the DFT of the other direction: every gradient is an Fft again, unscaled
(BACKWARD) with the forward's scale c folded into a multiply (c: 1, 1/N for FORWARD's inverse,
1/sqrt(N) for ORTHO). The real transforms weight the one-sided bins:

* rfft's adjoint is ``Re(R^H dy)`` over the one-sided rows R of the DFT: irfft of dy with bins
  1 .. ceil(N/2)-1 halved (irfft counts each of them twice, as the bin and its mirror; DC and the
  Nyquist bin once);
* irfft's is ``a_k rfft(dy)_k``, a_k = 2 for the bins irfft mirrors and 1 for DC and (even n) the
  Nyquist bin, whose imaginary parts irfft ignores (gradient 0); bins past n//2 get 0.

The weighting runs on the F32 view of the spectrum (view_as_real), which the element-wise ops take.
A spectrum that fans out would need a C64 sum, which no kernel does: that is an error at the sum.

Stft is the rfft (or full fft) of frames ``w[t] x[src(f*hop + t)]``, src reading the padded signal
from x (reflected, or masked to 0 for constant padding): the frames' gradient is the transform's
adjoint as above, the window's the sum over frames of it times the frames, and the signal's a
GatherBackward (a scatter-add) of it times the window through the same index table.

LogMel's rule recomputes its power, energies and logs in primitives and differentiates every branch
as torch's autograd of whisper's formula does: a mel above the floor takes dy/4, one below it hands
dy/4 to the floor, which is the maximum minus 8, so to the maximal logs (shared evenly by ties, as
amax); a tie with the floor splits in half (torch.maximum); energies below the clamp get 0. Its
filters get ``sum dE P^T``. (LogMelBackward, the kernel for a hand-built backward, treats the floor
as a constant.)

WelchPeaks' rule differentiates the powers it outputs through the PSD at the bins it chose; the bins
themselves (the output's index entries) are constants of the choice, as torch.topk's indices are, so
their gradient is dropped.
"""

from __future__ import annotations

import math

import numpy as np

from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.grad.core import GradContext, vjp
from rlxpy.ir.graph import Node
from rlxpy.ir.ops.base import ActKind, CmpOp, FftNorm, ReduceOp
from rlxpy.ir.ops.signal import LOG_MEL_MIN_ENERGY, LOG_MEL_RANGE, block_length, spectrum_length
from rlxpy.ir.shape import normalize_axis


def scale_of(norm: FftNorm, inverse: bool, n: int) -> float:
    """The factor an Fft of length n applies in that direction."""
    if norm is FftNorm.ORTHO:
        return 1.0 / math.sqrt(n)
    if norm is FftNorm.FORWARD and inverse:
        return 1.0 / n
    return 1.0


def _transform(ctx: GradContext, node: Node, x: Node, op: ops.Fft) -> Node:
    """``op`` applied to x, with the forward's plan table when it has one (same length N)."""
    table = ctx.inputs(node)[1:]
    return ctx.g.apply(op, [x, *table])


def _weighted(ctx: GradContext, spectrum: Node, axis: int, weights: np.ndarray, name: str | None) -> Node:
    """A C64 spectrum times real per-bin (re, im) weights [bins, 2] along ``axis``: on its F32 view."""
    pairs = ctx.g.view_as_real(spectrum)
    shape = [1] * pairs.rank
    shape[axis], shape[-1] = weights.shape
    scaled = ctx.mul(pairs, ctx.g.constant(weights.reshape(shape), dtype=DType.F32))
    return ctx.g.view_as_complex(scaled, name)


def _fit_bins(ctx: GradContext, pairs: Node, axis: int, bins: int) -> Node:
    """The F32 view of a spectrum cut or zero-padded to ``bins`` along ``axis``."""
    have = pairs.shape[axis]
    if have > bins:
        return ctx.g.narrow(pairs, axis, 0, bins)
    if have < bins:
        return ctx.g.concat([pairs, ctx.zeros_shaped(pairs, axis, bins - have)], axis)
    return pairs


def _complex_grad(ctx: GradContext, node: Node, dy: Node, axis: int, scale: float, name: str) -> Node:
    op: ops.Fft = node.op  # type: ignore[assignment]
    dx = _transform(ctx, node, dy, ops.Fft(not op.inverse, FftNorm.BACKWARD, op.axis))
    if scale == 1.0:
        return dx
    if dx.dtype is DType.C64:
        return _weighted(ctx, dx, axis, np.full((dx.shape[axis], 2), scale), name)
    return ctx.mul(dx, scale, name)


def _rfft_grad(ctx: GradContext, node: Node, dy: Node, axis: int, scale: float, name: str) -> Node:
    op: ops.Fft = node.op  # type: ignore[assignment]
    x = ctx.input(node, 0)
    n = x.shape[axis]
    if not op.onesided:  # Re(W^H dy): the real part of the unscaled inverse
        full = ctx.g.view_as_real(_transform(ctx, node, dy, ops.Fft(True, FftNorm.BACKWARD, op.axis)))
        dx = ctx.g.reshape(ctx.g.narrow(full, full.rank - 1, 0, 1), x.shape)
        return ctx.mul(dx, scale, name) if scale != 1.0 else dx
    halve = np.full((dy.shape[axis], 2), 0.5 * scale)
    halve[0] = scale
    if n % 2 == 0:
        halve[n // 2] = scale
    weighted = _weighted(ctx, dy, axis, halve, None)
    back = ops.Fft(True, FftNorm.BACKWARD, op.axis, real=True, n=n)
    return ctx.g.reshape(_transform(ctx, node, weighted, back), x.shape, name)


def _irfft_grad(ctx: GradContext, node: Node, dy: Node, axis: int, scale: float, name: str) -> Node:
    """x has M bins, the output n samples: a_k rfft(dy)_k, cut or zero-padded to M bins."""
    op: ops.Fft = node.op  # type: ignore[assignment]
    x = ctx.input(node, 0)
    n, bins = op.length(x.type), x.shape[axis]
    spectrum = _transform(ctx, node, dy, ops.Fft(False, FftNorm.BACKWARD, op.axis, real=True))
    pairs = _fit_bins(ctx, ctx.g.view_as_real(spectrum), axis, bins)
    weights = np.zeros((bins, 2))
    used = min(bins, n // 2 + 1)
    weights[:used] = 2.0 * scale
    weights[0] = (scale, 0.0)
    if n % 2 == 0 and n // 2 < used:
        weights[n // 2] = (scale, 0.0)
    shape = [1] * pairs.rank
    shape[axis], shape[-1] = weights.shape
    scaled = ctx.mul(pairs, ctx.g.constant(weights.reshape(shape), dtype=DType.F32))
    return ctx.g.view_as_complex(scaled, name)


@vjp(ops.Fft)
def grad_fft(ctx: GradContext, node: Node, dy: Node) -> list[Node | None]:
    op: ops.Fft = node.op  # type: ignore[assignment]
    x = ctx.input(node, 0)
    scale = scale_of(op.norm, op.inverse, op.length(x.type))
    axis = normalize_axis(op.axis, x.rank)
    rule = _complex_grad if not op.real else _irfft_grad if op.inverse else _rfft_grad
    return [rule(ctx, node, dy, axis, scale, ctx.name(node, "x"))] + [None] * (len(node.inputs) - 1)


def _frame_table(op: ops.Stft, length: int, frames: int) -> tuple[np.ndarray, np.ndarray]:
    """([frames, n_fft] source index into x of every frame sample, whether it is a real sample (not
    constant padding))."""
    pos = np.arange(frames)[:, None] * op.hop + np.arange(op.n_fft)[None, :] - op.padding()
    inside = (pos >= 0) & (pos < length)
    if op.pad_mode == "reflect":
        pos = np.where(pos < 0, -pos, pos)
        pos = np.where(pos >= length, 2 * (length - 1) - pos, pos)
        inside = np.ones_like(inside)
    return np.clip(pos, 0, length - 1).astype(np.int32), inside


@vjp(ops.Stft)
def grad_stft(ctx: GradContext, node: Node, dy: Node) -> list[Node | None]:
    op: ops.Stft = node.op  # type: ignore[assignment]
    x, window = ctx.input(node, 0), ctx.input(node, 1)
    g = ctx.g
    axis = node.rank - 1
    frames, length = node.shape[-2], x.shape[-1]
    scale = 1.0 / math.sqrt(op.n_fft) if op.norm is FftNorm.ORTHO else 1.0
    table = ctx.inputs(node)[2:]
    if op.onesided:  # the rfft's adjoint: irfft of the half-weighted bins
        halve = np.full((node.shape[-1], 2), 0.5 * scale)
        halve[0] = scale
        if op.n_fft % 2 == 0:
            halve[op.n_fft // 2] = scale
        weighted = _weighted(ctx, dy, axis, halve, None)
        dframes = g.apply(ops.Fft(True, FftNorm.BACKWARD, -1, real=True, n=op.n_fft), [weighted, *table])
    else:  # the full fft's: the real part of the unscaled inverse
        full = g.view_as_real(g.apply(ops.Fft(True, FftNorm.BACKWARD, -1), [dy, *table]))
        dframes = g.reshape(g.narrow(full, full.rank - 1, 0, 1), tuple(node.shape[:-1]) + (op.n_fft,))
        if scale != 1.0:
            dframes = ctx.mul(dframes, scale)
    index, inside = _frame_table(op, length, frames)
    mask = None if inside.all() else g.constant(inside.astype(np.float32), dtype=DType.F32)
    if mask is not None:
        dframes = ctx.mul(dframes, mask)
    grads: list[Node | None] = [None] * len(node.inputs)
    index_node = g.constant(index, dtype=DType.I32)
    if ctx.needs(node, 0):
        spread = ctx.mul(dframes, window)
        grads[0] = g.gather_backward(spread, index_node, length, x.rank - 1, ctx.name(node, "x"))
    if ctx.needs(node, 1):
        samples = g.gather(x, index_node, x.rank - 1)  # [..., frames, n_fft]
        grads[1] = ctx.sum_to(ctx.mul(dframes, samples), (op.n_fft,), ctx.name(node, "window"))
    return grads


def _spectrum_parts(ctx: GradContext, spectrum: Node, bins: int) -> tuple[Node, Node]:
    """(re, im) [..., bins] of a C64 spectrum or of the first bins of a block-layout one."""
    g = ctx.g
    if spectrum.dtype is DType.C64:
        pairs = g.view_as_real(spectrum)
        last = pairs.rank - 1
        shape = tuple(spectrum.shape)
        return (g.reshape(g.narrow(pairs, last, 0, 1), shape), g.reshape(g.narrow(pairs, last, 1, 1), shape))
    n = block_length(spectrum.type, "log_mel")
    last = spectrum.rank - 1
    return g.narrow(spectrum, last, 0, bins), g.narrow(spectrum, last, n, bins)


def _mask(ctx: GradContext, a: Node, b: Node | float, op: CmpOp, like: Node) -> Node:
    return ctx.g.cast(ctx.compare(a, b, op), like.dtype)


def _log_mel_dlogs(ctx: GradContext, node: Node, logs: Node, dy: Node) -> Node:
    """d loss / d logs through ``(max(L, max L - 8) + 4) / 4`` (whisper's floor, differentiated)."""
    axes = (logs.rank - 1,) if node.op.floor_axes == 1 else (logs.rank - 2, logs.rank - 1)
    top = ctx.g.apply(ops.Reduce(ReduceOp.MAX, axes, True), [logs])
    floor = ctx.sub(top, LOG_MEL_RANGE)
    quarter = ctx.mul(dy, 0.25)
    tie = ctx.mul(_mask(ctx, logs, floor, CmpOp.EQ, logs), 0.5)
    share = ctx.add(_mask(ctx, logs, floor, CmpOp.GT, logs), tie)
    to_floor = ctx.reduce_sum(ctx.mul(quarter, ctx.sub(ctx.scalar(1.0, logs), share)), axes, keep_dim=True)
    is_top = _mask(ctx, logs, top, CmpOp.EQ, logs)
    per_top = ctx.div(to_floor, ctx.reduce_sum(is_top, axes, keep_dim=True))
    return ctx.add(ctx.mul(quarter, share), ctx.mul(is_top, per_top))


@vjp(ops.LogMel)
def grad_log_mel(ctx: GradContext, node: Node, dy: Node) -> list[Node | None]:
    spectrum, filters = ctx.inputs(node)
    g = ctx.g
    bins = filters.shape[1]
    re, im = _spectrum_parts(ctx, spectrum, bins)
    power = ctx.add(ctx.mul(re, re), ctx.mul(im, im))
    energy = g.matmul(power, g.transpose(filters, (1, 0)))
    clamped = g.maximum(energy, LOG_MEL_MIN_ENERGY)
    logs = ctx.div(g.activation(clamped, ActKind.LOG), math.log(10.0))
    d_logs = _log_mel_dlogs(ctx, node, logs, dy)
    kept = _mask(ctx, energy, LOG_MEL_MIN_ENERGY, CmpOp.GE, energy)
    d_energy = ctx.mul(ctx.div(d_logs, ctx.mul(clamped, math.log(10.0))), kept)
    grads: list[Node | None] = [None, None]
    if ctx.needs(node, 0):
        twice = ctx.mul(g.matmul(d_energy, filters), 2.0)  # d power, doubled: d re = 2 re dP
        if spectrum.dtype is DType.C64:
            pairs = g.view_as_real(spectrum)
            scaled = ctx.mul(pairs, g.reshape(twice, tuple(twice.shape) + (1,)))
            grads[0] = g.view_as_complex(scaled, ctx.name(node, "spectrum"))
        else:
            n, last = block_length(spectrum.type, "log_mel"), spectrum.rank - 1
            pieces = [ctx.mul(re, twice), ctx.mul(im, twice)]
            if n > bins:
                gap = ctx.zeros_shaped(re, last, n - bins)
                pieces = [pieces[0], gap, pieces[1], gap]
            grads[0] = g.concat(pieces, last, ctx.name(node, "spectrum"))
    if ctx.needs(node, 1):
        rows = math.prod(power.shape[:-1])
        d_rows = g.reshape(d_energy, (rows, filters.shape[0]))
        grads[1] = g.matmul(g.transpose(d_rows, (1, 0)), g.reshape(power, (rows, bins)),
                            ctx.name(node, "filters"))
    return grads


@vjp(ops.WelchPeaks)
def grad_welch_peaks(ctx: GradContext, node: Node, dy: Node) -> list[Node | None]:
    """out[b, 2j] = bin_j (no gradient), out[b, 2j + 1] = psd[b, bin_j] with psd[b, n] = c_n / S
    sum_s |X_{b,s}[n]|^2 (c_n = 2 but for DC and an even n_fft's Nyquist bin, S segments): the power
    cotangents go to their bins by comparing each chosen bin with every bin (the k bins are distinct),
    and dX_{b,s}[n] = 2 c_n / S g[b, n] X_{b,s}[n] (d |z|^2 = 2 z, as a complex gradient); bins that
    were not chosen, and the spectrum's upper half, get 0."""
    (x,) = ctx.inputs(node)
    op: ops.WelchPeaks = node.op  # type: ignore[assignment]
    g = ctx.g
    n_fft = spectrum_length(x.type, "welch_peaks")
    bins, batch, k, segments = n_fft // 2 + 1, node.shape[0], op.k, op.n_segments
    chosen = g.narrow(g.reshape(node, (batch, k, 2)), 2, 0, 1)  # [batch, k, 1] bin numbers (exact in f32)
    d_power = g.narrow(g.reshape(dy, (batch, k, 2)), 2, 1, 1)
    every_bin = g.constant(np.arange(bins, dtype=np.float64).reshape(1, 1, bins), dtype=DType.F32)
    per_bin = ctx.reduce_sum(ctx.mul(_mask(ctx, chosen, every_bin, CmpOp.EQ, d_power), d_power), [1],
                             keep_dim=False)  # [batch, bins]
    factor = np.full(bins, 4.0 / segments)
    factor[0] = 2.0 / segments
    if n_fft % 2 == 0:
        factor[-1] = 2.0 / segments
    scaled = ctx.mul(per_bin, g.constant(factor.reshape(1, bins), dtype=DType.F32))
    rows = g.reshape(g.expand(g.reshape(scaled, (batch, 1, bins)), (batch, segments, bins)),
                     (batch * segments, bins))
    if n_fft > bins:
        rows = g.concat([rows, ctx.zeros_shaped(rows, 1, n_fft - bins)], 1)
    name = ctx.name(node, "spectrum")
    if x.dtype is DType.C64:
        pairs = g.view_as_real(x)
        return [g.view_as_complex(ctx.mul(pairs, g.reshape(rows, (batch * segments, n_fft, 1))), name)]
    return [ctx.mul(x, g.concat([rows, rows], 1), name)]


@vjp(ops.ComplexView)
def grad_complex_view(ctx: GradContext, node: Node, dy: Node) -> list[Node | None]:
    """The views are each other's inverse, and re/im pairs are the complex gradient's layout."""
    name = ctx.name(node, "x")
    return [ctx.g.view_as_real(dy, name) if node.op.to_complex else ctx.g.view_as_complex(dy, name)]
