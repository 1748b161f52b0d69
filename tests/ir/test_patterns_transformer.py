"""Transformer patterns on the IR: where they fire, where they must not, and that the numpy
reference gives the same answer with and without them."""

from __future__ import annotations

import numpy as np
import pytest
from transformer_graphs import inputs_for, pre_norm_block

import rlxpy
from rlxpy.errors import GraphError
from rlxpy.ir import ops
from rlxpy.ir.ops.base import MaskKind
from rlxpy.ir.passes.patterns_transformer import fuse_transformer
from rlxpy.ir.reference import run_reference


def kinds(g: rlxpy.Graph) -> list[str]:
    return [type(n.op).__name__ for n in g.nodes]


def test_pre_norm_block_gets_packed_attention_and_tee():
    g, _ = pre_norm_block()
    fused = fuse_transformer(g)
    names = kinds(fused)
    assert names.count("PackedAttention") == 1 and names.count("Attention") == 0
    assert names.count("ResidualNormTee") == 1, "resid1 feeds ln2 and resid2: a tee"
    assert names.count("SplitMatMul") == 0, "packed attention took the narrows first"
    # the narrows and their reshapes are gone; names of kept nodes and outputs are unchanged
    assert not {"q", "k", "v", "q4", "k4", "v4"} & {n.name for n in fused.nodes}
    assert fused["attn"].shape == g["attn"].shape and fused["resid1"].shape == g["resid1"].shape
    assert [fused.nodes[i].name for i in fused.outputs] == ["resid2"]


def test_split_qkv_takes_the_narrows_when_packed_attention_is_off():
    g, _ = pre_norm_block()
    fused = fuse_transformer(g, skip={"packed_attention"})
    split = [n for n in fused.nodes if isinstance(n.op, ops.SplitMatMul)]
    assert len(split) == 1 and split[0].op.widths == (30, 10, 10) and split[0].op.has_bias
    # q/k/v are now a contiguous Narrow (axis 0) + Reshape of the blocked result: views
    for name in ("q", "k", "v"):
        node = fused[name]
        part = fused.nodes[node.inputs[0]]
        assert isinstance(node.op, ops.Reshape) and isinstance(part.op, ops.Narrow) and part.op.axis == 0
        assert part.inputs[0] == split[0].id and node.shape == g[name].shape


def test_split_qkv_with_rope_in_between():
    g, _ = pre_norm_block(rope=True, heads=3, kv_heads=3, dim=6)
    fused = fuse_transformer(g)
    names = kinds(fused)
    assert names.count("SplitMatMul") == 1 and names.count("PackedAttention") == 0


@pytest.mark.parametrize("rms", [False, True])
@pytest.mark.parametrize("skip", [set(), {"packed_attention"}, {"split_qkv", "packed_attention"},
                                  {"residual_norm"}])
def test_reference_agrees_with_and_without_patterns(rms, skip):
    g, params = pre_norm_block(rms=rms, mask=True)
    feeds = inputs_for(g)
    want = run_reference(g, feeds, params)["resid2"]
    got = run_reference(fuse_transformer(g, skip=skip), feeds, params)["resid2"]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_split_qkv_needs_an_exact_tiling():
    g = rlxpy.Graph("gap")
    x = g.input("x", [4, 8])
    w = g.param("w", [8, 12])
    y = g.matmul(x, w, name="y")
    g.output(g.narrow(y, 1, 0, 4, name="a"), g.narrow(y, 1, 6, 6, name="b"))  # columns 4:6 unused
    assert "SplitMatMul" not in kinds(fuse_transformer(g))

    g = rlxpy.Graph("overlap")
    x = g.input("x", [4, 8])
    y = g.matmul(x, g.param("w", [8, 12]), name="y")
    g.output(g.narrow(y, 1, 0, 8, name="a"), g.narrow(y, 1, 4, 8, name="b"))
    assert "SplitMatMul" not in kinds(fuse_transformer(g))

    g = rlxpy.Graph("output")  # the matmul itself is read back: its layout must stay row-major
    x = g.input("x", [4, 8])
    y = g.matmul(x, g.param("w", [8, 12]), name="y")
    g.output(y, g.narrow(y, 1, 0, 6, name="a"), g.narrow(y, 1, 6, 6, name="b"))
    assert "SplitMatMul" not in kinds(fuse_transformer(g))

    g = rlxpy.Graph("tiled")
    x = g.input("x", [4, 8])
    y = g.matmul(x, g.param("w", [8, 12]), name="y")
    g.output(g.narrow(y, 1, 0, 6, name="a"), g.narrow(y, 1, 6, 6, name="b"), g.narrow(y, 1, 0, 6, name="a2"))
    fused = fuse_transformer(g)
    assert kinds(fused).count("SplitMatMul") == 1
    feeds, params = {"x": np.arange(32, dtype=np.float32).reshape(4, 8)}, {
        "w": np.linspace(-1, 1, 96, dtype=np.float32).reshape(8, 12)}
    want, got = run_reference(g, feeds, params), run_reference(fused, feeds, params)
    for name in ("a", "b", "a2"):
        np.testing.assert_array_equal(got[name], want[name])


