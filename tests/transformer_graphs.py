"""Transformer graphs shared by the pattern tests (IR level and GPU level)."""

from __future__ import annotations

import numpy as np

import rlxpy
from rlxpy.ir.ops.base import MaskKind


def pre_norm_block(batch=2, seq=17, heads=6, kv_heads=2, dim=5, rms=False, rope=False, mask=False, seed=0):
    """A pre-norm (GPT-2 / Llama style) block with a fused QKV projection; returns graph and params.

    With ``rope`` q and k are rotated before attention (the packed pattern cannot read them in place,
    split QKV still applies); ``mask`` adds a CUSTOM keep-mask input [B, S]."""
    hidden, q_w, kv_w = heads * dim, heads * dim, kv_heads * dim
    rng = np.random.default_rng(seed)
    shapes = {"g1": (hidden,), "b1": (hidden,), "wqkv": (hidden, q_w + 2 * kv_w), "bqkv": (q_w + 2 * kv_w,),
              "wo": (q_w, hidden), "bo": (hidden,), "g2": (hidden,), "b2": (hidden,),
              "w1": (hidden, 2 * hidden), "c1": (2 * hidden,), "w2": (2 * hidden, hidden), "c2": (hidden,)}
    params = {name: (rng.standard_normal(shape) * (1.0 if name[0] == "g" else 0.3)).astype(np.float32)
              for name, shape in shapes.items()}
    g = rlxpy.Graph("pre_norm")
    x = g.input("x", [batch, seq, hidden])
    w = {name: g.param(name, list(shape)) for name, shape in shapes.items()}
    norm = (lambda t, a, b, name: g.rms_norm(t, a, b, eps=1e-5, name=name)) if rms else (
        lambda t, a, b, name: g.layer_norm(t, a, b, eps=1e-5, name=name))
    h = norm(x, w["g1"], w["b1"], "ln1")
    qkv = g.linear(h, w["wqkv"], w["bqkv"], name="qkv")
    q = g.narrow(qkv, 2, 0, q_w, name="q")
    k = g.narrow(qkv, 2, q_w, kv_w, name="k")
    v = g.narrow(qkv, 2, q_w + kv_w, kv_w, name="v")
    if rope:
        cos = np.cos(np.arange(seq)[:, None] * 0.1 * np.arange(1, dim // 2 + 1)).astype(np.float32)
        sin = np.sin(np.arange(seq)[:, None] * 0.1 * np.arange(1, dim // 2 + 1)).astype(np.float32)
        c, s = g.constant(cos, name="cos"), g.constant(sin, name="sin")
        q = g.rope(q, c, s, dim, n_rot=2 * (dim // 2), name="q_rope")
        k = g.rope(k, c, s, dim, n_rot=2 * (dim // 2), name="k_rope")
    else:
        q = g.reshape(q, [batch, seq, heads, dim], name="q4")
        k = g.reshape(k, [batch, seq, kv_heads, dim], name="k4")
        v = g.reshape(v, [batch, seq, kv_heads, dim], name="v4")
    extra = {}
    if mask:
        extra = {"mask_kind": MaskKind.CUSTOM, "mask": g.input("keep", [batch, seq])}
    else:
        extra = {"mask_kind": MaskKind.CAUSAL}
    a = g.attention(q, k, v, heads, dim, num_kv_heads=kv_heads, name="attn", **extra)
    a = g.reshape(a, [batch, seq, q_w], name="attn3")
    s1 = g.add(x, g.linear(a, w["wo"], w["bo"], name="o"), name="resid1")
    h2 = norm(s1, w["g2"], w["b2"], "ln2")
    f = g.linear(g.linear(h2, w["w1"], w["c1"], "gelu", name="up"), w["w2"], w["c2"], name="down")
    g.output(g.add(s1, f, name="resid2"))
    return g, params


def inputs_for(g: rlxpy.Graph, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for node in g.inputs():
        if node.name == "keep":
            keep = np.ones(node.shape, np.float32)
            keep[0, node.shape[1] - min(3, node.shape[1] - 1):] = 0  # padding ending the first sequence
            feeds[node.name] = keep
        else:
            feeds[node.name] = rng.standard_normal(node.shape).astype(np.float32)
    return feeds
