"""Data movement on the GPU (Transpose, Narrow, Concat, Expand, Gather, ScatterAdd) and the f16/bf16
casts, against torch (permute, narrow, cat, expand, embedding / index_select, index_add_, .to())
and bit for bit where the op only moves data."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rlxpy
from rlxpy.errors import GraphError, UnsupportedOpError
from rlxpy.ir.dtype import DType
from rlxpy.ir.reference import run_reference
from rlxpy.wgpu_backend.compiler import lower_graph, prepare
from rlxpy.wgpu_backend.kernels.params import KERNELS
from rlxpy.wgpu_backend.lowering.shape import Axis, coalesce
from rlxpy.wgpu_backend.schedule import DeviceFacts

#: Every storage width: 1 (u8), 2 (f16, bf16), 4 (f32, i32, bool) and 8 (i64) bytes per element.
DTYPES = [DType.F32, DType.I32, DType.BOOL, DType.F16, DType.BF16, DType.U8, DType.I64]


# -- helpers ------------------------------------------------------------------------------------
def sample(shape: tuple[int, ...], dtype: DType, seed: int = 0) -> np.ndarray:
    """Values that exercise every byte of the element: signs, NaN/inf/-0.0 for floats, i64 > 2^32."""
    rng = np.random.default_rng(seed)
    if dtype is DType.BOOL:
        return np.asarray(rng.random(shape) < 0.5)
    if dtype is DType.U8:
        return rng.integers(0, 256, shape).astype(np.uint8)
    if dtype is DType.I32:
        return rng.integers(-2**31, 2**31 - 1, shape).astype(np.int32)
    if dtype is DType.I64:
        return rng.integers(-2**40, 2**40, shape).astype(np.int64)
    values = np.asarray(rng.standard_normal(shape) * 100, np.float32)
    flat = values.reshape(-1)
    specials = np.array([np.nan, np.inf, -np.inf, -0.0], np.float32)
    flat[: min(flat.size, 4) : 1] = specials[: min(flat.size, 4)]
    if dtype is DType.F16:
        return values.astype(np.float16)
    if dtype is DType.BF16:  # exactly representable in bf16, so the input is not rounded
        return (values.view(np.uint32) & 0xFFFF0000).view(np.float32)
    return values


def to_torch(array: np.ndarray, dtype: DType) -> torch.Tensor:
    tensor = torch.from_numpy(np.ascontiguousarray(array))
    return tensor.to(torch.bfloat16) if dtype is DType.BF16 else tensor


def from_torch(tensor: torch.Tensor) -> np.ndarray:
    return tensor.float().numpy() if tensor.dtype == torch.bfloat16 else tensor.numpy()


def assert_same_bits(actual: np.ndarray, expected: np.ndarray, what: str = "") -> None:
    """Data movement must not change a bit: compare the raw patterns (NaN payloads, -0.0 included)."""
    actual, expected = np.asarray(actual), np.ascontiguousarray(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    if actual.dtype.kind == "f":
        actual = actual.view(f"u{actual.dtype.itemsize}")
        expected = expected.view(f"u{expected.dtype.itemsize}")
    np.testing.assert_array_equal(actual, expected, err_msg=what)


def assert_moved(actual: np.ndarray, expected: np.ndarray, dtype: DType, what: str = "") -> None:
    """Bit-exact; for bf16 a NaN matches any NaN (torch's f32 -> bf16 picks its own NaN payload)."""
    if dtype is DType.BF16:
        nan = np.isnan(expected)
        np.testing.assert_array_equal(np.isnan(actual), nan, err_msg=f"{what}: NaN positions")
        actual, expected = np.where(nan, 0, actual), np.where(nan, 0, expected)
    assert_same_bits(actual, expected, what)


def run_graph(build, feeds: list[tuple[np.ndarray, DType]]):
    """Compile ``build(g, *inputs)`` and run it; returns (executable, gpu outputs, reference outputs)."""
    g = rlxpy.Graph("shape_ops")
    nodes = [g.input(f"x{i}", array.shape, dtype) for i, (array, dtype) in enumerate(feeds)]
    outs = build(g, *nodes)
    outs = outs if isinstance(outs, tuple) else (outs,)
    g.output(*outs)
    values = {f"x{i}": array for i, (array, _) in enumerate(feeds)}
    exe = rlxpy.compile(g)
    gpu = exe.run(values)
    ref = run_reference(g, values)
    return exe, [gpu[o.name] for o in outs], [ref[o.name] for o in outs]


def kernels_of(exe) -> list[str]:
    return [step.kernel for step in exe.schedule.steps]


# -- Transpose ----------------------------------------------------------------------------------
TRANSPOSES = [
    ((1,), (0,)),
    ((3, 5), (1, 0)),
    ((4, 7), (0, 1)),
    ((17, 5, 3), (2, 0, 1)),
    ((255, 33), (1, 0)),
    ((2, 3, 4, 5), (3, 1, 2, 0)),
    ((2, 3, 1, 5, 2, 3), (5, 4, 3, 2, 1, 0)),
    ((2, 3, 2, 2, 3, 2, 2, 3), (4, 5, 6, 7, 0, 1, 2, 3)),  # rank 8 that merges into 2 blocks
]


@pytest.mark.parametrize("shape,perm", TRANSPOSES)
def test_transpose_matches_torch_permute_bit_for_bit(device, shape, perm):
    x = sample(shape, DType.F32, seed=len(shape))
    exe, (gpu,), (ref,) = run_graph(lambda g, a: g.transpose(a, perm), [(x, DType.F32)])
    assert_same_bits(gpu, torch.from_numpy(x).permute(*perm).contiguous().numpy(), "GPU vs torch")
    assert_same_bits(ref, gpu, "reference vs GPU")
    assert kernels_of(exe) == ["shape_strided"]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape,perm", [((17, 5, 3), (2, 0, 1)), ((3, 1, 7), (2, 1, 0)), ((1, 9), (1, 0))])
def test_transpose_moves_every_dtype(device, dtype, shape, perm):
    x = sample(shape, dtype, seed=3)
    _, (gpu,), _ = run_graph(lambda g, a: g.transpose(a, perm), [(x, dtype)])
    assert_moved(gpu, from_torch(to_torch(x, dtype).permute(*perm).contiguous()), dtype, "transpose")


def test_rank7_transpose_that_cannot_merge_is_a_clear_error(device):
    g = rlxpy.Graph("rank7")
    x = g.input("x", (2,) * 7)
    g.output(g.transpose(x, tuple(range(6, -1, -1)), name="flip7"))
    with pytest.raises(UnsupportedOpError, match=r"flip7 \(Transpose\).*at most 6"):
        rlxpy.compile(g)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_copy_moves_every_dtype(device, dtype):
    x = sample((3, 5), dtype, seed=2)  # 15 elements: an odd number of 2-byte and 1-byte values
    exe, (gpu,), _ = run_graph(lambda g, a: g.copy(a), [(x, dtype)])
    assert_moved(gpu, x, dtype, "copy")
    assert kernels_of(exe) == ["elementwise_copy_words"]


def test_transpose_with_a_bad_perm_is_a_graph_error():
    g = rlxpy.Graph("bad")
    x = g.input("x", (2, 3))
    with pytest.raises(GraphError, match=r"swap.*not a permutation"):
        g.transpose(x, (0, 0), name="swap")


# -- Narrow -------------------------------------------------------------------------------------
NARROWS = [
    ((17,), 0, 3, 9),
    ((17, 5), 1, 1, 3),
    ((3, 17, 5), 1, 16, 1),
    ((255, 33), 0, 100, 155),
    ((2, 3, 257), -1, 1, 255),
    ((1,), 0, 0, 1),
]


@pytest.mark.parametrize("shape,axis,start,length", NARROWS)
def test_narrow_matches_torch_narrow(device, shape, axis, start, length):
    x = sample(shape, DType.F32, seed=5)
    exe, (gpu,), (ref,) = run_graph(lambda g, a: g.narrow(a, axis, start, length), [(x, DType.F32)])
    assert_same_bits(gpu, torch.from_numpy(x).narrow(axis, start, length).contiguous().numpy(), "narrow")
    assert_same_bits(ref, gpu)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_narrow_moves_every_dtype_from_an_odd_start(device, dtype):
    x = sample((3, 17, 5), dtype, seed=6)
    _, (inner, middle), _ = run_graph(lambda g, a: (g.narrow(a, 2, 1, 3), g.narrow(a, 1, 5, 11)),
                                      [(x, dtype)])
    assert_moved(inner, from_torch(to_torch(x, dtype).narrow(2, 1, 3).contiguous()), dtype)
    assert_moved(middle, from_torch(to_torch(x, dtype).narrow(1, 5, 11).contiguous()), dtype)


def test_empty_narrow_and_concat_inputs_emit_no_steps(device):
    x = sample((4, 6), DType.F32)
    exe, (gpu,), _ = run_graph(lambda g, a: g.concat([g.narrow(a, 1, 2, 0), a, g.narrow(a, 1, 6, 0)], 1),
                               [(x, DType.F32)])
    assert_same_bits(gpu, x)
    assert kernels_of(exe) == ["shape_strided"], "only the non-empty concat input is copied"


def test_narrow_past_the_end_is_a_graph_error():
    g = rlxpy.Graph("bad")
    x = g.input("x", (4, 6))
    with pytest.raises(GraphError, match=r"cut \(Narrow\).*exceeds axis 1"):
        g.narrow(x, 1, 4, 3, name="cut")


# -- Concat -------------------------------------------------------------------------------------
CONCATS = [
    ([(3,), (5,), (1,)], 0),
    ([(3, 5), (3, 1), (3, 7)], 1),
    ([(2, 3, 5), (2, 1, 5)], 1),
    ([(17, 5)], 0),
    ([(1, 3), (2, 3), (3, 3), (1, 3), (5, 3)], 0),
    ([(3, 3, 3), (3, 3, 2)], -1),
    ([(255, 33), (255, 1)], 1),
]


@pytest.mark.parametrize("shapes,axis", CONCATS)
def test_concat_matches_torch_cat(device, shapes, axis):
    xs = [sample(s, DType.F32, seed=i) for i, s in enumerate(shapes)]
    exe, (gpu,), (ref,) = run_graph(lambda g, *ins: g.concat(ins, axis), [(x, DType.F32) for x in xs])
    assert_same_bits(gpu, torch.cat([torch.from_numpy(x) for x in xs], axis).numpy(), "cat")
    assert_same_bits(ref, gpu)
    assert len(exe.schedule.steps) == sum(1 for x in xs if x.size), "one step per non-empty input"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shapes,axis", [([(3, 5), (3, 1), (3, 7)], 1), ([(3,), (5,), (1,)], 0),
                                         ([(2, 1, 3), (2, 2, 3), (2, 1, 3)], 1)])
