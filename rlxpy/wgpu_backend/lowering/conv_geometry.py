"""The conv family's shared uniform record: every conv kernel sees a 3-D window.

A 1-D or 2-D conv, pool or im2col is a 3-D one with size-1 leading spatial dims (kernel 1, stride 1,
no padding), so one set of kernels serves all three ranks. ``ConvParams`` serves the convolution
kernels (implicit GEMM, direct, im2col), ``ConvPoolParams`` the pools.
"""

from __future__ import annotations

from collections.abc import Sequence

from rlxpy.ir.graph import Node
from rlxpy.ir.ops.conv import Geometry
from rlxpy.wgpu_backend.kernels.params import F32, I32, U32, params
from rlxpy.wgpu_backend.lowering.elementwise import ACTIVATION_WGSL

_AXES = ("d", "h", "w")
#: sizes, kernel, stride, padding before (signed: taps left of 0 are padding), dilation per axis
_WINDOW = {f"{name}_{a}": kind for name, kind in (("in", U32), ("out", U32), ("k", U32), ("s", U32),
                                                  ("p", I32), ("dl", U32)) for a in _AXES}

CONV_PARAMS = params(
    "ConvParams", total=U32, positions=U32, m=U32, m_start=U32, kdim=U32, kvol=U32, c_in=U32, c_in_g=U32,
    c_out=U32, c_out_g=U32, groups=U32, **_WINDOW, x=U32, w=U32, bias=U32, y=U32, has_bias=U32, splits=U32,
    k_chunk=U32, part=U32, residual=U32, has_residual=U32)
POOL_PARAMS = params(
    "ConvPoolParams", total=U32, positions=U32, **_WINDOW,
    **{f"{bound}_{a}": I32 for bound in ("lo", "hi") for a in _AXES}, adaptive=U32, mean=U32, divisor=F32,
    x=U32, y=U32)


def as_3d(values: Sequence[int], fill: int) -> tuple[int, int, int]:
    """Per-dim values of a 1-D/2-D/3-D window as (d, h, w): missing leading dims get ``fill``."""
    return tuple([fill] * (3 - len(values)) + [int(v) for v in values])  # type: ignore[return-value]


def window_fields(in_sizes: Sequence[int], out_sizes: Sequence[int], geo: Geometry) -> dict[str, int]:
    """The 3-D geometry fields (``in_*``, ``out_*``, ``k_*``, ``s_*``, ``p_*`` = padding before, ``dl_*``)."""
    values = {"in": as_3d(in_sizes, 1), "out": as_3d(out_sizes, 1), "k": as_3d(geo.kernel, 1),
              "s": as_3d(geo.stride, 1), "p": as_3d(geo.begin, 0), "dl": as_3d(geo.dilation, 1)}
    return {f"{name}_{a}": v[i] for name, v in values.items() for i, a in enumerate(_AXES)}


def epilogue_expr(node: Node) -> str:
    """The activation of a Conv/ConvTranspose node as an expression in ``v`` (``v``: none)."""
    act = node.op.activation
    return ACTIVATION_WGSL[act] if act is not None else "v"
