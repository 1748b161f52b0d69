"""Backward ops: each is the exact gradient of rlxpy's forward op.

Each follows its forward exactly (RoPE table offsets, GatherBackward clamping indices like the
forward, attention honouring score_scale/softcap/GQA), so torch autograd through the forward's
reference semantics is the oracle.

Documented in docs/ops.md#backward (generated from these docstrings by rlxpy/ir/ops_doc.py).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass

from rlxpy.ir.ops.attention import Attention, bshd_layout
from rlxpy.ir.ops.base import (
    ENUMS,
    ActKind,
    MaskKind,
    Op,
    ReduceOp,
    TensorType,
    check_axis,
    need,
    need_static,
)
from rlxpy.ir.ops.conv import AdaptivePool, Pool
from rlxpy.ir.ops.loss import CrossEntropy
from rlxpy.ir.ops.rope import Rope
from rlxpy.ir.ops.scan import GatedDeltaNet, SelectiveScan
from rlxpy.ir.shape import format_shape


class AttentionWrt(enum.IntEnum):
    """Which input AttentionBackward differentiates (the ids are serialised: keep them stable); ALL
    gives the three gradients at once, flattened one after the other; PACKED gives them at once side
    by side in each token's row (the gradient of a fused QKV projection that was narrowed into q | k | v)."""

    QUERY = 0
    KEY = 1
    VALUE = 2
    ALL = 3
    PACKED = 4


ENUMS[AttentionWrt.__name__] = AttentionWrt  # so JSON graphs can name it


def _last_axis(axis: int, rank: int, what: str) -> None:
    need(check_axis(axis, rank) == rank - 1,
         f"{what} normalises the last axis only, got axis={axis} for rank {rank}")


def _norm_backward_check(x: TensorType, dy: TensorType, params: Sequence[TensorType], axis: int,
                         what: str) -> None:
    need(x.rank >= 1 and x.dtype.is_float, f"{what} needs a float x of rank >= 1, got {x}")
    _last_axis(axis, x.rank, what)
    need(dy.shape == x.shape, f"dy {dy} must match x {x}")
    for t in params:
        need(t.shape == (x.shape[-1],), f"gamma/beta must be [{x.shape[-1]}], got {t}")


@dataclass(frozen=True)
class RmsNormBackwardInput(Op):
    """dx of ``y = x r gamma + beta``, ``r = 1/sqrt(mean(x^2) + eps)``; inputs x, gamma, [beta], dy.
    ``dx = r (gamma dy - x r^2 mean(dy gamma x))``; beta does not influence it."""

    eps: float = 1e-6
    axis: int = -1
    arity = (3, 4)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        _norm_backward_check(ins[0], ins[-1], ins[1:-1], self.axis, "rms_norm_backward_input")
        return ins[0]


@dataclass(frozen=True)
class RmsNormBackwardGamma(Op):
    """d gamma [H] of RmsNorm: ``sum over rows of dy x r``; inputs x, gamma, [beta], dy."""

    eps: float = 1e-6
    axis: int = -1
    arity = (3, 4)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        _norm_backward_check(ins[0], ins[-1], ins[1:-1], self.axis, "rms_norm_backward_gamma")
        return TensorType((ins[0].shape[-1],), ins[0].dtype)


@dataclass(frozen=True)
class RmsNormBackwardBeta(Op):
    """d beta [H] of RmsNorm: ``sum over rows of dy``; inputs x, gamma, [beta], dy."""

    eps: float = 1e-6
    axis: int = -1
    arity = (3, 4)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        _norm_backward_check(ins[0], ins[-1], ins[1:-1], self.axis, "rms_norm_backward_beta")
        return TensorType((ins[0].shape[-1],), ins[0].dtype)


@dataclass(frozen=True)
class LayerNormBackwardInput(Op):
    """dx of LayerNorm (biased variance, like torch.nn.functional.layer_norm); inputs x, gamma, dy.
    ``xhat = (x - mean) / sqrt(var + eps)``, ``s = dy gamma``: ``dx = (s - mean(s) - xhat mean(s xhat))
    / sqrt(var + eps)``."""

    eps: float = 1e-5
    axis: int = -1
    arity = (3, 3)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        _norm_backward_check(ins[0], ins[2], ins[1:2], self.axis, "layer_norm_backward_input")
        return ins[0]


