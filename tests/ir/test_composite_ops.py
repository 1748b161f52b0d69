"""Composite and control-flow ops: shape rules, the direct numpy reference against independent
torch/transformers oracles, the unfused graph against the reference, JSON, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from rlxpy.errors import GraphError
from rlxpy.ir import DType, Graph, ops
from rlxpy.ir.ops.attention import LAYER_INPUTS_BIAS, LAYER_INPUTS_NO_BIAS
from rlxpy.ir.passes import check_unfused, unfuse
from rlxpy.ir.reference import run_reference

RTOL = 1e-5
ATOL = 1e-5


def rand(shape, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def run_both(g: Graph, inputs: dict, params: dict | None = None) -> np.ndarray:
    """The graph's single output by the direct reference; asserts the unfused graph agrees."""
    (name,) = [g.nodes[o].name for o in g.outputs]
    direct = run_reference(g, inputs, params)[name]
    flat = unfuse(g)
    check_unfused(flat)
    unfused = run_reference(flat, inputs, params)[name]
    np.testing.assert_allclose(unfused, direct, rtol=RTOL, atol=ATOL)
    return direct


def t64(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.asarray(x, dtype=np.float64))


# -- DotGeneral ---------------------------------------------------------------------------------
def tensordot_oracle(lhs, rhs, lc, rc, lb, rb) -> np.ndarray:
    """Independent path: torch.tensordot per batch element after moving batch axes to the front."""
    a, b = t64(lhs), t64(rhs)
    if not lb:
        return torch.tensordot(a, b, dims=(list(lc), list(rc))).numpy()
    a_rest = [d for d in range(a.ndim) if d not in lb]
    b_rest = [d for d in range(b.ndim) if d not in rb]
    a = a.permute(*lb, *a_rest)
    b = b.permute(*rb, *b_rest)
    batch_shape = a.shape[: len(lb)]
    a = a.reshape(-1, *a.shape[len(lb):])
    b = b.reshape(-1, *b.shape[len(rb):])
    a_con = [a_rest.index(d) for d in lc]
    b_con = [b_rest.index(d) for d in rc]
    parts = [torch.tensordot(a[i], b[i], dims=(a_con, b_con)) for i in range(a.shape[0])]
    out = torch.stack(parts)
    return out.reshape(*batch_shape, *out.shape[1:]).numpy()


DOT_CASES = [
    # lhs shape, rhs shape, lhs_contracting, rhs_contracting, lhs_batch, rhs_batch
    ((3, 17), (17, 5), (1,), (0,), (), ()),  # plain matmul
    ((1, 1), (1, 1), (1,), (0,), (), ()),
    ((17, 3), (5, 17), (0,), (1,), (), ()),  # both transposed
    ((2, 3, 4), (4, 5, 3), (2, 1), (0, 2), (), ()),  # two contracting axes, out of order
    ((3,), (5,), (), (), (), ()),  # outer product
    ((7,), (7,), (0,), (0,), (), ()),  # inner product -> scalar
    ((2, 3, 17), (2, 17, 5), (2,), (1,), (0,), (0,)),  # batched matmul
    ((3, 2, 4, 5), (4, 6, 2), (2,), (0,), (1,), (2,)),  # batch axis in the middle, rhs batch last
    ((2, 3, 4, 5), (3, 2, 5, 1), (3,), (2,), (0, 1), (1, 0)),  # two batch axes, swapped
    ((1, 255), (255, 3), (1,), (0,), (), ()),
]


