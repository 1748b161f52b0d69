"""Recurrent sequence models: Mamba-1 selective scan and the gated delta rule.

Documented in docs/ops.md#scan (generated from these docstrings by rlxpy/ir/ops_doc.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rlxpy.ir.ops.base import Op, TensorType, need
from rlxpy.ir.shape import format_shape

MAX_SCAN_STATE = 256
MAX_DELTA_STATE = 128


@dataclass(frozen=True)
class SelectiveScan(Op):
    """Mamba-1 selective scan; inputs x [B,S,Hd], delta [B,S,Hd], A [Hd,N], Bm [B,S,N], Cm [B,S,N],
    and with ``carry_state`` a state [B,Hd,N].

    Per (b, channel c) a state h[N] starts at 0 (or the carried state) and for t in order:
    ``h = exp(delta[t,c] * A[c]) * h + delta[t,c] * Bm[t] * x[t,c]``; ``y[t,c] = sum_n Cm[t,n] h[n]``.
    A is used as given (callers pass ``-exp(A_log)``); no D skip term and no gating, unlike
    transformers' MambaMixer.slow_forward which adds both around the same recurrence.
    With ``carry_state`` the final state is written back into the state tensor (in place): a
    prefill leaves the state a decode step (S = 1) continues from, as Mamba's ssm_state cache."""

    state_size: int
    carry_state: bool = False
    arity = (5, 6)

    def mutated_inputs(self) -> tuple[int, ...]:
        return (5,) if self.carry_state else ()  # the carried state

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        want_inputs = 6 if self.carry_state else 5
        need(len(ins) == want_inputs,
             f"takes {want_inputs} inputs with carry_state={self.carry_state}, got {len(ins)}")
        x, delta, a, b, c = ins[:5]
        n = self.state_size
        need(1 <= n <= MAX_SCAN_STATE, f"state_size {n} must be in 1..{MAX_SCAN_STATE}")
        need(x.rank == 3 and x.dtype.is_float, f"x must be a float [B, S, Hd] tensor, got {x}")
        need(delta.shape == x.shape, f"delta {delta} must match x {x}")
        need(a.shape == (x.shape[2], n), f"A must be [Hd={x.shape[2]}, N={n}], got {a}")
        want = tuple(x.shape[:2]) + (n,)
        need(b.shape == want and c.shape == want, f"Bm and Cm must be {format_shape(want)}, got {b} and {c}")
        if self.carry_state:
            want = (x.shape[0], x.shape[2], n)
            need(ins[5].shape == want, f"state must be {format_shape(want)}, got {ins[5]}")
        need(len({t.dtype for t in ins}) == 1, "inputs must share a dtype: " + ", ".join(map(str, ins)))
        return x


@dataclass(frozen=True)
class GatedDeltaNet(Op):
    """Gated delta rule (Qwen3-Next / GDN); inputs q, k, v [B,S,Hv,N], g [B,S,Hv] (log-gate),
    beta [B,S,Hv], and with ``carry_state`` a state [B,Hv,N,N]; out [B,S,Hv,N].

    Per (b, head) a state S[N,N] starts at 0 (or the carried state) and for each t:
    ``S *= exp(g_t)``; ``d = (v_t - k_t @ S) * beta_t``; ``S += outer(k_t, d)``;
    ``o_t = (q_t @ S) / sqrt(N)``. Matches transformers' ``torch_recurrent_gated_delta_rule``
    without its in-kernel L2 norm: q/k are expected L2-normalised, k already GQA-repeated.
    With ``carry_state`` the final state is written back into the state tensor (in place)."""

    state_size: int
    carry_state: bool = False
    arity = (5, 6)

    def mutated_inputs(self) -> tuple[int, ...]:
        return (5,) if self.carry_state else ()  # the carried state

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        want_inputs = 6 if self.carry_state else 5
        need(len(ins) == want_inputs,
             f"takes {want_inputs} inputs with carry_state={self.carry_state}, got {len(ins)}")
        q, k, v, g, beta = ins[:5]
        n = self.state_size
        need(1 <= n <= MAX_DELTA_STATE, f"state_size {n} must be in 1..{MAX_DELTA_STATE}")
        need(q.rank == 4 and q.shape[3] == n and q.dtype.is_float,
             f"q must be float [B, S, Hv, {n}], got {q}")
        need(k.shape == q.shape and v.shape == q.shape, f"q {q}, k {k} and v {v} must share one shape")
        need(g.shape == q.shape[:3] and beta.shape == q.shape[:3],
             f"g and beta must be {format_shape(q.shape[:3])}, got {g} and {beta}")
        if self.carry_state:
            want = (q.shape[0], q.shape[2], n, n)
            need(ins[5].shape == want, f"state must be {format_shape(want)}, got {ins[5]}")
        return q
