"""Convolution, pooling and im2col, channels-first.

Windows are given per spatial dim as tuples; an empty tuple means the default (stride 1,
padding 0, dilation 1). Output size per spatial dim: ``floor((in + 2p - d(k-1) - 1)/s) + 1``.

Documented in docs/ops.md#conv (generated from these docstrings by rlxpy/ir/ops_doc.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rlxpy.ir.ops.base import Op, ReduceOp, TensorType, need
from rlxpy.ir.shape import Dim, format_shape

Ints = tuple[int, ...]


def window_params(values: tuple[int, ...], spatial: int, default: int, what: str,
                  minimum: int) -> tuple[int, ...]:
    """Expand a per-dim window attribute: () -> default everywhere, one value -> every dim."""
    if not values:
        return (default,) * spatial
    if len(values) == 1:
        values = values * spatial
    need(len(values) == spatial, f"{what} {values} has {len(values)} entries for {spatial} spatial dims")
    need(all(isinstance(v, int) and v >= minimum for v in values),
         f"{what} {values} must be ints >= {minimum}")
    return tuple(values)


def window_out_size(size: Dim, kernel: int, stride: int, padding: int, dilation: int, what: str) -> Dim:
    """``floor((in + 2p - d(k-1) - 1)/s) + 1``; symbolic sizes are refused (the window needs them)."""
    need(isinstance(size, int), f"{what}: spatial dim {size} must be static")
    span = dilation * (kernel - 1) + 1
    padded = size + 2 * padding  # type: ignore[operator]
    need(padded >= span, f"{what}: window {span} (kernel {kernel}, dilation {dilation}) exceeds the padded "
         f"input {padded}")
    return (padded - span) // stride + 1


@dataclass(frozen=True)
class Conv(Op):
    """N-d convolution (cross-correlation) like torch.nn.functional.conv1d/2d/3d, without bias.

    x [N, C_in, *spatial] (rank 3/4/5), w [C_out, C_in/groups, *kernel_size]; symmetric zero
    padding. ``out[n, o, p] = sum_{c, t} x_pad[n, g*C_in/G + c, p*s + t*d] * w[o, c, t]`` with
    g = o // (C_out/G). ``kernel_size`` must match w's trailing dims."""

    kernel_size: tuple[int, ...]
    stride: tuple[int, ...] = ()
    padding: tuple[int, ...] = ()
    dilation: tuple[int, ...] = ()
    groups: int = 1
    arity = (2, 2)

    def windows(self, spatial: int) -> tuple[Ints, Ints, Ints, Ints]:
        """(kernel, stride, padding, dilation), each expanded to ``spatial`` entries."""
        return (window_params(self.kernel_size, spatial, 1, "kernel_size", 1),
                window_params(self.stride, spatial, 1, "stride", 1),
                window_params(self.padding, spatial, 0, "padding", 0),
                window_params(self.dilation, spatial, 1, "dilation", 1))

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        x, w = ins
        need(x.rank in (3, 4, 5), f"conv input must be [N, C, L], [N, C, H, W] or [N, C, D, H, W], got {x}")
        need(w.rank == x.rank, f"conv weight {w} must have the input's rank {x.rank}")
        need(x.dtype.is_float and w.dtype == x.dtype,
             f"conv needs float x and w of one dtype, got {x} and {w}")
        spatial = x.rank - 2
        kernel, stride, padding, dilation = self.windows(spatial)
        need(tuple(w.shape[2:]) == kernel, f"kernel_size {kernel} does not match weight {w}")
        c_in, c_out = x.shape[1], w.shape[0]
        need(isinstance(c_in, int) and isinstance(c_out, int), f"channels must be static, got {x} and {w}")
        need(self.groups >= 1 and c_in % self.groups == 0 and c_out % self.groups == 0,
             f"groups={self.groups} must divide C_in={c_in} and C_out={c_out}")
        need(w.shape[1] == c_in // self.groups,
             f"weight {w} needs C_in/groups = {c_in // self.groups} input channels")
        out = tuple(window_out_size(x.shape[2 + i], kernel[i], stride[i], padding[i], dilation[i], "conv")
                    for i in range(spatial))
        return TensorType((x.shape[0], c_out) + out, x.dtype)