@pytest.mark.parametrize("case", DOT_CASES, ids=[str(c[:2]) for c in DOT_CASES])
def test_dot_general_matches_tensordot(case):
    lhs_shape, rhs_shape, lc, rc, lb, rb = case
    g = Graph()
    a = g.input("a", lhs_shape)
    b = g.input("b", rhs_shape)
    g.output(g.dot_general(a, b, lc, rc, lb, rb, name="dg"))
    lhs, rhs = rand(lhs_shape, 1), rand(rhs_shape, 2)
    got = run_both(g, {"a": lhs, "b": rhs})
    want = tensordot_oracle(lhs, rhs, lc, rc, lb, rb)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_dot_general_propagates_nan_and_inf():
    g = Graph()
    a = g.input("a", [2, 3])
    b = g.input("b", [3, 2])
    g.output(g.dot_general(a, b, [1], [0], name="dg"))
    lhs = np.array([[np.nan, 1, 2], [1, np.inf, 0.5]], np.float32)
    rhs = np.ones((3, 2), np.float32)
    got = run_both(g, {"a": lhs, "b": rhs})
    np.testing.assert_array_equal(got, lhs.astype(np.float64) @ rhs)


@pytest.mark.parametrize("args, message", [
    (([1], [1], [], []), "contracting sizes differ: lhs axis 1 is 3, rhs axis 1 is 5"),
    (([1], [], [], []), "differ in length"),
    (([1], [0], [0], []), "lhs_batch (0,) and rhs_batch () differ in length"),
    (([1, 1], [0, 0], [], []), "must be distinct axes"),
    (([2], [0], [], []), "must be distinct axes in [0, 2)"),
    (([0], [0], [0], [1]), "must be distinct axes"),
])
def test_dot_general_rejects_bad_axes(args, message):
    g = Graph()
    a = g.input("a", [4, 3])
    b = g.input("b", [3, 5])
    with pytest.raises(GraphError, match=r"^bad_dot \(DotGeneral\): ") as info:
        g.dot_general(a, b, *args, name="bad_dot")
    assert message in str(info.value)


def test_dot_general_rejects_mixed_dtypes():
    g = Graph()
    a = g.input("a", [4, 3])
    b = g.input("b", [3, 5], DType.F16)
    with pytest.raises(GraphError, match="mm .DotGeneral.: lhs f32.4, 3. and rhs f16.3, 5. dtypes differ"):
        g.dot_general(a, b, [1], [0], name="mm")


# -- LoraMatMul ---------------------------------------------------------------------------------
@pytest.mark.parametrize("x_shape, n, r", [((1, 1), 1, 1), ((3, 17), 5, 2), ((2, 3, 17), 255, 4)])
def test_lora_matmul_matches_torch(x_shape, n, r):
    k = x_shape[-1]
    g = Graph()
    x = g.input("x", x_shape)
    w, a, b = g.param("w", [k, n]), g.param("a", [k, r]), g.param("b", [r, n])
    g.output(g.lora_matmul(x, w, a, b, scale=0.75, name="lora"))
    values = {"w": rand((k, n), 2), "a": rand((k, r), 3), "b": rand((r, n), 4)}
    xs = rand(x_shape, 1)
    got = run_both(g, {"x": xs}, values)
    # peft's LoRA forward: base(x) + lora_B(lora_A(x)) * scaling, with nn.Linear weights [out, in]
    base = F.linear(t64(xs), t64(values["w"]).T)
    lora = F.linear(F.linear(t64(xs), t64(values["a"]).T), t64(values["b"]).T) * 0.75
    np.testing.assert_allclose(got, (base + lora).numpy(), rtol=RTOL, atol=ATOL)


def test_lora_matmul_rejects_rank_mismatch():
    g = Graph()
    x = g.input("x", [3, 4])
    w, a, b = g.param("w", [4, 5]), g.param("a", [4, 2]), g.param("b", [3, 5])
    with pytest.raises(GraphError, match=r"lora \(LoraMatMul\): lora shapes disagree.*b f32\[3, 5\]"):
        g.lora_matmul(x, w, a, b, name="lora")


# -- FusedSwiGLU --------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(2,), (3, 34), (2, 3, 510)])
@pytest.mark.parametrize("gate_first", [True, False])
def test_swiglu_honours_gate_first(shape, gate_first):
    g = Graph()
    x = g.input("x", shape)
    g.output(g.swiglu(x, gate_first=gate_first, name="ffn.act"))
    xs = rand(shape, 5)
    got = run_both(g, {"x": xs})
    first, second = t64(xs).chunk(2, dim=-1)
    gate, up = (first, second) if gate_first else (second, first)
    np.testing.assert_allclose(got, (up * F.silu(gate)).numpy(), rtol=RTOL, atol=ATOL)


