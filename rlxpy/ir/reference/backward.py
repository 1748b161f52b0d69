"""Reference semantics: backward ops (numpy, float64), each the exact gradient of its forward."""

from __future__ import annotations

import numpy as np
from scipy import special

from rlxpy.ir.dtype import DType
from rlxpy.ir.ops import TensorType
from rlxpy.ir.ops.attention import attention_layout
from rlxpy.ir.ops.backward import (
    ActivationBackward,
    AttentionBackward,
    AttentionWrt,
    CrossEntropyBackward,
    CumsumBackward,
    GatedDeltaNetBackward,
    GatherBackward,
    LayerNormBackwardGamma,
    LayerNormBackwardInput,
    PoolBackward,
    RmsNormBackwardBeta,
    RmsNormBackwardGamma,
    RmsNormBackwardInput,
    RopeBackward,
    SelectiveScanBackward,
)
from rlxpy.ir.ops.base import ActKind, MaskKind, ReduceOp
from rlxpy.ir.ops.conv import adaptive_bin
from rlxpy.ir.reference.attention import attention_mask, from_bhsd, mask_bhqk, to_bhsd
from rlxpy.ir.reference.conv import pool_divisor
from rlxpy.ir.reference.core import reference
from rlxpy.ir.reference.loss import log_softmax, target_rows
from rlxpy.ir.reference.rope import ref_rope
from rlxpy.ir.reference.scan import gated_delta_rule
from rlxpy.ir.reference.shape import clamp_indices
from rlxpy.ir.shape import normalize_axis


def _rows(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64).reshape(-1, x.shape[-1])


def _rms_inverse(x: np.ndarray, eps: float) -> np.ndarray:
    return 1.0 / np.sqrt((x * x).mean(-1, keepdims=True) + eps)


@reference(RmsNormBackwardInput)
def ref_rms_norm_backward_input(op: RmsNormBackwardInput, args, node):
    x, gamma, dy = _rows(args[0]), args[1].astype(np.float64), _rows(args[-1])
    r = _rms_inverse(x, op.eps)
    dot = (dy * gamma * x).mean(-1, keepdims=True)
    return (r * (gamma * dy - x * dot * r * r)).reshape(args[0].shape).astype(args[0].dtype)


@reference(RmsNormBackwardGamma)
def ref_rms_norm_backward_gamma(op: RmsNormBackwardGamma, args, node):
    x, dy = _rows(args[0]), _rows(args[-1])
    return (dy * x * _rms_inverse(x, op.eps)).sum(0).astype(args[0].dtype)


@reference(RmsNormBackwardBeta)
def ref_rms_norm_backward_beta(op: RmsNormBackwardBeta, args, node):
    return _rows(args[-1]).sum(0).astype(args[0].dtype)


