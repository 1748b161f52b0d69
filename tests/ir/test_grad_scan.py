"""Gradient rule of the scan family (SelectiveScan) vs torch.autograd through a plain torch loop of
the recurrence, and finite differences of the float64 reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from grad_helpers import check_grads, rand

from rlxpy.errors import UnsupportedOpError
from rlxpy.ir import Graph, ops
from rlxpy.ir.passes.autodiff import grad


def torch_selective_scan(x, delta, a, bm, cm):
    """SelectiveScan's recurrence written out step by step in torch (the independent oracle)."""
    batch, _, channels = x.shape
    h = torch.zeros(batch, channels, a.shape[1], dtype=x.dtype)
    ys = []
    for t in range(x.shape[1]):
        h = torch.exp(delta[:, t, :, None] * a) * h + (delta[:, t] * x[:, t])[..., None] * bm[:, t, None, :]
        ys.append((h * cm[:, t, None, :]).sum(-1))
    return torch.stack(ys, 1)


def scan_inputs(batch: int, steps: int, channels: int, states: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Mamba-like values: delta a softplus (positive), A = -exp(A_log) (negative)."""
    delta = np.log1p(np.exp(rand((batch, steps, channels), seed + 1, 0.5, -1.0)))
    return {
        "x": rand((batch, steps, channels), seed),
        "delta": delta.astype(np.float32),
        "A": (-np.exp(rand((channels, states), seed + 2, 0.5))).astype(np.float32),
        "Bm": rand((batch, steps, states), seed + 3),
        "Cm": rand((batch, steps, states), seed + 4),
    }


def build_scan(g, x, delta, a, bm, cm):
    return g.selective_scan(x, delta, a, bm, cm)


# (batch, steps, channels, states): each of B 1/2, S 1/3/17, channels 1/5/33, N 1/16 at least once
CASES = [(1, 1, 1, 1), (2, 3, 5, 16), (1, 17, 33, 16), (2, 17, 1, 1), (1, 3, 33, 1), (2, 1, 5, 16),
         (2, 17, 5, 16), (1, 17, 5, 1)]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_selective_scan_gradients(case):
    # f32 graph vs torch float64 autograd within grad_helpers.F32_TOL (rtol 1e-4, atol 1e-5), then the
    # float64 graph vs central differences within FD_TOL (rtol 1e-5, atol 1e-6)
    check_grads(build_scan, torch_selective_scan, scan_inputs(*case))


def test_some_inputs_only_one_backward_node():
    arrays = scan_inputs(2, 3, 5, 4)
    check_grads(build_scan, torch_selective_scan, arrays, wrt=["delta", "Cm"])
    g = Graph("scan_one")
    nodes = [g.input(name, v.shape) for name, v in arrays.items()]
    g.output(g.sum(g.reshape(build_scan(g, *nodes), (30,)), 0, name="loss"))
    result = grad(g, "loss", ["x", "A", "Bm"])
    backward = [n for n in result.graph.nodes if isinstance(n.op, ops.SelectiveScanBackward)]
    assert len(backward) == 1


def test_large_decay_values_stay_finite():
    """delta up to ~5 and A down to ~-8: exp(delta A) underflows toward 0, the gradients stay finite."""
    arrays = scan_inputs(1, 17, 5, 16, seed=3)
    arrays["delta"] = (arrays["delta"] * 5).astype(np.float32)
    arrays["A"] = (arrays["A"] * 4).astype(np.float32)
    check_grads(build_scan, torch_selective_scan, arrays, fd=False)


def test_carried_state_is_refused_naming_the_node():
    g = Graph("scan_cache")
    x = g.input("x", (1, 3, 2))
    bc = g.input("bc", (1, 3, 4))
    y = g.selective_scan(x, x, g.input("A", (2, 4)), bc, bc, state=g.param("state", (1, 2, 4)), name="ssm")
    g.output(g.sum(g.reshape(y, (6,)), 0, name="loss"))
    with pytest.raises(UnsupportedOpError, match="ssm.*carry_state"):
        grad(g, "loss", ["x"])


def test_backward_op_refuses_a_wrong_dy():
    g = Graph("bad_dy")
    arrays = scan_inputs(1, 3, 2, 4)
    nodes = [g.input(name, v.shape) for name, v in arrays.items()]
    with pytest.raises(Exception, match="dy"):
        g.apply(ops.SelectiveScanBackward(4), [*nodes, g.input("dy", (1, 3, 3))])