#: Padded taps contribute the reduction's identity, so they never win a max/min.
POOL_KINDS = (ReduceOp.SUM, ReduceOp.MEAN, ReduceOp.MAX, ReduceOp.MIN, ReduceOp.PROD)


@dataclass(frozen=True)
class Pool(Op):
    """Sliding-window reduction over NCL / NCHW / NCDHW; no dilation; stride defaults to **1**.

    Padded taps contribute the reduction's identity (sum/mean 0, max -inf, min +inf, prod 1),
    and mean divides by the full kernel volume (padded taps included). So MAX matches
    torch's max_pool{1,2,3}d and MEAN torch's avg_pool{1,2,3}d(count_include_pad=True).
    Padding is -inf / +inf for max / min (not a large finite value), so a window of nothing but
    padding and -inf (or +inf) values gives -inf (+inf), as torch does."""

    kind: ReduceOp
    kernel_size: tuple[int, ...]
    stride: tuple[int, ...] = ()
    padding: tuple[int, ...] = ()

    def windows(self, spatial: int) -> tuple[Ints, Ints, Ints]:
        return (window_params(self.kernel_size, spatial, 1, "kernel_size", 1),
                window_params(self.stride, spatial, 1, "stride", 1),
                window_params(self.padding, spatial, 0, "padding", 0))

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        (x,) = ins
        need(x.rank in (3, 4, 5), f"pool input must be [N, C, L], [N, C, H, W] or [N, C, D, H, W], got {x}")
        need(x.dtype.is_float, f"pool needs a float input, got {x}")
        need(self.kind in POOL_KINDS, f"unknown pool kind {self.kind!r}")
        spatial = x.rank - 2
        kernel, stride, padding = self.windows(spatial)
        out = tuple(window_out_size(x.shape[2 + i], kernel[i], stride[i], padding[i], 1, "pool")
                    for i in range(spatial))
        return TensorType(tuple(x.shape[:2]) + out, x.dtype)


@dataclass(frozen=True)
class Im2Col(Op):
    """Patches of x [N, C, H, W] as rows: out [N*H_out*W_out, C*kH*kW], zero padding.

    Row = (n, ho, wo) row-major, column = (c, ki, kj) row-major, reading
    ``x[n, c, ho*sh + ki*dh - ph, wo*sw + kj*dw - pw]``. This is
    ``torch.nn.functional.unfold(x, ...)`` ([N, C*kH*kW, L]) transposed to [N, L, C*kH*kW] and
    flattened to rows."""

    kernel_size: tuple[int, ...]
    stride: tuple[int, ...] = ()
    padding: tuple[int, ...] = ()
    dilation: tuple[int, ...] = ()

    def windows(self) -> tuple[Ints, Ints, Ints, Ints]:
        return (window_params(self.kernel_size, 2, 1, "kernel_size", 1),
                window_params(self.stride, 2, 1, "stride", 1),
                window_params(self.padding, 2, 0, "padding", 0),
                window_params(self.dilation, 2, 1, "dilation", 1))

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        (x,) = ins
        need(x.rank == 4, f"im2col takes x [N, C, H, W] (2-D only), got {x}")
        kernel, stride, padding, dilation = self.windows()
        h_out = window_out_size(x.shape[2], kernel[0], stride[0], padding[0], dilation[0], "im2col")
        w_out = window_out_size(x.shape[3], kernel[1], stride[1], padding[1], dilation[1], "im2col")
        n, c = x.shape[0], x.shape[1]
        need(isinstance(n, int) and isinstance(c, int),
             f"im2col needs static N and C, got {format_shape(x.shape)}")
        return TensorType((n * h_out * w_out, c * kernel[0] * kernel[1]), x.dtype)  # type: ignore[operator]
