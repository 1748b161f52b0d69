"""The aten op table, part four: what AOTAutograd's backward graphs hold (torch.compile training).

The backward ops torch keeps whole (the backend leaves them out of the decomposition table) map onto
rlxpy's backward ops: SDPA's backward onto AttentionBackward (tiled, probabilities recomputed; the
forward's logsumexp is not read), ``embedding_dense_backward`` onto GatherBackward, the activation
backwards onto ActivationBackward, ``convolution_backward`` onto the Conv / ConvTranspose gradient
rules (rlxpy/ir/grad/conv.py), the pools' backwards onto PoolBackward (max pooling's winners found
again from the input, so its indices are not read). The ops torch's decompositions of other
backwards leave behind (``index_put`` with accumulation, one-hot ``scatter``, ``slice_scatter``)
map onto primitives. The forward outputs a training graph saves for them (batch norm's statistics,
max pooling's indices) are computed here when the forward graph reads them.
Same conventions as torch_fx_ops.py: torch's semantics, UnsupportedOpError where rlxpy has none.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch.fx as fx

from rlxpy.frontends.torch_fx_ops_nn import sdpa_mask, unswap_heads
from rlxpy.frontends.torch_fx_translate import FxTranslator, translator
from rlxpy.ir import DType, Node, ops
from rlxpy.ir.grad import VJP, GradContext
from rlxpy.ir.ops.base import ActKind, ReduceOp
from rlxpy.ir.ops.conv import adaptive_bin

T = FxTranslator
Args = dict[str, Any]


# -- attention ------------------------------------------------------------------------------------------
@translator("_scaled_dot_product_flash_attention_for_cpu_backward")
def tr_sdpa_backward(t: T, node: fx.Node, a: Args) -> list[Node]:
    """(dq, dk, dv) of SDPA on [B, H, S, D]: one AttentionBackward over all three, cut into its parts."""
    q, k, v, dy = (t.tensor(a[n], DType.F32) for n in ("query", "key", "value", "grad_out"))
    if any(x.rank != 4 for x in (q, k, v, dy)):
        raise t.unsupported("attention backward on tensors that are not [B, H, S, D]")
    if a.get("dropout_p"):
        raise t.unsupported("attention dropout")
    heads, kv_heads, head_dim = q.shape[1], k.shape[1], q.shape[3]
    shapes = [*q.shape, *k.shape]
    if not all(isinstance(d, int) for d in shapes) or v.shape != k.shape:
        raise t.unsupported(f"attention backward needs static shapes and v shaped like k (q {q.shape}, "
                            f"k {k.shape}, v {v.shape})")
    kind, mask = sdpa_mask(t, a, q, k)
    # [B, S, H, D] sources transposed for SDPA go in as they are when all four have one
    sources = [unswap_heads(t, x, x.shape[1]) for x in (q, k, v, dy)]
    bshd = all(s is not x for s, x in zip(sources, (q, k, v, dy)))
    q_in, k_in, v_in, dy_in = sources if bshd else (q, k, v, dy)
    flat = t.g.attention_backward(q_in, k_in, v_in, dy_in, "all", heads, head_dim, num_kv_heads=kv_heads,
                                  mask_kind=kind, mask=mask, score_scale=a.get("scale"), name=node.name)
    grads, start = [], 0
    for x in (q_in, k_in, v_in):
        size = math.prod(x.shape)
        part = t.g.reshape(t.g.narrow(flat, 0, start, size), x.shape)
        grads.append(t.g.transpose(part, [0, 2, 1, 3]) if bshd else part)
        start += size
    return grads


# -- embedding, scatters ------------------------------------------------------------------------------
@translator("embedding_dense_backward")
def tr_embedding_backward(t: T, node: fx.Node, a: Args) -> Node:
    """d weight of embedding: the rows of grad_output summed into the rows their indices name; the
    padding index's row stays zero."""
    if a.get("scale_grad_by_freq"):
        raise t.unsupported("embedding backward with scale_grad_by_freq")
    dy = t.tensor(a["grad_output"], DType.F32)
    idx = t.cast(t.tensor(a["indices"]), DType.I32)
    rows = a["num_weights"]
    if not isinstance(rows, int):
        raise t.unsupported(f"embedding backward with a symbolic table size {rows}")
    padding = a.get("padding_idx")
    if padding is not None and padding >= 0:
        keep = t.g.cast(t.g.compare(idx, t.tensor(padding, DType.I32), "ne"), DType.F32)
        dy = t.g.mul(dy, t.g.reshape(keep, list(idx.shape) + [1]))
    return t.g.gather_backward(dy, idx, rows, 0, name=node.name)


