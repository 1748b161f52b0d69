"""Transformer patterns on the GPU: bit-identical results with each pattern on and off, fewer steps,
and agreement with torch (an independent oracle) on odd shapes and GQA."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_close
from transformer_graphs import inputs_for, pre_norm_block

import rlxpy
from rlxpy import env
from rlxpy.ir import ops


def compiled(g: rlxpy.Graph, params: dict, **flags):
    with env.override(**flags):
        exe = rlxpy.compile(g)
    for name, value in params.items():
        exe.set_param(name, value)
    return exe


def gpu_steps(exe) -> int:
    return sum(step.kind == "gpu" for step in exe.schedule.steps)


def torch_block(params: dict, feeds: dict, heads: int, kv_heads: int, dim: int, rms: bool) -> np.ndarray:
    """The same pre-norm block in torch (sdpa with the kv heads repeated for GQA)."""
    import torch
    import torch.nn.functional as F

    t = {name: torch.from_numpy(value).double() for name, value in params.items()}
    x = torch.from_numpy(feeds["x"]).double()
    batch, seq, hidden = x.shape

    def norm(z, gamma, beta):
        if rms:
            return z * torch.rsqrt((z * z).mean(-1, keepdim=True) + 1e-5) * gamma + beta
        return F.layer_norm(z, (hidden,), gamma, beta, 1e-5)

    qkv = norm(x, t["g1"], t["b1"]) @ t["wqkv"] + t["bqkv"]
    q, k, v = qkv.split([heads * dim, kv_heads * dim, kv_heads * dim], -1)
    q = q.reshape(batch, seq, heads, dim).transpose(1, 2)
    k, v = (z.reshape(batch, seq, kv_heads, dim).transpose(1, 2).repeat_interleave(heads // kv_heads, 1)
            for z in (k, v))
    keep = torch.from_numpy(feeds["keep"]).bool()[:, None, None, :]
    a = F.scaled_dot_product_attention(q, k, v, attn_mask=keep).transpose(1, 2).reshape(batch, seq, -1)
    s1 = x + a @ t["wo"] + t["bo"]
    f = F.gelu(norm(s1, t["g2"], t["b2"]) @ t["w1"] + t["c1"]) @ t["w2"] + t["c2"]
    return (s1 + f).numpy()


@pytest.mark.parametrize("rms", [False, True])
@pytest.mark.parametrize("shape", [(2, 17, 6, 2, 5), (1, 3, 4, 4, 8), (3, 255, 3, 1, 16)])
def test_pre_norm_block_patterns_are_exact_and_match_torch(device, rms, shape):
    batch, seq, heads, kv_heads, dim = shape
    g, params = pre_norm_block(batch, seq, heads, kv_heads, dim, rms=rms, mask=True)
    feeds = inputs_for(g)
    fused = compiled(g, params)
    plain = compiled(g, params, RLX_WGPU_NO_PATTERNS=1)
    got, want = fused.run(feeds)["resid2"], plain.run(feeds)["resid2"]
    np.testing.assert_array_equal(got, want)
    oracle = torch_block(params, feeds, heads, kv_heads, dim, rms)
    assert_close(got, oracle, 1e-4, 1e-4 * np.abs(oracle).max(), "pre-norm block vs torch")
    # packed attention skips the 3 narrow copies, the tee the add (the decode pattern finds no GEMV)
    assert gpu_steps(fused) == gpu_steps(plain) - 4
    kinds = {type(n.op) for n in fused.schedule.graph.nodes}
    assert {ops.PackedAttention, ops.ResidualNormTee} <= kinds and ops.Attention not in kinds


@pytest.mark.parametrize("skip", ["packed_attention", "split_qkv,packed_attention", "residual_norm",
                                  "split_qkv,packed_attention,residual_norm"])
def test_each_pattern_off_gives_identical_bits(device, skip):
    g, params = pre_norm_block(2, 19, 6, 3, 7, mask=True)
    feeds = inputs_for(g)
    want = compiled(g, params, RLX_WGPU_NO_PATTERNS=1).run(feeds)["resid2"]
    exe = compiled(g, params, RLX_WGPU_SKIP_PATTERNS=skip)
    np.testing.assert_array_equal(exe.run(feeds)["resid2"], want)
    kinds = {type(n.op) for n in exe.schedule.graph.nodes}
    assert (ops.SplitMatMul in kinds) == (skip == "packed_attention")
    assert (ops.ResidualNormTee in kinds) == ("residual_norm" not in skip)


def test_nan_and_inf_propagate_the_same_with_and_without_patterns(device):
    g, params = pre_norm_block(2, 9, 4, 2, 8, mask=True)
    feeds = inputs_for(g)
    feeds["x"][0, 2, 5] = np.nan
    feeds["x"][1, 4, 0] = np.inf
    got = compiled(g, params).run(feeds)["resid2"]
    want = compiled(g, params, RLX_WGPU_NO_PATTERNS=1).run(feeds)["resid2"]
    np.testing.assert_array_equal(got, want)  # NaN positions equal too
    oracle = torch_block(params, feeds, 4, 2, 8, rms=False)
    assert np.isnan(got).any()
    np.testing.assert_array_equal(np.isfinite(got), np.isfinite(oracle))


def test_no_packed_bshd_attn_flag_hands_the_narrows_to_split_qkv(device):
    g, params = pre_norm_block(2, 9, 4, 2, 8, mask=True)
    feeds = inputs_for(g)
    exe = compiled(g, params, RLX_WGPU_NO_PACKED_BSHD_ATTN=1)
    kinds = {type(n.op) for n in exe.schedule.graph.nodes}
    assert ops.PackedAttention not in kinds and ops.SplitMatMul in kinds
    np.testing.assert_array_equal(exe.run(feeds)["resid2"],
                                  compiled(g, params, RLX_WGPU_NO_PATTERNS=1).run(feeds)["resid2"])


@pytest.mark.parametrize("rows,widths,act",
                         [(2, (3, 5, 7), None), (17, (64, 1), "gelu"), (255, (33, 33, 33), "relu")])
def test_split_matmul_matches_torch_on_odd_widths(device, rows, widths, act):
    import torch

    k = 19
    g = rlxpy.Graph("split")
    x = g.input("x", [rows, k])
    y = g.linear(x, g.param("w", [k, sum(widths)]), g.param("b", [sum(widths)]), act, name="y")
    starts = np.cumsum((0, *widths[:-1]))
    g.output(*(g.narrow(y, 1, int(s), w, name=f"part{i}") for i, (s, w) in enumerate(zip(starts, widths))))
    rng = np.random.default_rng(rows)
    params = {"w": rng.standard_normal((k, sum(widths))).astype(np.float32),
              "b": rng.standard_normal(sum(widths)).astype(np.float32)}
    feeds = {"x": rng.standard_normal((rows, k)).astype(np.float32)}
    exe = compiled(g, params)
    assert ops.SplitMatMul in {type(n.op) for n in exe.schedule.graph.nodes}
    got = exe.run(feeds)
    plain = compiled(g, params, RLX_WGPU_NO_PATTERNS=1).run(feeds)
    full = torch.from_numpy(feeds["x"]).double() @ torch.from_numpy(params["w"]).double() + torch.from_numpy(
        params["b"]).double()
    if act:
        full = {"gelu": torch.nn.functional.gelu, "relu": torch.relu}[act](full)
    for i, (s, w) in enumerate(zip(starts, widths)):
        np.testing.assert_array_equal(got[f"part{i}"], plain[f"part{i}"])
        assert_close(got[f"part{i}"], full[:, s:s + w].numpy(), 1e-4, 1e-4, f"part {i}")