def test_concat_stripes_sharing_a_word_keep_each_other(device, dtype, shapes, axis):
    # odd widths put two 2-byte (or four 1-byte) elements of different inputs in one word
    xs = [sample(s, dtype, seed=10 + i) for i, s in enumerate(shapes)]
    _, (gpu,), _ = run_graph(lambda g, *ins: g.concat(ins, axis), [(x, dtype) for x in xs])
    assert_moved(gpu, from_torch(torch.cat([to_torch(x, dtype) for x in xs], axis)), dtype, "cat")


def test_concat_of_mismatched_shapes_is_a_graph_error():
    g = rlxpy.Graph("bad")
    a, b = g.input("a", (2, 3)), g.input("b", (3, 3))
    with pytest.raises(GraphError, match=r"join \(Concat\).*differ outside axis 1"):
        g.concat([a, b], 1, name="join")


# -- Expand -------------------------------------------------------------------------------------
EXPANDS = [
    ((3, 1), (2, 3, 4)),
    ((), (5,)),
    ((1,), (17,)),
    ((5,), (3, 5)),
    ((1, 3, 1), (4, 3, 6)),
    ((4,), (4,)),
    ((2, 1, 3, 1, 1, 2), (2, 3, 3, 2, 1, 2)),
    ((33,), (255, 33)),
]


