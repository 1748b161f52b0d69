"""GPU Reduce / Cumsum / Argmax / TopK against torch (and a stable numpy sort for TopK indices)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import ODD_SHAPES, assert_close, rand

import rlxpy
from rlxpy.ir.dtype import DType
from rlxpy.ir.reference import run_reference
from rlxpy.wgpu_backend.lowering import reduce as reduce_lowering  # importing registers the kernels

EPS32 = float(np.finfo(np.float32).eps)
OPS = ("sum", "mean", "max", "min", "prod")


def compile_graph(shape, build, dtype=DType.F32):
    """A graph with one input ``x`` of ``shape`` and the outputs ``build(g, x)`` returns (a dict)."""
    g = rlxpy.Graph("reduce_test")
    x = g.input("x", shape, dtype)
    outs = build(g, x)
    g.output(*outs.values())
    return g, rlxpy.compile(g), outs


def kernels_of(exe) -> dict[str, str]:
    """node name -> kernel of its (single) step."""
    return {step.node: step.kernel for step in exe.schedule.steps}


def torch_reduce(x: np.ndarray, op: str, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    t = torch.from_numpy(x)
    if op == "sum":
        out = torch.sum(t, dim=axes, keepdim=keep)
    elif op == "mean":
        out = torch.mean(t, dim=axes, keepdim=keep)
    elif op == "max":
        out = torch.amax(t, dim=axes, keepdim=keep)
    elif op == "min":
        out = torch.amin(t, dim=axes, keepdim=keep)
    else:  # torch.prod takes one dim: fold the axes from the last one down
        out = t
        for axis in sorted(axes, reverse=True):
            out = torch.prod(out, dim=axis, keepdim=keep)
    return out.numpy()


def reduce_tolerance(x: np.ndarray, op: str, axes: tuple[int, ...]) -> tuple[float, float]:
    """(rtol, atol) from the f32 rounding a reduction of this length may accumulate."""
    n = int(np.prod([x.shape[a] for a in axes]))
    if op in ("max", "min"):
        return 0.0, 0.0
    if op == "prod":
        return 4 * EPS32 * np.sqrt(n) + 1e-6, 0.0
    magnitude = float(np.abs(x).sum(axis=axes).max()) if x.size else 0.0
    atol = 2 * EPS32 * magnitude + 1e-7  # measured errors stay below 0.2 eps * sum |x|
    return 1e-6, atol / n if op == "mean" else atol


REDUCE_CASES = [
    # (shape, axes, keep_dim, expected kernel)
    (ODD_SHAPES[0], (0,), False, "reduce_serial"),
    (ODD_SHAPES[1], (-1,), True, "reduce_serial"),
    (ODD_SHAPES[2], (0,), False, "reduce_serial"),
    (ODD_SHAPES[2], (1,), True, "reduce_serial"),
    (ODD_SHAPES[3], (0,), False, "reduce_tile"),
    (ODD_SHAPES[3], (1,), False, "reduce_serial"),
    (ODD_SHAPES[3], (0, 1), True, "reduce_tree"),
    (ODD_SHAPES[4], (2,), False, "reduce_tree"),
    (ODD_SHAPES[4], (0, 1), False, "reduce_serial"),
    (ODD_SHAPES[4], (1, 2), True, "reduce_tree"),
    ((3, 1000), (1,), False, "reduce_tree"),
    ((2, 4097), (-1,), False, "reduce_tree"),
    ((4097, 3), (0,), False, "reduce_tile"),
    ((5, 100, 40), (1,), True, "reduce_tile"),
]


@pytest.mark.parametrize("shape, axes, keep, kernel", REDUCE_CASES,
                         ids=[f"{c[0]}-{c[1]}-{'keep' if c[2] else 'drop'}" for c in REDUCE_CASES])
def test_reduce_matches_torch(device, shape, axes, keep, kernel):
    g, exe, outs = compile_graph(shape, lambda g, x: {op: g.reduce(x, op, axes, keep) for op in OPS})
    assert set(kernels_of(exe).values()) == {kernel}
    x = rand(shape, seed=len(shape) + sum(shape))
    x_prod = rand(shape, seed=1, low=0.9, high=1.1)  # keeps long products inside f32 range
    for op, node in outs.items():
        feed = x_prod if op == "prod" else x
        got = exe.run({"x": feed})[node.name]
        rtol, atol = reduce_tolerance(feed, op, tuple(a % len(shape) for a in axes))
        assert_close(got, torch_reduce(feed, op, axes, keep), rtol, atol, f"{op} over {axes} of {shape}")


@pytest.mark.parametrize("shape, axes", [((6, 40), (1,)), ((6, 300), (1,)), ((300, 6), (0,)),
                                         ((40, 6), (0,))])
def test_reduce_nan_and_inf_rows_like_torch(device, shape, axes):
    x = rand(shape, seed=3)
    lines = np.moveaxis(x, axes[0], -1)  # a view: writes land in x, one reduced line per row
    lines[0, 7] = np.nan
    lines[1, 3] = np.inf
    lines[2, 5] = -np.inf
    lines[3, 1], lines[3, 9] = np.inf, -np.inf
    lines[4, :] = -np.inf
    lines[5, 2], lines[5, 4] = np.nan, np.inf
    g, exe, outs = compile_graph(shape, lambda g, x: {op: g.reduce(x, op, axes) for op in OPS})
    got = exe.run({"x": x})
    for op, node in outs.items():
        rtol, atol = reduce_tolerance(np.nan_to_num(x, posinf=0, neginf=0), op, axes)
        assert_close(got[node.name], torch_reduce(x, op, axes, False), rtol, atol, f"{op} with NaN/inf rows")


def test_reduce_rejects_max_of_empty_axis_and_int_input(device):
    with pytest.raises(rlxpy.UnsupportedOpError, match=r"amax_of_nothing \(Reduce\).*empty axis"):
        compile_graph((3, 0), lambda g, x: {"m": g.reduce(x, "max", 1, name="amax_of_nothing")})
    with pytest.raises(rlxpy.UnsupportedOpError, match=r"int_sum \(Reduce\).*f32"):
        compile_graph((4, 5), lambda g, x: {"s": g.sum(x, 1, name="int_sum")}, DType.I32)


# -- cumsum ------------------------------------------------------------------------------------

CUMSUM_CASES = [
    (ODD_SHAPES[0], 0, "reduce_cumsum_lines"), (ODD_SHAPES[1], 0, "reduce_cumsum_lines"),
    (ODD_SHAPES[2], 0, "reduce_cumsum_lines"), (ODD_SHAPES[2], -1, "reduce_cumsum_lines"),
    (ODD_SHAPES[3], 0, "reduce_cumsum_lines"), (ODD_SHAPES[3], 1, "reduce_cumsum_lines"),
    (ODD_SHAPES[4], 1, "reduce_cumsum_lines"), (ODD_SHAPES[4], 2, "reduce_cumsum_rows"),
    ((3, 1000), 1, "reduce_cumsum_rows"), ((2, 4097), -1, "reduce_cumsum_rows"),
    ((1000, 3), 0, "reduce_cumsum_lines"),
]


def torch_cumsum(x: np.ndarray, axis: int, exclusive: bool) -> np.ndarray:
    total = torch.cumsum(torch.from_numpy(x), dim=axis)
    if exclusive:
        total = torch.cat([torch.zeros_like(total.narrow(axis, 0, 1)),
                           total.narrow(axis, 0, x.shape[axis] - 1)], dim=axis)
    return total.numpy()


def both_cumsums(g, x, axis: int) -> dict:
    return {exclusive: g.cumsum(x, axis, exclusive=exclusive) for exclusive in (False, True)}


def cumsum_atol(x: np.ndarray, axis: int) -> np.ndarray:
    """Per element: f32 prefix sums may be off by a few eps times the running sum of |x|."""
    running = np.cumsum(np.abs(np.nan_to_num(x, posinf=0, neginf=0)).astype(np.float64), axis=axis)
    return 2 * EPS32 * running.max(axis=axis, keepdims=True) + 1e-7


@pytest.mark.parametrize("shape, axis, kernel", CUMSUM_CASES,
                         ids=[f"{c[0]}-axis{c[1]}" for c in CUMSUM_CASES])
def test_cumsum_matches_torch(device, shape, axis, kernel):
    g, exe, outs = compile_graph(shape, lambda g, x: both_cumsums(g, x, axis))
    assert set(kernels_of(exe).values()) == {kernel}
    x = rand(shape, seed=sum(shape))
    got = exe.run({"x": x})
    atol = float(cumsum_atol(x, axis).max())
    for exclusive, node in outs.items():
        assert_close(got[node.name], torch_cumsum(x, axis, exclusive), 1e-6, atol, f"exclusive={exclusive}")


@pytest.mark.parametrize("shape, axis", [((5, 300), 1), ((5, 20), 1), ((300, 5), 0)])
def test_cumsum_nan_and_inf_like_torch(device, shape, axis):
    x = rand(shape, seed=4)
    lines = np.moveaxis(x, axis, -1)
    lines[0, 10] = np.nan
    lines[1, 3] = np.inf
    lines[2, 4], lines[2, 15] = np.inf, -np.inf
    lines[3, :] = -np.inf
    g, exe, outs = compile_graph(shape, lambda g, x: both_cumsums(g, x, axis))
    got = exe.run({"x": x})
    atol = float(cumsum_atol(x, axis).max())
    for exclusive, node in outs.items():
        assert_close(got[node.name], torch_cumsum(x, axis, exclusive), 1e-6, atol, f"exclusive={exclusive}")


def test_cumsum_rejects_int_input(device):
    with pytest.raises(rlxpy.UnsupportedOpError, match=r"int_scan \(Cumsum\).*f32"):
        compile_graph((4, 5), lambda g, x: {"c": g.cumsum(x, name="int_scan")}, DType.I32)


# -- argmax / topk -----------------------------------------------------------------------------

def stable_topk_indices(x: np.ndarray, k: int) -> np.ndarray:
    """Descending, NaN first, ties -> smaller index: two stable argsorts (the reference uses lexsort)."""
    nan = np.isnan(x)
    by_value = np.argsort(np.where(nan, 0.0, -x.astype(np.float64)), axis=-1, kind="stable")
    nan_first = np.argsort(~np.take_along_axis(nan, by_value, -1), axis=-1, kind="stable")
    return np.take_along_axis(by_value, nan_first, -1)[..., :k]


SELECT_SHAPES = [*ODD_SHAPES, (4, 1000), (2, 4097)]


def select_inputs(shape: tuple[int, ...], seed: int) -> dict[str, np.ndarray]:
    """Distinct random values, heavy ties (small integers), rows with NaN / +-inf, and zeros of both
    signs around the smallest subnormals (a GPU that flushes subnormals in compares ties them)."""
    ties = rand(shape, seed=seed, dtype=np.int32, low=0, high=3).astype(np.float32)
    special = rand(shape, seed=seed + 1)
    rows = special.reshape(-1, shape[-1])
    rows[0, rows.shape[1] // 2] = np.nan
    rows[0, -1] = np.inf
    if rows.shape[0] > 1:
        rows[1, :] = -np.inf
        rows[-1, 0] = np.inf
        rows[-1, -1] = np.nan
    tiny = np.zeros(shape, np.float32)
    flat = tiny.reshape(-1, shape[-1])
    flat[:, ::2] = -0.0
    flat[:, shape[-1] // 2] = 1e-45
    flat[:, -1] = -1e-45 if shape[-1] > 2 else flat[:, -1]
    return {"random": rand(shape, seed=seed), "ties": ties, "special": special, "subnormal": tiny}


@pytest.mark.parametrize("shape", SELECT_SHAPES, ids=str)
def test_argmax_and_topk_match_torch(device, shape):
    cols = shape[-1]
    ks = sorted({1, min(5, cols), min(64, cols), *([min(100, cols)] if cols > 64 else [])})
    g, exe, outs = compile_graph(shape, lambda g, x: {"argmax": g.argmax(x), **{k: g.topk(x, k) for k in ks}})
    kernels = kernels_of(exe)
    for k in ks:
        assert kernels[outs[k].name] == ("reduce_topk" if k <= 64 else "reduce_rank")
    for what, x in select_inputs(shape, seed=cols).items():
        got = exe.run({"x": x})
        want_argmax = torch.argmax(torch.from_numpy(x), dim=-1).numpy()
        assert_close(got[outs["argmax"].name], want_argmax.astype(np.int32), 0, 0, f"argmax of {what}")
        for k in ks:
            indices = got[outs[k].name]
            assert indices.dtype == np.int32
            want = stable_topk_indices(x, k).astype(np.int32)
            assert_close(indices, want, 0, 0, f"top{k} indices of {what}")
            values = np.take_along_axis(x, indices.astype(np.int64), -1)
            assert_close(values, torch.topk(torch.from_numpy(x), k, dim=-1).values.numpy(), 0, 0,
                         f"top{k} values of {what}")


def test_topk_large_k_uses_rank_and_matches_reference(device):
    shape = (3, 1000)
    g, exe, outs = compile_graph(shape, lambda g, x: {k: g.topk(x, k) for k in (300, 1000)})
    assert set(kernels_of(exe).values()) == {"reduce_rank"}
    x = rand(shape, seed=9, dtype=np.int32, low=-50, high=50).astype(np.float32)
    x[0, 17] = np.nan
    got = exe.run({"x": x})
    ref = run_reference(g, {"x": x})
    for k, node in outs.items():
        assert_close(got[node.name], stable_topk_indices(x, k).astype(np.int32), 0, 0, f"top{k}")
        assert_close(got[node.name], ref[node.name], 0, 0, f"top{k} vs reference")


def test_select_rejects_int_input(device):
    with pytest.raises(rlxpy.UnsupportedOpError, match=r"pick \(TopK\).*f32"):
        compile_graph((4, 5), lambda g, x: {"t": g.topk(x, 2, name="pick")}, DType.I32)
    with pytest.raises(rlxpy.UnsupportedOpError, match=r"best \(Argmax\).*f32"):
        compile_graph((4, 5), lambda g, x: {"a": g.argmax(x, name="best")}, DType.I32)


# -- loop budget: long loops split over several dispatches -------------------------------------

def test_cumsum_longer_than_lavapipe_loop_limit(device):
    """lavapipe stops a GPU thread after 65535 loop steps: a 70000-long line must come out whole."""
    shape = (70000, 2)
    g, exe, outs = compile_graph(shape, lambda g, x: both_cumsums(g, x, 0))
    for node in outs.values():
        assert [s.kernel for s in exe.schedule.steps if s.node == node.name] == ["reduce_cumsum_lines"] * 3
    x = rand(shape, seed=8)
    got = exe.run({"x": x})
    atol = float(cumsum_atol(x, 0).max())
    for exclusive, node in outs.items():
        assert_close(got[node.name], torch_cumsum(x, 0, exclusive), 1e-6, atol, f"exclusive={exclusive}")


def test_chunked_dispatches_match_torch(device, monkeypatch):
    """A tiny loop budget forces every chunked path (tree, tile, scans, top-k rounds) on small inputs."""
    monkeypatch.setattr(reduce_lowering, "LOOP_BUDGET", 70)

    def build(g, x):
        return {"sum_rows": g.sum(x, 1), "mean_rows": g.mean(x, 1), "max_cols": g.reduce(x, "max", 0),
                "mean_cols": g.mean(x, 0), "scan_rows": g.cumsum(x, 1), "scan_rows_ex": g.cumsum(x, 1, True),
                "scan_cols": g.cumsum(x, 0, True), "top5": g.topk(x, 5), "argmax": g.argmax(x)}

    shape = (255, 1000)
    g, exe, outs = compile_graph(shape, build)
    steps = [s.node for s in exe.schedule.steps]
    assert all(steps.count(node.name) > 1 for name, node in outs.items() if name != "argmax"), steps
    x = rand(shape, seed=10)
    got = exe.run({"x": x})
    tx = torch.from_numpy(x)
    want = {"sum_rows": tx.sum(1), "mean_rows": tx.mean(1), "max_cols": tx.amax(0), "mean_cols": tx.mean(0),
            "scan_rows": tx.cumsum(1), "scan_rows_ex": torch_cumsum(x, 1, True),
            "scan_cols": torch_cumsum(x, 0, True), "top5": stable_topk_indices(x, 5), "argmax": tx.argmax(1)}
    for name, node in outs.items():
        expected = np.asarray(want[name])
        if name in ("top5", "argmax"):
            assert_close(got[node.name], expected.astype(np.int32), 0, 0, name)
            continue
        axis = 0 if name.endswith("cols") else 1
        atol = 2 * EPS32 * float(np.abs(x).sum(axis=axis).max()) + 1e-7
        assert_close(got[node.name], expected, 1e-6, atol / shape[axis] if "mean" in name else atol, name)


def test_active_extent_scales_row_wise_steps_only(device):
    """With the first 5 of 64 rows active, row-wise steps shrink; steps across rows run in full."""
    def build(g, x):
        gamma = g.constant(np.linspace(0.5, 1.5, 300, dtype=np.float32))
        return {"sum": g.sum(x, 1), "amax": g.reduce(x, "max", 1),
                "scan": g.cumsum(x, 1), "softmax": g.softmax(x), "norm": g.rms_norm(x, gamma),
                "top3": g.topk(x, 3), "top100": g.topk(x, 100), "down_rows": g.sum(x, 0),
                "softmax_rows": g.softmax(x, 0), "scan_rows": g.cumsum(x, 0)}

    g, exe, outs = compile_graph((64, 300), build)
    x = rand((64, 300), seed=12)
    full = exe.run({"x": x})
    try:
        scaled = exe.set_active_extent((5, 64))
        part = exe.run({"x": x})
    finally:
        exe.set_active_extent(None)
    across_rows = {"down_rows", "softmax_rows", "scan_rows"}
    fixed = {outs[name].name for name in across_rows}
    assert scaled == sum(1 for s in exe.schedule.steps if s.node not in fixed) > 0
    for name, node in outs.items():
        want = full[node.name] if name in across_rows else full[node.name][:5]
        got = part[node.name] if name in across_rows else part[node.name][:5]
        assert_close(got, want, 0, 0, f"{name} under the active extent")


@pytest.mark.parametrize("shape", [(1, 49152), (3, 8193), (2, 2, 10000)], ids=str)
def test_argmax_of_long_rows_runs_in_parts_and_matches_torch(device, shape):
    """Rows of 8192+ values (a decode step's logits): parts of 1024 side by side, then a merge. NaN
    first (two NaN in different parts: the first wins), ties across parts -> the smaller index."""
    g, exe, outs = compile_graph(shape, lambda g, x: {"argmax": g.argmax(x), "top1": g.topk(x, 1)})
    for node in outs.values():
        assert [s.kernel for s in exe.schedule.steps if s.node == node.name] == ["reduce_topk_split"] * 2
    inputs = select_inputs(shape, seed=shape[-1])
    nan_late = rand(shape, seed=3)
    rows = nan_late.reshape(-1, shape[-1])
    rows[:, -3] = np.nan
    rows[:, 5000] = np.nan
    for what, x in {**inputs, "nan in two parts": nan_late}.items():
        got = exe.run({"x": x})
        want = torch.argmax(torch.from_numpy(x), dim=-1).numpy().astype(np.int32)
        assert_close(got[outs["argmax"].name], want, 0, 0, f"argmax of {what}")
        want = stable_topk_indices(x, 1).astype(np.int32)
        assert_close(got[outs["top1"].name], want, 0, 0, f"top1 of {what}")
