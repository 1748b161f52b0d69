"""The ONNX operator table, part two: convolutional networks (onnx.ai/onnx/operators).

Conv, ConvTranspose, MaxPool, AveragePool, GlobalAveragePool / GlobalMaxPool, BatchNormalization,
InstanceNormalization, GroupNormalization, Resize / Upsample, HardSigmoid, HardSwish and Pad, with
ONNX's ``auto_pad`` (NOTSET, SAME_UPPER, SAME_LOWER, VALID) and asymmetric ``pads`` (the conv
family's ``padding`` / ``padding_end``). A BatchNormalization whose statistics are initializers,
right after a Conv with initializer weights, arrives fused as ``rlx.ConvBatchNorm`` (the importer's
pattern pass, onnx.py) and is folded here into the conv's weight and bias with numpy; any other
BatchNormalization is the BatchNorm op. Attributes rlxpy cannot honour (cubic resize, training-mode
batch norm, pooling indices, ...) are an UnsupportedOpError naming the node.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rlxpy.errors import ModelError, UnsupportedOpError
from rlxpy.frontends.onnx_ops import Known, emits
from rlxpy.frontends.onnx_ops_check import axes_of, int_list, scalar_of
from rlxpy.ir import DType, Node
from rlxpy.ir.ops.base import ActKind, ReduceOp

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def _text(value: Any, default: str) -> str:
    value = default if value is None else value
    return value.decode() if isinstance(value, bytes) else str(value)


def window_pads(im: Any, node: Any, attrs: dict, sizes: list[int], kernel: list[int], strides: list[int],
                dilations: list[int]) -> tuple[list[int], list[int]]:
    """(padding before, padding after) per spatial dim from ``pads`` or ``auto_pad``."""
    auto = _text(attrs.get("auto_pad"), "NOTSET")
    if auto not in AUTO_PADS:
        raise UnsupportedOpError(f"{im.where(node)}: auto_pad {auto!r} (ONNX has {', '.join(AUTO_PADS)})")
    spatial = len(sizes)
    if auto == "VALID":
        return [0] * spatial, [0] * spatial
    if auto == "NOTSET":
        pads = int_list(im.where(node), attrs.get("pads", [0] * (2 * spatial)), "pads")
        if len(pads) != 2 * spatial or any(p < 0 for p in pads):
            raise ModelError(f"{im.where(node)}: pads {pads} for {spatial} spatial dims")
        return pads[:spatial], pads[spatial:]
    begin, end = [], []
    for size, k, s, d in zip(sizes, kernel, strides, dilations):  # output = ceil(in / stride)
        total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
        small, large = total // 2, total - total // 2
        begin.append(small if auto == "SAME_UPPER" else large)
        end.append(large if auto == "SAME_UPPER" else small)
    return begin, end


def _window(im: Any, node: Any, attrs: dict, x: Node, kernel: list[int]) -> dict[str, list[int]]:
    spatial, where = x.rank - 2, im.where(node)
    strides = int_list(where, attrs.get("strides", [1] * spatial), "strides")
    dilations = int_list(where, attrs.get("dilations", [1] * spatial), "dilations")
    for what, values in (("kernel_shape", kernel), ("strides", strides), ("dilations", dilations)):
        if spatial < 1 or len(values) != spatial or any(v < 1 for v in values):
            raise ModelError(f"{where}: {what} {list(values)} for a rank-{x.rank} input ({spatial} spatial "
                             "dims, each at least 1)")
    begin, end = window_pads(im, node, attrs, [int(d) for d in x.shape[2:]], kernel, strides, dilations)
    return {"stride": strides, "padding": begin, "padding_end": end, "dilation": dilations}


def _float(im: Any, value: Any) -> Node:
    return im.tensor(value, DType.F32)


def _folded(im: Any, node: Any, what: str, array: np.ndarray) -> Known:
    """A value computed at import, kept among the importer's values for the whole import (its
    materialised node is cached by the value's identity, which must not be reused)."""
    known = Known(array)
    im.values[f"{node.output[0]}:{what}"] = known
    return known


def add_channel_bias(g: Any, y: Node, bias: Node | None, name: str | None) -> Node:
    """y + bias[c] per channel, as its own add: the conv epilogue pattern (ir/passes/patterns_conv.py)
    moves it, with an activation that follows, into the conv kernel. Shared with the torch frontend."""
    if bias is None:
        return y
    per_channel = g.reshape(bias, [int(y.shape[1])] + [1] * (y.rank - 2))
    return g.add(y, per_channel, name=name)