@pytest.mark.parametrize("shape,target", EXPANDS)
def test_expand_matches_torch_expand(device, shape, target):
    x = sample(shape, DType.F32, seed=7)
    _, (gpu,), (ref,) = run_graph(lambda g, a: g.expand(a, target), [(x, DType.F32)])
    assert_same_bits(gpu, torch.from_numpy(x).expand(*target).contiguous().numpy(), "expand")
    assert_same_bits(ref, gpu)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_expand_moves_every_dtype(device, dtype):
    x = sample((1, 3, 1), dtype, seed=8)
    _, (gpu,), _ = run_graph(lambda g, a: g.expand(a, (2, 5, 3, 3)), [(x, dtype)])
    assert_moved(gpu, from_torch(to_torch(x, dtype).expand(2, 5, 3, 3).contiguous()), dtype)


def test_expand_of_a_non_one_dim_is_a_graph_error():
    g = rlxpy.Graph("bad")
    x = g.input("x", (3, 2))
    with pytest.raises(GraphError, match=r"grow \(Expand\).*cannot expand"):
        g.expand(x, (3, 4), name="grow")


def test_implicit_broadcast_runs_through_unfuse_expand(device):
    # g.add(x[3,1], y[1,4]) works: unfuse inserts an Expand per operand, lowered here
    x, y = sample((3, 1), DType.F32, 1), sample((1, 4), DType.F32, 2)
    exe, (gpu,), _ = run_graph(lambda g, a, b: g.add(a, b), [(x, DType.F32), (y, DType.F32)])
    np.testing.assert_array_equal(gpu, (torch.from_numpy(x) + torch.from_numpy(y)).numpy())
    assert kernels_of(exe) == ["shape_strided", "shape_strided", "elementwise_binary_vec4"]  # 12 elements


