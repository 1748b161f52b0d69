"""Reference semantics: selective scan and the gated delta rule (numpy, float64 state)."""

from __future__ import annotations

import numpy as np

from rlxpy.ir.ops.scan import GatedDeltaNet, SelectiveScan
from rlxpy.ir.reference.core import reference


def selective_scan(x: np.ndarray, delta: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray,
                   state: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(y [B,S,Hd], final state [B,Hd,N]): the recurrence of SelectiveScan, vectorised over
    (batch, channel, state); ``state`` is the carried state to start from (else zeros)."""
    x64, d64, a64, b64, c64 = (t.astype(np.float64) for t in (x, delta, a, b, c))
    batch, steps, channels = x.shape
    h = np.zeros((batch, channels, a.shape[1])) if state is None else state.astype(np.float64).copy()
    y = np.zeros((batch, steps, channels))
    with np.errstate(over="ignore", invalid="ignore"):
        for t in range(steps):
            decay = np.exp(d64[:, t, :, None] * a64[None])  # [B, Hd, N]
            h = decay * h + (d64[:, t] * x64[:, t])[:, :, None] * b64[:, t, None, :]
            y[:, t] = np.einsum("bcn,bn->bc", h, c64[:, t])
    return y, h


@reference(SelectiveScan)
def ref_selective_scan(op: SelectiveScan, args, node):
    state = args[5] if op.carry_state else None
    y, final = selective_scan(*args[:5], state=state)
    if state is not None:
        state[...] = final.astype(state.dtype)  # in place, as GatedDeltaNet's carried state
    return y.astype(args[0].dtype)


def gated_delta_rule(q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray, beta: np.ndarray,
                     state: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(out [B,S,H,N], final state [B,H,N,N]) of GatedDeltaNet; host ops reuse this."""
    q64, k64, v64, g64, b64 = (t.astype(np.float64) for t in (q, k, v, g, beta))
    batch, steps, heads, n = q.shape
    s = np.zeros((batch, heads, n, n)) if state is None else state.astype(np.float64).copy()
    out = np.zeros((batch, steps, heads, n))
    scale = 1.0 / np.sqrt(n)
    with np.errstate(over="ignore", invalid="ignore"):
        for t in range(steps):
            s *= np.exp(g64[:, t])[:, :, None, None]
            recalled = np.einsum("bhij,bhi->bhj", s, k64[:, t])  # sk[j] = sum_i S[i,j] k[i]
            d = (v64[:, t] - recalled) * b64[:, t, :, None]
            s += k64[:, t, :, :, None] * d[:, :, None, :]
            out[:, t] = scale * np.einsum("bhij,bhi->bhj", s, q64[:, t])
    return out, s


@reference(GatedDeltaNet)
def ref_gated_delta_net(op: GatedDeltaNet, args, node):
    state = args[5] if op.carry_state else None
    out, final = gated_delta_rule(*args[:5], state=state)
    if state is not None:
        # The op updates its state tensor in place; the interpreter holds its own copy of that
        # value, so nodes after this one read the carried state, as on the backend.
        state[...] = final.astype(state.dtype)
    return out.astype(args[0].dtype)