@translator("index_put")
def tr_index_put(t: T, node: fx.Node, a: Args) -> Node:
    """``self[indices] += values`` (accumulate=True) with one index tensor on the first axis: what the
    decomposed embedding backward leaves."""
    if not a.get("accumulate"):
        raise t.unsupported("index_put without accumulate (duplicate indices make the result depend on "
                            "the order of writes)")
    entries = list(a["indices"])
    if len(entries) != 1 or entries[0] is None:
        raise t.unsupported("index_put with more than one index tensor")
    x = t.tensor(a["self"], DType.F32)
    idx = t.cast(t.tensor(entries[0]), DType.I32)
    values = t.tensor(a["values"], DType.F32)
    want = list(idx.shape) + list(x.shape[1:])
    if list(values.shape) != want:
        values = t.g.expand(values, want, name=f"{node.name}.values")
    if not isinstance(x.shape[0], int):
        raise t.unsupported(f"index_put into a symbolic first axis {x.shape[0]}")
    summed = t.g.gather_backward(values, idx, x.shape[0], 0)
    return t.g.add(x, summed, name=node.name)


@translator("scatter")
def tr_scatter(t: T, node: fx.Node, a: Args) -> Node:
    """torch.scatter with one index per row along ``dim`` (index size 1 there, other dims as self's):
    ``out = where(position == index, src, self)``; what the decomposed nll_loss backward leaves."""
    if a.get("reduce") is not None:
        raise t.unsupported("scatter with a reduce argument")
    x, idx = t.tensor(a["self"]), t.tensor(a["index"])
    axis = a["dim"] % x.rank
    shape = list(x.shape)
    expected = shape[:axis] + [1] + shape[axis + 1:]
    if list(idx.shape) != expected:
        raise t.unsupported(f"scatter with index {list(idx.shape)}: only one index per row along dim {axis} "
                            f"({expected})")
    out = t.out_dtype(node)
    source = a.get("src", a.get("value"))
    source = t.tensor(source, out)
    positions = t.g.reshape(t.iota(shape[axis]), [shape[axis] if d == axis else 1 for d in range(x.rank)])
    hit = t.g.compare(positions, t.cast(idx, DType.I32), "eq")
    return t.g.where(hit, source, t.tensor(a["self"], out), name=node.name)


@translator("slice_scatter")
def tr_slice_scatter(t: T, node: fx.Node, a: Args) -> Node:
    """self with ``self[start:end]`` along ``dim`` replaced by src (step 1)."""
    x, src = t.tensor(a["self"]), t.tensor(a["src"], t.out_dtype(node))
    axis = a["dim"] % x.rank
    size = x.shape[axis]
    if (a.get("step") or 1) != 1 or not isinstance(size, int):
        raise t.unsupported("slice_scatter with a step or a symbolic size")
    start = a.get("start") or 0
    start = start + size if start < 0 else start
    end = a.get("end")
    end = size if end is None or end > size else (end + size if end < 0 else end)
    pieces = []
    if start > 0:
        pieces.append(t.g.narrow(x, axis, 0, start))
    pieces.append(src)
    if end < size:
        pieces.append(t.g.narrow(x, axis, end, size - end))
    return pieces[0] if len(pieces) == 1 else t.g.concat(pieces, axis, name=node.name)


