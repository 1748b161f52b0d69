"""The ONNX operator table: for each op, a numpy fold (all inputs known at import time) and/or an
emitter (builder calls on graph tensors), both with ONNX's semantics (onnx.ai/onnx/operators).

Known values keep ONNX's dtypes (int64 shapes stay int64) until they are used by a graph tensor;
graph tensors are f32, i32 (ONNX int64/int32) or bool. Emitters take ``(im, node, ins, attrs)`` where
``ins`` holds Known values, graph Nodes, or None for an omitted optional input, and return one value
per output.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlxpy.errors import ModelError, UnsupportedOpError
from rlxpy.frontends.onnx_ops_check import (
    axes_of,
    axis_of,
    broadcast,
    fold_size,
    gather_elements_index,
    indices_in_range,
    int_list,
    permutation,
    reshape_target,
    same_rank_concat,
    scalar_of,
    squeeze_shape,
    unsqueeze_shape,
)
from rlxpy.ir import DType, Node
from rlxpy.ir.ops.base import ActKind, BinaryOp, CmpOp, ReduceOp


@dataclass(frozen=True)
class Known:
    """A value known at import time (initializer, Constant, or folded shape arithmetic)."""

    value: np.ndarray


Emit = Callable[[Any, Any, list[Any], dict[str, Any]], list[Any]]
EMIT: dict[str, Emit] = {}
#: ONNX TensorProto element types rlxpy takes, and how a graph tensor stores them.
ONNX_DTYPES = {1: (np.float32, DType.F32), 6: (np.int32, DType.I32), 7: (np.int64, DType.I32),
               9: (np.bool_, DType.BOOL)}


def emits(*names: str) -> Callable[[Emit], Emit]:
    def register(fn: Emit) -> Emit:
        for name in names:
            EMIT[name] = fn
        return fn
    return register


def onnx_numpy_dtype(code: int, what: str) -> np.dtype:
    if code not in ONNX_DTYPES:
        raise UnsupportedOpError(f"{what}: ONNX element type {code} is not supported (float, int64, int32, "
                                 "bool)")
    return np.dtype(ONNX_DTYPES[code][0])


# -- element-wise ---------------------------------------------------------------------------------
BINARY = {"Add": (BinaryOp.ADD, np.add), "Sub": (BinaryOp.SUB, np.subtract),
           "Mul": (BinaryOp.MUL, np.multiply),
           "Div": (BinaryOp.DIV, None), "Pow": (BinaryOp.POW, np.power), "Max": (BinaryOp.MAX, np.maximum),
           "Min": (BinaryOp.MIN, np.minimum)}
COMPARE = {"Equal": (CmpOp.EQ, np.equal), "Less": (CmpOp.LT, np.less),
            "LessOrEqual": (CmpOp.LE, np.less_equal),
            "Greater": (CmpOp.GT, np.greater), "GreaterOrEqual": (CmpOp.GE, np.greater_equal)}
UNARY = {"Sqrt": (ActKind.SQRT, np.sqrt), "Tanh": (ActKind.TANH, np.tanh), "Relu": (ActKind.RELU, None),
          "Sigmoid": (ActKind.SIGMOID, None), "Exp": (ActKind.EXP, np.exp), "Log": (ActKind.LOG, np.log),
          "Neg": (ActKind.NEG, np.negative), "Abs": (ActKind.ABS, np.abs), "Sin": (ActKind.SIN, np.sin),
          "Cos": (ActKind.COS, np.cos)}


def int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        return np.trunc(a / b).astype(np.result_type(a, b))  # ONNX integer Div truncates like C
    return np.divide(a, b)


@emits(*BINARY)
def emit_binary(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    kind = BINARY[node.op_type][0]
    a, b = im.pair(ins[0], ins[1])
    # a one-element exponent of any rank ([], [1], [1, 1]): float() of a non-0-d array is an error
    square = isinstance(ins[1], Known) and ins[1].value.size == 1 and float(ins[1].value.reshape(-1)[0]) == 2
    if kind is BinaryOp.POW and square:
        return [im.g.mul(a, a, name=im.name(node))]  # x ** 2 as x * x, like onnxruntime
    return [im.g.binary(a, b, kind, name=im.name(node))]


@emits(*COMPARE)
def emit_compare(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    a, b = im.pair(ins[0], ins[1])
    if a.dtype is DType.BOOL:
        a, b = im.cast(a, DType.I32), im.cast(b, DType.I32)
    return [im.g.compare(a, b, COMPARE[node.op_type][0], name=im.name(node))]


@emits(*UNARY)
def emit_unary(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    x = im.tensor(ins[0])
    kind = UNARY[node.op_type][0]
    if x.dtype is not DType.F32:
        raise UnsupportedOpError(f"{im.where(node)}: {node.op_type} of {x.dtype} (rlxpy runs it on float)")
    return [im.g.activation(x, kind, name=im.name(node))]


@emits("Reciprocal")
def emit_reciprocal(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    return [im.g.div(im.g.constant(1.0), im.tensor(ins[0]), name=im.name(node))]


@emits("Erf")
def emit_erf(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    return [erf(im.g, im.tensor(ins[0], DType.F32), im.name(node))]


def erf(g: Any, x: Node, name: str) -> Node:
    """erf(x) by Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7, about f32's rounding of erf near 1):
    1 - t (a1 + t (a2 + ...)) exp(-x^2), t = 1 / (1 + p |x|), odd in x; NaN propagates. Shared with
    the torch frontend (aten.erf); GELU patterns never get here, they use the exact GELU kernel."""
    p, coeffs = 0.3275911, (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
    ax = g.activation(x, "abs")
    t = g.div(g.constant(1.0), g.add(g.mul(ax, p), 1.0))
    poly = g.constant(coeffs[-1])
    for c in reversed(coeffs[:-1]):
        poly = g.add(g.mul(poly, t), c)
    y = g.sub(g.constant(1.0), g.mul(g.mul(poly, t), g.exp(g.activation(g.mul(ax, ax), "neg"))))
    return g.where(g.compare(x, 0.0, "lt"), g.activation(y, "neg"), y, name=name)


@emits("Gelu")
def emit_gelu(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    approx = attrs.get("approximate", "none")
    approx = approx.decode() if isinstance(approx, bytes) else approx
    return [im.g.gelu(im.tensor(ins[0]), approximate=approx == "tanh", name=im.name(node))]


@emits("IsNaN")
def emit_isnan(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    x = im.tensor(ins[0])
    return [im.g.compare(x, x, "ne", name=im.name(node))]  # only NaN differs from itself


@emits("Not")
def emit_not(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    return [im.g.compare(im.cast(im.tensor(ins[0]), DType.I32), 0, "eq", name=im.name(node))]


@emits("And", "Or", "Xor")
def emit_logical(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    a, b = (im.cast(im.tensor(v), DType.I32) for v in ins)
    if node.op_type == "Xor":
        return [im.g.compare(a, b, "ne", name=im.name(node))]
    joined = im.g.minimum(a, b) if node.op_type == "And" else im.g.maximum(a, b)
    return [im.g.compare(joined, 0, "ne", name=im.name(node))]


@emits("Where")
def emit_where(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    a, b = im.pair(ins[1], ins[2])
    return [im.g.where(im.tensor(ins[0]), a, b, name=im.name(node))]


@emits("Clip")
def emit_clip(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    x = im.tensor(ins[0])
    low = ins[1] if len(ins) > 1 else (Known(np.float32(attrs["min"])) if "min" in attrs else None)
    high = ins[2] if len(ins) > 2 else (Known(np.float32(attrs["max"])) if "max" in attrs else None)
    if low is not None:
        x = im.g.maximum(x, im.tensor(low, x.dtype))
    if high is not None:
        x = im.g.minimum(x, im.tensor(high, x.dtype))
    return [x]


@emits("Cast")
def emit_cast(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    onnx_numpy_dtype(attrs["to"], im.where(node))
    return [im.cast(im.tensor(ins[0]), ONNX_DTYPES[attrs["to"]][1])]


@emits("Identity", "Dropout")
def emit_identity(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    if node.op_type == "Dropout" and len(node.output) > 1 and node.output[1]:
        raise UnsupportedOpError(f"{im.where(node)}: the mask output of Dropout")
    return [ins[0]]


# -- matrix products, normalisation ------------------------------------------------------------------
@emits("MatMul")
def emit_matmul(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    a, b = im.tensor(ins[0], DType.F32), im.tensor(ins[1], DType.F32)
    if a.rank < 2 or b.rank < 2:
        raise UnsupportedOpError(f"{im.where(node)}: MatMul of a 1-D operand")
    if b.rank > 2 and tuple(a.shape[:-2]) != tuple(b.shape[:-2]):  # numpy batch broadcasting
        lead = broadcast(im.where(node), tuple(a.shape[:-2]), tuple(b.shape[:-2]))
        a = im.g.expand(a, list(lead) + list(a.shape[-2:]))
        b = im.g.expand(b, list(lead) + list(b.shape[-2:]))
    return [im.g.matmul(a, b, name=im.name(node))]


@emits("Gemm")
def emit_gemm(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    """alpha * A' B' + beta * C, A' = A^T if transA, B' = B^T if transB."""
    a, b = im.tensor(ins[0], DType.F32), ins[1]
    if attrs.get("transA"):
        a = im.g.transpose(a, [1, 0])
    if isinstance(b, Known):  # a weight: transpose it now, not on every run
        b = Known(np.ascontiguousarray(b.value.T)) if attrs.get("transB") else b
        b = im.tensor(b, DType.F32)
    else:
        b = im.tensor(b, DType.F32)
        b = im.g.transpose(b, [1, 0]) if attrs.get("transB") else b
    alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
    c = ins[2] if len(ins) > 2 else None
    if c is not None and alpha == 1.0 and beta == 1.0 and len(im.shape_of(c)) == 1 \
            and im.shape_of(c)[0] == b.shape[1]:
        return [im.g.linear(a, b, im.tensor(c, DType.F32), name=im.name(node))]
    y = im.g.matmul(a, b)
    y = im.g.mul(y, alpha) if alpha != 1.0 else y
    if c is not None and beta != 0.0:
        cc = im.tensor(c, DType.F32)
        y = im.g.add(y, im.g.mul(cc, beta) if beta != 1.0 else cc)
    return [y]


@emits("rlx.Linear")
def emit_linear(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    """MatMul(x, W) + b fused by the importer's pattern pass (W [K, N], b [N] both known)."""
    x, w, b = (im.tensor(v, DType.F32) for v in ins[:3])
    return [im.g.linear(x, w, b, name=im.name(node))]


