"""The names of the typed word loads and stores (``include/common_words.wgsl``) per IR dtype.

Kernels that mix dtypes bind the arena as ``array<u32>`` and convert per element; a lowerer picks
the loader and store of each operand here and passes their names as placeholder values. The WGSL
itself lives in ``kernels/include/``: common_words (loads, stores), common_float (NaN, inf,
saturating casts), common_math (erf, atan, sin/cos/tan, tanh).
"""

from __future__ import annotations

from rlxpy.errors import UnsupportedOpError
from rlxpy.ir.dtype import DType

#: IR dtype -> (WGSL compute type, loader function name) for word-sized element types.
WORD_TYPES = {
    DType.F32: ("f32", "ld_f32"),
    DType.I32: ("i32", "ld_i32"),
    DType.U32: ("u32", "ld_u32"),
    DType.BOOL: ("u32", "ld_u32"),
}


def word_type(dtype: DType, what: str) -> tuple[str, str]:
    """(WGSL type, loader) of a word-sized dtype; anything else is not lowered by word kernels."""
    if dtype not in WORD_TYPES:
        raise UnsupportedOpError(f"{what}: dtype {dtype} is not supported by this kernel (f32/i32/u32/bool)")
    return WORD_TYPES[dtype]


def store_fn(dtype: DType) -> str:
    return {"f32": "st_f32", "i32": "st_i32", "u32": "st_u32"}[word_type(dtype, "store")[0]]
