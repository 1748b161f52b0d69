"""ONNX's signal operators: DFT (opset 17/20) and STFT (opset 17) as Fft / Stft nodes.

ONNX keeps complex tensors as f32 [..., 2] (re, im) and real ones as [..., 1]: a complex input is seen
as c64 through ComplexView (the same bytes) and results go back the same way. Semantics are those of
onnx's reference: DFT is numpy.fft.fft / ifft (the inverse scaled by 1/n) with the axis padded or cut to
``dft_length``; ``onesided`` keeps the first n//2+1 bins forward and makes the inverse an irfft (a real
[..., 1] output); STFT frames the signal without padding (frames = 1 + (T - frame_length) // step), a
missing window is all ones.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlxpy.errors import UnsupportedOpError
from rlxpy.frontends.onnx_ops import emits
from rlxpy.frontends.onnx_ops_cnn import pad_axis
from rlxpy.ir import DType, Node
from rlxpy.ir.ops.base import FftNorm

#: ONNX's inverse divides by n and its forward does not: rlxpy's FORWARD norm.
ONNX_NORM = FftNorm.FORWARD


def _scalar(im: Any, node: Any, ins: list[Any], index: int, what: str) -> int | None:
    if len(ins) <= index or ins[index] is None:
        return None
    return int(im.known(node, ins[index], what).reshape(-1)[0])


def _as_complex(im: Any, x: Node) -> Node:
    """f32 [..., 1 or 2] -> c64 [...] (a real input gets a zero imaginary part)."""
    if x.shape[-1] == 1:
        zeros = pad_axis(im.g, x, x.rank - 1, 0, 1, 0.0)  # [..., 2]: (x, 0)
        return im.g.view_as_complex(zeros)
    return im.g.view_as_complex(x)


@emits("DFT")
def emit_dft(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    x = im.tensor(ins[0], DType.F32)
    if x.rank < 2 or x.shape[-1] not in (1, 2):
        raise UnsupportedOpError(f"{im.where(node)}: DFT input must be [..., n, 1 or 2], got {x.type}")
    axis = _scalar(im, node, ins, 2, "axis")
    if axis is None:
        axis = attrs.get("axis", -2 if im.opset >= 20 else 1)
    axis %= x.rank
    if axis == x.rank - 1:
        raise UnsupportedOpError(f"{im.where(node)}: DFT axis {axis} is the (re, im) axis of {x.type}")
    inverse, onesided = bool(attrs.get("inverse", 0)), bool(attrs.get("onesided", 0))
    size = int(x.shape[axis])
    length = _scalar(im, node, ins, 1, "dft_length")
    if inverse and onesided:  # irfft: the one-sided input is taken as it is, n = dft_length
        n = length or 2 * (size - 1)
        signal = im.g.irfft(_as_complex(im, x), n, ONNX_NORM, axis)
        return [im.g.reshape(signal, list(signal.shape) + [1], name=im.name(node))]
    if length is not None and length != size:  # numpy's n: cut or zero-pad the axis
        x = pad_axis(im.g, x, axis, 0, length - size, 0.0)
    n = int(x.shape[axis])
    if not inverse and x.shape[-1] == 1:
        real = im.g.reshape(x, list(x.shape[:-1]))
        spectrum = im.g.rfft(real, ONNX_NORM, axis, onesided=onesided)
    else:
        spectrum = im.g.fft(_as_complex(im, x), inverse, ONNX_NORM, axis)
        if onesided:
            spectrum = im.g.narrow(spectrum, axis, 0, n // 2 + 1)
    return [im.g.view_as_real(spectrum, name=im.name(node))]


@emits("STFT")
def emit_stft(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    x = im.tensor(ins[0], DType.F32)
    if x.rank != 3 or x.shape[-1] != 1:
        raise UnsupportedOpError(f"{im.where(node)}: STFT takes a real signal [batch, length, 1], got "
                                 f"{x.type} (complex signals are not supported)")
    step = _scalar(im, node, ins, 1, "frame_step")
    window = im.tensor(ins[2], DType.F32) if len(ins) > 2 and ins[2] is not None else None
    frame_length = _scalar(im, node, ins, 3, "frame_length")
    if frame_length is None:
        frame_length = int(window.shape[0]) if window is not None else int(x.shape[1])
    if window is None:
        window = im.g.expand(im.g.constant(np.ones([1], np.float32), DType.F32), [frame_length])
    if tuple(window.shape) != (frame_length,):
        raise UnsupportedOpError(f"{im.where(node)}: STFT window {window.type} is not [frame_length = "
                                 f"{frame_length}]")
    signal = im.g.reshape(x, [int(x.shape[0]), int(x.shape[1])])
    spectrum = im.g.stft(signal, window, frame_length, step, center=False,
                         onesided=bool(attrs.get("onesided", 1)))
    return [im.g.view_as_real(spectrum, name=im.name(node))]
