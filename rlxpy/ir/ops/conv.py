"""Convolution, transposed convolution, pooling (windowed and adaptive) and im2col, channels-first.

Inputs are [N, C, L], [N, C, H, W] or [N, C, D, H, W] (1-D / 2-D / 3-D); spatial dims must be
static. Window attributes are per spatial dim tuples; an empty tuple means the default (kernel
1, stride 1, padding 0, dilation 1) and one value applies to every dim. ``padding`` is the zero
padding before each dim and ``padding_end`` the padding after it (empty: the same as
``padding``, so symmetric padding needs only ``padding``; ONNX's ``pads`` are
``padding + padding_end``). A window of kernel k and dilation d spans ``d(k-1) + 1`` elements;
output size per spatial dim: ``floor((in + pb + pe - d(k-1) - 1)/s) + 1`` (Pool's ``ceil_mode``
rounds up instead). A window larger than the padded input is a GraphError naming the node.

Documented in docs/ops.md#conv (generated from these docstrings by rlxpy/ir/ops_doc.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rlxpy.errors import GraphError
from rlxpy.ir.ops.base import ActKind, Op, ReduceOp, TensorType, need
from rlxpy.ir.shape import Dim, format_shape

Ints = tuple[int, ...]

RANKS = "[N, C, L], [N, C, H, W] or [N, C, D, H, W]"


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


@dataclass(frozen=True)
class Geometry:
    """A window's attributes expanded to every spatial dim: kernel, stride, padding before
    (``begin``) and after (``end``) each dim, and dilation."""

    kernel: Ints
    stride: Ints
    begin: Ints
    end: Ints
    dilation: Ints

    @property
    def spatial(self) -> int:
        return len(self.kernel)

    def span(self, i: int) -> int:
        """Elements one window covers along dim ``i``: d(k-1) + 1."""
        return self.dilation[i] * (self.kernel[i] - 1) + 1


def geometry(spatial: int, kernel_size: Ints, stride: Ints, padding: Ints, padding_end: Ints,
             dilation: Ints) -> Geometry:
    """The expanded window of an op's attributes (``padding_end`` () = ``padding``)."""
    begin = window_params(padding, spatial, 0, "padding", 0)
    return Geometry(window_params(kernel_size, spatial, 1, "kernel_size", 1),
                    window_params(stride, spatial, 1, "stride", 1), begin,
                    window_params(padding_end, spatial, 0, "padding_end", 0) if padding_end else begin,
                    window_params(dilation, spatial, 1, "dilation", 1))


