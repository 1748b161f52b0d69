"""DType parsing, promotion and arena storage; Sym/Shape helpers. Oracles: torch, numpy."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from rlxpy.ir.dtype import DType, from_storage, promote, to_storage
from rlxpy.ir.shape import (
    Sym,
    as_dim,
    as_shape,
    bind,
    broadcast_shapes,
    format_shape,
    is_static,
    normalize_axis,
    numel,
    symbols,
)

TORCH_DTYPES = {
    DType.F32: torch.float32, DType.F16: torch.float16, DType.BF16: torch.bfloat16, DType.F64: torch.float64,
    DType.C64: torch.complex64, DType.I8: torch.int8, DType.I16: torch.int16, DType.I32: torch.int32,
    DType.I64: torch.int64, DType.U8: torch.uint8, DType.U32: torch.uint32, DType.BOOL: torch.bool,
}


# -- DType ------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", list(DType))
def test_parse_accepts_dtype_and_short_name(dtype):
    assert DType.parse(dtype) is dtype
    assert DType.parse(dtype.value) is dtype
    assert DType.parse(str(dtype)) is dtype


@pytest.mark.parametrize("dtype", [d for d in DType if d is not DType.BF16])
def test_parse_accepts_numpy_dtypes(dtype):
    assert DType.parse(dtype.numpy) is dtype
    assert DType.parse(dtype.numpy.type) is dtype
    assert DType.parse(dtype.numpy.name) is dtype  # "float32", "int8", ...


def test_parse_maps_float32_numpy_to_f32_not_bf16():
    # bf16 is computed as f32 in the reference; a numpy float32 must still mean f32
    assert DType.parse(np.float32) is DType.F32


@pytest.mark.parametrize("bad", ["f31", "float128x", np.complex128, np.uint64, object])
def test_parse_rejects_unknown(bad):
    with pytest.raises(ValueError, match="unknown dtype"):
        DType.parse(bad)


def test_itemsize_matches_torch_except_bool_words():
    for dtype, torch_dtype in TORCH_DTYPES.items():
        expected = 4 if dtype is DType.BOOL else torch_dtype.itemsize  # bool is stored as one u32 word
        assert dtype.itemsize == expected, dtype


def test_float_and_int_classification():
    assert {d for d in DType if d.is_float} == {DType.F32, DType.F16, DType.BF16, DType.F64}
    assert {d for d in DType if d.is_int} == {DType.I8, DType.I16, DType.I32, DType.I64, DType.U8, DType.U32}
    assert not DType.BOOL.is_int and not DType.C64.is_float


def test_storage_numpy_types():
    assert DType.BF16.numpy == np.float32 and DType.BF16.storage_numpy == np.uint16
    assert DType.BOOL.numpy == np.bool_ and DType.BOOL.storage_numpy == np.uint32
    assert repr(DType.F32) == "DType.F32" and str(DType.I64) == "i64"


# -- promotion ----------------------------------------------------------------------------------
@pytest.mark.parametrize("a,b", list(itertools.combinations_with_replacement(list(DType), 2)))
def test_promote_is_symmetric_and_idempotent(a, b):
    assert promote(a, b) is promote(b, a)
    assert promote(a, a) is a


# The IR's table, written out pair by pair.
PROMOTE_TABLE = [
    (DType.F16, DType.BF16, DType.F32),
    (DType.F16, DType.F32, DType.F32),
    (DType.BF16, DType.F32, DType.F32),
    (DType.F32, DType.F64, DType.F64),
    (DType.I8, DType.I32, DType.I32),
    (DType.I16, DType.I64, DType.I64),
    (DType.U8, DType.I16, DType.I16),
    (DType.U8, DType.I8, DType.I16),  # equal rank, mixed sign: next wider signed (torch too)
    (DType.U32, DType.I32, DType.I64),
    (DType.BOOL, DType.I32, DType.I32),
    (DType.BOOL, DType.F16, DType.F16),
    (DType.BOOL, DType.BF16, DType.BF16),
    (DType.I32, DType.F32, DType.F32),
    (DType.I8, DType.F16, DType.F32),  # f16/bf16 with any int -> f32
    (DType.U8, DType.BF16, DType.F32),
    (DType.I64, DType.F32, DType.F64),  # any float with i64 -> f64 (torch says f32)
    (DType.I64, DType.F16, DType.F64),
    (DType.I64, DType.F64, DType.F64),
    (DType.F64, DType.C64, DType.C64),
    (DType.I64, DType.C64, DType.C64),
]


@pytest.mark.parametrize("a,b,expected", PROMOTE_TABLE)
def test_promote_table(a, b, expected):
    assert promote(a, b) is expected
    assert promote(b, a) is expected


@pytest.mark.parametrize("a,b", [(a, b) for a, b in itertools.combinations(list(DType), 2)
                                 if (a.is_float and b.is_float) or (a.is_int and b.is_int and
                                                                   DType.U32 not in (a, b))])
def test_promote_agrees_with_torch_within_one_kind(a, b):
    # within floats and within ints (u32 aside: torch promotes u32+i16 to i64) the IR agrees with torch
    expected = torch.promote_types(TORCH_DTYPES[a], TORCH_DTYPES[b])
    assert TORCH_DTYPES[promote(a, b)] == expected


# -- storage -------------------------------------------------------------------------------------
def _bf16_bits_torch(values: np.ndarray) -> np.ndarray:
    return torch.from_numpy(values).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)


def test_bf16_storage_rounds_to_nearest_even_like_torch():
    rng = np.random.default_rng(0)
    random = rng.standard_normal(4096).astype(np.float32) * np.float32(10.0) ** rng.integers(-30, 30, 4096)
    # exact ties (low half 0x8000) with even and odd kept halves, just below/above ties, subnormals,
    # values that round up into the next binade and to inf
    patterns = np.array([0x3F808000, 0x3F818000, 0x3F807FFF, 0x3F808001, 0x00008000, 0x00018000, 0x00000001,
                         0x3FFFFFFF, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F8000, 0x80000000, 0x7F800000, 0xFF800000],
                        dtype=np.uint32).view(np.float32)
    values = np.concatenate([random, patterns])
    np.testing.assert_array_equal(to_storage(values, DType.BF16), _bf16_bits_torch(values))


def test_bf16_storage_keeps_nan_a_nan():
    # the rounding add used to carry NaN payloads into inf or wrap 0xFFFFFFFF to 0
    nans = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0xFFFFFFFF, 0x7FFFFFFF],
                    dtype=np.uint32).view(np.float32)
    back = from_storage(to_storage(nans, DType.BF16), DType.BF16)
    assert np.isnan(back).all()
    assert torch.from_numpy(nans).to(torch.bfloat16).isnan().all()


def test_bf16_round_trip_matches_torch_values_and_keeps_shape():
    x = np.random.default_rng(1).standard_normal((3, 17, 5)).astype(np.float32)
    back = from_storage(to_storage(x, DType.BF16), DType.BF16)
    assert back.shape == x.shape and back.dtype == np.float32
    np.testing.assert_array_equal(back, torch.from_numpy(x).to(torch.bfloat16).float().numpy())
    scalar = to_storage(np.float32(1.5), DType.BF16)
    assert scalar.shape == () and int(scalar) == 0x3FC0


def test_bool_storage_is_one_word_per_element():
    raw = to_storage(np.array([True, False, True]), DType.BOOL)
    assert raw.dtype == np.uint32 and raw.tolist() == [1, 0, 1]
    assert to_storage(np.array([0.0, -2.5, np.nan]), DType.BOOL).tolist() == [0, 1, 1]
    np.testing.assert_array_equal(from_storage(raw, DType.BOOL), [True, False, True])


@pytest.mark.parametrize("dtype", [d for d in DType if d not in (DType.BF16, DType.BOOL)])
def test_storage_round_trip_is_exact(dtype):
    values = np.arange(-3, 14).reshape(17, 1) % (256 if dtype in (DType.U8, DType.U32) else 1000)
    array = values.astype(dtype.numpy)
    raw = to_storage(array, dtype)
    assert raw.dtype == dtype.storage_numpy and raw.nbytes == array.size * dtype.itemsize
    np.testing.assert_array_equal(from_storage(raw, dtype), array)


# -- shapes --------------------------------------------------------------------------------------
def test_as_dim_accepts_ints_symbols_and_numpy_ints():
    assert as_dim(3) == 3 and as_dim(np.int64(4)) == 4 and isinstance(as_dim(np.int64(4)), int)
    assert as_dim("T") == Sym("T") and as_dim(Sym("B")) == Sym("B")
    assert as_shape([2, "T", Sym("B")]) == (2, Sym("T"), Sym("B"))


@pytest.mark.parametrize("bad,error", [(-1, ValueError), (True, TypeError), (2.0, TypeError),
                                       (None, TypeError)])
def test_as_dim_rejects_bad_values(bad, error):
    with pytest.raises(error):
        as_dim(bad)


@pytest.mark.parametrize("shapes", [[(17, 5), (5,)], [(3, 1, 4), (1, 5, 1)], [(1,), (255,)], [(2, 3), ()],
                                    [(1, 1), (1,)], [(4, 1, 3), (1, 7, 1), (7, 3)], [(0, 3), (1, 3)]])
def test_broadcast_shapes_matches_numpy_on_ints(shapes):
    assert broadcast_shapes(*shapes) == np.broadcast_shapes(*shapes)


def test_broadcast_shapes_with_symbols():
    t, b = Sym("T"), Sym("B")
    assert broadcast_shapes((t, 1), (1, 4)) == (t, 4)
    assert broadcast_shapes((b, t, 8), (t, 1)) == (b, t, 8)
    assert broadcast_shapes((t,), (t,)) == (t,)
    assert broadcast_shapes((1,), (t,)) == (t,)


@pytest.mark.parametrize("shapes", [[(Sym("T"),), (3,)], [(Sym("T"),), (Sym("U"),)], [(2, 3), (4,)]])
def test_broadcast_shapes_clash_names_the_shapes(shapes):
    with pytest.raises(ValueError, match="cannot broadcast") as info:
        broadcast_shapes(*shapes)
    assert format_shape(shapes[0]) in str(info.value) and format_shape(shapes[1]) in str(info.value)


def test_bind_replaces_known_symbols_only():
    shape = (Sym("B"), Sym("T"), 8)
    assert bind(shape, {"B": 2}) == (2, Sym("T"), 8)
    assert bind(shape, {"B": 2, "T": 5, "other": 9}) == (2, 5, 8)
    assert is_static(bind(shape, {"B": 2, "T": 5})) and not is_static(shape)
    assert symbols(shape) == {"B", "T"} and symbols((3,)) == set()


def test_numel_and_format():
    assert numel((3, 17, 5)) == 255 and numel(()) == 1 and numel((0, 4)) == 0
    with pytest.raises(ValueError, match=r"\[T, 4\] has symbolic dims"):
        numel((Sym("T"), 4))
    assert format_shape((2, Sym("T"))) == "[2, T]" and format_shape(()) == "[]"


@pytest.mark.parametrize("axis,rank,expected", [(0, 1, 0), (-1, 3, 2), (2, 3, 2), (-3, 3, 0), (0, 0, 0)])
def test_normalize_axis(axis, rank, expected):
    assert normalize_axis(axis, rank) == expected


@pytest.mark.parametrize("axis,rank", [(3, 3), (-4, 3), (1, 1)])
def test_normalize_axis_out_of_range(axis, rank):
    with pytest.raises(ValueError, match=f"axis {axis} out of range for rank {rank}"):
        normalize_axis(axis, rank)
