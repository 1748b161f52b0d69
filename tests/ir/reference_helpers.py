"""Helpers of the reference-vs-torch tests (tests/ir/test_reference_<family>.py): build a one-node
graph and run the numpy reference; random inputs with or without edge values; a closeness check
that compares shapes first."""

from __future__ import annotations

import numpy as np
import torch

from rlxpy.ir import DType, Graph
from rlxpy.ir.passes import check_unfused, unfuse
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


def rand_edges(shape, seed: int = 0, scale: float = 3.0, edges: bool = True) -> np.ndarray:
    """Normal values; with ``edges`` the first elements are NaN, +-inf, +-0, halves, tiny, large."""
    x = (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)
    if edges:
        flat = x.reshape(-1)
        count = min(flat.size, EDGES.size)
        flat[:count] = EDGES[:count]
    return x


def t(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x))


def close_tight(actual: np.ndarray, expected, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    expected = expected.numpy() if isinstance(expected, torch.Tensor) else np.asarray(expected)
    assert actual.shape == expected.shape, f"shape {actual.shape} != oracle {expected.shape}"
    np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=atol,
                               equal_nan=True)


def rand_plain(shape, seed: int = 0, scale: float = 1.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def close_loose(actual: np.ndarray, expected, rtol: float = 1e-5, atol: float = 1e-5) -> None:
    expected = expected.numpy() if isinstance(expected, torch.Tensor) else np.asarray(expected)
    assert actual.shape == expected.shape, f"shape {actual.shape} != oracle {expected.shape}"
    np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=atol,
                               equal_nan=True)


# -- composites: the direct reference and the unfused graph must agree ---------------------------
RTOL = 1e-5
ATOL = 1e-5


def rand_plain_seeded(shape, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def run_both(g: Graph, inputs: dict, params: dict | None = None) -> np.ndarray:
    """The graph's single output by the direct reference; asserts the unfused graph agrees."""
    (name,) = [g.nodes[o].name for o in g.outputs]
    direct = run_reference(g, inputs, params)[name]
    flat = unfuse(g)
    check_unfused(flat)
    unfused = run_reference(flat, inputs, params)[name]
    np.testing.assert_allclose(unfused, direct, rtol=RTOL, atol=ATOL)
    return direct


def t64(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.asarray(x, dtype=np.float64))