# -- convolution ----------------------------------------------------------------------------------
@emits("Conv")
def emit_conv(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    x, w = _float(im, ins[0]), _float(im, ins[1])
    bias = _float(im, ins[2]) if len(ins) > 2 and ins[2] is not None else None
    return [_conv(im, node, attrs, x, w, bias)]


def _conv(im: Any, node: Any, attrs: dict, x: Node, w: Node, bias: Node | None) -> Node:
    kernel = [int(k) for k in attrs.get("kernel_shape", w.shape[2:])]
    window = _window(im, node, attrs, x, kernel)
    groups = int(attrs.get("group", 1))
    y = im.g.conv(x, w, window["stride"], window["padding"], window["dilation"], groups,
                  padding_end=window["padding_end"])
    return add_channel_bias(im.g, y, bias, im.name(node))


@emits("rlx.ConvBatchNorm")
def emit_conv_batch_norm(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    """Conv then BatchNormalization, every weight known: one conv with the norm folded in (numpy, f64)."""
    x = _float(im, ins[0])
    w, bias, scale, shift, mean, var = (None if v is None else np.asarray(v.value, np.float64)
                                        for v in ins[1:])
    factor = scale / np.sqrt(var + float(attrs.get("epsilon", 1e-5)))
    folded_w = (w * factor.reshape((-1,) + (1,) * (w.ndim - 1))).astype(np.float32)
    folded_b = (((bias if bias is not None else 0.0) - mean) * factor + shift).astype(np.float32)
    weight, bias = _folded(im, node, "weight", folded_w), _folded(im, node, "bias", folded_b)
    return [_conv(im, node, attrs, x, _float(im, weight), _float(im, bias))]


@emits("ConvTranspose")
def emit_conv_transpose(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    x, w = _float(im, ins[0]), _float(im, ins[1])
    bias = _float(im, ins[2]) if len(ins) > 2 and ins[2] is not None else None
    spatial = x.rank - 2
    kernel = [int(k) for k in attrs.get("kernel_shape", w.shape[2:])]
    strides = [int(s) for s in attrs.get("strides", [1] * spatial)]
    dilations = [int(d) for d in attrs.get("dilations", [1] * spatial)]
    extra = [int(p) for p in attrs.get("output_padding", [0] * spatial)]
    auto = _text(attrs.get("auto_pad"), "NOTSET")
    sizes = [int(d) for d in x.shape[2:]]
    shape = attrs.get("output_shape")
    if shape is None and auto in ("SAME_UPPER", "SAME_LOWER"):
        shape = [size * s for size, s in zip(sizes, strides)]
    if shape is not None:  # pads from the requested output size (ONNX's equations)
        shape = [int(d) for d in list(shape)[-spatial:]]
        total = [s * (size - 1) + e + (k - 1) * d + 1 - want
                 for s, size, e, k, d, want in zip(strides, sizes, extra, kernel, dilations, shape)]
        if any(t < 0 for t in total):
            raise UnsupportedOpError(f"{im.where(node)}: output_shape {shape} is larger than the transposed "
                                     "convolution produces")
        upper = auto == "SAME_UPPER"
        begin = [t // 2 if upper else t - t // 2 for t in total]
        end = [t - t // 2 if upper else t // 2 for t in total]
    elif auto == "VALID":
        begin, end = [0] * spatial, [0] * spatial
    else:
        pads = [int(p) for p in attrs.get("pads", [0] * (2 * spatial))]
        begin, end = pads[:spatial], pads[spatial:]
    groups = int(attrs.get("group", 1))
    y = im.g.conv_transpose(x, w, strides, begin, extra, dilations, groups, padding_end=end)
    return [add_channel_bias(im.g, y, bias, im.name(node))]


# -- pooling ----------------------------------------------------------------------------------------
@emits("MaxPool", "AveragePool")
def emit_pool(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    if len(node.output) > 1 and node.output[1]:
        raise UnsupportedOpError(f"{im.where(node)}: the Indices output of MaxPool")
    if int(attrs.get("storage_order", 0)):
        raise UnsupportedOpError(f"{im.where(node)}: MaxPool storage_order=1")
    x = _float(im, ins[0])
    kernel = [int(k) for k in attrs["kernel_shape"]]
    window = _window(im, node, attrs, x, kernel)
    mean = node.op_type == "AveragePool"
    y = im.g.pool(x, ReduceOp.MEAN if mean else ReduceOp.MAX, kernel, window["stride"], window["padding"],
                  im.name(node), dilation=window["dilation"], padding_end=window["padding_end"],
                  ceil_mode=bool(attrs.get("ceil_mode", 0)),
                  count_include_pad=bool(attrs.get("count_include_pad", 0)) if mean else True)
    return [y]


@emits("GlobalAveragePool", "GlobalMaxPool")
def emit_global_pool(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    kind = ReduceOp.MEAN if node.op_type == "GlobalAveragePool" else ReduceOp.MAX
    return [im.g.adaptive_pool(_float(im, ins[0]), kind, 1, im.name(node))]


# -- normalisation ----------------------------------------------------------------------------------
@emits("BatchNormalization")
def emit_batch_norm(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    if int(attrs.get("training_mode", 0)) or any(node.output[1:]):
        raise UnsupportedOpError(f"{im.where(node)}: BatchNormalization in training mode (running statistics "
                                 "outputs): rlxpy runs inference")
    x, gamma, beta, mean, var = (_float(im, v) for v in ins[:5])
    return [im.g.batch_norm(x, mean, var, gamma, beta, eps=float(attrs.get("epsilon", 1e-5)),
                            name=im.name(node))]


@emits("InstanceNormalization")
def emit_instance_norm(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    x, gamma, beta = (_float(im, v) for v in ins[:3])
    return [im.g.group_norm(x, int(x.shape[1]), gamma, beta, eps=float(attrs.get("epsilon", 1e-5)),
                            name=im.name(node))]


@emits("GroupNormalization")
def emit_group_norm(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    """Opset 21 scales per channel; opset 18-20 per group (each group's value repeated over its channels)."""
    x = _float(im, ins[0])
    groups, channels = int(attrs["num_groups"]), int(x.shape[1])
    if int(attrs.get("stash_type", 1)) != 1:
        raise UnsupportedOpError(f"{im.where(node)}: GroupNormalization stash_type {attrs['stash_type']}")
    params = []
    for value in ins[1:3]:
        if im.shape_of(value) == (groups,) and groups != channels:
            known = im.known(node, value, "per-group scale / bias")
            value = _folded(im, node, f"channels{len(params)}", np.repeat(known, channels // groups))
        params.append(_float(im, value))
    return [im.g.group_norm(x, groups, params[0], params[1], eps=float(attrs.get("epsilon", 1e-5)),
                            name=im.name(node))]


# -- resampling -------------------------------------------------------------------------------------
_COORDS = {"half_pixel": "half_pixel", "asymmetric": "asymmetric", "pytorch_half_pixel": "pytorch_half_pixel",
           "align_corners": "align_corners"}
_NEAREST = {"round_prefer_floor": "nearest_round_prefer_floor",
            "round_prefer_ceil": "nearest_round_prefer_ceil", "floor": "nearest_floor",
            "ceil": "nearest_ceil"}


@emits("Resize", "Upsample")
def emit_resize(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    x = _float(im, ins[0])
    upsample = node.op_type == "Upsample" or im.opset < 11
    mode = _text(attrs.get("mode"), "nearest")
    coord = "asymmetric" if upsample else _text(attrs.get("coordinate_transformation_mode"), "half_pixel")
    nearest = "floor" if upsample else _text(attrs.get("nearest_mode"), "round_prefer_floor")
    problems = [f"{key}={attrs[key]}" for key in ("antialias", "exclude_outside") if attrs.get(key)]
    if mode not in ("nearest", "linear"):
        problems.append(f"mode {mode!r}")
    if coord not in _COORDS:
        problems.append(f"coordinate_transformation_mode {coord!r}")
    if nearest not in _NEAREST:
        problems.append(f"nearest_mode {nearest!r}")
    if _text(attrs.get("keep_aspect_ratio_policy"), "stretch") != "stretch":
        problems.append(f"keep_aspect_ratio_policy {attrs['keep_aspect_ratio_policy']!r}")
    if problems:
        raise UnsupportedOpError(f"{im.where(node)}: rlxpy's Resize has no {', '.join(problems)}")
    rank = x.rank
    axes = [int(a) % rank for a in attrs.get("axes", range(rank))]
    scales_in = ins[1] if upsample else (ins[2] if len(ins) > 2 else None)
    sizes_in = None if upsample else (ins[3] if len(ins) > 3 else None)
    shape = [int(d) for d in x.shape]
    sizes, steps = list(shape), [1.0] * rank
    if sizes_in is not None and im.shape_of(sizes_in) != (0,):
        for axis, size in zip(axes, im.known(node, sizes_in, "sizes")):
            sizes[axis] = int(size)
            steps[axis] = shape[axis] / int(size)
    else:
        scales = [float(s) for s in im.known(node, scales_in, "scales")] if scales_in is not None else []
        for axis, scale in zip(axes, scales):
            sizes[axis] = int(np.floor(shape[axis] * scale))
            steps[axis] = 1.0 / scale
    resized = [a for a in range(rank) if sizes[a] != shape[a] or steps[a] != 1.0]
    first = min(resized, default=rank)
    if first < rank - 3 or any(a < first for a in resized):
        raise UnsupportedOpError(f"{im.where(node)}: Resize of axes {resized} of {shape} (rlxpy resizes up "
                                 "to 3 trailing axes)")
    first = min(first, rank - 1)
    if all(sizes[a] == shape[a] and steps[a] == 1.0 for a in range(rank)):
        return [x]
    mode_name = "linear" if mode == "linear" else _NEAREST[nearest]
    return [im.g.resize(x, sizes[first:], mode_name, _COORDS[coord], steps[first:], name=im.name(node))]


# -- element-wise --------------------------------------------------------------------------------------
@emits("HardSigmoid", "HardSwish")
def emit_hard_sigmoid(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    """HardSigmoid max(0, min(1, alpha x + beta)) (alpha 0.2, beta 0.5); HardSwish x * that with 1/6, 0.5.
    With torch's constants (1/6, 0.5: what torch exports) they are the HARDSIGMOID / HARDSWISH activations,
    one kernel each; other constants are built from primitives."""
    x = _float(im, ins[0])
    swish = node.op_type == "HardSwish"
    alpha = 1.0 / 6.0 if swish else float(attrs.get("alpha", 0.2))
    beta = 0.5 if swish else float(attrs.get("beta", 0.5))
    if math.isclose(alpha, 1.0 / 6.0, rel_tol=1e-6) and beta == 0.5:
        kind = ActKind.HARDSWISH if swish else ActKind.HARDSIGMOID
        return [im.g.activation(x, kind, name=im.name(node))]
    gate = im.g.minimum(im.g.maximum(im.g.add(im.g.mul(x, alpha), beta), 0.0), 1.0)
    return [im.g.mul(x, gate, name=im.name(node)) if swish else gate]


# -- padding -------------------------------------------------------------------------------------------
@emits("Pad")
def emit_pad(im: Any, node: Any, ins: list[Any], attrs: dict) -> list[Any]:
    x = im.tensor(ins[0])
    where = im.where(node)
    mode = _text(attrs.get("mode"), "constant")
    if "pads" in attrs:  # opset < 11
        pads, value = int_list(where, attrs["pads"], "pads"), float(attrs.get("value", 0.0))
    else:
        pads = int_list(where, im.known(node, ins[1] if len(ins) > 1 else None, "pads"), "pads")
        given = ins[2] if len(ins) > 2 else None
        value = float(scalar_of(where, im.known(node, given, "constant_value"), "constant_value")) \
            if given is not None else 0.0
    axes = list(range(x.rank))
    if len(ins) > 3 and ins[3] is not None:
        axes = axes_of(where, int_list(where, im.known(node, ins[3], "axes"), "axes"), x.rank)
    count = len(axes)
    if len(pads) != 2 * count:
        raise ModelError(f"{where}: {len(pads)} pads for {count} axes (it needs two per axis)")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise UnsupportedOpError(f"{im.where(node)}: Pad mode {mode!r}")
    for i, axis in enumerate(axes):
        before, after = pads[i], pads[i + count]
        if before == 0 and after == 0:
            continue
        if mode == "constant":
            x = pad_axis(im.g, x, axis, before, after, value if x.dtype.is_float else int(value))
        else:
            x = _index_pad(im, node, x, axis, before, after, mode)
    return [x]


def pad_axis(g: Any, x: Node, axis: int, before: int, after: int, value: float) -> Node:
    """x with ``before`` / ``after`` elements of ``value`` around ``axis`` (a negative count crops);
    shared with the torch frontend's constant_pad_nd."""
    size = int(x.shape[axis])
    if before < 0 or after < 0:
        start, stop = max(-before, 0), size - max(-after, 0)
        x = g.narrow(x, axis, start, max(stop - start, 0))
        before, after = max(before, 0), max(after, 0)
    pieces = []
    for count in (before, after):
        if count == 0:
            pieces.append(None)
            continue
        shape = list(x.shape)
        shape[axis] = count
        fill = g.constant(np.full([1] * x.rank, value, dtype=x.dtype.numpy), x.dtype)
        pieces.append(g.expand(fill, shape))
    parts = [p for p in (pieces[0], x, pieces[1]) if p is not None]
    return parts[0] if len(parts) == 1 else g.concat(parts, axis)


def _index_pad(im: Any, node: Any, x: Node, axis: int, before: int, after: int, mode: str) -> Node:
    """reflect / edge / wrap padding as one gather of precomputed source indices along ``axis``."""
    size = int(x.shape[axis])
    positions = np.arange(-before, size + after)
    if mode == "edge":
        index = np.clip(positions, 0, size - 1)
    elif mode == "wrap":
        index = positions % size
    else:
        if size < 2 or before >= size or after >= size:
            raise UnsupportedOpError(f"{im.where(node)}: reflect padding of {before}/{after} on an axis of "
                                     f"{size}")
        period = 2 * (size - 1)
        folded = positions % period
        index = np.where(folded < size, folded, period - folded)
    return im.g.gather(x, im.g.constant(index.astype(np.int32), DType.I32), axis, name=im.name(node))