# -- activations ----------------------------------------------------------------------------------------
@translator("threshold_backward")
def tr_threshold_backward(t: T, node: fx.Node, a: Args) -> Node:
    """grad where self > threshold, else 0 (ReLU's backward at threshold 0)."""
    dy, x = t.tensor(a["grad_output"], DType.F32), t.tensor(a["self"], DType.F32)
    if a["threshold"] == 0 and dy.shape == x.shape:
        return t.g.activation_backward(x, dy, ActKind.RELU, of_output=True, name=node.name)
    keep = t.g.compare(x, float(a["threshold"]), "gt")
    return t.g.where(keep, dy, t.tensor(0.0, DType.F32), name=node.name)


@translator("gelu_backward")
def tr_gelu_backward(t: T, node: fx.Node, a: Args) -> Node:
    kind = ActKind.GELU_APPROX if a.get("approximate") == "tanh" else ActKind.GELU
    return _activation_backward(t, node, a["self"], a["grad_output"], kind, of_output=False)


@translator("silu_backward")
def tr_silu_backward(t: T, node: fx.Node, a: Args) -> Node:
    return _activation_backward(t, node, a["self"], a["grad_output"], ActKind.SILU, of_output=False)


@translator("sigmoid_backward", "tanh_backward")
def tr_output_backward(t: T, node: fx.Node, a: Args) -> Node:
    """sigmoid/tanh backward from the forward's output: ``dy y (1 - y)``, ``dy (1 - y^2)``."""
    kind = ActKind.SIGMOID if node.target._schema.name.endswith("sigmoid_backward") else ActKind.TANH
    return _activation_backward(t, node, a["output"], a["grad_output"], kind, of_output=True)


def _activation_backward(t: T, node: fx.Node, tensor: Any, grad: Any, kind: ActKind, of_output: bool) -> Node:
    x, dy = t.tensor(tensor, DType.F32), t.tensor(grad, DType.F32)
    if x.shape != dy.shape:
        raise t.unsupported(f"activation backward with grad {list(dy.shape)} and input {list(x.shape)}")
    return t.g.activation_backward(x, dy, kind, of_output=of_output, name=node.name)


# -- convolution, pooling ---------------------------------------------------------------------------
def _ints(value: Any) -> tuple[int, ...]:
    return tuple(int(v) for v in ([value] if isinstance(value, int) else value or ()))


@translator("convolution_backward")
def tr_convolution_backward(t: T, node: fx.Node, a: Args) -> list[Node | None]:
    """(d input, d weight, d bias) of torch's convolution, those ``output_mask`` asks for: the forward
    conv rebuilt without its bias and differentiated by its gradient rule (the rebuilt node itself is
    read by nothing and never runs)."""
    dy, x, w = (t.tensor(a[n], DType.F32) for n in ("grad_output", "input", "weight"))
    stride, padding, dilation = _ints(a["stride"]), _ints(a["padding"]), _ints(a["dilation"])
    groups, mask = int(a["groups"]), list(a["output_mask"])
    if a["transposed"]:
        forward = t.g.conv_transpose(x, w, stride, padding, _ints(a["output_padding"]), dilation, groups)
    else:
        forward = t.g.conv(x, w, stride, padding, dilation, groups)
    if tuple(forward.shape) != tuple(dy.shape):
        raise t.unsupported(f"convolution backward with grad {list(dy.shape)} for an output "
                            f"{list(forward.shape)}")
    ctx = GradContext(t.g, [True] * len(t.g.nodes))
    dx, dw = VJP[type(forward.op)](ctx, forward, dy)
    db = None
    if mask[2]:
        channels = int(dy.shape[1])
        db = t.g.reshape(ctx.sum_to(dy, (channels,) + (1,) * (dy.rank - 2)), [channels])
    return [dx if mask[0] else None, dw if mask[1] else None, db]