def test_swiglu_propagates_nan_and_inf_like_torch():
    g = Graph()
    x = g.input("x", [1, 8])
    g.output(g.swiglu(x, name="act"))
    xs = np.array([[np.nan, 1.0, np.inf, -np.inf, 2.0, np.nan, 3.0, 0.5]], np.float32)
    got = run_both(g, {"x": xs})
    gate, up = torch.from_numpy(xs).chunk(2, dim=-1)
    np.testing.assert_array_equal(got, (up * F.silu(gate)).numpy())


def test_swiglu_cast_to_f16():
    g = Graph()
    x = g.input("x", [3, 6])
    g.output(g.swiglu(x, cast_to="f16", name="act"))
    assert g["act"].dtype is DType.F16
    xs = rand((3, 6), 6)
    direct = run_reference(g, {"x": xs})["act"]
    unfused = run_reference(unfuse(g), {"x": xs})["act"]
    gate, up = torch.from_numpy(xs).chunk(2, dim=-1)
    want = (up * F.silu(gate)).to(torch.float16).numpy()
    assert direct.dtype == unfused.dtype == np.float16
    np.testing.assert_allclose(direct.astype(np.float32), want.astype(np.float32), rtol=1e-3)
    np.testing.assert_allclose(unfused.astype(np.float32), want.astype(np.float32), rtol=1e-3)


def test_swiglu_rejects_odd_last_dim():
    g = Graph()
    x = g.input("x", [2, 7])
    with pytest.raises(GraphError, match=r"^act \(FusedSwiGLU\): swiglu's last dim must be static and even"):
        g.swiglu(x, name="act")


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


# -- If -----------------------------------------------------------------------------------------
def branch(name: str, fn, shapes) -> Graph:
    sub = Graph(name)
    args = [sub.input(f"in{i}", s) for i, s in enumerate(shapes)]
    sub.output(fn(sub, *args))
    return sub


def if_graph(pred_shape=(1,)) -> Graph:
    then = branch("then", lambda s, x, w: s.mul(s.exp(x), w), [[3, 4], [4]])
    other = branch("else", lambda s, x, w: s.sub(x, w), [[3, 4], [4]])
    g = Graph()
    pred, x, w = g.input("pred", pred_shape), g.input("x", [3, 4]), g.param("w", [4])
    g.output(g.if_then_else(pred, then, other, [x, w], name="choose"))
    return g


@pytest.mark.parametrize("pred", [1.0, 0.0, np.nan, -np.inf])
def test_if_picks_a_branch_like_python(pred):
    g = if_graph()
    x, w = rand((3, 4), 1), rand((4,), 2)
    got = run_both(g, {"pred": [pred], "x": x}, {"w": w})
    taken = bool(torch.tensor(pred) != 0)  # truthiness as Where: NaN and -inf are true
    want = torch.exp(t64(x)) * t64(w) if taken else t64(x) - t64(w)
    np.testing.assert_allclose(got, want.numpy(), rtol=RTOL, atol=ATOL)


def test_if_takes_a_one_element_pred_of_higher_rank():
    then = branch("then", lambda s, x: s.exp(x), [[]])
    other = branch("else", lambda s, x: s.activation(x, "neg"), [[]])
    g = Graph()
    pred, x = g.input("pred", [1, 1]), g.input("x", [])
    g.output(g.if_then_else(pred, then, other, [x], name="pick"))
    assert g["pick"].shape == ()
    for pv, want in ((1.0, np.exp(np.float32(0.5))), (0.0, -0.5)):
        np.testing.assert_allclose(run_both(g, {"pred": [[pv]], "x": 0.5}), want, rtol=RTOL)


