"""Reference semantics of the composite and control-flow ops, computed DIRECTLY (real control
flow, einsum, whole-block numpy), never by unfusing: the unfuse pass is checked against these."""

from __future__ import annotations

import string
from collections.abc import Sequence

import numpy as np
from scipy import special

from rlxpy.ir.ops import composite
from rlxpy.ir.reference import reference, run_reference
from rlxpy.ir.reference.core import ACTIVATIONS, cast_values


def _f64(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64)


def run_branch(graph, values: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Evaluate a sub-graph with its Inputs bound positionally to ``values``; its outputs in order."""
    inputs = {node.op.name: value for node, value in zip(graph.inputs(), values)}
    results = run_reference(graph, inputs)
    return [results[graph.nodes[o].name] for o in graph.outputs]


def _truthy(value: np.ndarray) -> bool:
    return bool(value.reshape(()) != 0)  # NaN != 0: true, as Where


# -- control flow -------------------------------------------------------------------------------
@reference(composite.If)
def ref_if(op: composite.If, args, node):
    pred, captures = args[0], args[1:]
    if pred.size == 1:  # a real branch: only the taken side runs
        branch = op.then_branch if _truthy(pred) else op.else_branch
        return run_branch(branch, captures)[0]
    (on_true,) = run_branch(op.then_branch, captures)
    (on_false,) = run_branch(op.else_branch, captures)
    return np.where(pred != 0, on_true, on_false)


@reference(composite.While)
def ref_while(op: composite.While, args, node):
    state = list(args)
    for _ in range(op.max_iterations):
        (pred,) = run_branch(op.cond, state)
        if not _truthy(pred):
            break
        new = run_branch(op.body, state)
        state[: len(new)] = new
    return state[0]


# -- linear algebra -----------------------------------------------------------------------------
def einsum_spec(op: composite.DotGeneral, lhs_rank: int, rhs_rank: int) -> str:
    """The numpy.einsum subscripts of a DotGeneral, e.g. batch b, contracting k: 'bmk,bkn->bmn'."""
    letters = iter(string.ascii_letters)
    lhs = [""] * lhs_rank
    rhs = [""] * rhs_rank
    for a, b in zip(op.lhs_batch + op.lhs_contracting, op.rhs_batch + op.rhs_contracting):
        lhs[a] = rhs[b] = next(letters)
    lhs_free, rhs_free = op.free_dims(lhs_rank, rhs_rank)
    for d in lhs_free:
        lhs[d] = next(letters)
    for d in rhs_free:
        rhs[d] = next(letters)
    out = [lhs[d] for d in op.lhs_batch] + [lhs[d] for d in lhs_free] + [rhs[d] for d in rhs_free]
    return f"{''.join(lhs)},{''.join(rhs)}->{''.join(out)}"


@reference(composite.DotGeneral)
def ref_dot_general(op: composite.DotGeneral, args, node):
    lhs, rhs = args
    return np.einsum(einsum_spec(op, lhs.ndim, rhs.ndim), _f64(lhs), _f64(rhs)).astype(lhs.dtype)


@reference(composite.LoraMatMul)
def ref_lora_matmul(op: composite.LoraMatMul, args, node):
    x, w, a, b = (_f64(t) for t in args)
    return (x @ w + op.scale * ((x @ a) @ b)).astype(args[0].dtype)


@reference(composite.FusedSwiGLU)
def ref_swiglu(op: composite.FusedSwiGLU, args, node):
    (x,) = args
    half = x.shape[-1] // 2
    first, second = _f64(x[..., :half]), _f64(x[..., half:])
    gate, up = (first, second) if op.gate_first else (second, first)
    with np.errstate(all="ignore"):  # inf * 0 -> NaN, as torch
        y = (up * gate * special.expit(gate)).astype(x.dtype)  # silu(g) = g * sigmoid(g)
    return cast_values(y, op.cast_to) if op.cast_to is not None else y


# -- transformer blocks -------------------------------------------------------------------------
def _rotate_half(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """x [B, H, S, D] with transformers' rotate_half: x·cos + rotate_half(x)·sin, tables [P, D/2]."""
    seq = x.shape[2]
    c = np.concatenate([cos[:seq], cos[:seq]], axis=-1)  # [S, D]
    s = np.concatenate([sin[:seq], sin[:seq]], axis=-1)
    half = x.shape[-1] // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * c + rotated * s


def _keep_mask(mask: np.ndarray, batch: int, heads: int, seq: int) -> np.ndarray:
    """True where a score is masked: [B,S] / [B,S,S] / [B,H,S,S] entries < 0.5, as [B,H,S,S]."""
    if mask.ndim == 2:
        mask = mask[:, None, None, :]
    elif mask.ndim == 3:
        mask = mask[:, None]
    return np.broadcast_to(mask < 0.5, (batch, heads, seq, seq))


def attention_block(hidden: np.ndarray, qkv_w, out_w, mask, heads: int, head_dim: int, qkv_b=None,
                    out_b=None, cos=None, sin=None) -> np.ndarray:
    """Self-attention over hidden [B, S, E] in float64 (see FusedAttentionBlock's docstring)."""
    batch, seq, _ = hidden.shape
    width = heads * head_dim
    qkv = _f64(hidden) @ _f64(qkv_w)
    if qkv_b is not None:
        qkv = qkv + _f64(qkv_b)
    q, k, v = (qkv[..., i * width:(i + 1) * width].reshape(batch, seq, heads, head_dim).transpose(0, 2, 1, 3)
               for i in range(3))
    if cos is not None:
        q, k = _rotate_half(q, _f64(cos), _f64(sin)), _rotate_half(k, _f64(cos), _f64(sin))
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(head_dim)
    scores = np.where(_keep_mask(mask, batch, heads, seq), -1e9, scores)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    context = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, seq, width)
    out = context @ _f64(out_w)
    return out + _f64(out_b) if out_b is not None else out