# -- Gather -------------------------------------------------------------------------------------
def clamped_rows(idx: np.ndarray, dim: int) -> torch.Tensor:
    """The catalogue rule, written with torch: truncate, then clamp into [0, dim - 1]."""
    return torch.clamp(torch.trunc(torch.from_numpy(np.asarray(idx, np.float64))), 0, dim - 1).long()


def index_sample(kind: DType, shape: tuple[int, ...], dim: int, seed: int = 0) -> np.ndarray:
    """In-range and out-of-range indices (negative, >= dim; fractions for f32; > 2^32 for i64)."""
    rng = np.random.default_rng(seed)
    shape = tuple(shape)
    if kind is DType.U32:
        return np.asarray(rng.integers(0, dim + 6, shape), np.uint32)
    if kind is DType.F32:
        return np.asarray(rng.uniform(-3, dim + 3, shape), np.float32)
    values = np.asarray(rng.integers(-4, dim + 4, shape))
    if kind is DType.I64:
        flat = values.reshape(-1)
        flat[:2] = [-(2**33) - 3, 2**33 + 1][: flat.size]
        return values.astype(np.int64)
    return values.astype(np.int32)


@pytest.mark.parametrize("index_dtype", [DType.I32, DType.U32, DType.F32, DType.I64], ids=str)
def test_gather_axis0_is_a_clamped_embedding_lookup(device, index_dtype):
    table = sample((17, 5), DType.F32, seed=1)
    idx = index_sample(index_dtype, (3, 4), 17, seed=2)
    exe, (gpu,), (ref,) = run_graph(lambda g, t, i: g.gather(t, i, 0),
                                    [(table, DType.F32), (idx, index_dtype)])
    expected = torch.nn.functional.embedding(clamped_rows(idx, 17), torch.from_numpy(table)).numpy()
    assert_same_bits(gpu, expected, "embedding")
    assert_same_bits(ref, gpu)
    assert kernels_of(exe) == ["shape_gather"]


@pytest.mark.parametrize("axis,idx_shape", [(1, (5,)), (-1, (2, 3)), (2, ()), (0, (1,))])
def test_gather_along_any_axis_matches_index_select(device, axis, idx_shape):
    table = sample((3, 7, 4), DType.F32, seed=3)
    dim = table.shape[axis]
    idx = index_sample(DType.I32, idx_shape, dim, seed=4)
    _, (gpu,), (ref,) = run_graph(lambda g, t, i: g.gather(t, i, axis),
                                  [(table, DType.F32), (idx, DType.I32)])
    axis_n = axis % 3
    picked = torch.index_select(torch.from_numpy(table), axis_n, clamped_rows(idx, dim).reshape(-1))
    expected = picked.reshape(table.shape[:axis_n] + idx_shape + table.shape[axis_n + 1:]).numpy()
    assert_same_bits(gpu, expected, "index_select")
    assert_same_bits(ref, gpu)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gather_moves_every_table_dtype(device, dtype):
    table = sample((9, 3), dtype, seed=5)
    idx = np.array([8, 0, 3, 3, -2, 12, 1], np.int32)
    _, (rows, cols), _ = run_graph(lambda g, t, i: (g.gather(t, i, 0), g.gather(t, g.narrow(i, 0, 0, 5), 1)),
                                   [(table, dtype), (idx, DType.I32)])
    tt = to_torch(table, dtype)
    assert_moved(rows, from_torch(torch.index_select(tt, 0, clamped_rows(idx, 9))), dtype)
    assert_moved(cols, from_torch(torch.index_select(tt, 1, clamped_rows(idx[:5], 3))), dtype)