def test_if_with_elementwise_pred_is_torch_where():
    g = if_graph(pred_shape=(3, 1))
    x, w = rand((3, 4), 3), rand((4,), 4)
    pred = np.array([[1.0], [0.0], [2.0]], np.float32)
    got = run_both(g, {"pred": pred, "x": x}, {"w": w})
    want = torch.where(t64(pred) != 0, torch.exp(t64(x)) * t64(w), t64(x) - t64(w))
    np.testing.assert_allclose(got, want.numpy(), rtol=RTOL, atol=ATOL)


def test_if_rejects_branch_with_two_outputs():
    then = Graph("then")
    x = then.input("x", [3])
    then.output(then.relu(x), then.exp(x))
    other = branch("else", lambda s, x: s.relu(x), [[3]])
    g = Graph()
    pred, x = g.input("pred", [1]), g.input("x", [3])
    with pytest.raises(GraphError, match=r"^pick \(If\): then_branch has 2 outputs, needs exactly 1"):
        g.if_then_else(pred, then, other, [x], name="pick")


@pytest.mark.parametrize("then_shapes, other_shapes, pred_shape, message", [
    ([[3]], [[3], [3]], [1], "else_branch has 2 Inputs, but 1 values are bound"),
    ([[4]], [[3]], [1], "then_branch Input 'in0' is f32[4], but the value bound to it is f32[3]"),
    ([[3]], [[3]], [2], "pred f32[2] must hold one element or broadcast to the branch output [3]"),
])
def test_if_rejects_mismatched_branches(then_shapes, other_shapes, pred_shape, message):
    then = branch("then", lambda s, *a: s.relu(a[0]), then_shapes)
    other = branch("else", lambda s, *a: s.relu(a[0]), other_shapes)
    g = Graph()
    pred, x = g.input("pred", pred_shape), g.input("x", [3])
    with pytest.raises(GraphError, match=r"^pick \(If\): ") as info:
        g.if_then_else(pred, then, other, [x], name="pick")
    assert message in str(info.value)


def test_if_rejects_params_inside_a_branch():
    then = Graph("then")
    x = then.input("x", [3])
    then.output(then.mul(x, then.param("w", [3])))
    other = branch("else", lambda s, x: s.relu(x), [[3]])
    g = Graph()
    pred, x = g.input("pred", [1]), g.input("x", [3])
    with pytest.raises(GraphError, match=r"pick \(If\): then_branch declares Params \['w'\]: pass the outer"):
        g.if_then_else(pred, then, other, [x], name="pick")


# -- While --------------------------------------------------------------------------------------
def counting_loop(max_iterations, limit: float = 10.0) -> Graph:
    """state (i, acc, w): while i < limit: i += 1; acc = acc * 0.5 + w (w is a captured Param)."""
    cond = Graph("cond")
    i, acc, w = cond.input("i", []), cond.input("acc", [2, 3]), cond.input("w", [3])
    cond.output(cond.compare(i, limit, "lt"))
    body = Graph("body")
    i, acc, w = body.input("i", []), body.input("acc", [2, 3]), body.input("w", [3])
    body.output(body.add(i, 1.0), body.add(body.mul(acc, 0.5), w))
    g = Graph()
    acc0 = g.input("acc0", [2, 3])
    start = g.input("start", [])
    w = g.param("w", [3])
    loop = g.while_loop([start, acc0, w], cond, body, max_iterations, name="loop")
    g.output(loop)
    return g


def python_loop(start, acc, w, limit, max_iterations):
    i = torch.tensor(start, dtype=torch.float64)
    acc, w = t64(acc), t64(w)
    for _ in range(max_iterations):
        if not i < limit:
            break
        i, acc = i + 1, acc * 0.5 + w
    return i, acc


@pytest.mark.parametrize("start, max_iterations", [(7.0, 8), (0.0, 5), (3.0, 0), (12.0, 4), (9.5, 1)])
def test_while_counts_like_a_python_loop(start, max_iterations):
    g = counting_loop(max_iterations)
    acc0, w = rand((2, 3), 1), rand((3,), 2)
    got = run_both(g, {"start": start, "acc0": acc0}, {"w": w})
    want, _ = python_loop(start, acc0, w, 10.0, max_iterations)
    np.testing.assert_allclose(got, want.numpy(), rtol=RTOL)