def _normalised(x: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """(xhat, 1/sqrt(var + eps)) with the two-pass biased variance."""
    centred = x - x.mean(-1, keepdims=True)
    inv_std = 1.0 / np.sqrt((centred * centred).mean(-1, keepdims=True) + eps)
    return centred * inv_std, inv_std


@reference(LayerNormBackwardInput)
def ref_layer_norm_backward_input(op: LayerNormBackwardInput, args, node):
    x, gamma, dy = _rows(args[0]), args[1].astype(np.float64), _rows(args[2])
    xhat, inv_std = _normalised(x, op.eps)
    s = dy * gamma
    dx = inv_std * (s - s.mean(-1, keepdims=True) - xhat * (s * xhat).mean(-1, keepdims=True))
    return dx.reshape(args[0].shape).astype(args[0].dtype)


@reference(LayerNormBackwardGamma)
def ref_layer_norm_backward_gamma(op: LayerNormBackwardGamma, args, node):
    xhat, _ = _normalised(_rows(args[0]), op.eps)
    return (_rows(args[1]) * xhat).sum(0).astype(args[0].dtype)


@reference(RopeBackward)
def ref_rope_backward(op: RopeBackward, args, node):
    dy, cos, sin = args[:3]
    # the adjoint of a rotation by theta is the rotation by -theta
    return ref_rope(op.forward(), [dy, cos, -sin, *args[3:]], node)


@reference(CumsumBackward)
def ref_cumsum_backward(op: CumsumBackward, args, node):
    (dy,) = args
    axis = normalize_axis(op.axis, dy.ndim)
    wide = dy.astype(np.float64) if dy.dtype.kind == "f" else dy
    suffix = np.flip(np.cumsum(np.flip(wide, axis), axis=axis), axis)
    return (suffix - wide if op.exclusive else suffix).astype(dy.dtype)


@reference(GatherBackward)
def ref_gather_backward(op: GatherBackward, args, node):
    dy, idx = args
    rank = len(node.shape)
    axis = normalize_axis(op.axis, rank)
    outer = int(np.prod(dy.shape[:axis]))
    inner = int(np.prod(node.shape[axis + 1:]))
    rows = clamp_indices(idx, op.axis_dim).ravel()
    out = np.zeros((outer, op.axis_dim, inner), dtype=np.float64)
    np.add.at(out, (slice(None), rows), dy.astype(np.float64).reshape(outer, rows.size, inner))
    return out.reshape(node.shape).astype(dy.dtype)


def attention_grads(op: AttentionBackward, q, k, v, dy, mask) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dq, dk, dv) in [B, H or H_kv, S, D] float64, recomputing the forward of nn.ref_attention."""
    heads, kv_heads, d = op.num_heads, op.forward().kv_heads, op.head_dim
    group = heads // kv_heads
    qb, dyb = (to_bhsd(t, _layout(q, heads, d), heads, d).astype(np.float64) for t in (q, dy))
    kb, vb = (to_bhsd(t, _layout(k, kv_heads, d), kv_heads, d).astype(np.float64) for t in (k, v))
    k_rep, v_rep = np.repeat(kb, group, axis=1), np.repeat(vb, group, axis=1)
    scale = op.score_scale if op.score_scale is not None else 1.0 / np.sqrt(d)
    raw = np.einsum("bhqd,bhkd->bhqk", qb, k_rep) * scale
    capped = op.softcap * np.tanh(raw / op.softcap) if op.softcap else raw
    keep = np.ones(raw.shape, dtype=bool)
    scores = capped
    s_q, s_k = raw.shape[-2:]
    if op.mask_kind in (MaskKind.CAUSAL, MaskKind.SLIDING_WINDOW):
        keep = np.broadcast_to(attention_mask(op.mask_kind, s_q, s_k, op.window), raw.shape)
        scores = np.where(keep, capped, -3.4e38)
    elif op.mask_kind is MaskKind.CUSTOM:
        keep = ~(mask_bhqk(mask, raw.shape) < 0.5)
        scores = np.where(keep, capped, -1e9)
    elif op.mask_kind is MaskKind.BIAS:
        scores = capped + mask_bhqk(mask.astype(np.float64), raw.shape)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    dv = np.einsum("bhqk,bhqd->bhkd", p, dyb)
    dp = np.einsum("bhqd,bhkd->bhqk", dyb, v_rep)
    ds = p * (dp - (p * dp).sum(-1, keepdims=True))
    ds = np.where(keep, ds, 0.0)  # a replaced score is a constant: no gradient flows through it
    if op.softcap:
        ds = ds * (1.0 - np.tanh(raw / op.softcap) ** 2)
    dq = scale * np.einsum("bhqk,bhkd->bhqd", ds, k_rep)
    dk = scale * np.einsum("bhqk,bhqd->bhkd", ds, qb)
    batch = qb.shape[0]
    fold = (batch, kv_heads, group) + dk.shape[2:]  # sum the query heads sharing a kv head
    return dq, dk.reshape(fold).sum(2), dv.reshape(fold).sum(2)


def _layout(t: np.ndarray, heads: int, head_dim: int) -> str:
    return attention_layout(TensorType(tuple(t.shape), DType.F32), heads, head_dim)


@reference(AttentionBackward)
def ref_attention_backward(op: AttentionBackward, args, node):
    q, k, v, dy = args[:4]
    rest = list(args[4:])[1:] if op.given_output else list(args[4:])  # o: the reference recomputes P
    grads = attention_grads(op, q, k, v, dy, rest[0] if rest else None)
    laid_out = []
    for wrt in (AttentionWrt.QUERY, AttentionWrt.KEY, AttentionWrt.VALUE):
        target = (q, k, v)[wrt]
        heads = op.num_heads if wrt is AttentionWrt.QUERY else op.forward().kv_heads
        grad = from_bhsd(grads[wrt], _layout(target, heads, op.head_dim), target.shape).astype(target.dtype)
        laid_out.append(grad)
    if op.wrt is AttentionWrt.ALL:
        return np.concatenate([g.reshape(-1) for g in laid_out])
    if op.wrt is AttentionWrt.PACKED:  # token-major: each token's dq | dk | dv
        return np.concatenate([g.reshape(g.shape[0], g.shape[1], -1) for g in laid_out], axis=-1)
    return laid_out[op.wrt]


@reference(CrossEntropyBackward)
def ref_cross_entropy_backward(op: CrossEntropyBackward, args, node):
    logits, targets, dy = args
    probs = np.exp(log_softmax(logits, -1))
    rows, valid = target_rows(targets, logits.shape[-1])
    onehot = np.arange(logits.shape[-1]) == rows[..., None]
    grad = (probs - onehot) * dy.astype(np.float64)[..., None]
    return np.where(valid[..., None], grad, 0.0).astype(logits.dtype)


def _gelu_tanh_slope(x: np.ndarray) -> np.ndarray:
    k = np.sqrt(2.0 / np.pi)
    t = np.tanh(k * (x + 0.044715 * x ** 3))
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3 * 0.044715 * x * x)


#: fn'(t) in float64, from the input x (or the output y for ActivationBackward.of_output kinds)
SLOPES = {
    ActKind.RELU: lambda t: np.where(t <= 0, 0.0, 1.0),
    ActKind.SIGMOID: lambda t: t * (1.0 - t),
    ActKind.TANH: lambda t: 1.0 - t * t,
    ActKind.EXP: lambda t: t,
    ActKind.LOG: lambda t: 1.0 / t,
    ActKind.SQRT: lambda t: 0.5 / t,
    ActKind.RSQRT: lambda t: -0.5 * t ** 3,
    ActKind.NEG: lambda t: -np.ones_like(t),
    ActKind.ABS: np.sign,
    ActKind.GELU: lambda t: (0.5 * (1.0 + special.erf(t / np.sqrt(2.0)))
                             + t * np.exp(-0.5 * t * t) / np.sqrt(2 * np.pi)),
    ActKind.GELU_APPROX: _gelu_tanh_slope,
    ActKind.SILU: lambda t: special.expit(t) * (1.0 + t * (1.0 - special.expit(t))),
    ActKind.ROUND: np.zeros_like,
    ActKind.SIN: np.cos,
    ActKind.COS: lambda t: -np.sin(t),
    ActKind.TAN: lambda t: 1.0 + t * t,
    ActKind.ATAN: lambda t: 1.0 / (1.0 + t * t),
    ActKind.HARDSIGMOID: lambda t: np.where((t > -3.0) & (t < 3.0), 1.0 / 6.0, 0.0),
    ActKind.HARDSWISH: lambda t: np.where(t < -3.0, 0.0, np.where(t <= 3.0, t / 3.0 + 0.5, 1.0)),
}
#: kinds whose slope above is written in the output y; from the input x they first apply the function
_OUTPUT_FORM = {ActKind.SIGMOID: special.expit, ActKind.TANH: np.tanh, ActKind.EXP: np.exp,
                ActKind.SQRT: np.sqrt, ActKind.RSQRT: lambda x: 1.0 / np.sqrt(x), ActKind.TAN: np.tan}


@reference(ActivationBackward)
def ref_activation_backward(op: ActivationBackward, args, node):
    t, dy = (a.astype(np.float64) for a in args)
    with np.errstate(all="ignore"):
        if not op.of_output and op.fn in _OUTPUT_FORM:
            t = _OUTPUT_FORM[op.fn](t)
        grad = dy * SLOPES[op.fn](t)
        if op.fn is ActKind.ROUND:  # a zero slope, even where dy is inf or NaN (torch gives zeros)
            grad = np.zeros_like(dy)
    return grad.astype(args[0].dtype)


@reference(SelectiveScanBackward)
def ref_selective_scan_backward(op: SelectiveScanBackward, args, node):
    x, delta, a, bm, cm, dy = (t.astype(np.float64) for t in args)
    batch, steps, channels = x.shape
    # every state h_t (float64), h[:, t + 1] after step t, h[:, 0] = 0
    h = np.zeros((batch, steps + 1, channels, op.state_size))
    with np.errstate(over="ignore", invalid="ignore"):
        decay = np.exp(delta[..., None] * a)  # [B, S, Hd, N]
        for t in range(steps):
            h[:, t + 1] = decay[:, t] * h[:, t] + (delta[:, t] * x[:, t])[..., None] * bm[:, t, None, :]
        lam = np.zeros_like(h[:, 1:])
        carry = np.zeros((batch, channels, op.state_size))
        for t in reversed(range(steps)):
            lam[:, t] = cm[:, t, None, :] * dy[:, t, :, None] + carry
            carry = decay[:, t] * lam[:, t]
        prev = h[:, :-1]
        dx = np.einsum("btcn,btc,btn->btc", lam, delta, bm)
        ddelta = np.einsum("btcn,btcn->btc", lam, a * decay * prev + bm[:, :, None, :] * x[..., None])
        da = np.einsum("btcn,btc->cn", lam * decay * prev, delta)
        dbm = np.einsum("btcn,btc->btn", lam, delta * x)
        dcm = np.einsum("btc,btcn->btn", dy, h[:, 1:])
    flat = np.concatenate([part.ravel() for part in (dx, ddelta, da, dbm, dcm)])
    return flat.astype(args[0].dtype)


def _pool_taps(op: PoolBackward, in_sizes, out_sizes) -> tuple[np.ndarray, np.ndarray]:
    """[P_out, T] flat input index of every tap of every output position (taps in the forward's loop
    order) and whether the tap lies inside the input."""
    spatial = len(in_sizes)
    geo = None if op.output_size else op.forward().geometry(spatial)
    index = np.zeros((1,) * (2 * spatial), np.int64)
    valid = np.ones((1,) * (2 * spatial), bool)
    for i, (size, out) in enumerate(zip(in_sizes, out_sizes)):
        if geo is None:
            bins = np.array([adaptive_bin(j, size, out) for j in range(out)])
            pos = bins[:, :1] + np.arange(int((bins[:, 1] - bins[:, 0]).max()))[None, :]
            ok = pos < bins[:, 1:]
        else:
            pos = (np.arange(out) * geo.stride[i] - geo.begin[i])[:, None] \
                + np.arange(geo.kernel[i])[None, :] * geo.dilation[i]
            ok = (pos >= 0) & (pos < size)
        shape = [1] * (2 * spatial)
        shape[i], shape[spatial + i] = pos.shape
        index = index * size + np.clip(pos, 0, size - 1).reshape(shape)
        valid = valid & ok.reshape(shape)
    positions = int(np.prod(out_sizes))
    full = tuple(out_sizes) + index.shape[spatial:]
    return (np.broadcast_to(index, full).reshape(positions, -1),
            np.broadcast_to(valid, tuple(out_sizes) + valid.shape[spatial:]).reshape(positions, -1))


@reference(PoolBackward)
def ref_pool_backward(op: PoolBackward, args, node):
    x, y, dy = args
    rows = x.shape[0] * x.shape[1]
    in_sizes, out_sizes = x.shape[2:], y.shape[2:]
    index, valid = _pool_taps(op, in_sizes, out_sizes)
    xf = x.astype(np.float64).reshape(rows, -1)
    yf = y.astype(np.float64).reshape(rows, -1)
    g = dy.astype(np.float64).reshape(rows, -1)
    dx = np.zeros_like(xf)
    row_ids = np.arange(rows)[:, None]
    if op.kind in (ReduceOp.MAX, ReduceOp.MIN):
        vals = xf[:, index]  # [rows, P_out, T]
        target = yf[:, :, None]
        hit = valid[None] & ((vals == target) | (np.isnan(vals) & np.isnan(target)))
        first = hit.argmax(-1)
        won = np.take_along_axis(index[None].repeat(rows, 0), first[..., None], -1)[..., 0]
        np.add.at(dx, (np.broadcast_to(row_ids, won.shape), won), np.where(hit.any(-1), g, 0.0))
    else:
        if op.kind is ReduceOp.MEAN:
            if op.output_size:
                divisor = valid.sum(-1).astype(np.float64)
            else:
                forward = op.forward()
                per_position = pool_divisor(forward, in_sizes, out_sizes, forward.geometry(len(in_sizes)))
                divisor = np.broadcast_to(per_position, out_sizes).reshape(-1)
            with np.errstate(all="ignore"):
                g = g / divisor[None, :]
        share = np.where(valid[None], g[:, :, None], 0.0)
        np.add.at(dx, (np.broadcast_to(row_ids[:, :, None], share.shape),
                       np.broadcast_to(index[None], share.shape)), share)
    return dx.reshape(x.shape).astype(x.dtype)


def gated_delta_rule_backward(q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray, beta: np.ndarray,
                              dy: np.ndarray) -> list[np.ndarray]:
    """[dq, dk, dv, dg, dbeta] of the gated delta rule from a zero state (GatedDeltaNetBackward), f64."""
    q64, k64, v64, g64, b64, dy64 = (t.astype(np.float64) for t in (q, k, v, g, beta, dy))
    batch, steps, heads, n = q.shape
    scale = 1.0 / np.sqrt(n)
    states = [np.zeros((batch, heads, n, n))]
    for t in range(steps):  # S_t for t = 0 .. S-1 (S_{-1} = 0), one step of the forward each
        _, final = gated_delta_rule(q64[:, t:t + 1], k64[:, t:t + 1], v64[:, t:t + 1], g64[:, t:t + 1],
                                    b64[:, t:t + 1], states[-1])
        states.append(final)
    grads = [np.zeros_like(t) for t in (q64, q64, q64, g64, g64)]
    dq, dk, dv, dg, dbeta = grads
    adj = np.zeros((batch, heads, n, n))
    with np.errstate(over="ignore", invalid="ignore"):
        for t in reversed(range(steps)):
            decay = np.exp(g64[:, t])[:, :, None, None]
            before = decay * states[t]  # S'_t
            kt, qt, dyt = k64[:, t], q64[:, t], dy64[:, t]
            recalled = np.einsum("bhij,bhi->bhj", before, kt)
            d = (v64[:, t] - recalled) * b64[:, t, :, None]
            adj = adj + scale * qt[..., :, None] * dyt[..., None, :]
            dq[:, t] = scale * np.einsum("bhij,bhj->bhi", states[t + 1], dyt)
            e = np.einsum("bhij,bhi->bhj", adj, kt)
            dv[:, t] = b64[:, t, :, None] * e
            dbeta[:, t] = (e * (v64[:, t] - recalled)).sum(-1)
            u = -b64[:, t, :, None] * e
            dk[:, t] = np.einsum("bhij,bhj->bhi", adj, d) + np.einsum("bhij,bhj->bhi", before, u)
            d_before = adj + kt[..., :, None] * u[..., None, :]
            dg[:, t] = (d_before * before).sum((-1, -2))
            adj = decay * d_before
    return grads


@reference(GatedDeltaNetBackward)
def ref_gated_delta_net_backward(op: GatedDeltaNetBackward, args, node):
    grads = gated_delta_rule_backward(*args)
    return np.concatenate([t.reshape(-1) for t in grads]).astype(args[0].dtype)
