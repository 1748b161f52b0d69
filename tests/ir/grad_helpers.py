"""Helpers of the gradient-rule tests (tests/ir/test_grad_<family>.py): differentiate a small graph
with rlxpy's autodiff, run it with the numpy reference, and hold the gradients to two independent
oracles:

* torch.autograd in float64 on the same (f32) inputs: the f32 graph's gradients must match within
  ``F32_TOL`` (each op of the f32 graph rounds to f32 once; the gradient graphs chain a handful);
* central finite differences of the float64 reference: the same graph built with f64 tensors must
  match them within ``FD_TOL`` at a few sampled coordinates of every differentiated input.

The loss is ``sum(y * cot)`` with a random cotangent ``cot``, so every rule sees a non-uniform dy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch

from rlxpy.ir import DType, Graph
from rlxpy.ir.passes.autodiff import grad
from rlxpy.ir.reference import run_reference

#: f32 graph vs torch float64 autograd (rtol, atol)
F32_TOL = (1e-4, 1e-5)
#: f64 graph vs central differences with step 1e-6 (rtol, atol)
FD_TOL = (1e-5, 1e-6)
FD_STEP = 1e-6


def rand(shape: Sequence[int], seed: int, scale: float = 1.0, shift: float = 0.0) -> np.ndarray:
    return np.asarray(np.random.default_rng(seed).standard_normal(shape) * scale + shift, dtype=np.float32)


def _graph(build: Callable, arrays: Mapping[str, np.ndarray], wide: bool) -> tuple[Graph, list[str]]:
    g = Graph("grad_test")
    nodes, names = [], []
    for name, array in arrays.items():
        if array.dtype.kind == "f":
            nodes.append(g.input(name, array.shape, DType.F64 if wide else DType.F32))
            names.append(name)
        else:
            nodes.append(g.input(name, array.shape, DType.parse(array.dtype)))
    y = build(g, *nodes)
    cot = g.input("cot", y.shape, y.dtype)
    product = g.mul(y, cot)
    flat = g.reshape(product, (max(product.numel, 1),))
    g.output(g.sum(flat, 0, name="loss"))
    return g, names


def _feeds(arrays: Mapping[str, np.ndarray], cot: np.ndarray, wide: bool) -> dict[str, np.ndarray]:
    out = {k: (v.astype(np.float64) if wide and v.dtype.kind == "f" else v) for k, v in arrays.items()}
    out["cot"] = cot.astype(np.float64 if wide else np.float32)
    return out


def autodiff_grads(build: Callable, arrays: Mapping[str, np.ndarray], wrt: Sequence[str] | None = None,
                   wide: bool = False, cot_seed: int = 99) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """({input name: gradient}, cotangent) of ``sum(build(...) * cot)`` through rlxpy's autodiff."""
    g, names = _graph(build, arrays, wide)
    wrt = names if wrt is None else list(wrt)
    shape = g["cot"].shape
    cot = rand(shape, cot_seed)
    result = grad(g, "loss", wrt)
    out = run_reference(result.graph, _feeds(arrays, cot, wide))
    return {name: out[result.grads[name]] for name in wrt}, cot


def torch_grads(torch_fn: Callable, arrays: Mapping[str, np.ndarray], wrt: Sequence[str], cot: np.ndarray
                ) -> dict[str, np.ndarray]:
    tensors = {}
    for name, array in arrays.items():
        if array.dtype.kind == "f":
            tensors[name] = torch.from_numpy(np.asarray(array, np.float64)).requires_grad_(name in wrt)
        else:
            tensors[name] = torch.from_numpy(np.asarray(array, np.int64))
    y = torch_fn(*tensors.values())
    (y * torch.from_numpy(np.asarray(cot, np.float64))).sum().backward()
    return {name: tensors[name].grad.numpy() for name in wrt}


def finite_difference_check(build: Callable, arrays: Mapping[str, np.ndarray], wrt: Sequence[str],
                            points: int = 6, cot_seed: int = 99) -> None:
    """The f64 graph's gradients vs central differences of its f64 reference loss."""
    grads, cot = autodiff_grads(build, arrays, wrt, wide=True, cot_seed=cot_seed)
    forward, _ = _graph(build, arrays, True)
    base = _feeds(arrays, cot, True)
    rng = np.random.default_rng(7)
    for name in wrt:
        flat_size = base[name].size
        for index in rng.choice(flat_size, size=min(points, flat_size), replace=False):
            values = []
            for sign in (1.0, -1.0):
                feeds = dict(base)
                moved = base[name].copy().reshape(-1)
                moved[index] += sign * FD_STEP
                feeds[name] = moved.reshape(base[name].shape)
                values.append(float(run_reference(forward, feeds)["loss"]))
            estimate = (values[0] - values[1]) / (2 * FD_STEP)
            got = float(grads[name].reshape(-1)[index])
            rtol, atol = FD_TOL
            assert abs(got - estimate) <= atol + rtol * abs(estimate), \
                f"d loss / d {name}[{index}]: autodiff {got!r}, finite differences {estimate!r}"


def check_grads(build: Callable, torch_fn: Callable, arrays: Mapping[str, np.ndarray],
                wrt: Sequence[str] | None = None, tol: tuple[float, float] = F32_TOL,
                fd: bool = True) -> None:
    """Autodiff of ``build`` vs torch.autograd of ``torch_fn`` (f32 graph), then vs finite differences
    (f64 graph). ``wrt`` defaults to every float input."""
    wrt = [k for k, v in arrays.items() if v.dtype.kind == "f"] if wrt is None else list(wrt)
    got, cot = autodiff_grads(build, arrays, wrt)
    want = torch_grads(torch_fn, arrays, wrt, cot)
    for name in wrt:
        assert got[name].shape == want[name].shape, f"{name}: shape {got[name].shape} != {want[name].shape}"
        assert got[name].dtype == np.float32, f"{name}: gradient dtype {got[name].dtype}"
        np.testing.assert_allclose(got[name].astype(np.float64), want[name], rtol=tol[0], atol=tol[1],
                                   err_msg=f"d loss / d {name} vs torch.autograd", equal_nan=True)
    if fd:
        finite_difference_check(build, arrays, wrt)