@translator("max_pool2d_with_indices_backward", "max_pool3d_with_indices_backward")
def tr_max_pool_backward(t: T, node: fx.Node, a: Args) -> Node:
    """PoolBackward from the input: the pool runs again for its maxima, the indices are not read."""
    x, dy = t.tensor(a["self"], DType.F32), t.tensor(a["grad_output"], DType.F32)
    kernel = _ints(a["kernel_size"])
    y = t.g.pool(x, ReduceOp.MAX, kernel, _ints(a["stride"]) or kernel, _ints(a["padding"]),
                 dilation=_ints(a["dilation"]), ceil_mode=bool(a["ceil_mode"]))
    return t.g.apply(ops.PoolBackward.of(y.op), [x, y, dy], node.name)


@translator("adaptive_max_pool2d_backward", "adaptive_max_pool3d_backward")
def tr_adaptive_max_pool_backward(t: T, node: fx.Node, a: Args) -> Node:
    """PoolBackward of the adaptive max pool: its maxima again from the input, the indices not read."""
    x, dy = t.tensor(a["self"], DType.F32), t.tensor(a["grad_output"], DType.F32)
    y = t.g.adaptive_pool(x, ReduceOp.MAX, [int(d) for d in dy.shape[2:]])
    return t.g.apply(ops.PoolBackward.of(y.op), [x, y, dy], node.name)


@translator("_adaptive_avg_pool2d_backward", "_adaptive_avg_pool3d_backward")
def tr_adaptive_avg_pool_backward(t: T, node: fx.Node, a: Args) -> Node:
    x, dy = t.tensor(a["self"], DType.F32), t.tensor(a["grad_output"], DType.F32)
    op = ops.AdaptivePool(ReduceOp.MEAN, tuple(int(d) for d in dy.shape[2:]))
    return t.g.apply(ops.PoolBackward.of(op), [x, dy, dy], node.name)


@translator("avg_pool2d_backward", "avg_pool3d_backward")
def tr_avg_pool_backward(t: T, node: fx.Node, a: Args) -> Node:
    """PoolBackward of the mean pool; its y input is not read for a mean, so dy (of y's type) stands in."""
    x, dy = t.tensor(a["self"], DType.F32), t.tensor(a["grad_output"], DType.F32)
    kernel = _ints(a["kernel_size"])
    op = ops.Pool(ReduceOp.MEAN, kernel, _ints(a["stride"]) or kernel, _ints(a["padding"]),
                  ceil_mode=bool(a["ceil_mode"]), count_include_pad=bool(a["count_include_pad"]),
                  divisor=int(a.get("divisor_override") or 0))
    return t.g.apply(ops.PoolBackward.of(op), [x, dy, dy], node.name)


def _pool_windows(op: ops.Pool | ops.AdaptivePool, in_sizes: list[int], out_sizes: list[int]
                  ) -> tuple[np.ndarray, np.ndarray]:
    """([positions, taps] flat position in the input plane of every window tap (in the forward's loop
    order, clamped), whether the tap lies inside the input)."""
    spatial = len(in_sizes)
    geo = None if isinstance(op, ops.AdaptivePool) else op.geometry(spatial)
    flat = np.zeros([1] * (2 * spatial), np.int64)
    inside = np.ones([1] * (2 * spatial), bool)
    for i, (size, out) in enumerate(zip(in_sizes, out_sizes)):  # positions on the first axes, taps last
        if geo is None:
            bins = np.array([adaptive_bin(o, size, out) for o in range(out)])
            pos = bins[:, :1] + np.arange(int((bins[:, 1] - bins[:, 0]).max()))[None, :]
            ok = pos < bins[:, 1:]
        else:
            pos = (np.arange(out)[:, None] * geo.stride[i] - geo.begin[i]
                   + np.arange(geo.kernel[i])[None, :] * geo.dilation[i])
            ok = (pos >= 0) & (pos < size)
        shape = [1] * (2 * spatial)
        shape[i], shape[spatial + i] = pos.shape
        flat = flat * size + np.clip(pos, 0, size - 1).reshape(shape)
        inside = inside & ok.reshape(shape)
    full = list(out_sizes) + list(flat.shape[spatial:])
    positions = math.prod(out_sizes)
    return (np.broadcast_to(flat, full).reshape(positions, -1).astype(np.int32),
            np.broadcast_to(inside, full).reshape(positions, -1))