@dataclass(frozen=True)
class LayerNormBackwardGamma(Op):
    """d gamma [H] of LayerNorm: ``sum over rows of dy xhat``; inputs x, dy. (d beta = sum of dy,
    built from a Reduce.)"""

    eps: float = 1e-5
    axis: int = -1
    arity = (2, 2)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        _norm_backward_check(ins[0], ins[1], (), self.axis, "layer_norm_backward_gamma")
        return TensorType((ins[0].shape[-1],), ins[0].dtype)


@dataclass(frozen=True)
class RopeBackward(Op):
    """dx of Rope with the same attributes; inputs dy, cos, sin (+ the i32[1] position input).
    A rotation's adjoint is the rotation by -theta: Rope applied to dy with sin negated."""

    head_dim: int
    n_rot: int = 0
    interleaved: bool = False
    position_offset: int = 0
    arity = (3, 4)

    def forward(self) -> Rope:
        return Rope(self.head_dim, self.n_rot, self.interleaved, self.position_offset)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        return self.forward().infer(ins)


@dataclass(frozen=True)
class CumsumBackward(Op):
    """dx of Cumsum: the reverse (suffix) scan along ``axis``. Inclusive forward ->
    ``dx[i] = sum_{j >= i} dy[j]``; exclusive -> ``sum_{j > i} dy[j]``."""

    axis: int = -1
    exclusive: bool = False

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        check_axis(self.axis, ins[0].rank)
        return ins[0]


@dataclass(frozen=True)
class GatherBackward(Op):
    """d table of Gather(axis): ``out = 0; out[..., clip(idx[j]), ...] += dy[..., j, ...]``.

    Inputs dy [table[:axis] + idx.shape + table[axis+1:]] and indices; ``axis_dim`` is the
    table's size along ``axis``. Indices are truncated and clamped like the forward, so this is
    its exact adjoint (out-of-range indices add into the clamped row, not nowhere)."""

    axis_dim: int
    axis: int = 0
    arity = (2, 2)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        dy, idx = ins
        table_rank = dy.rank - idx.rank + 1
        need(table_rank >= 1, f"dy {dy} has fewer dims than the indices {idx}")
        axis = check_axis(self.axis, table_rank)
        need(tuple(dy.shape[axis:axis + idx.rank]) == tuple(idx.shape),
             f"dy {dy} must hold the index shape {format_shape(idx.shape)} at axis {axis}")
        need(self.axis_dim >= 1, f"axis_dim {self.axis_dim} must be >= 1")
        shape = tuple(dy.shape[:axis]) + (self.axis_dim,) + tuple(dy.shape[axis + idx.rank:])
        return TensorType(shape, dy.dtype)


@dataclass(frozen=True)
class AttentionBackward(Op):
    """dq, dk or dv (``wrt``) of Attention with the same attributes; with ``wrt`` ALL the three as one
    1-D tensor [dq flat, dk flat, dv flat] (each in its input's layout); with ``wrt`` PACKED the three
    as one [B, S, (H + 2 H_kv) D] tensor, each token's row holding its dq, dk and dv side by side
    (self-attention with token-major q, k, v: [B, S, H, D] or [B, S, H*D], one B and S). Inputs q, k,
    v, dy, then the forward's output o when ``given_output``, then the mask (CUSTOM / BIAS).

    With ``P = softmax(mask(cap(scale q k^T)))``: ``dV = P^T dY``, ``dP = dY V^T``,
    ``dS = P (dP - rowsum(P dP))``, zeroed where the mask replaced the score, times
    ``1 - tanh^2`` under a softcap; ``dQ = scale dS K``, ``dK = scale dS^T Q``. GQA sums dK/dV over
    the query heads sharing a kv head. dy has q's shape and layout. ``rowsum(P dP)`` equals
    ``rowsum(dY * O)`` (O = P V, the forward's output, q's shape and layout): with ``given_output``
    it is computed from o instead of from the probabilities, which saves recomputing dY V^T for it.
    o must then be the forward's output for these q, k, v (the op does not check it)."""

    num_heads: int
    head_dim: int
    wrt: AttentionWrt
    num_kv_heads: int = 0
    mask_kind: MaskKind = MaskKind.NONE
    score_scale: float | None = None
    softcap: float | None = None
    window: int = 0
    given_output: bool = False
    arity = (4, 6)

    def forward(self) -> Attention:
        return Attention(self.num_heads, self.head_dim, self.num_kv_heads, self.mask_kind, self.score_scale,
                         self.softcap, self.window)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        q, k, v, dy = ins[:4]
        rest = list(ins[4:])
        if self.given_output:
            need(bool(rest), "given_output needs the forward's output o as input 4")
            o = rest.pop(0)
            need(o == q, f"o {o} must have q's type {q}")
        self.forward().infer([q, k, v, *rest])
        need(dy.shape == q.shape, f"dy {dy} must have q's shape {format_shape(q.shape)}")
        need(isinstance(self.wrt, AttentionWrt), f"wrt must be an AttentionWrt, got {self.wrt!r}")
        if self.wrt is AttentionWrt.ALL:
            need_static(q.shape + k.shape, "attention backward wrt all")
            return TensorType((math.prod(q.shape) + 2 * math.prod(k.shape),), q.dtype)
        if self.wrt is AttentionWrt.PACKED:
            kv_heads = self.forward().kv_heads
            need(bshd_layout(q, self.num_heads, self.head_dim) and bshd_layout(k, kv_heads, self.head_dim)
                 and k.shape[:2] == q.shape[:2] and v.shape == k.shape,
                 f"wrt PACKED needs token-major q {q}, k {k}, v {v} over one batch and sequence")
            width = (self.num_heads + 2 * kv_heads) * self.head_dim
            return TensorType((q.shape[0], q.shape[1], width), q.dtype)
        return (q, k, v)[self.wrt]


