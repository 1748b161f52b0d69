"""Attention-family composites (FusedAttentionBlock, FusedTransformerLayer): the direct numpy
reference against torch/transformers, the unfused graph against the reference, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from reference_helpers import ATOL, RTOL, run_both, t64
from reference_helpers import rand_plain_seeded as rand

from rlxpy.errors import GraphError
from rlxpy.ir import Graph, ops
from rlxpy.ir.ops.attention import LAYER_INPUTS_BIAS, LAYER_INPUTS_NO_BIAS
from rlxpy.ir.passes import unfuse


# -- FusedAttentionBlock ------------------------------------------------------------------------
def keep_mask(shape, seed: int) -> np.ndarray:
    mask = (np.random.default_rng(seed).random(shape) > 0.3).astype(np.float32)
    mask[..., 0] = 1.0  # every row keeps one key, except the row we blank on purpose below
    if mask.ndim >= 3:
        mask[0, ..., -1, :] = 0.0  # a fully masked row averages V uniformly
    return mask


def rope_tables(positions: int, head_dim: int) -> tuple[np.ndarray, np.ndarray]:
    inv = 1.0 / 10000 ** (np.arange(0, head_dim, 2) / head_dim)
    angles = np.arange(positions)[:, None] * inv[None, :]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def torch_attention(hidden, qkv_w, out_w, mask, heads, head_dim, qkv_b=None, out_b=None, cos=None, sin=None):
    """transformers-style MHA: split heads, llama's apply_rotary_pos_emb, scores masked_fill'ed
    with -1e9 where the keep-mask is < 0.5 (replaced, not added: a fully masked row is uniform)."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    x = t64(hidden)
    batch, seq, _ = x.shape
    qkv = F.linear(x, t64(qkv_w).T, t64(qkv_b) if qkv_b is not None else None)
    q, k, v = (part.view(batch, seq, heads, head_dim).transpose(1, 2) for part in qkv.chunk(3, dim=-1))
    if cos is not None:
        c = torch.cat([t64(cos[:seq])] * 2, dim=-1)[None]  # [1, S, D]
        s = torch.cat([t64(sin[:seq])] * 2, dim=-1)[None]
        q, k = apply_rotary_pos_emb(q, k, c, s)
    m = t64(mask)
    m = m[:, None, None, :] if m.ndim == 2 else (m[:, None] if m.ndim == 3 else m)
    scores = (q @ k.transpose(-1, -2)) / head_dim**0.5
    scores = scores.masked_fill(m.expand_as(scores) < 0.5, -1e9)
    context = torch.softmax(scores, dim=-1) @ v
    context = context.transpose(1, 2).reshape(batch, seq, heads * head_dim)
    return F.linear(context, t64(out_w).T, t64(out_b) if out_b is not None else None).numpy()


ATTN_CASES = [
    # batch, seq, embed, heads, head_dim, mask rank, bias, rope
    (1, 1, 4, 1, 4, 2, False, False),
    (2, 3, 6, 2, 4, 2, True, False),
    (2, 5, 12, 3, 4, 3, False, True),
    (1, 17, 10, 2, 6, 4, True, True),
]


