"""The numpy reference of Softmax (norm family) against torch, on any axis and with NaN/inf."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlxpy.ir import DType, Graph
from rlxpy.ir.reference import run_reference

EDGES = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 1e-30, 88.0, -88.0],
                 dtype=np.float32)


def run(build, **arrays: np.ndarray) -> np.ndarray:
    """One Input per keyword array, ``build(g, *inputs)`` -> node, evaluated by the reference."""
    g = Graph("t")
    nodes = [g.input(name, a.shape, DType.parse(a.dtype)) for name, a in arrays.items()]
    out = build(g, *nodes)
    g.output(out)
    return run_reference(g, arrays)[out.name]


def rand(shape, seed: int = 0, scale: float = 3.0, edges: bool = True) -> np.ndarray:
    """Normal values; with ``edges`` the first elements are NaN, +-inf, +-0, halves, tiny, large."""
    x = (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)
    if edges:
        flat = x.reshape(-1)
        count = min(flat.size, EDGES.size)
        flat[:count] = EDGES[:count]
    return x


def t(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x))


def close(actual: np.ndarray, expected, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    expected = expected.numpy() if isinstance(expected, torch.Tensor) else np.asarray(expected)
    assert actual.shape == expected.shape, f"shape {actual.shape} != oracle {expected.shape}"
    np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=atol,
                               equal_nan=True)


# -- softmax, cumsum ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
@pytest.mark.parametrize("shape", [(3, 17, 5), (1, 1, 255), (2, 3, 257)], ids=str)
def test_softmax_matches_torch_on_any_axis(shape, axis):
    x = rand(shape, seed=29, scale=10.0, edges=False)
    close(run(lambda g, a: g.softmax(a, axis), x=x), torch.softmax(t(x).double(), axis).float())


def test_softmax_rows_with_inf_and_nan_like_torch():
    ninf, inf, nan = -np.inf, np.inf, np.nan
    x = np.array([[ninf, ninf, ninf, ninf],  # fully masked row: NaN, as torch
                  [ninf, 0.0, 1.0, ninf],  # partly masked: zeros where -inf
                  [1.0, inf, 2.0, 0.0],  # +inf: NaN (inf - inf), as torch
                  [1.0, nan, 2.0, 0.0],  # NaN propagates to the whole row
                  [1e4, -1e4, 0.0, 1e4]], dtype=np.float32)  # large values: max-subtracted, no overflow
    out = run(lambda g, a: g.softmax(a), x=x)
    close(out, torch.softmax(t(x), -1))
    assert np.isnan(out[0]).all() and out[1, 0] == 0 and np.isnan(out[2]).all() and np.isnan(out[3]).all()
    np.testing.assert_allclose(out[4], [0.5, 0, 0, 0.5])