@dataclass(frozen=True)
class CrossEntropyBackward(Op):
    """d logits of CrossEntropy; inputs logits [..., C], targets [...], dy [...] (the gradient of the
    per-row losses). ``dlogits = (softmax(logits) - onehot(target)) * dy`` per row; a row whose target
    is outside [0, C) (ignored by the forward) gets zeros."""

    arity = (3, 3)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        logits, targets, dy = ins
        CrossEntropy().infer([logits, targets])
        need(tuple(dy.shape) == tuple(targets.shape) and dy.dtype == logits.dtype,
             f"dy {dy} must be {logits.dtype}{format_shape(targets.shape)}, one value per row")
        return logits


#: Activations whose derivative their output gives (ActivationBackward may read y instead of x).
FROM_OUTPUT = frozenset({ActKind.RELU, ActKind.SIGMOID, ActKind.TANH, ActKind.EXP, ActKind.NEG, ActKind.SQRT,
                         ActKind.RSQRT, ActKind.TAN})


@dataclass(frozen=True)
class ActivationBackward(Op):
    """dx of Activation(fn) in one pass: ``dx = dy * fn'(x)``; inputs t, dy, with t the activation's
    input x, or its output y when ``of_output`` (for the kinds whose derivative y gives: RELU, SIGMOID,
    TANH, EXP, NEG, SQRT, RSQRT, TAN). The derivatives are torch's: RELU 0 where y <= 0 (x <= 0), else
    1; SIGMOID y(1 - y); TANH 1 - y^2; EXP y; LOG 1/x; SQRT 1/(2y); RSQRT -y^3/2; ABS sign(x), 0 at 0;
    GELU Phi(x) + x phi(x); GELU_APPROX that of the tanh form; SILU s(1 + x(1 - s)), s = sigmoid(x);
    ROUND 0; SIN cos x; COS -sin x; TAN 1 + y^2; ATAN 1/(1 + x^2); HARDSIGMOID 1/6 on (-3, 3), else 0;
    HARDSWISH 0 below -3, x/3 + 1/2 up to 3, then 1 (a NaN x gives 0 and 1, as torch)."""

    fn: ActKind
    of_output: bool = False
    arity = (2, 2)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        t, dy = ins
        need(t.dtype.is_float and dy == t, f"t and dy must be one float type, got {t} and {dy}")
        need(not self.of_output or self.fn in FROM_OUTPUT,
             f"the derivative of {self.fn.name} needs the activation's input, not its output")
        return t


@dataclass(frozen=True)
class SelectiveScanBackward(Op):
    """The five gradients of SelectiveScan (without a carried state) as one 1-D tensor
    [dx, ddelta, dA, dBm, dCm], each flat in its input's layout; inputs x, delta, A, Bm, Cm, dy
    (dy with x's shape).

    The states ``h_t`` are recomputed from h = 0, then walked back with the adjoint
    ``lam_t = Cm[t] dy[t,c] + exp(delta[t+1,c] A[c]) lam_{t+1}`` (per batch and channel, over n):
    ``dx[t,c] = sum_n lam_t delta Bm[t]``, ``ddelta[t,c] = sum_n lam_t (A exp(delta A) h_{t-1} + Bm[t] x)``,
    ``dA[c,n] = sum_{b,t} lam_t delta exp(delta A) h_{t-1}``, ``dBm[t,n] = sum_c lam_t delta x``,
    ``dCm[t,n] = sum_c dy h_t``."""

    state_size: int
    arity = (6, 6)

    def forward(self) -> SelectiveScan:
        return SelectiveScan(self.state_size)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        x, delta, a, bm, cm, dy = ins
        self.forward().infer([x, delta, a, bm, cm])
        need(dy == x, f"dy {dy} must have x's type {x}")
        need_static(x.shape + a.shape, "selective scan backward")
        return TensorType((2 * math.prod(x.shape) + math.prod(a.shape) + 2 * math.prod(bm.shape),), x.dtype)