def test_gather_f32_indices_truncate_and_nan_reads_row_zero(device):
    table = np.arange(12, dtype=np.float32).reshape(6, 2)
    idx = np.array([1.7, -0.5, 5.99, np.inf, -np.inf, np.nan, 2.0], np.float32)
    g = rlxpy.Graph("trunc")
    out = g.gather(g.input("t", (6, 2)), g.input("i", (7,)), 0)
    g.output(out)
    got = rlxpy.compile(g).run({"t": table, "i": idx})[out.name]
    np.testing.assert_array_equal(got[:, 0] / 2, [1, 0, 5, 5, 0, 0, 2])


def test_gather_with_bool_indices_is_a_graph_error():
    g = rlxpy.Graph("bad")
    t, i = g.input("t", (4, 2)), g.input("i", (3,), DType.BOOL)
    with pytest.raises(GraphError, match=r"lookup \(Gather\).*indices must be"):
        g.gather(t, i, name="lookup")


def test_gather_from_an_empty_axis_is_a_graph_error(device):
    g = rlxpy.Graph("bad")
    out = g.gather(g.input("t", (0, 2)), g.input("i", (3,), DType.I32), name="lookup")
    g.output(out)
    with pytest.raises(GraphError, match=r"lookup \(Gather\).*empty"):
        rlxpy.compile(g)


# -- ScatterAdd ---------------------------------------------------------------------------------
def index_add(updates: np.ndarray, idx: np.ndarray, out_dim: int) -> np.ndarray:
    """torch.index_add_ on zeros, out-of-range rows (after truncation) dropped first."""
    rows = torch.trunc(torch.from_numpy(idx.astype(np.float64)))
    keep = (rows >= 0) & (rows < out_dim)
    out = torch.zeros((out_dim,) + updates.shape[1:], dtype=torch.from_numpy(updates).dtype)
    return out.index_add_(0, rows[keep].long(), torch.from_numpy(updates)[keep]).numpy()


@pytest.mark.parametrize("shape,out_dim", [((6, 5), 4), ((17,), 3), ((9, 3, 4), 5), ((1, 255), 1)])
def test_scatter_add_matches_torch_index_add(device, shape, out_dim):
    updates = sample(shape, DType.F32, seed=2)
    updates[np.isnan(updates) | np.isinf(updates)] = 1.5
    idx = np.random.default_rng(3).integers(-2, out_dim + 2, shape[0]).astype(np.int32)
    exe, (gpu,), (ref,) = run_graph(lambda g, u, i: g.scatter_add(u, i, out_dim),
                                    [(updates, DType.F32), (idx, DType.I32)])
    np.testing.assert_allclose(gpu, index_add(updates, idx, out_dim), rtol=1e-6, atol=1e-5)
    assert_same_bits(gpu, ref, "sequential accumulation equals numpy.add.at exactly")
    assert kernels_of(exe) == ["shape_scatter_add"]


def test_scatter_add_past_the_loop_limit_splits_into_dispatches(device):
    # a thread walks 50000 rows to zero and 20000 updates: past the 65535 loop steps after which lavapipe
    # silently stops an invocation (the last rows came out wrong in one dispatch)
    updates = np.random.default_rng(6).integers(-50, 50, (20000, 2)).astype(np.int32)
    idx = np.random.default_rng(7).integers(-5, 50005, 20000).astype(np.int32)
    exe, (gpu,), _ = run_graph(lambda g, u, i: g.scatter_add(u, i, 50000),
                               [(updates, DType.I32), (idx, DType.I32)])
    np.testing.assert_array_equal(gpu, index_add(updates, idx, 50000))
    assert kernels_of(exe) == ["shape_scatter_add"] * 3


