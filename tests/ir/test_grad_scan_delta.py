"""Gradient rule of GatedDeltaNet (through GatedDeltaNetBackward) vs torch.autograd through a plain
torch loop of the gated delta rule (float64, on the same f32 inputs; f32 graph within
grad_helpers.F32_TOL: rtol 1e-4, atol 1e-5), and central differences of the float64 reference (FD_TOL)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from grad_helpers import check_grads, rand

from rlxpy.errors import UnsupportedOpError
from rlxpy.ir import Graph
from rlxpy.ir.passes.autodiff import grad


def torch_gated_delta(q, k, v, g, beta):
    """The recurrence written out step by step in torch (the independent oracle)."""
    batch, steps, heads, n = q.shape
    s = torch.zeros(batch, heads, n, n, dtype=q.dtype)
    outs = []
    for t in range(steps):
        s = s * torch.exp(g[:, t])[:, :, None, None]
        recalled = torch.einsum("bhij,bhi->bhj", s, k[:, t])
        d = (v[:, t] - recalled) * beta[:, t, :, None]
        s = s + k[:, t, :, :, None] * d[:, :, None, :]
        outs.append(torch.einsum("bhij,bhi->bhj", s, q[:, t]) / np.sqrt(n))
    return torch.stack(outs, 1)


def delta_inputs(batch: int, steps: int, heads: int, n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Qwen3-Next-like values: q, k L2-normalised rows, g a negative log-gate, beta in (0, 1)."""
    def unit(x):
        return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)

    shape = (batch, steps, heads, n)
    return {"q": unit(rand(shape, seed)), "k": unit(rand(shape, seed + 1)), "v": rand(shape, seed + 2),
            "g": (-np.abs(rand(shape[:3], seed + 3, 0.5))).astype(np.float32),
            "beta": (1.0 / (1.0 + np.exp(-rand(shape[:3], seed + 4)))).astype(np.float32)}


def build(g, q, k, v, gate, beta):
    return g.gated_delta_net(q, k, v, gate, beta)


# (batch, steps, heads, N): B 1/2, S 1/3/17, heads 1/3, N 1/4/16
CASES = [(1, 1, 1, 1), (2, 3, 3, 4), (1, 17, 1, 16), (2, 17, 3, 4), (1, 3, 1, 16)]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_gated_delta_net_gradients(case):
    check_grads(build, torch_gated_delta, delta_inputs(*case))


def test_some_inputs_only():
    check_grads(build, torch_gated_delta, delta_inputs(2, 5, 1, 4, seed=3), wrt=["k", "g"])


def test_carried_state_is_refused_naming_the_node():
    g = Graph("gdn_cache")
    q = g.input("q", (1, 2, 1, 4))
    gate, beta = g.input("g", (1, 2, 1)), g.input("beta", (1, 2, 1))
    state = g.param("state", (1, 1, 4, 4))
    y = g.gated_delta_net(q, q, q, gate, beta, state=state, name="gdn")
    g.output(g.sum(g.reshape(y, (8,)), 0, name="loss"))
    with pytest.raises(UnsupportedOpError, match="gdn.*carry_state"):
        grad(g, "loss", ["q"])


def test_oracle_matches_the_reference_forward():
    from rlxpy.ir.reference.scan import gated_delta_rule

    arrays = delta_inputs(2, 5, 3, 4, seed=5)
    want = torch_gated_delta(*(torch.from_numpy(a).double() for a in arrays.values())).numpy()
    got, _ = gated_delta_rule(*arrays.values())
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