@pytest.mark.parametrize("case", ATTN_CASES)
def test_attention_block_matches_torch(case):
    batch, seq, embed, heads, head_dim, mask_rank, bias, rope = case
    width = heads * head_dim
    mask_shape = {2: (batch, seq), 3: (batch, seq, seq), 4: (batch, heads, seq, seq)}[mask_rank]
    g = Graph()
    hidden = g.input("hidden", [batch, seq, embed])
    mask = g.input("mask", mask_shape)
    qkv_w, out_w = g.param("qkv_w", [embed, 3 * width]), g.param("out_w", [width, embed])
    extra = {}
    if bias:
        extra.update(qkv_b=g.param("qkv_b", [3 * width]), out_b=g.param("out_b", [embed]))
    if rope:
        table = [seq + 2, head_dim // 2]
        extra.update(cos=g.param("cos", table), sin=g.param("sin", table))
    g.output(g.attention_block(hidden, qkv_w, out_w, mask, heads, head_dim, name="blk0.attn", **extra))
    params = {"qkv_w": rand((embed, 3 * width), 2) * 0.5, "out_w": rand((width, embed), 3),
              "qkv_b": rand((3 * width,), 4), "out_b": rand((embed,), 5)}
    params["cos"], params["sin"] = rope_tables(seq + 2, head_dim)
    params = {k: v for k, v in params.items() if k in {n.name for n in g.params()}}
    inputs = {"hidden": rand((batch, seq, embed), 1), "mask": keep_mask(mask_shape, 6)}
    got = run_both(g, inputs, params)
    want = torch_attention(inputs["hidden"], params["qkv_w"], params["out_w"], inputs["mask"], heads,
                           head_dim, params.get("qkv_b"), params.get("out_b"), params.get("cos"),
                           params.get("sin"))
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_attention_block_unfuses_to_named_primitives():
    g = Graph()
    hidden = g.input("hidden", [1, 3, 8])
    mask = g.input("mask", [1, 3])
    block = g.attention_block(hidden, g.param("qkv_w", [8, 24]), g.param("out_w", [8, 8]), mask, 2, 4,
                              qkv_b=g.param("qkv_b", [24]), out_b=g.param("out_b", [8]),
                              cos=g.param("cos", [3, 2]), sin=g.param("sin", [3, 2]), name="blk0.attn")
    g.output(block)
    flat = unfuse(g)
    kinds = {n.name: type(n.op).__name__ for n in flat.nodes}
    assert kinds["blk0.attn/qkv"] == "FusedMatMulBiasAct"
    assert kinds["blk0.attn/q_rope"] == kinds["blk0.attn/k_rope"] == "Rope"
    assert kinds["blk0.attn/attention"] == "Attention"
    assert kinds["blk0.attn"] == "FusedMatMulBiasAct"
    assert flat["blk0.attn/attention"].op.mask_kind is ops.MaskKind.CUSTOM


@pytest.mark.parametrize("build, message", [
    (lambda g, h, m: g.attention_block(h, g.param("w", [8, 20]), g.param("o", [8, 8]), m, 2, 4, name="a"),
     "qkv_w must be [8, 24], got f32[8, 20]"),
    (lambda g, h, m: g.attention_block(h, g.param("w", [8, 24]), g.param("o", [8, 8]), g.input("m2", [1, 4]),
                                       2, 4, name="a"), "mask f32[1, 4] must be [B, S], [B, S, S] or"),
    (lambda g, h, m: g.attention_block(h, g.param("w", [8, 24]), g.param("o", [8, 8]), m, 2, 4,
                                       cos=g.param("c", [2, 2]), sin=g.param("s", [2, 2]), name="a"),
     "cos/sin have 2 positions, the sequence has 3"),
])
def test_attention_block_rejects_bad_shapes(build, message):
    g = Graph()
    hidden, mask = g.input("hidden", [1, 3, 8]), g.input("mask", [1, 3])
    with pytest.raises(GraphError, match=r"^a \(FusedAttentionBlock\): ") as info:
        build(g, hidden, mask)
    assert message in str(info.value)


# -- FusedTransformerLayer ----------------------------------------------------------------------
def layer_graph(batch, seq, embed, heads, inner, has_bias, activation="gelu"):
    g = Graph("bert")
    head_dim = embed // heads
    shapes = {"qkv_w": [embed, 3 * embed], "qkv_b": [3 * embed], "out_w": [embed, embed], "out_b": [embed],
              "ln1_g": [embed], "ln1_b": [embed], "fc1_w": [embed, inner], "fc1_b": [inner],
              "fc2_w": [inner, embed], "fc2_b": [embed], "ln2_g": [embed], "ln2_b": [embed]}
    names = LAYER_INPUTS_BIAS if has_bias else LAYER_INPUTS_NO_BIAS
    weights = {"hidden": g.input("hidden", [batch, seq, embed]), "mask": g.input("mask", [batch, seq])}
    weights.update({n: g.param(n, shapes[n]) for n in names if n in shapes})
    g.output(g.transformer_layer(weights, heads, head_dim, eps1=1e-12, eps2=1e-6, activation=activation,
                                 name="blk0"))
    rng = np.random.default_rng(7)
    params = {n: (rng.standard_normal(shapes[n]) * 0.3).astype(np.float32) for n in names if n in shapes}
    return g, params


def test_transformer_layer_matches_transformers_bert_layer():
    from transformers.models.bert.modeling_bert import BertConfig, BertLayer

    batch, seq, embed, heads, inner = 2, 5, 12, 3, 17
    g, params = layer_graph(batch, seq, embed, heads, inner, has_bias=True)
    inputs = {"hidden": rand((batch, seq, embed), 1), "mask": keep_mask((batch, seq), 2)}
    got = run_both(g, inputs, params)

    config = BertConfig(hidden_size=embed, num_attention_heads=heads, intermediate_size=inner,
                        hidden_act="gelu", layer_norm_eps=1e-12)
    config._attn_implementation = "eager"
    layer = BertLayer(config).eval().double()
    layer.output.LayerNorm.eps = 1e-6  # eps2 differs from eps1 on purpose
    q, k, v = (t64(params["qkv_w"][:, i * embed:(i + 1) * embed]).T for i in range(3))
    qb, kb, vb = t64(params["qkv_b"]).chunk(3)
    state = {"attention.self.query.weight": q, "attention.self.query.bias": qb,
             "attention.self.key.weight": k, "attention.self.key.bias": kb,
             "attention.self.value.weight": v, "attention.self.value.bias": vb,
             "attention.output.dense.weight": t64(params["out_w"]).T,
             "attention.output.dense.bias": t64(params["out_b"]),
             "attention.output.LayerNorm.weight": t64(params["ln1_g"]),
             "attention.output.LayerNorm.bias": t64(params["ln1_b"]),
             "intermediate.dense.weight": t64(params["fc1_w"]).T,
             "intermediate.dense.bias": t64(params["fc1_b"]),
             "output.dense.weight": t64(params["fc2_w"]).T, "output.dense.bias": t64(params["fc2_b"]),
             "output.LayerNorm.weight": t64(params["ln2_g"]), "output.LayerNorm.bias": t64(params["ln2_b"])}
    layer.load_state_dict(state)
    additive = torch.where(t64(inputs["mask"]) < 0.5, -1e9, 0.0)[:, None, None, :].to(torch.float64)
    with torch.no_grad():
        want = layer(t64(inputs["hidden"]), attention_mask=additive)
    want = want[0] if isinstance(want, tuple) else want
    np.testing.assert_allclose(got, want.numpy(), rtol=RTOL, atol=ATOL)


def test_transformer_layer_without_bias_keeps_layer_norm_betas():
    batch, seq, embed, heads, inner = 1, 3, 8, 2, 5
    g, params = layer_graph(batch, seq, embed, heads, inner, has_bias=False, activation="relu")
    assert len(g["blk0"].inputs) == 10
    inputs = {"hidden": rand((batch, seq, embed), 3), "mask": keep_mask((batch, seq), 4)}
    got = run_both(g, inputs, params)
    x = t64(inputs["hidden"])
    attn = torch_attention(inputs["hidden"], params["qkv_w"], params["out_w"], inputs["mask"], heads,
                           embed // heads)
    h1 = F.layer_norm(x + torch.from_numpy(attn), (embed,), t64(params["ln1_g"]), t64(params["ln1_b"]), 1e-12)
    ffn = F.relu(h1 @ t64(params["fc1_w"])) @ t64(params["fc2_w"])
    want = F.layer_norm(h1 + ffn, (embed,), t64(params["ln2_g"]), t64(params["ln2_b"]), 1e-6)
    np.testing.assert_allclose(got, want.numpy(), rtol=RTOL, atol=ATOL)


def test_transformer_layer_rejects_wrong_intermediate_weight():
    g = Graph()
    op = ops.FusedTransformerLayer(2, 4, intermediate_size=6, has_bias=False)
    shapes = {"hidden": [1, 3, 8], "qkv_w": [8, 24], "out_w": [8, 8], "ln1_g": [8], "ln1_b": [8],
              "fc1_w": [8, 6], "fc2_w": [5, 8], "ln2_g": [8], "ln2_b": [8], "mask": [1, 3]}
    nodes = [g.input(n, shapes[n]) for n in LAYER_INPUTS_NO_BIAS]
    with pytest.raises(GraphError, match=r"^layer \(FusedTransformerLayer\): fc2_w must be \[6, 8\], got"):
        g.apply(op, nodes, "layer")
    with pytest.raises(GraphError, match=r"^layer2 \(FusedTransformerLayer\): takes 14 inputs"):
        g.apply(ops.FusedTransformerLayer(2, 4, 6), nodes, "layer2")