def max_pool_indices(t: T, x: Node, y: Node) -> Node:
    """torch's indices output of a max pool (windowed or adaptive, 1-D to 3-D; ``y`` is rlxpy's pool
    node): per output, the flat position (``h*W + w`` in 2-D) in its input plane of the window's first
    maximum, a NaN counting as the maximum. A constant table holds every window's tap positions; x's
    planes gathered through it (taps outside the input -inf), an Argmax picks the tap and the table its
    position."""
    in_sizes = [int(d) for d in x.shape[2:]]
    table, valid = _pool_windows(y.op, in_sizes, [int(d) for d in y.shape[2:]])
    positions, taps = table.shape
    planes = t.g.reshape(x, [int(x.shape[0]) * int(x.shape[1]), math.prod(in_sizes)])
    windows = t.g.gather(planes, t.g.constant(table, dtype=DType.I32), 1)  # [planes, positions, taps]
    if not valid.all():
        windows = t.g.where(t.g.constant(valid), windows, t.tensor(-np.inf, DType.F32))
    chosen = t.g.argmax(windows)  # [planes, positions]
    start = (np.arange(positions) * taps).astype(np.int32)
    index = t.g.add(chosen, t.g.constant(start, dtype=DType.I32))
    picked = t.g.gather(t.g.constant(table.reshape(-1), dtype=DType.I32), index)
    return t.g.reshape(picked, list(y.shape))  # int64 in torch is i32 in rlxpy


def reads_more_than_first(node: fx.Node) -> bool:
    """Does the graph read an output of ``node`` past its first (statistics, indices)?"""
    return any(user.target.__name__ != "getitem" or user.args[1] != 0 for user in node.users)


def batch_statistics(t: T, x: Node, eps: float) -> tuple[Node, Node]:
    """(mean, 1/sqrt(biased var + eps)) per channel of x [N, C, *spatial]: what a training batch norm
    saves for its backward."""
    batch, channels = int(x.shape[0]), int(x.shape[1])
    spatial = math.prod(int(d) for d in x.shape[2:])
    moved = t.g.transpose(t.g.reshape(x, [batch, channels, spatial]), [1, 0, 2])
    grouped = t.g.reshape(moved, [1, channels, batch * spatial])
    mean = t.g.mean(grouped, 2, keep_dim=True)
    centred = t.g.sub(grouped, mean)
    var = t.g.mean(t.g.mul(centred, centred), 2, keep_dim=True)
    rstd = t.g.activation(t.g.add(var, eps), ActKind.RSQRT)
    return t.g.reshape(mean, [channels]), t.g.reshape(rstd, [channels])


#: Backward ops translated whole (above): kept out of the decomposition table in training graphs.
WHOLE = ("_scaled_dot_product_flash_attention_for_cpu_backward", "embedding_dense_backward",
         "threshold_backward", "gelu_backward", "silu_backward", "sigmoid_backward", "tanh_backward",
         "convolution_backward", "max_pool2d_with_indices_backward", "max_pool3d_with_indices_backward",
         "avg_pool2d_backward", "avg_pool3d_backward", "adaptive_max_pool2d_backward",
         "adaptive_max_pool3d_backward", "_adaptive_avg_pool2d_backward", "_adaptive_avg_pool3d_backward")