@dataclass(frozen=True)
class PoolBackward(Op):
    """dx of a Pool (``output_size`` empty: the window attributes are Pool's) or an AdaptivePool
    (``output_size`` set: its bins); inputs x, y (the pool's output), dy; dx has x's type.

    Every input element sums, over the windows (bins) it lies in, ``dy / divisor`` for MEAN (the
    forward's divisor of that window), ``dy`` for SUM, and for MAX / MIN ``dy`` of the windows it
    wins only: the winner is the first tap in window order (the forward's loop order) whose value is
    the window's output y, a NaN winning over numbers (torch's max_pool takes the first maximum
    too). A tap in the padding never wins. y is read for MAX / MIN only (any tensor of its type may
    stand in for a mean or a sum). PROD has no backward."""

    kind: ReduceOp
    kernel_size: tuple[int, ...] = ()
    stride: tuple[int, ...] = ()
    padding: tuple[int, ...] = ()
    dilation: tuple[int, ...] = ()
    padding_end: tuple[int, ...] = ()
    ceil_mode: bool = False
    count_include_pad: bool = True
    divisor: int = 0
    output_size: tuple[int, ...] = ()
    arity = (3, 3)

    @classmethod
    def of(cls, pool: Pool | AdaptivePool) -> PoolBackward:
        """The backward of a forward pool op."""
        if isinstance(pool, AdaptivePool):
            return cls(pool.kind, output_size=pool.output_size)
        return cls(pool.kind, pool.kernel_size, pool.stride, pool.padding, pool.dilation, pool.padding_end,
                   pool.ceil_mode, pool.count_include_pad, pool.divisor)

    def forward(self) -> Pool | AdaptivePool:
        if self.output_size:
            return AdaptivePool(self.kind, self.output_size)
        return Pool(self.kind, self.kernel_size, self.stride, self.padding, self.dilation, self.padding_end,
                    self.ceil_mode, self.count_include_pad, self.divisor)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        x, y, dy = ins
        need(self.kind is not ReduceOp.PROD, "product pooling has no backward")
        want = self.forward().infer([x])
        need(y == want and dy == want, f"y {y} and dy {dy} must be the pool's output {want} (x {x})")
        return x


@dataclass(frozen=True)
class GatedDeltaNetBackward(Op):
    """The five gradients of GatedDeltaNet (without a carried state) as one 1-D tensor
    [dq, dk, dv, dg, dbeta], each flat in its input's layout; inputs q, k, v, g, beta, dy (dy with q's
    shape).

    With S'_t = exp(g_t) S_{t-1}, r_t = S'_t^T k_t, d_t = (v_t - r_t) beta_t, S_t = S'_t + k_t d_t^T and
    o_t = c S_t^T q_t (c = 1/sqrt(N)), the states are recomputed from 0, then the adjoint G = dL/dS_t
    is walked back from 0: ``G += c q_t dy_t^T``; ``dq_t = c S_t dy_t``; ``e = G^T k_t``;
    ``dv_t = beta_t e``; ``dbeta_t = e . (v_t - r_t)``; ``u = -beta_t e``;
    ``dk_t = G d_t + S'_t u``; ``dS' = G + k_t u^T``; ``dg_t = sum(dS' * S'_t)``;
    ``G = exp(g_t) dS'``."""

    state_size: int
    arity = (6, 6)

    def forward(self) -> GatedDeltaNet:
        return GatedDeltaNet(self.state_size)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        q, k, v, g, beta, dy = ins
        self.forward().infer([q, k, v, g, beta])
        need(dy == q, f"dy {dy} must have q's type {q}")
        need_static(q.shape, "gated delta net backward")
        return TensorType((3 * math.prod(q.shape) + 2 * math.prod(g.shape),), q.dtype)