@pytest.mark.filterwarnings("ignore:invalid value encountered in cast")  # the reference's NaN row
@pytest.mark.parametrize("index_dtype", [DType.I32, DType.U32, DType.F32, DType.I64], ids=str)
def test_scatter_add_skips_rows_outside_and_truncates(device, index_dtype):
    updates = np.arange(1, 9, dtype=np.float32).reshape(8, 1) * np.array([[1, 10]], np.float32)
    raw = {DType.F32: [1.7, -0.5, -1.0, 4.0, np.nan, 3.2, 0.0, 1e10],
           DType.I64: [1, 0, -1, 4, 2**32 + 1, 3, 0, -(2**33)]}.get(index_dtype, [1, 0, -1, 4, 7, 3, 0, 2])
    if index_dtype is DType.U32:
        raw = [1, 0, 2**32 - 1, 4, 7, 3, 0, 2]
    idx = np.array(raw, dtype=index_dtype.numpy)
    _, (gpu,), _ = run_graph(lambda g, u, i: g.scatter_add(u, i, 4),
                             [(updates, DType.F32), (idx, index_dtype)])
    rows = np.trunc(np.nan_to_num(np.array(raw, np.float64), nan=-1.0))
    np.testing.assert_array_equal(gpu, index_add(updates, rows, 4))


def test_scatter_add_of_ints_and_bools(device):
    updates = np.random.default_rng(4).integers(-50, 50, (7, 3)).astype(np.int32)
    flags = np.random.default_rng(5).random((7, 3)) < 0.3
    idx = np.array([2, 0, 2, 5, 1, 2, -1], np.int32)
    _, (ints, bools), _ = run_graph(lambda g, u, b, i: (g.scatter_add(u, i, 3), g.scatter_add(b, i, 3)),
                                    [(updates, DType.I32), (flags, DType.BOOL), (idx, DType.I32)])
    np.testing.assert_array_equal(ints, index_add(updates, idx, 3))
    expected = np.zeros((3, 3), bool)
    for row, flag in zip(idx, flags):
        if 0 <= row < 3:
            expected[row] |= flag
    np.testing.assert_array_equal(bools, expected)


def test_scatter_add_of_f16_is_a_clear_error(device):
    g = rlxpy.Graph("bad")
    out = g.scatter_add(g.input("u", (3, 2), DType.F16), g.input("i", (3,), DType.I32), 4, name="accum")
    g.output(out)
    with pytest.raises(UnsupportedOpError, match=r"accum \(ScatterAdd\).*f16"):
        rlxpy.compile(g)


def test_scatter_add_with_mismatched_indices_is_a_graph_error():
    g = rlxpy.Graph("bad")
    with pytest.raises(GraphError, match=r"accum \(ScatterAdd\).*updates \[U, ...\]"):
        g.scatter_add(g.input("u", (3, 2)), g.input("i", (4,), DType.I32), 4, name="accum")


# -- f16 / bf16 casts ---------------------------------------------------------------------------
def cast_on_gpu(x: np.ndarray, src: DType, dst: DType) -> tuple[np.ndarray, object]:
    exe, (gpu,), _ = run_graph(lambda g, a: g.cast(a, dst), [(x, src)])
    return gpu, exe


def assert_same_floats(actual: np.ndarray, expected: np.ndarray, what: str = "") -> None:
    """Bit-exact, except that any NaN matches any NaN."""
    nan = np.isnan(expected.astype(np.float32))
    np.testing.assert_array_equal(np.isnan(actual.astype(np.float32)), nan, err_msg=f"{what}: NaN positions")
    assert_same_bits(actual[~nan], expected[~nan], what)


def f32_edge_cases() -> np.ndarray:
    """Random bit patterns (every class: NaN, inf, subnormal) plus the f16 / bf16 rounding edges."""
    rng = np.random.default_rng(11)
    bits = rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    near = (rng.choice([-1, 1], 20000) * 2.0 ** rng.uniform(-27, 17, 20000)).astype(np.float32)
    edges = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 65504, 65519.996, 65520, 65536, -65520,
                      2**-24, 2**-25, 3 * 2**-25, 2**-25 + 2**-40, 2**-14, 2**-14 - 2**-25, 1 + 2**-11,
                      1 + 3 * 2**-11, 1 + 2**-8, 1 + 3 * 2**-8, 3.4028235e38, -3.4028235e38, 1e-45],
                     np.float32)
    return np.concatenate([edges, bits, near])


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")  # the reference's f16 overflow
@pytest.mark.parametrize("dst,torch_dtype", [(DType.F16, torch.float16), (DType.BF16, torch.bfloat16)],
                         ids=str)
def test_f32_to_half_rounds_to_nearest_even_like_torch(device, dst, torch_dtype):
    x = f32_edge_cases()
    gpu, exe = cast_on_gpu(x, DType.F32, dst)
    expected = from_torch(torch.from_numpy(x).to(torch_dtype))
    assert_same_floats(gpu, expected, f"f32 -> {dst}")
    assert kernels_of(exe) == ["elementwise_cast_half"], "the cast runs on the GPU, not as a host step"