@emits("LayerNormalization", "rlx.LayerNorm")
def emit_layer_norm(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    x = im.tensor(ins[0], DType.F32)
    axis = axis_of(im.where(node), attrs.get("axis", -1), x.rank)
    width = math.prod(x.shape[axis:])
    flat = im.g.reshape(x, list(x.shape[:axis]) + [width]) if axis != x.rank - 1 else x
    gamma = im.g.reshape(im.tensor(ins[1], DType.F32), [width])
    has_beta = len(ins) > 2 and ins[2] is not None
    beta = im.g.reshape(im.tensor(ins[2], DType.F32), [width]) if has_beta else None
    if any(o for o in node.output[1:]):
        raise UnsupportedOpError(f"{im.where(node)}: the mean / inv_std_dev outputs of LayerNormalization")
    y = im.g.layer_norm(flat, gamma, beta, eps=float(attrs.get("epsilon", 1e-5)))
    return [im.g.reshape(y, x.shape, name=im.name(node)) if flat is not x else y]


@emits("Softmax", "LogSoftmax")
def emit_softmax(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    x = im.tensor(ins[0], DType.F32)
    default = -1 if im.opset >= 13 else 1
    axis = axis_of(im.where(node), attrs.get("axis", default), x.rank)
    shape = list(x.shape)
    if im.opset < 13 and axis != x.rank - 1:  # old softmax: flatten to [prod(:axis), prod(axis:)]
        x = im.g.reshape(x, [math.prod(shape[:axis]), math.prod(shape[axis:])])
        axis = 1
    if node.op_type == "Softmax":
        y = im.g.softmax(x, axis)
    else:
        shifted = im.g.sub(x, im.g.reduce(x, ReduceOp.MAX, [axis], True))
        y = im.g.sub(shifted, im.g.activation(im.g.sum(im.g.exp(shifted), axis, keep_dim=True), "log"))
    return [im.g.reshape(y, shape, name=im.name(node)) if list(y.shape) != shape else y]


REDUCE = {"ReduceMean": (ReduceOp.MEAN, np.mean), "ReduceSum": (ReduceOp.SUM, np.sum),
           "ReduceMax": (ReduceOp.MAX, np.max), "ReduceMin": (ReduceOp.MIN, np.min),
           "ReduceProd": (ReduceOp.PROD, np.prod)}


def reduce_axes(ins: list[Any], attrs: dict, rank: int, where: str) -> list[int] | None:
    axes = attrs.get("axes")
    if axes is None and len(ins) > 1 and ins[1] is not None:
        if not isinstance(ins[1], Known):
            raise UnsupportedOpError(f"{where}: reduce axes must be known at import time")
        axes = ins[1].value
    axes = None if axes is None else int_list(where, axes, "axes")
    if not axes:
        return None if attrs.get("noop_with_empty_axes") else list(range(rank))
    return sorted(axes_of(where, axes, rank))


@emits(*REDUCE)
def emit_reduce(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    x = im.tensor(ins[0])
    axes = reduce_axes(ins, attrs, x.rank, im.where(node))
    if axes is None:
        return [x]
    keep = bool(attrs.get("keepdims", 1))
    kind = REDUCE[node.op_type][0]
    out_dtype = x.dtype
    x = im.cast(x, DType.F32)
    if axes != list(range(axes[0], axes[-1] + 1)):
        rest = [d for d in range(x.rank) if d not in axes]
        moved = im.g.transpose(x, rest + axes)
        y = im.g.reduce(moved, kind, list(range(len(rest), x.rank)), False)
        if keep:
            y = im.g.reshape(y, [1 if d in axes else x.shape[d] for d in range(x.rank)])
    else:
        y = im.g.reduce(x, kind, axes, keep)
    return [im.cast(y, out_dtype)]


# -- shapes and data movement ------------------------------------------------------------------------
@emits("Reshape")
def emit_reshape(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    x = im.tensor(ins[0])
    target = reshape_target(im.where(node), tuple(x.shape), im.known(node, ins[1], "shape"),
                            attrs.get("allowzero", 0))
    return [im.g.reshape(x, target, name=im.name(node)) if list(x.shape) != target else x]


@emits("Flatten")
def emit_flatten(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    x = im.tensor(ins[0])
    axis = axis_of(im.where(node), attrs.get("axis", 1), x.rank, inclusive=True)
    return [im.g.reshape(x, [math.prod(x.shape[:axis]), math.prod(x.shape[axis:])], name=im.name(node))]


def _axes_arg(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[int] | None:
    if "axes" in attrs:
        return int_list(im.where(node), attrs["axes"], "axes")
    if len(ins) > 1 and ins[1] is not None:
        return int_list(im.where(node), im.known(node, ins[1], "axes"), "axes")
    return None


@emits("Unsqueeze", "Squeeze")
def emit_unsqueeze(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    x = im.tensor(ins[0])
    axes = _axes_arg(im, node, ins, attrs)
    if node.op_type == "Unsqueeze" and axes is None:
        raise ModelError(f"{im.where(node)}: axes are missing (no attribute, no input)")
    shape = unsqueeze_shape(im.where(node), tuple(x.shape), axes) if node.op_type == "Unsqueeze" \
        else squeeze_shape(im.where(node), tuple(x.shape), axes)
    return [im.g.reshape(x, shape, name=im.name(node))]


@emits("Transpose")
def emit_transpose(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    x = im.tensor(ins[0])
    perm = permutation(im.where(node), attrs.get("perm", range(x.rank - 1, -1, -1)), x.rank)
    return [x if perm == sorted(perm) else im.g.transpose(x, perm, name=im.name(node))]


@emits("Expand")
def emit_expand(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    x = im.tensor(ins[0])
    shape = int_list(im.where(node), im.known(node, ins[1], "shape"), "shape")
    target = list(broadcast(im.where(node), tuple(x.shape), shape))
    if list(x.shape) == target:
        return [x]
    if x.rank < len(target):
        x = im.g.reshape(x, [1] * (len(target) - x.rank) + list(x.shape))
    return [im.g.expand(x, target, name=im.name(node))]


@emits("Concat")
def emit_concat(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    dtype = next((v.dtype for v in ins if isinstance(v, Node)), None)
    parts = [im.tensor(v, dtype) for v in ins if v is not None]
    axis = same_rank_concat(im.where(node), [p.shape for p in parts], attrs.get("axis"))
    parts = [p for p in parts if p.shape[axis] != 0]
    return [parts[0] if len(parts) == 1 else im.g.concat(parts, axis, name=im.name(node))]


def slice_spec(shape: tuple, ins: list[Any], attrs: dict, known: Callable, where: str
               ) -> list[tuple[int, int, int, int]]:
    """[(axis, start, stop, step)] with ONNX's clamping, from inputs (opset >= 10) or attributes."""
    if "starts" in attrs:
        starts = int_list(where, attrs["starts"], "starts")
        ends = int_list(where, attrs.get("ends", []), "ends")
        axes = int_list(where, attrs.get("axes", range(len(starts))), "axes")
        steps = [1] * len(starts)
    else:
        if len(ins) < 3 or ins[1] is None or ins[2] is None:
            raise ModelError(f"{where}: starts and ends are missing")
        starts, ends = int_list(where, known(ins[1]), "starts"), int_list(where, known(ins[2]), "ends")
        given = len(ins) > 3 and ins[3] is not None
        axes = int_list(where, known(ins[3]), "axes") if given else list(range(len(starts)))
        given = len(ins) > 4 and ins[4] is not None
        steps = int_list(where, known(ins[4]), "steps") if given else [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps) or 0 in steps:
        raise ModelError(f"{where}: starts {starts}, ends {ends}, axes {axes}, steps {steps} do not match "
                         "(or a step is 0)")
    out = []
    for axis, start, stop, step in zip(axes_of(where, axes, len(shape)), starts, ends, steps):
        start, stop, step = slice(start, stop, step).indices(int(shape[axis]))
        out.append((axis, start, stop, step))
    return out


@emits("Slice")
def emit_slice(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    x = im.tensor(ins[0])
    spec = slice_spec(tuple(x.shape), ins, attrs, lambda v: im.known(node, v, "slice"), im.where(node))
    for axis, start, stop, step in spec:
        if step != 1:
            raise UnsupportedOpError(f"{im.where(node)}: Slice with step {step}")
        if start == 0 and stop == x.shape[axis]:
            continue
        x = im.g.narrow(x, axis, start, max(stop - start, 0))
    return [x]


@emits("Split")
def emit_split(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    x = im.tensor(ins[0])
    where = im.where(node)
    axis = axis_of(where, attrs.get("axis", 0), x.rank)
    sizes = attrs.get("split")
    if sizes is None and len(ins) > 1 and ins[1] is not None:
        sizes = im.known(node, ins[1], "split")
    if sizes is None:
        parts = attrs.get("num_outputs", len(node.output))
        if not 1 <= parts <= max(x.shape[axis], 1):
            raise ModelError(f"{where}: {parts} parts of an axis of {x.shape[axis]}")
        chunk = -(-x.shape[axis] // parts)
        sizes = [min(chunk, x.shape[axis] - i * chunk) for i in range(parts)]
    sizes = int_list(where, sizes, "split")
    if any(s < 0 for s in sizes) or sum(sizes) != x.shape[axis] or len(sizes) != len(node.output):
        raise ModelError(f"{where}: split sizes {sizes} do not cut an axis of {x.shape[axis]} into "
                         f"{len(node.output)} outputs")
    outs, start = [], 0
    for size in sizes:
        outs.append(im.g.narrow(x, axis, start, size))
        start += size
    return outs


@emits("Gather")
def emit_gather(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    table = im.tensor(ins[0])
    axis = axis_of(im.where(node), attrs.get("axis", 0), table.rank)
    size = table.shape[axis]
    if isinstance(ins[1], Known):  # wrap negative indices now
        idx = indices_in_range(im.where(node), ins[1].value, size)
        indices = im.g.constant(idx.astype(np.int32), DType.I32)
    else:
        indices = im.cast(ins[1], DType.I32)
        im.note_index_bound(indices, size)
        indices = im.g.where(im.g.compare(indices, 0, "lt"), im.g.add(indices, size), indices)
    return [im.g.gather(table, indices, axis, name=im.name(node))]


@emits("GatherElements")
def emit_gather_elements(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    """out[i..] = data[i0, .., idx[i..], .., in] along axis (torch.gather): one flat gather at the
    linear index, computed from the (static) shapes."""
    data = im.tensor(ins[0])
    axis = gather_elements_index(im.where(node), tuple(data.shape), im.shape_of(ins[1]), attrs.get("axis", 0))
    shape = [int(d) for d in data.shape]
    strides = [math.prod(shape[a + 1:]) for a in range(len(shape))]
    if isinstance(ins[1], Known):
        idx = indices_in_range(im.where(node), ins[1].value, shape[axis])
        grids = np.indices(idx.shape)
        linear = sum((idx if a == axis else grids[a]) * strides[a] for a in range(len(shape)))
        index = im.g.constant(linear.astype(np.int32), DType.I32)
    else:
        idx = im.cast(ins[1], DType.I32)
        idx = im.g.where(im.g.compare(idx, 0, "lt"), im.g.add(idx, shape[axis]), idx)
        grids = np.indices(tuple(idx.shape))
        base = sum(grids[a] * strides[a] for a in range(len(shape)) if a != axis)
        index = im.g.add(im.g.mul(idx, strides[axis]), im.g.constant(base.astype(np.int32), DType.I32))
    flat = im.g.reshape(data, [math.prod(shape)])
    return [im.g.gather(flat, index, 0, name=im.name(node))]


@emits("Shape")
def emit_shape(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    shape = np.array(im.shape_of(ins[0]), dtype=np.int64)
    start, end = (int(np.clip(attrs.get(key, default), -2**62, 2**62))
                  for key, default in (("start", 0), ("end", len(shape))))
    return [Known(shape[start:end])]


@emits("Size")
def emit_size(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    return [Known(np.array(math.prod(im.shape_of(ins[0])), dtype=np.int64))]


@emits("ConstantOfShape")
def emit_constant_of_shape(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    where = im.where(node)
    shape = fold_size(where, int_list(where, im.known(node, ins[0], "shape"), "shape"))
    value = np.asarray(attrs.get("value", np.zeros([1], np.float32)))
    return [Known(np.full(shape, scalar_of(where, value, "value"), dtype=value.dtype))]