def test_while_second_state_value_uses_captured_param():
    """Loop state (acc, i, w): body returns two outputs, w stays a fixed capture."""
    cond = branch("cond", lambda s, acc, i, w: s.compare(i, 3.0, "lt"), [[2, 3], [], [3]])
    body = Graph("body")
    acc, i, w = body.input("acc", [2, 3]), body.input("i", []), body.input("w", [3])
    body.output(body.add(body.mul(acc, 0.5), w), body.add(i, 1.0))
    g = Graph()
    acc0, start, w = g.input("acc0", [2, 3]), g.input("start", []), g.param("w", [3])
    g.output(g.while_loop([acc0, start, w], cond, body, 10, name="loop"))
    acc0v, wv = rand((2, 3), 3), rand((3,), 4)
    got = run_both(g, {"acc0": acc0v, "start": 0.0}, {"w": wv})
    _, want = python_loop(0.0, acc0v, wv, 3.0, 10)
    np.testing.assert_allclose(got, want.numpy(), rtol=RTOL)


def test_while_rejects_missing_max_iterations():
    g = counting_loop(4)
    loop = g["loop"]
    with pytest.raises(GraphError, match=r"^loop2 \(While\): max_iterations is required"):
        g.apply(ops.While(loop.op.cond, loop.op.body), loop.inputs, "loop2")


@pytest.mark.parametrize("make, message", [
    (lambda: (branch("c", lambda s, x: s.compare(x, 1.0, "lt"), [[2]]),
              branch("b", lambda s, x: s.exp(x), [[2]])),
     "cond's output must hold one element, got bool[2]"),
    (lambda: (branch("c", lambda s, x: s.sum(x, 0), [[2]]),
              branch("b", lambda s, x: s.sum(x, 0, True), [[2]])),
     "body output 0 is f32[1], but the state value it replaces is f32[2]"),
])
def test_while_rejects_bad_cond_and_body(make, message):
    cond, body = make()
    g = Graph()
    x = g.input("x", [2])
    with pytest.raises(GraphError, match=r"^loop \(While\): ") as info:
        g.while_loop([x], cond, body, 3, name="loop")
    assert message in str(info.value)


# -- JSON ---------------------------------------------------------------------------------------
def test_json_round_trip_keeps_if_and_while():
    """A While whose body holds an If, next to a top-level If: text round trip, same values."""
    inner_then = branch("t", lambda s, x: s.mul(x, 2.0), [[3]])
    inner_else = branch("e", lambda s, x: s.sub(x, 1.0), [[3]])
    body = Graph("body")
    x = body.input("x", [3])
    body.output(body.if_then_else(body.compare(body.sum(x, 0), 0.0, "gt"), inner_then, inner_else, [x]))
    cond = branch("cond", lambda s, x: s.compare(s.sum(x, 0), 50.0, "lt"), [[3]])
    g = if_graph()
    start = g.input("start", [3])
    g.output(g.while_loop([start], cond, body, max_iterations=7, name="loop"))
    text = g.to_json()
    assert '"$graph"' in text
    again = Graph.from_json(text)
    assert str(again) == str(g)
    loop = again["loop"].op
    assert isinstance(loop, ops.While) and loop.max_iterations == 7
    assert isinstance(loop.body["if_0"].op, ops.If)
    inputs = {"pred": [0.0], "x": rand((3, 4), 1), "start": np.array([1.0, 2.0, -0.5], np.float32)}
    params = {"w": rand((4,), 2)}
    first, second = run_reference(g, inputs, params), run_reference(again, inputs, params)
    for name in first:
        np.testing.assert_array_equal(first[name], second[name])
    flat = run_reference(unfuse(again), inputs, params)
    for name in first:
        np.testing.assert_allclose(flat[name], first[name], rtol=RTOL)


def test_composite_ops_are_marked_and_registered():
    from rlxpy.ir.reference import REFERENCE, _load_families

    _load_families()
    for op_type in ops.COMPOSITE_OPS:
        assert op_type.composite and op_type in ops.ALL_OPS and op_type in REFERENCE