@reference(composite.FusedAttentionBlock)
def ref_attention_block(op: composite.FusedAttentionBlock, args, node):
    hidden, qkv_w, out_w, mask = args[:4]
    rest = list(args[4:])
    qkv_b, out_b = (rest.pop(0), rest.pop(0)) if op.has_bias else (None, None)
    cos, sin = rest if op.has_rope else (None, None)
    out = attention_block(hidden, qkv_w, out_w, mask, op.num_heads, op.head_dim, qkv_b, out_b, cos, sin)
    return out.astype(hidden.dtype)


def _layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    centred = x - x.mean(-1, keepdims=True)
    return centred / np.sqrt((centred * centred).mean(-1, keepdims=True) + eps) * _f64(gamma) + _f64(beta)


@reference(composite.FusedTransformerLayer)
def ref_transformer_layer(op: composite.FusedTransformerLayer, args, node):
    t = dict(zip(op.input_names(), args))
    hidden = _f64(t["hidden"])
    attn = attention_block(hidden, t["qkv_w"], t["out_w"], t["mask"], op.num_heads, op.head_dim,
                           t.get("qkv_b"), t.get("out_b"))
    h1 = _layer_norm(hidden + attn, t["ln1_g"], t["ln1_b"], op.eps1)
    inner = h1 @ _f64(t["fc1_w"])
    if "fc1_b" in t:
        inner = inner + _f64(t["fc1_b"])
    with np.errstate(all="ignore"):
        inner = ACTIVATIONS[op.activation](inner)
    ffn = inner @ _f64(t["fc2_w"])
    if "fc2_b" in t:
        ffn = ffn + _f64(t["fc2_b"])
    return _layer_norm(h1 + ffn, t["ln2_g"], t["ln2_b"], op.eps2).astype(t["hidden"].dtype)
