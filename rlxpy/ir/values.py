"""The input contract: what ``exe.run`` inputs, ``set_param`` values and the reference take.

One rule set for every way host data enters a graph, so no value is converted silently:

* **Shape** must equal the tensor's shape exactly (a flat ``[512]`` array is not an ``[8, 64]``
  input). A rank-0 tensor takes a Python number or a 0-d array.
* **numpy arrays** (and anything ``np.asarray`` turns into one, e.g. CPU torch tensors) must have the
  tensor's own dtype, or one every value of which the tensor's dtype holds exactly (the lossless
  widenings in ``WIDENS``: f16 -> f32, i8/i16/u8/u16 -> i32, u8/u16 -> u32, ...). float64 into an
  f32 tensor, int64 into an i32 one, f32 into an int tensor are refused: convert on your side.
  A bf16 tensor takes float32 values, rounded to nearest even as torch does (numpy has no bf16).
* **Python numbers and lists** have no dtype of their own; they take the tensor's: floats round to
  the nearest f32/f16, integers must fit the int type's range, and an int tensor refuses
  non-integral values. bool tensors take bools (or 0/1).
* NaN and Inf are legal values; the NaN trace (``RLX_WGPU_NAN_TRACE``) reports them.

Anything else raises ``InputError`` naming the input, the expected type and what was given.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlxpy.errors import InputError
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph_core import Node
from rlxpy.ir.shape import format_shape

#: tensor dtype -> numpy dtypes accepted besides its own, each holding only values it represents exactly
WIDENS: dict[DType, tuple[str, ...]] = {
    DType.F32: ("float16",),
    DType.F64: ("float16", "float32"),
    DType.BF16: ("float32",),  # the documented rounding: numpy has no bf16
    DType.I16: ("int8", "uint8"),
    DType.I32: ("int8", "int16", "uint8", "uint16"),
    DType.I64: ("int8", "int16", "int32", "uint8", "uint16", "uint32"),
    DType.U32: ("uint8", "uint16"),
    DType.C64: (),
}


def _python_value(node: Node, value: Any, what: str) -> np.ndarray:
    """A Python number or (nested) list: converted to the tensor's dtype when every value fits."""
    array = np.asarray(value)
    if array.dtype == object or array.dtype.kind not in "biufc":
        raise InputError(f"{what} {node.name!r} ({node.type}): cannot read {type(value).__name__} values")
    dtype = node.dtype
    if dtype.is_int or dtype is DType.BOOL:
        if array.dtype.kind == "c" or (array.dtype.kind == "f" and not (
                np.all(np.isfinite(array)) and np.all(array == np.round(array)))):
            raise InputError(f"{what} {node.name!r} ({node.type}): non-integer values for an integer tensor")
        info = np.iinfo(np.uint8 if dtype is DType.BOOL else dtype.numpy)
        low, high = (0, 1) if dtype is DType.BOOL else (info.min, info.max)
        if array.size and (array.min() < low or array.max() > high):
            raise InputError(f"{what} {node.name!r} ({node.type}): values [{array.min()}, {array.max()}] "
                             f"do not fit {dtype} [{low}, {high}]")
    elif array.dtype.kind == "c" and dtype is not DType.C64:
        raise InputError(f"{what} {node.name!r}: complex values for a {node.dtype} tensor")
    return array.astype(dtype.numpy)


def check_value(node: Node, value: Any, what: str) -> np.ndarray:
    """``value`` as the numpy array of ``node``'s dtype and shape, or InputError (module docstring)."""
    python = isinstance(value, (int, float, bool, complex, list, tuple))
    array = _python_value(node, value, what) if python else np.asarray(value)
    if array.dtype.kind not in "biufc":
        raise InputError(f"{what} {node.name!r} ({node.type}): cannot read {type(value).__name__} values "
                         f"({array.dtype})")
    shape = tuple(node.shape)
    if array.shape != shape:
        raise InputError(f"{what} {node.name!r}: expected shape {format_shape(shape)} ({node.dtype}), "
                         f"got {format_shape(array.shape)} (shapes must match exactly)")
    if python:
        return array
    want = np.dtype(node.dtype.numpy)
    if array.dtype == want or array.dtype.name in WIDENS.get(node.dtype, ()):
        return array.astype(want, copy=False)
    widens = ", ".join(WIDENS.get(node.dtype, ())) or "none"
    raise InputError(f"{what} {node.name!r} ({node.type}): got {array.dtype} data, expected {want.name} "
                     f"(lossless widenings accepted: {widens}) — convert it explicitly, e.g. "
                     f".astype(np.{want.name})")
