"""Cheap op tests: build a graph, run it on the GPU, compare with the reference and an oracle."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import rlxpy
from rlxpy.ir.dtype import DType
from rlxpy.ir.reference import run_reference

ODD_SHAPES = [(1,), (3,), (17, 5), (255, 33), (2, 3, 257)]

#: f32 tolerances by kind of computation (rtol, atol).
TOL = {
    "exact": (0.0, 0.0),
    "elementwise": (1e-6, 1e-6),
    "transcendental": (2e-6, 2e-6),
    "reduction": (1e-5, 1e-5),
    "matmul": (1e-4, 1e-4),
}


def rand(
    shape: Sequence[int], seed: int = 0, dtype: Any = np.float32, low: float = -2.0, high: float = 2.0
) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(int(low), int(high) + 1, size=shape).astype(dtype)
    return rng.uniform(low, high, size=shape).astype(dtype)


def assert_close(actual: np.ndarray, expected: np.ndarray, rtol: float, atol: float, what: str = "") -> None:
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != expected {expected.shape}"
    if actual.dtype == bool or expected.dtype == bool:
        np.testing.assert_array_equal(actual, expected, err_msg=what)
        return
    # complex values compare whole (a float64 cast would drop the imaginary parts)
    wide = np.complex128 if np.iscomplexobj(actual) or np.iscomplexobj(expected) else np.float64
    np.testing.assert_allclose(
        actual.astype(wide),
        expected.astype(wide),
        rtol=rtol,
        atol=atol,
        equal_nan=True,
        err_msg=what,
    )


def to_torch(array: np.ndarray):
    import torch

    return torch.from_numpy(np.ascontiguousarray(array))


def check_op(
    build: Callable[..., Any],
    inputs: Sequence[np.ndarray],
    oracle: Callable[..., Any] | None = None,
    params: dict[str, np.ndarray] | None = None,
    tol: str | tuple[float, float] = "elementwise",
    dtypes: Sequence[DType | str] | None = None,
) -> dict[str, np.ndarray]:
    """Build ``build(g, *input_nodes)`` (returns a node or tuple of nodes), then check
    GPU == reference and reference == ``oracle(*torch_inputs)`` (a tensor or tuple of them)."""
    rtol, atol = TOL[tol] if isinstance(tol, str) else tol
    g = rlxpy.Graph("check_op")
    nodes = []
    for i, array in enumerate(inputs):
        dtype = dtypes[i] if dtypes else (DType.F32 if array.dtype.kind == "f" else DType.parse(array.dtype))
        nodes.append(g.input(f"x{i}", array.shape, dtype))
    for name, array in (params or {}).items():
        g.param(name, array.shape, DType.F32 if array.dtype.kind == "f" else DType.parse(array.dtype))
    outs = build(g, *nodes)
    outs = outs if isinstance(outs, tuple) else (outs,)
    g.output(*outs)
    feeds = {f"x{i}": a for i, a in enumerate(inputs)}
    exe = rlxpy.compile(g)
    for name, array in (params or {}).items():
        exe.set_param(name, array)
    gpu = exe.run(feeds)
    ref = run_reference(g, feeds, params)
    for node in outs:
        assert_close(gpu[node.name], ref[node.name], rtol, atol, f"GPU vs reference for {node.name}")
    if oracle is not None:
        expected = oracle(*[to_torch(a) for a in inputs])
        expected = expected if isinstance(expected, tuple) else (expected,)
        for node, want in zip(outs, expected):
            want = want.detach().numpy() if hasattr(want, "detach") else np.asarray(want)
            assert_close(ref[node.name], want, rtol, atol, f"reference vs oracle for {node.name}")
            assert_close(gpu[node.name], want, rtol, atol, f"GPU vs oracle for {node.name}")
    return gpu


def typed(graph: Any, values: dict[str, Any]) -> dict[str, np.ndarray]:
    """``values`` converted to the dtypes of the graph's inputs/params of the same names: the explicit
    conversion the input contract (rlxpy/ir/values.py) asks of a caller holding float64/int64 data."""
    leaves = {n.op.name: n for n in [*graph.inputs(), *graph.params()]}
    return {name: np.asarray(value).astype(leaves[name].dtype.numpy) for name, value in values.items()}