def window_out_size(size: Dim, kernel: int, stride: int, padding: int, dilation: int, what: str,
                    padding_end: int | None = None, ceil_mode: bool = False) -> Dim:
    """``floor((in + pb + pe - d(k-1) - 1)/s) + 1`` (``ceil`` with ``ceil_mode``, torch's rule: the
    last window must start inside the input or its leading padding); symbolic sizes are refused."""
    need(isinstance(size, int), f"{what}: spatial dim {size} must be static")
    end = padding if padding_end is None else padding_end
    span = dilation * (kernel - 1) + 1
    padded = size + padding + end  # type: ignore[operator]
    need(padded >= span, f"{what}: window {span} (kernel {kernel}, dilation {dilation}) exceeds the padded "
         f"input {padded}")
    if not ceil_mode:
        return (padded - span) // stride + 1
    out = -(-(padded - span) // stride) + 1
    if (out - 1) * stride >= size + padding:  # type: ignore[operator]
        out -= 1
    return out


def out_sizes(x: TensorType, geo: Geometry, what: str, ceil_mode: bool = False) -> tuple[Dim, ...]:
    """Output spatial sizes of a windowed op over x; errors name x's shape."""
    try:
        return tuple(window_out_size(x.shape[2 + i], geo.kernel[i], geo.stride[i], geo.begin[i],
                                     geo.dilation[i], what, geo.end[i], ceil_mode)
                     for i in range(geo.spatial))
    except GraphError as e:  # add the input's type to the window's complaint
        raise GraphError(f"{e} (input {x})") from None


def _check_float_input(x: TensorType, what: str) -> int:
    need(x.rank in (3, 4, 5), f"{what} input must be {RANKS}, got {x}")
    need(x.dtype.is_float, f"{what} needs a float input, got {x}")
    return x.rank - 2


def _check_bias(ins: Sequence[TensorType], channels: int, what: str) -> None:
    if len(ins) == 3:
        bias, x = ins[2], ins[0]
        need(bias.shape == (channels,) and bias.dtype == x.dtype,
             f"{what} bias must be {x.dtype}[{channels}] (one per output channel), got {bias}")


def _static_channels(x: TensorType, w: TensorType, what: str) -> tuple[int, int]:
    c_in, w0 = x.shape[1], w.shape[0]
    need(isinstance(c_in, int) and isinstance(w0, int), f"{what}: channels must be static, got x {x}, w {w}")
    return c_in, w0  # type: ignore[return-value]


@dataclass(frozen=True)
class Conv(Op):
    """N-d convolution (cross-correlation) like torch.nn.functional.conv1d/2d/3d, with an optional
    bias and activation epilogue.

    x [N, C_in, *spatial] (rank 3/4/5), w [C_out, C_in/groups, *kernel_size], optional bias
    [C_out]. With x_pad = x zero-padded by ``padding`` before and ``padding_end`` after each dim,
    ``out[n, o, p] = act(bias[o] + sum_{c, t} x_pad[n, g*C_in/G + c, p*s + t*d] * w[o, c, t])``,
    g = o // (C_out/G). Padded taps are zeros that are multiplied (an inf or NaN weight makes NaN
    wherever its tap lands in padding, as torch's float64 conv does; its float32 CPU path, oneDNN,
    skips padded taps). ``groups = C_in`` is depthwise.
    ``kernel_size`` must match w's trailing dims; ``activation`` is any ActKind (None: none).
    ``residual``: a last input r of the output's type is added before the activation,
    ``act((bias[o] + sum ...) + r[n, o, p])`` (the conv epilogue pattern's ResNet shortcut)."""

    kernel_size: tuple[int, ...]
    stride: tuple[int, ...] = ()
    padding: tuple[int, ...] = ()
    dilation: tuple[int, ...] = ()
    groups: int = 1
    padding_end: tuple[int, ...] = ()
    activation: ActKind | None = None
    residual: bool = False
    arity = (2, 4)

    def geometry(self, spatial: int) -> Geometry:
        return geometry(spatial, self.kernel_size, self.stride, self.padding, self.padding_end, self.dilation)

    def windows(self, spatial: int) -> tuple[Ints, Ints, Ints, Ints]:
        """(kernel, stride, padding before, dilation), each expanded to ``spatial`` entries."""
        geo = self.geometry(spatial)
        return geo.kernel, geo.stride, geo.begin, geo.dilation

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        x, w = ins[0], ins[1]
        spatial = _check_float_input(x, "conv")
        need(w.rank == x.rank, f"conv weight {w} must have the input's rank {x.rank} (x {x})")
        need(w.dtype == x.dtype, f"conv needs x and w of one dtype, got x {x} and w {w}")
        geo = self.geometry(spatial)
        need(tuple(w.shape[2:]) == geo.kernel, f"kernel_size {geo.kernel} does not match weight {w}")
        c_in, c_out = _static_channels(x, w, "conv")
        need(self.groups >= 1 and c_in % self.groups == 0 and c_out % self.groups == 0,
             f"groups={self.groups} must divide C_in={c_in} and C_out={c_out} (x {x}, w {w})")
        need(w.shape[1] == c_in // self.groups,
             f"weight {w} needs C_in/groups = {c_in // self.groups} input channels "
             f"(x {x}, groups={self.groups})")
        extra = ", residual" if self.residual else ""
        need(len(ins) <= 3 + self.residual, f"conv takes x, w, [bias]{extra}, got {len(ins)} inputs")
        _check_bias(ins[:len(ins) - self.residual], c_out, "conv")
        need(self.activation is None or isinstance(self.activation, ActKind),
             f"activation must be an ActKind or None, got {self.activation!r}")
        out = TensorType((x.shape[0], c_out) + out_sizes(x, geo, "conv"), x.dtype)
        need(not self.residual or (len(ins) >= 3 and ins[-1] == out),
             f"conv residual must be {out} (the output's type), got {ins[-1] if len(ins) >= 3 else 'none'}")
        return out


@dataclass(frozen=True)
class ConvTranspose(Op):
    """N-d transposed convolution like torch.nn.functional.conv_transpose1d/2d/3d (ONNX
    ConvTranspose), with an optional bias and activation epilogue.

    x [N, C_in, *spatial] (rank 3/4/5), w [C_in, C_out/groups, *kernel_size] (torch's layout),
    optional bias [C_out]. Output position q sums every tap t of every input channel c of its
    group: ``out[n, g*C_out/G + o, q] = act(bias + sum_{c, t} xz[n, g*C_in/G + c, (q + pb - t*d)/s]
    * w[g*C_in/G + c, o, t])`` where xz is x when the division is exact and lands in [0, in), else
    a zero that is multiplied, as Conv's padding is: this is a Conv over x with s-1 zeros between
    elements and the flipped kernel. For finite weights it equals torch's scatter form
    (``out[i*s + t*d - pb] += x[i] * w[t]``); an inf or NaN weight also makes NaN at the outputs its
    tap covers between or beyond the inputs, which torch's scatter never multiplies. Output size per
    dim: ``(in - 1)*s - pb - pe + d(k-1) + output_padding + 1`` (>= 1), where pb = ``padding`` and
    pe = ``padding_end`` (default: pb); ``output_padding`` only lengthens the end of the output."""

    kernel_size: tuple[int, ...]
    stride: tuple[int, ...] = ()
    padding: tuple[int, ...] = ()
    output_padding: tuple[int, ...] = ()
    dilation: tuple[int, ...] = ()
    groups: int = 1
    padding_end: tuple[int, ...] = ()
    activation: ActKind | None = None
    arity = (2, 3)

    def geometry(self, spatial: int) -> Geometry:
        return geometry(spatial, self.kernel_size, self.stride, self.padding, self.padding_end, self.dilation)

    def out_padding(self, spatial: int) -> Ints:
        return window_params(self.output_padding, spatial, 0, "output_padding", 0)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        x, w = ins[0], ins[1]
        spatial = _check_float_input(x, "conv_transpose")
        need(w.rank == x.rank, f"conv_transpose weight {w} must have the input's rank {x.rank} (x {x})")
        need(w.dtype == x.dtype, f"conv_transpose needs x and w of one dtype, got x {x} and w {w}")
        geo = self.geometry(spatial)
        extra = self.out_padding(spatial)
        need(tuple(w.shape[2:]) == geo.kernel, f"kernel_size {geo.kernel} does not match weight {w}")
        c_in, w0 = _static_channels(x, w, "conv_transpose")
        need(w0 == c_in, f"conv_transpose weight {w} needs C_in = {c_in} rows (x {x})")
        need(self.groups >= 1 and c_in % self.groups == 0,
             f"groups={self.groups} must divide C_in={c_in} (x {x}, w {w})")
        c_out = int(w.shape[1]) * self.groups
        _check_bias(ins, c_out, "conv_transpose")
        need(self.activation is None or isinstance(self.activation, ActKind),
             f"activation must be an ActKind or None, got {self.activation!r}")
        out: list[Dim] = []
        for i in range(spatial):
            size = x.shape[2 + i]
            need(isinstance(size, int), f"conv_transpose: spatial dim {size} must be static (x {x})")
            n = (size - 1) * geo.stride[i] - geo.begin[i] - geo.end[i] + geo.span(i) + extra[i]  # type: ignore[operator]
            need(n >= 1, f"conv_transpose: output size {n} < 1 along spatial dim {i} (x {x}, w {w}, "
                 f"padding {geo.begin}/{geo.end})")
            out.append(n)
        return TensorType((x.shape[0], c_out) + tuple(out), x.dtype)


#: Padded taps contribute the reduction's identity, so they never win a max/min.
POOL_KINDS = (ReduceOp.SUM, ReduceOp.MEAN, ReduceOp.MAX, ReduceOp.MIN, ReduceOp.PROD)


@dataclass(frozen=True)
class Pool(Op):
    """Sliding-window reduction over NCL / NCHW / NCDHW; stride defaults to **1**.

    Window taps sit at ``p*s + t*d - pb``. A tap outside the input (in the padding, or past the
    padded input with ``ceil_mode``) contributes the reduction's identity (sum/mean 0, max -inf,
    min +inf, prod 1), so padding never wins a max or min; a NaN in a window makes that max/min
    NaN (torch's max_pool). ``ceil_mode`` rounds the output size up, dropping a last window that
    would start past the input and its leading padding (torch's rule).

    Mean divides by ``divisor`` when it is > 0 (torch's divisor_override), else by the number of
    taps inside the padded input [-pb, in + pe) when ``count_include_pad``, else by the number
    inside the input [0, in) (a window of nothing but padding then gives 0/0 = NaN). Without
    ceil_mode every tap is inside the padded input, so count_include_pad divides by the kernel
    volume. MAX matches torch's max_pool{1,2,3}d, MEAN avg_pool{1,2,3}d; ``divisor`` and
    ``count_include_pad=False`` are for MEAN only."""

    kind: ReduceOp
    kernel_size: tuple[int, ...]
    stride: tuple[int, ...] = ()
    padding: tuple[int, ...] = ()
    dilation: tuple[int, ...] = ()
    padding_end: tuple[int, ...] = ()
    ceil_mode: bool = False
    count_include_pad: bool = True
    divisor: int = 0

    def geometry(self, spatial: int) -> Geometry:
        return geometry(spatial, self.kernel_size, self.stride, self.padding, self.padding_end, self.dilation)

    def windows(self, spatial: int) -> tuple[Ints, Ints, Ints]:
        """(kernel, stride, padding before), each expanded to ``spatial`` entries."""
        geo = self.geometry(spatial)
        return geo.kernel, geo.stride, geo.begin

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        (x,) = ins
        spatial = _check_float_input(x, "pool")
        need(self.kind in POOL_KINDS, f"unknown pool kind {self.kind!r}")
        need(isinstance(self.divisor, int) and self.divisor >= 0,
             f"divisor {self.divisor!r} must be an int >= 0")
        need(self.kind is ReduceOp.MEAN or (self.divisor == 0 and self.count_include_pad),
             f"divisor and count_include_pad=False apply to mean pooling only, not {self.kind.name}")
        geo = self.geometry(spatial)
        return TensorType(tuple(x.shape[:2]) + out_sizes(x, geo, "pool", self.ceil_mode), x.dtype)


def adaptive_bin(i: int, size: int, out: int) -> tuple[int, int]:
    """[start, end) of adaptive bin ``i`` of ``out`` over ``size`` elements (torch's rule)."""
    return (i * size) // out, -(-((i + 1) * size) // out)


@dataclass(frozen=True)
class AdaptivePool(Op):
    """Adaptive pooling like torch's adaptive_{avg,max}_pool{1,2,3}d: output spatial size
    ``output_size`` (one value: every dim); bin i of a dim of size L covers
    ``[floor(i*L/out), ceil((i+1)*L/out))`` (bins may overlap; ``out > L`` repeats elements).
    ``kind`` reduces each bin (mean divides by the bin's volume; a NaN makes max/min NaN).
    ``output_size = 1`` is global pooling (ONNX GlobalAveragePool / GlobalMaxPool)."""

    kind: ReduceOp
    output_size: tuple[int, ...]

    def sizes(self, spatial: int) -> Ints:
        need(bool(self.output_size), "adaptive pool needs an output_size")
        return window_params(self.output_size, spatial, 1, "output_size", 1)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        (x,) = ins
        spatial = _check_float_input(x, "adaptive pool")
        need(self.kind in POOL_KINDS, f"unknown pool kind {self.kind!r}")
        for i in range(spatial):
            need(isinstance(x.shape[2 + i], int),
                 f"adaptive pool: spatial dim {x.shape[2 + i]} must be static (x {x})")
        return TensorType(tuple(x.shape[:2]) + self.sizes(spatial), x.dtype)


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
        h_out, w_out = out_sizes(x, Geometry(kernel, stride, padding, padding, dilation), "im2col")
        n, c = x.shape[0], x.shape[1]
        need(isinstance(n, int) and isinstance(c, int),
             f"im2col needs static N and C, got {format_shape(x.shape)}")
        return TensorType((n * h_out * w_out, c * math.prod(kernel)), x.dtype)  # type: ignore[operator]