@pytest.mark.parametrize("src", [DType.F16, DType.BF16], ids=str)
def test_every_half_value_widens_exactly(device, src):
    patterns = np.arange(2**16, dtype=np.uint32)
    if src is DType.F16:
        x = patterns.astype(np.uint16).view(np.float16)
        expected = torch.from_numpy(x).float().numpy()
    else:
        x = (patterns << 16).view(np.float32)
        expected = torch.from_numpy(x).to(torch.bfloat16).float().numpy()
    gpu, exe = cast_on_gpu(x, src, DType.F32)
    assert_same_floats(gpu, expected, f"{src} -> f32")
    assert kernels_of(exe) == ["elementwise_cast_half"]


CAST_PAIRS = [
    (DType.F32, DType.F16), (DType.F16, DType.F32), (DType.F32, DType.BF16), (DType.BF16, DType.F32),
    (DType.F16, DType.BF16), (DType.BF16, DType.F16), (DType.F16, DType.I32), (DType.BF16, DType.U32),
    (DType.F16, DType.BOOL), (DType.I32, DType.F16), (DType.I32, DType.BF16), (DType.BOOL, DType.F16),
    (DType.U32, DType.BF16),
]
TORCH_DTYPES = {DType.F32: torch.float32, DType.F16: torch.float16, DType.BF16: torch.bfloat16,
                DType.I32: torch.int32, DType.BOOL: torch.bool}


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")
@pytest.mark.parametrize("shape", [(1,), (3,), (17, 5), (255,)], ids=str)
@pytest.mark.parametrize("src,dst", CAST_PAIRS, ids=str)
def test_half_casts_on_odd_lengths_match_torch(device, shape, src, dst):
    rng = np.random.default_rng(sum(shape))
    if src in (DType.I32, DType.U32):
        x = rng.integers(0 if src is DType.U32 else -70000, 70000, shape).astype(src.numpy)
        # 2^24 + 2^16 + 1: int -> f32 makes it a bf16 tie (then even), as torch's int -> float -> bf16
        x.reshape(-1)[0] = 2**24 + 2**16 + 1
    elif src is DType.BOOL:
        x = rng.random(shape) < 0.5
    else:
        x = sample(shape, src, seed=sum(shape))
        if dst in (DType.I32, DType.U32):  # NaN/inf -> int differs in torch; see elementwise_cast's rule
            x = np.where(np.isfinite(x), x, 7).astype(x.dtype)
    gpu, exe = cast_on_gpu(x, src, dst)
    source = torch.from_numpy(x.astype(np.int64) if src is DType.U32 else x)
    source = source.to(torch.bfloat16) if src is DType.BF16 else source
    if dst is DType.U32:  # float -> u32 truncates and saturates at 0 (torch has no such cast)
        wide = torch.clamp(torch.trunc(source.double()), 0, 2**32 - 1).to(torch.int64)
        expected = wide.numpy().astype(np.uint32)
    else:
        expected = from_torch(source.to(TORCH_DTYPES[dst]))
    if dst.is_float:
        assert_same_floats(gpu, expected, f"{src} -> {dst}")
    else:
        np.testing.assert_array_equal(gpu, expected)
    assert kernels_of(exe) == ["elementwise_cast_half"]


def test_active_extent_scales_gather_and_cast_but_not_strided_copies(device):
    g = rlxpy.Graph("extent")
    table, idx = g.input("table", (100, 8)), g.input("idx", (64,), DType.I32)
    rows = g.cast(g.gather(table, idx, 0), "f16", name="rows")
    flipped = g.transpose(g.input("x", (64, 3)), (1, 0), name="flipped")
    g.output(rows, flipped)
    exe = rlxpy.compile(g)
    feeds = {"table": sample((100, 8), DType.F32, 1), "idx": index_sample(DType.I32, (64,), 100, 2),
             "x": sample((64, 3), DType.F32, 3)}
    full = exe.run(feeds)
    try:
        assert exe.set_active_extent((5, 64)) == 2, "gather and cast scale, the transpose runs in full"
        part = exe.run(feeds)
    finally:
        exe.set_active_extent(None)
    assert_same_bits(part["rows"][:5], full["rows"][:5])
    assert_same_bits(part["flipped"], full["flipped"])


