"""numpy folds of ONNX operators whose inputs are all known at import time (shape arithmetic,
initializer reshapes, ...), with ONNX's semantics. Every argument is checked first
(onnx_ops_check.py), so a malformed model is a ModelError naming the node, not a numpy exception.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from rlxpy.errors import ModelError, UnsupportedOpError
from rlxpy.frontends import onnx_ops_check as check
from rlxpy.frontends.onnx_ops import (
    BINARY,
    COMPARE,
    REDUCE,
    UNARY,
    Known,
    int_div,
    onnx_numpy_dtype,
    reduce_axes,
    slice_spec,
)

Fold = Callable[[str, list, dict], list[np.ndarray]]


def fold(op_type: str, ins: list[Any], attrs: dict, opset: int, outputs: int, where: str = "") -> \
        list[np.ndarray] | None:
    """The numpy value of ``op_type`` on known inputs, or None when there is no fold for it."""
    where = where or op_type
    v = [x.value if isinstance(x, Known) else x for x in ins]
    if not v or v[0] is None:
        return None  # an omitted first input: the emitter says what is missing
    if op_type in BINARY:
        return _fold_binary(where, op_type, v)
    if op_type in COMPARE:
        check.broadcast(where, *(np.shape(x) for x in v[:2]))
        return [np.asarray(COMPARE[op_type][1](v[0], v[1]))]
    if op_type in UNARY and UNARY[op_type][1] is not None:
        check.not_bool(where, op_type, v[0])
        with np.errstate(all="ignore"):  # sqrt / log of a negative: NaN, as at run time
            return [np.asarray(UNARY[op_type][1](v[0])).astype(v[0].dtype)]
    if op_type in REDUCE:
        axes = reduce_axes(ins, attrs, v[0].ndim, where)
        if axes is None:
            return [v[0]]
        check.not_bool(where, op_type, v[0])
        out = REDUCE[op_type][1](v[0], axis=tuple(axes), keepdims=bool(attrs.get("keepdims", 1)))
        return [np.asarray(out).astype(v[0].dtype)]
    simple = FOLDS.get(op_type)
    return None if simple is None else simple(where, v, attrs)


def _fold_binary(where: str, op_type: str, v: list) -> list[np.ndarray]:
    a, b = np.asarray(v[0]), np.asarray(v[1])
    check.broadcast(where, a.shape, b.shape)
    if op_type not in ("Add", "Mul", "Max", "Min"):
        check.not_bool(where, op_type, a, b)
    if op_type == "Pow" and a.dtype.kind in "iu" and b.dtype.kind in "iu" and b.size and b.min() < 0:
        raise ModelError(f"{where}: an integer to a negative integer power")
    fn = BINARY[op_type][1] or int_div
    with np.errstate(all="ignore"):  # integer division by zero, overflow: ONNX leaves them undefined
        return [np.asarray(fn(a, b)).astype(np.result_type(a, b))]


def _need(where: str, v: list, index: int, what: str) -> Any:
    if len(v) <= index or v[index] is None:
        raise ModelError(f"{where}: the {what} input is missing")
    return v[index]


def _axes(where: str, v: list, attrs: dict, required: bool) -> list[int] | None:
    if "axes" in attrs:
        return check.int_list(where, attrs["axes"], "axes")
    if len(v) > 1 and v[1] is not None:
        return check.int_list(where, v[1], "axes")
    if required:
        raise ModelError(f"{where}: axes are missing (no attribute, no input)")
    return None


def _fold_range(where: str, v: list, attrs: dict) -> list[np.ndarray]:
    start, limit, delta = (check.scalar_of(where, _need(where, v, i, name), name)
                           for i, name in enumerate(("start", "limit", "delta")))
    if delta == 0:
        raise ModelError(f"{where}: Range with delta 0")
    count = max(math.ceil((float(limit) - float(start)) / float(delta)), 0)
    check.fold_size(where, [count])
    return [np.arange(start, limit, delta).astype(np.result_type(v[0], v[1], v[2]))]


def _fold_reshape(where: str, v: list, attrs: dict) -> list[np.ndarray]:
    target = check.reshape_target(where, v[0].shape, _need(where, v, 1, "shape"), attrs.get("allowzero", 0))
    return [v[0].reshape(target)]


def _fold_flatten(where: str, v: list, attrs: dict) -> list[np.ndarray]:
    axis = check.axis_of(where, attrs.get("axis", 1), v[0].ndim, inclusive=True)
    return [v[0].reshape(math.prod(v[0].shape[:axis]), math.prod(v[0].shape[axis:]))]


def _fold_unsqueeze(where: str, v: list, attrs: dict) -> list[np.ndarray]:
    return [v[0].reshape(check.unsqueeze_shape(where, v[0].shape, _axes(where, v, attrs, True)))]


def _fold_squeeze(where: str, v: list, attrs: dict) -> list[np.ndarray]:
    return [v[0].reshape(check.squeeze_shape(where, v[0].shape, _axes(where, v, attrs, False)))]


def _fold_transpose(where: str, v: list, attrs: dict) -> list[np.ndarray]:
    perm = check.permutation(where, attrs.get("perm", range(v[0].ndim - 1, -1, -1)), v[0].ndim)
    return [np.transpose(v[0], perm)]


def _fold_expand(where: str, v: list, attrs: dict) -> list[np.ndarray]:
    target = check.int_list(where, _need(where, v, 1, "shape"), "shape")
    shape = check.fold_size(where, check.broadcast(where, v[0].shape, target))
    return [np.broadcast_to(v[0], shape).copy()]


def _fold_concat(where: str, v: list, attrs: dict) -> list[np.ndarray]:
    parts = [np.asarray(x) for x in v if x is not None]
    axis = check.same_rank_concat(where, [p.shape for p in parts], attrs.get("axis"))
    return [np.concatenate(parts, axis=axis)]


def _fold_gather(where: str, v: list, attrs: dict) -> list[np.ndarray]:
    axis = check.axis_of(where, attrs.get("axis", 0), v[0].ndim)
    idx = check.indices_in_range(where, np.asarray(_need(where, v, 1, "indices")), v[0].shape[axis])
    return [np.take(v[0], idx, axis=axis)]


def _fold_gather_elements(where: str, v: list, attrs: dict) -> list[np.ndarray]:
    data, idx = v[0], np.asarray(_need(where, v, 1, "indices"))
    axis = check.gather_elements_index(where, data.shape, idx.shape, attrs.get("axis", 0))
    idx = check.indices_in_range(where, idx, data.shape[axis])
    grids = list(np.indices(idx.shape))
    grids[axis] = idx
    return [data[tuple(grids)]]


def _fold_slice(where: str, v: list, attrs: dict) -> list[np.ndarray]:
    x = v[0]
    index = [slice(None)] * x.ndim
    for axis, start, stop, step in slice_spec(x.shape, v, attrs, lambda k: k, where):
        index[axis] = slice(start, stop if stop >= 0 else None, step)
    return [x[tuple(index)]]


def _fold_split(where: str, v: list, attrs: dict) -> list[np.ndarray]:
    axis = check.axis_of(where, attrs.get("axis", 0), v[0].ndim)
    sizes = attrs.get("split")
    if sizes is None and len(v) > 1 and v[1] is not None:
        sizes = v[1]
    if sizes is None:
        raise UnsupportedOpError(f"{where}: Split of a known value needs explicit sizes")
    sizes = check.int_list(where, sizes, "split")
    if any(s < 0 for s in sizes) or sum(sizes) != v[0].shape[axis]:
        raise ModelError(f"{where}: split sizes {sizes} do not add up to the axis of {v[0].shape[axis]}")
    return np.split(v[0], np.cumsum(sizes)[:-1], axis=axis)


def _fold_where(where: str, v: list, attrs: dict) -> list[np.ndarray]:
    check.broadcast(where, *(np.shape(_need(where, v, i, "a")) for i in range(3)))
    return [np.where(v[0], v[1], v[2])]


def _logical(fn: Callable) -> Fold:
    def run(where: str, v: list, attrs: dict) -> list[np.ndarray]:
        check.broadcast(where, np.shape(v[0]), np.shape(_need(where, v, 1, "second")))
        return [fn(v[0], v[1])]
    return run


FOLDS: dict[str, Fold] = {
    "Cast": lambda w, v, a: [v[0].astype(onnx_numpy_dtype(a.get("to"), w))],
    "Identity": lambda w, v, a: [v[0]],
    "Dropout": lambda w, v, a: [v[0]],
    "Not": lambda w, v, a: [np.logical_not(v[0])],
    "And": _logical(np.logical_and),
    "Or": _logical(np.logical_or),
    "Xor": _logical(np.logical_xor),
    "IsNaN": lambda w, v, a: [np.isnan(v[0].astype(np.float32))],
    "Where": _fold_where,
    "Range": _fold_range,
    "Reshape": _fold_reshape,
    "Flatten": _fold_flatten,
    "Unsqueeze": _fold_unsqueeze,
    "Squeeze": _fold_squeeze,
    "Transpose": _fold_transpose,
    "Expand": _fold_expand,
    "Concat": _fold_concat,
    "Gather": _fold_gather,
    "GatherElements": _fold_gather_elements,
    "Slice": _fold_slice,
    "Split": _fold_split,
    "Relu": lambda w, v, a: [np.maximum(v[0], 0).astype(v[0].dtype)],
    "Sigmoid": lambda w, v, a: check.not_bool(w, "Sigmoid", v[0])
    or [(1 / (1 + np.exp(-v[0]))).astype(v[0].dtype)],
}