def test_tee_hazard_reader_before_the_norm():
    """A reader of the sum that runs before the norm, with the norm's weights made after the sum:
    the tee can be emitted neither at the add (no weights yet) nor at the norm (too late)."""
    g = rlxpy.Graph("hazard")
    x, r = g.input("x", [3, 8]), g.input("r", [3, 8])
    s = g.add(x, r, name="s")
    early = g.mul(s, s, name="early")
    y = g.layer_norm(s, g.param("gamma", [8]), g.param("beta", [8]), name="y")
    g.output(early, y)
    assert "ResidualNormTee" not in kinds(fuse_transformer(g))

    g = rlxpy.Graph("weights_first")  # same, but the weights exist before the add: tee at the add
    x, r = g.input("x", [3, 8]), g.input("r", [3, 8])
    gamma, beta = g.param("gamma", [8]), g.param("beta", [8])
    s = g.add(x, r, name="s")
    early = g.mul(s, s, name="early")
    g.output(early, g.layer_norm(s, gamma, beta, name="y"))
    fused = fuse_transformer(g)
    assert "ResidualNormTee" in kinds(fused)
    rng = np.random.default_rng(3)
    feeds = {name: rng.standard_normal((3, 8)).astype(np.float32) for name in ("x", "r")}
    params = {name: rng.standard_normal(8).astype(np.float32) for name in ("gamma", "beta")}
    want, got = run_reference(g, feeds, params), run_reference(fused, feeds, params)
    for name in ("early", "y"):
        np.testing.assert_allclose(got[name], want[name], rtol=1e-6, atol=1e-6)


def test_sum_read_only_by_the_norm_uses_the_catalogue_fused_op():
    g = rlxpy.Graph("post_norm")
    x, r = g.input("x", [3, 8]), g.input("r", [3, 8])
    g.output(g.layer_norm(g.add(x, r, name="s"), g.param("gamma", [8]), g.param("beta", [8]), name="y"))
    assert kinds(fuse_transformer(g))[-1] == "FusedResidualLN"
    g = rlxpy.Graph("broadcast")  # a broadcast add is not a residual
    x, r = g.input("x", [3, 8]), g.input("r", [1, 8])
    g.output(g.rms_norm(g.add(x, r, name="s"), g.param("gamma", [8]), name="y"))
    assert "ResidualNormTee" not in kinds(fuse_transformer(g)) and "Binary" in kinds(fuse_transformer(g))


def test_packed_attention_needs_one_parent_and_token_major_slices():
    g = rlxpy.Graph("two_parents")
    a, b = g.input("a", [2, 9, 16]), g.input("b", [2, 9, 16])
    q = g.narrow(a, 2, 0, 8, name="q")
    k = g.narrow(b, 2, 0, 8, name="k")
    v = g.narrow(a, 2, 8, 8, name="v")
    g.output(g.attention(q, k, v, 2, 4, name="attn"))
    assert "PackedAttention" not in kinds(fuse_transformer(g))

    g = rlxpy.Graph("head_major")  # [B, H, S, D] slices are not token-major rows of the parent
    p = g.input("p", [2, 3, 4, 12])
    q, k, v = (g.narrow(p, 3, i * 4, 4, name=n) for i, n in enumerate("qkv"))
    g.output(g.attention(q, k, v, 3, 4, name="attn"))
    assert "PackedAttention" not in kinds(fuse_transformer(g))


def test_packed_attention_from_a_five_dim_parent():
    """[B, S, 3, H, D] sliced on axis 2 (the catalogue's packed BSHD form)."""
    g = rlxpy.Graph("five")
    p = g.input("p", [2, 7, 3, 4, 6])
    q, k, v = (g.reshape(g.narrow(p, 2, i, 1, name=f"{n}5"), [2, 7, 4, 6], name=n)
               for i, n in enumerate("qkv"))
    g.output(g.attention(q, k, v, 4, 6, mask_kind=MaskKind.CAUSAL, name="attn"))
    fused = fuse_transformer(g)
    packed = [n for n in fused.nodes if isinstance(n.op, ops.PackedAttention)]
    assert len(packed) == 1 and (packed[0].op.row, packed[0].op.k_col, packed[0].op.v_col) == (72, 24, 48)
    feeds = {"p": np.random.default_rng(5).standard_normal((2, 7, 3, 4, 6)).astype(np.float32)}
    np.testing.assert_allclose(run_reference(fused, feeds)["attn"], run_reference(g, feeds)["attn"],
                               rtol=1e-6, atol=1e-6)


def test_unknown_pattern_name_is_an_error():
    g, _ = pre_norm_block()
    with pytest.raises(GraphError, match="unknown patterns"):
        fuse_transformer(g, skip={"packd_attention"})


def test_fused_ops_refuse_bad_shapes_naming_the_node():
    g = rlxpy.Graph("bad")
    x, w = g.input("x", [4, 8]), g.param("w", [8, 12])
    with pytest.raises(GraphError, match=r"split \(SplitMatMul\): widths \(5, 5\) must .* N = 12"):
        g.apply(ops.SplitMatMul((5, 5)), [x, w], "split")
    with pytest.raises(GraphError, match=r"tee \(ResidualNormTee\): x .* and residual .* differ"):
        g.apply(ops.ResidualNormTee(), [x, g.input("r", [4, 7]), g.param("gamma", [8])], "tee")
    packed = ops.PackedAttention(2, 4, batch=2, seq=3, row=24, q_col=0, k_col=8, v_col=20)
    with pytest.raises(GraphError, match=r"att \(PackedAttention\): v columns 20:28 exceed the row of 24"):
        g.apply(packed, [g.input("p", [2, 3, 24])], "att")
    with pytest.raises(GraphError, match=r"att2 \(PackedAttention\): parent .* is not 2 x 3 rows of 24"):
        g.apply(ops.PackedAttention(2, 4, batch=2, seq=3, row=24), [g.input("p2", [2, 3, 25])], "att2")
