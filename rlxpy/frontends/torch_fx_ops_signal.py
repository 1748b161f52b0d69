"""aten translators of the signal family: torch.fft.fft/ifft/rfft/irfft (and their n-d forms) as Fft
nodes, one per transformed dim, and the ops torch.stft decomposes into under aot_autograd
(reflection_pad1d, unfold; its view, mul and transpose are translated with the other ops).

aten's ``normalization`` is 0 (none), 1 (1/sqrt(n)) or 2 (1/n); rlxpy's FftNorm scales 1/n on the
inverse only, so a forward transform scaled by 1/n (torch's norm="forward") is refused.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch.fx as fx

from rlxpy.frontends.torch_fx_translate import FxTranslator, translator
from rlxpy.ir import DType, Node
from rlxpy.ir.ops.base import FftNorm

T = FxTranslator
Args = dict[str, Any]


def _norm(t: T, normalization: int, forward: bool) -> FftNorm:
    if normalization == 0:
        return FftNorm.BACKWARD
    if normalization == 1:
        return FftNorm.ORTHO
    if not forward:
        return FftNorm.FORWARD
    raise t.unsupported("norm='forward' on a forward transform: rlxpy's Fft scales only the inverse by 1/n")


def _dims(t: T, x: Node, dims: Any) -> list[int]:
    axes = [int(d) % x.rank for d in dims]
    if not axes:
        raise t.unsupported("an FFT over no dims")
    return axes


@translator("_fft_c2c")
def tr_fft_c2c(t: T, node: fx.Node, a: Args) -> Node:
    """torch.fft.fft/ifft/fftn on c64: one Fft per dim."""
    x = t.tensor(a["self"])
    forward = bool(a["forward"])
    norm = _norm(t, int(a["normalization"]), forward)
    for axis in _dims(t, x, a["dim"]):
        x = t.g.fft(x, not forward, norm, axis)
    return x


@translator("_fft_r2c")
def tr_fft_r2c(t: T, node: fx.Node, a: Args) -> Node:
    """torch.fft.rfft (onesided) or fft of a real tensor: the real transform on the last dim listed,
    complex ones on the others."""
    x = t.cast(t.tensor(a["self"]), DType.F32)
    norm = _norm(t, int(a["normalization"]), True)
    *others, last = _dims(t, x, a["dim"])
    y = t.g.rfft(x, norm, last, onesided=bool(a["onesided"]))
    for axis in others:
        y = t.g.fft(y, False, norm, axis)
    return y


@translator("_fft_c2r")
def tr_fft_c2r(t: T, node: fx.Node, a: Args) -> Node:
    """torch.fft.irfft(n): complex inverse transforms on the other dims, then the real one on the last."""
    x = t.tensor(a["self"])
    norm = _norm(t, int(a["normalization"]), False)
    *others, last = _dims(t, x, a["dim"])
    for axis in others:
        x = t.g.fft(x, True, norm, axis)
    return t.g.irfft(x, int(a["last_dim_size"]), norm, last)


@translator("reflection_pad1d")
def tr_reflection_pad1d(t: T, node: fx.Node, a: Args) -> Node:
    """Mirror the last dim without repeating its edge (torch's reflect): two small gathers and a concat."""
    x = t.tensor(a["self"])
    left, right = (int(p) for p in a["padding"])
    size = x.shape[-1]
    if not isinstance(size, int) or max(left, right) >= size:
        raise t.unsupported(f"reflect padding ({left}, {right}) of a last dim of {size}")
    parts = []
    if left:
        parts.append(t.g.gather(x, t.constant(np.arange(left, 0, -1), DType.I32), x.rank - 1))
    parts.append(x)
    if right:
        mirrored = np.arange(size - 2, size - 2 - right, -1)
        parts.append(t.g.gather(x, t.constant(mirrored, DType.I32), x.rank - 1))
    return t.g.concat(parts, x.rank - 1) if len(parts) > 1 else x


@translator("unfold")
def tr_unfold(t: T, node: fx.Node, a: Args) -> Node:
    """Tensor.unfold(dim, size, step): windows as a gather of start + offset indices (computed on the
    GPU from two iotas), the window axis moved last as torch has it."""
    x = t.tensor(a["self"])
    axis, size, step = int(a["dimension"]) % max(1, x.rank), int(a["size"]), int(a["step"])
    length = x.shape[axis]
    if not isinstance(length, int):
        raise t.unsupported(f"unfold of a symbolic dim {length}")
    frames = (length - size) // step + 1
    starts = t.g.mul(t.g.reshape(t.iota(frames), [frames, 1]), t.constant(step, DType.I32))
    index = t.g.add(starts, t.g.reshape(t.iota(size), [1, size]))
    windows = t.g.gather(x, index, axis)  # x[:axis] + [frames, size] + x[axis+1:]
    if axis == x.rank - 1:
        return windows
    perm = [d for d in range(windows.rank) if d != axis + 1] + [axis + 1]
    return t.g.transpose(windows, perm)


@translator("view_as_real")
def tr_view_as_real(t: T, node: fx.Node, a: Args) -> Node:
    return t.g.view_as_real(t.tensor(a["self"]), name=node.name)


@translator("view_as_complex")
def tr_view_as_complex(t: T, node: fx.Node, a: Args) -> Node:
    return t.g.view_as_complex(t.cast(t.tensor(a["self"]), DType.F32), name=node.name)


def complex_abs(t: T, z: Node, name: str) -> Node:
    """|z| of a c64 tensor: sqrt(re^2 + im^2) over its (re, im) pairs (torch.abs of a complex tensor)."""
    pairs = t.g.view_as_real(z)
    return t.g.activation(t.g.sum(t.g.mul(pairs, pairs), [pairs.rank - 1]), "sqrt", name=name)
