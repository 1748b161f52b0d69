"""A 1-layer (BERT-style, post-norm) transformer block built with the builder, on the GPU, vs torch."""

from __future__ import annotations

import numpy as np
from helpers import assert_close

import rlxpy


def test_transformer_block_matches_torch(device):
    import torch

    batch, seq, hidden, heads, ffn = 2, 7, 48, 4, 96
    dim = hidden // heads
    rng = np.random.default_rng(0)
    p = {name: (rng.standard_normal(shape) * scale).astype(np.float32) for name, shape, scale in [
        ("wqkv", (hidden, 3 * hidden), 0.15), ("bqkv", (3 * hidden,), 0.1), ("wo", (hidden, hidden), 0.15),
        ("bo", (hidden,), 0.1), ("g1", (hidden,), 1.0), ("b1", (hidden,), 0.1), ("w1", (hidden, ffn), 0.15),
        ("c1", (ffn,), 0.1), ("w2", (ffn, hidden), 0.15), ("c2", (hidden,), 0.1), ("g2", (hidden,), 1.0),
        ("b2", (hidden,), 0.1)]}
    x = rng.standard_normal((batch, seq, hidden)).astype(np.float32)

    g = rlxpy.Graph("block")
    xn = g.input("x", x.shape)
    w = {name: g.param(name, value.shape) for name, value in p.items()}
    qkv = g.linear(xn, w["wqkv"], w["bqkv"], name="qkv")
    q, k, v = (g.narrow(qkv, 2, i * hidden, hidden, name=f"qkv{i}") for i in range(3))
    a = g.attention(q, k, v, heads, dim, name="attn")
    h = g.layer_norm(g.add(g.linear(a, w["wo"], w["bo"]), xn), w["g1"], w["b1"], eps=1e-5, name="ln1")
    f = g.linear(g.linear(h, w["w1"], w["c1"], "gelu"), w["w2"], w["c2"])
    g.output(g.layer_norm(g.add(f, h), w["g2"], w["b2"], eps=1e-5, name="out"))
    exe = rlxpy.compile(g)
    for name, value in p.items():
        exe.set_param(name, value)
    got = exe.run({"x": x})["out"]

    t = {name: torch.from_numpy(value) for name, value in p.items()}
    tx = torch.from_numpy(x)
    tq, tk, tv = (tx @ t["wqkv"] + t["bqkv"]).split(hidden, -1)
    split = lambda z: z.reshape(batch, seq, heads, dim).transpose(1, 2)  # noqa: E731
    ta = torch.nn.functional.scaled_dot_product_attention(split(tq), split(tk), split(tv))
    ta = ta.transpose(1, 2).reshape(batch, seq, hidden)
    th = torch.nn.functional.layer_norm(ta @ t["wo"] + t["bo"] + tx, (hidden,), t["g1"], t["b1"], 1e-5)
    tf = torch.nn.functional.gelu(th @ t["w1"] + t["c1"]) @ t["w2"] + t["c2"]
    want = torch.nn.functional.layer_norm(tf + th, (hidden,), t["g2"], t["b2"], 1e-5).numpy()
    assert_close(got, want, 1e-4, 1e-4 * np.abs(want).max(), "transformer block")