# -- lowering, without a device ------------------------------------------------------------------
def test_coalesce_merges_dims_contiguous_on_both_sides():
    axes = [Axis(2, 12, 1), Axis(3, 4, 2), Axis(4, 1, 6), Axis(1, 99, 99)]
    assert coalesce(axes) == [Axis(2, 12, 1), Axis(3, 4, 2), Axis(4, 1, 6)]  # nothing contiguous on both
    contiguous = [Axis(2, 12, 12), Axis(3, 4, 4), Axis(4, 1, 1)]
    assert coalesce(contiguous) == [Axis(24, 1, 1)]
    striped = [Axis(2, 6, 10), Axis(5, 1, 1, 2, 4)]  # a keep range stops a merge with its outer dim
    assert coalesce(striped) == striped


def test_transpose_uniforms_hold_dims_and_permuted_strides():
    g = rlxpy.Graph("plan")
    t = g.transpose(g.input("x", (2, 3, 5)), (2, 1, 0), name="t")
    g.output(t)
    schedule = lower_graph(prepare(g), DeviceFacts())
    (step,) = schedule.steps
    fields = KERNELS["shape_strided"].params.unpack(step.uniforms)
    assert [fields[f"d{k}"] for k in range(6)] == [1, 1, 1, 5, 3, 2]
    assert [fields[f"s{k}"] for k in range(3, 6)] == [1, 5, 15]
    assert [fields[f"t{k}"] for k in range(3, 6)] == [6, 2, 1]
    assert fields["n"] == fields["words"] == 30 and fields["elem_bytes"] == 4


# -- resize ---------------------------------------------------------------------------------------
RESIZES = [  # (shape, sizes, steps)
    ((2, 3, 5, 7), (9, 4), ()), ((1, 2, 4, 6), (8, 12), (0.5, 0.5)), ((1, 1, 5, 3), (7, 4), (2 / 3, 2 / 3)),
    ((2, 2, 7), (3,), ()), ((1, 2, 3, 4, 5), (5, 3, 8), ()), ((1, 1, 6, 6), (1, 1), ()), ((3, 33), (65,), ()),
]


@pytest.mark.parametrize("shape,sizes,steps", RESIZES, ids=str)
@pytest.mark.parametrize("mode,coord", [("nearest_floor", "asymmetric"),
                                        ("nearest_round_prefer_ceil", "half_pixel"),
                                        ("nearest_round_prefer_floor", "pytorch_half_pixel"),
                                        ("nearest_ceil", "align_corners"), ("linear", "half_pixel"),
                                        ("linear", "align_corners"), ("linear", "asymmetric")])
def test_resize_matches_the_reference_with_nan_and_inf(device, shape, sizes, steps, mode, coord):
    x = sample(shape, DType.F32, seed=27)
    x.reshape(-1)[:3] = [np.nan, np.inf, -np.inf]
    g = rlxpy.Graph()
    y = g.resize(g.input("x", shape), sizes, mode, coord, steps)
    g.output(y)
    out = rlxpy.compile(g).run({"x": x})[y.name]
    ref = run_reference(g, {"x": x})[y.name]
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-4, equal_nan=True)  # values ~100, f32 weights


@pytest.mark.parametrize("mode,align", [("nearest", None), ("nearest-exact", None), ("bilinear", False),
                                        ("bilinear", True)])
def test_resize_matches_torch_interpolate(device, mode, align):
    x = np.random.default_rng(28).standard_normal((2, 3, 9, 11)).astype(np.float32)
    x[0, 0, 4, 5] = np.nan
    expected = torch.nn.functional.interpolate(torch.from_numpy(x), scale_factor=1.7, mode=mode,
                                               align_corners=align).numpy()
    resize_mode, coord = {"nearest": ("nearest_floor", "asymmetric"),
                          "nearest-exact": ("nearest_round_prefer_ceil", "half_pixel"),
                          "bilinear": ("linear", "align_corners" if align else "half_pixel")}[mode]
    g = rlxpy.Graph()
    y = g.resize(g.input("x", x.shape), expected.shape[2:], resize_mode, coord, (1 / 1.7, 1 / 1.7))
    g.output(y)
    exe = rlxpy.compile(g)
    assert [s.kernel for s in exe.schedule.steps] == ["shape_resize"]
    np.testing.assert_allclose(exe.run({"x": x})[y.name], expected, rtol=1e-5, atol=1e-5, equal_nan=True)
