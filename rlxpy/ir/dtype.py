"""Element types of the IR and their storage in the arena.

Storage is dtype-aware: each tensor takes ``numel * itemsize`` bytes (rounded up to 4), except
``bool`` which is stored as one u32 (0 or 1) per element so kernels can address it as words.
"""

from __future__ import annotations

import enum

import numpy as np


class DType(enum.Enum):
    F32 = "f32"
    F16 = "f16"
    BF16 = "bf16"
    F64 = "f64"
    C64 = "c64"
    I8 = "i8"
    I16 = "i16"
    I32 = "i32"
    I64 = "i64"
    U8 = "u8"
    U32 = "u32"
    BOOL = "bool"

    def __repr__(self) -> str:
        return f"DType.{self.name}"

    def __str__(self) -> str:
        return self.value

    @property
    def itemsize(self) -> int:
        """Bytes per element in the arena."""
        return _STORAGE_BYTES[self]

    @property
    def is_float(self) -> bool:
        return self in (DType.F32, DType.F16, DType.BF16, DType.F64)

    @property
    def is_int(self) -> bool:
        return self in (DType.I8, DType.I16, DType.I32, DType.I64, DType.U8, DType.U32)

    @property
    def numpy(self) -> np.dtype:
        """The numpy dtype the reference interpreter uses (bf16 is computed as f32)."""
        return np.dtype(_NUMPY[self])

    @property
    def storage_numpy(self) -> np.dtype:
        """The numpy dtype of the arena bytes (bool → u32, bf16 → u16 bit patterns)."""
        return np.dtype(_STORAGE_NUMPY[self])

    @staticmethod
    def parse(value: DType | str | np.dtype | type) -> DType:
        """Accept a DType, its short name ("f32"), or a numpy dtype."""
        if isinstance(value, DType):
            return value
        if isinstance(value, str) and value in _BY_NAME:
            return _BY_NAME[value]
        try:
            np_dtype = np.dtype(value)
        except TypeError as e:
            raise ValueError(f"unknown dtype {value!r}") from e
        for dtype, name in _NUMPY.items():
            if np.dtype(name) == np_dtype and dtype is not DType.BF16:
                return dtype
        raise ValueError(f"unknown dtype {value!r}")


_STORAGE_BYTES = {
    DType.F32: 4, DType.F16: 2, DType.BF16: 2, DType.F64: 8, DType.C64: 8, DType.I8: 1,
    DType.I16: 2, DType.I32: 4, DType.I64: 8, DType.U8: 1, DType.U32: 4, DType.BOOL: 4,
}
_NUMPY = {
    DType.F32: "float32", DType.F16: "float16", DType.BF16: "float32", DType.F64: "float64",
    DType.C64: "complex64", DType.I8: "int8", DType.I16: "int16", DType.I32: "int32",
    DType.I64: "int64", DType.U8: "uint8", DType.U32: "uint32", DType.BOOL: "bool",
}
_STORAGE_NUMPY = {**_NUMPY, DType.BF16: "uint16", DType.BOOL: "uint32"}
_BY_NAME = {d.value: d for d in DType}

# Promotion rank, low to high (the IR's rule).
_RANK = {
    DType.BOOL: 0, DType.U8: 1, DType.I8: 1, DType.I16: 2, DType.BF16: 2, DType.F16: 3,
    DType.U32: 4, DType.I32: 4, DType.I64: 5, DType.F32: 6, DType.F64: 7, DType.C64: 8,
}


def promote(a: DType, b: DType) -> DType:
    """Result dtype of a binary op on ``a`` and ``b``."""
    if a == b:
        return a
    if {a, b} == {DType.F16, DType.BF16}:
        return DType.F32
    if a.is_float != b.is_float and DType.C64 not in (a, b):
        float_side, int_side = (a, b) if a.is_float else (b, a)
        if int_side is DType.BOOL:
            return float_side
        if int_side is DType.I64:
            return DType.F64
        if float_side in (DType.F16, DType.BF16):
            return DType.F32
        return float_side
    if _RANK[a] == _RANK[b] and a.is_int and b.is_int:
        # signed and unsigned of one rank (u8/i8, u32/i32): the next wider signed int, like
        # torch.promote_types, so that promote stays symmetric
        return DType.I16 if _RANK[a] == 1 else DType.I64
    return a if _RANK[a] >= _RANK[b] else b


def to_storage(array: np.ndarray, dtype: DType) -> np.ndarray:
    """Convert host data to the arena's storage representation of ``dtype``."""
    if dtype is DType.BF16:
        values = np.ascontiguousarray(array, dtype=np.float32)
        bits = values.view(np.uint32)
        # round to nearest even, as torch does when casting f32 -> bf16; NaN would carry into
        # the exponent (or wrap) under the rounding add, so it becomes the quiet NaN 0x7FC0
        rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
        return np.where(np.isnan(values), np.uint16(0x7FC0), rounded).reshape(np.shape(array))
    if dtype is DType.BOOL:
        return (np.asarray(array) != 0).astype(np.uint32)
    return np.ascontiguousarray(array, dtype=dtype.numpy)


def from_storage(raw: np.ndarray, dtype: DType) -> np.ndarray:
    """Inverse of :func:`to_storage`: arena representation -> the reference numpy dtype."""
    if dtype is DType.BF16:
        return (raw.astype(np.uint32) << 16).view(np.float32)
    if dtype is DType.BOOL:
        return raw != 0
    return raw
