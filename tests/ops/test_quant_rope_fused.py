"""The QKV GEMV with RoPE + KV-cache append folded into its epilogue (FusedGgufMatMul, head_dim > 0):
against the unfused graph on the GPU (RLX_WGPU_NO_PATTERNS), its numpy reference, and torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import assert_close, rand
from test_kv import rope_torch
from test_quant_gguf import gguf_values, make_weights

import rlxpy
from rlxpy import env
from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.passes.patterns import fuse_gguf_decode
from rlxpy.ir.reference import run_reference
from rlxpy.wgpu_backend.lowering.quant_gguf import gemv_plan, rope_plan


def attention_input(qtype: str, rows: int, hidden: int, heads: int, kv_heads: int, head_dim: int,
                    capacity: int, interleaved: bool, n_rot: int = 0):
    """rms_norm -> fused QKV GEMV -> RopeKvAppend, the caches read back after the append."""
    qw, kw = heads * head_dim, kv_heads * head_dim
    rot = n_rot or head_dim
    angles = np.arange(capacity + 8)[:, None]  # positions past the cache still have table rows
    angles = angles * (1.0 / 100 ** (np.arange(0, rot, 2) / rot))[None]
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    params = {"gamma": np.random.default_rng(9).uniform(0.5, 1.5, hidden).astype(np.float32),
              "wqkv": make_weights(qtype, qw + 2 * kw, hidden, 1),
              "kc": rand((capacity, kw), 2), "vc": rand((capacity, kw), 3)}
    g = rlxpy.Graph("qkv_rope")
    x = g.input("x", [rows, hidden])
    pos = g.input("pos", [1], "i32")
    kc, vc = g.param("kc", [capacity, kw]), g.param("vc", [capacity, kw])
    w = g.param("wqkv", list(params["wqkv"].shape), DType.U8)
    h = g.rms_norm(x, g.param("gamma", [hidden]), eps=1e-5, name="norm")
    qkv = g.dequant_matmul_gguf(h, w, qtype, qw + 2 * kw, hidden, name="qkv")
    q = g.rope_kv_append(qkv, kc, vc, g.constant(cos), g.constant(sin), pos, head_dim, qw, kw, n_rot=n_rot,
                         interleaved=interleaved, name="q")
    g.output(q, g.add(kc, 0.0, name="k_all"), g.add(vc, 0.0, name="v_all"))  # after the append
    return g, params, (cos, sin)


def torch_oracle(x, params, tables, qtype, heads, kv_heads, head_dim, pos, interleaved, n_rot=0):
    """q and the updated caches from torch: RMSNorm, the dequantised GEMV, rotary embedding."""
    qw, kw = heads * head_dim, kv_heads * head_dim
    rows, hidden = x.shape
    t = torch.from_numpy(x).double()
    weight = torch.from_numpy(gguf_values(params["wqkv"], qtype).astype(np.float64)).reshape(-1, hidden)
    h = t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-5) * torch.from_numpy(params["gamma"]).double()
    qkv = (h @ weight.T).float().numpy()
    rot = n_rot or head_dim

    def rotate(block: np.ndarray) -> np.ndarray:
        heads_of = block.reshape(rows, -1, head_dim).copy()
        part = np.ascontiguousarray(heads_of[..., :rot]).reshape(rows, -1)
        heads_of[..., :rot] = rope_torch(part, *tables, pos, rot, interleaved).reshape(rows, -1, rot)
        return heads_of.reshape(rows, -1)

    capacity = params["kc"].shape[0]
    fit = max(0, min(rows, capacity - pos))
    k_all, v_all = params["kc"].copy(), params["vc"].copy()
    k_all[pos: pos + fit] = rotate(qkv[:, qw: qw + kw])[:fit]
    v_all[pos: pos + fit] = qkv[:fit, qw + kw:]
    return rotate(qkv[:, :qw]), k_all, v_all


def compiled(g, params):
    exe = rlxpy.compile(g)
    for name, value in params.items():
        exe.set_param_bytes(name, value) if value.dtype == np.uint8 else exe.set_param(name, value)
    return exe


CASES = [  # qtype, rows, hidden, heads, kv_heads, head_dim, capacity, pos, interleaved, n_rot
    ("Q4_1", 1, 576, 9, 3, 64, 32, 13, True, 0),  # SmolLM2's attention geometry
    ("Q4_1", 1, 576, 9, 3, 64, 32, 7, False, 0),
    ("Q8_0", 3, 64, 4, 2, 8, 16, 5, True, 0),
    ("Q8_0", 3, 64, 4, 2, 8, 16, 5, False, 4),  # partial rotation
    ("F16", 2, 75, 3, 1, 6, 9, 8, False, 0),  # the second row lands past the cache: dropped
    ("Q4_K", 1, 256, 2, 2, 10, 40, 39, True, 6),
    ("Q5_0", 4, 96, 3, 1, 5, 12, 2, True, 4),  # odd head_dim: interleaved pairs need whole heads
]


@pytest.mark.parametrize(("qtype", "rows", "hidden", "heads", "kv_heads", "head_dim", "capacity", "pos",
                          "interleaved", "n_rot"), CASES)
def test_fused_qkv_rope_append_matches_unfused_graph_reference_and_torch(
        device, qtype, rows, hidden, heads, kv_heads, head_dim, capacity, pos, interleaved, n_rot,
        gemv_kernel):
    g, params, tables = attention_input(qtype, rows, hidden, heads, kv_heads, head_dim, capacity,
                                        interleaved, n_rot)
    x = np.random.default_rng(4).standard_normal((rows, hidden)).astype(np.float32)
    inputs = {"x": x, "pos": np.array([pos], np.int32)}
    exe = compiled(g, params)
    # the CPU variant pairs rows inside whole heads: an odd head_dim keeps the cooperative kernel
    expected = gemv_kernel if head_dim % 2 == 0 else "quant_gguf_gemv"
    assert [s.kernel for s in exe.schedule.steps if s.node in ("q", "qkv", "norm")] == [expected]
    source = next(s.source for s in exe.schedule.steps if s.node == "q")
    assert "const ROPE: bool = true" in source and "const NORM: bool = true" in source
    got = exe.run(inputs)
    with env.override(RLX_WGPU_NO_PATTERNS=1):
        plain = compiled(g, params)
    assert "rope_kv_append" in [s.kernel for s in plain.schedule.steps]
    unfused = plain.run(inputs)
    want = run_reference(g, inputs, {k: v.copy() for k, v in params.items()})
    expected = torch_oracle(x, params, tables, qtype, heads, kv_heads, head_dim, pos, interleaved, n_rot)
    oracle = dict(zip(("q", "k_all", "v_all"), expected))
    for name in ("q", "k_all", "v_all"):
        scale = float(np.abs(want[name]).max())
        assert_close(got[name], unfused[name], 1e-5, 1e-6 * scale, f"{name}: fused vs unfused GPU")
        assert_close(got[name], want[name], 1e-5, 1e-6 * scale, f"{name}: fused vs unfused reference")
        assert_close(got[name], oracle[name], 1e-4, 1e-5 * scale, f"{name}: fused vs torch")


def test_fused_epilogue_appends_at_each_run_position(device, gemv_kernel):
    """One compiled graph, three positions: every run lands its k/v row and keeps the earlier ones."""
    g, params, tables = attention_input("Q8_0", 1, 64, 4, 2, 8, 8, True)
    exe = compiled(g, params)
    caches = {"kc": params["kc"].copy(), "vc": params["vc"].copy()}
    for step, pos in enumerate((0, 3, 1)):
        x = rand((1, 64), 10 + step)
        got = exe.run({"x": x, "pos": np.array([pos], np.int32)})
        q, k_all, v_all = torch_oracle(x, {**params, **caches}, tables, "Q8_0", 4, 2, 8, pos, True)
        scale = float(np.abs(k_all).max())
        assert_close(got["q"], q, 1e-4, 1e-5 * scale, f"q at {pos}")
        assert_close(got["k_all"], k_all, 1e-4, 1e-5 * scale, f"k cache after {pos}")
        assert_close(got["v_all"], v_all, 1e-4, 1e-5 * scale, f"v cache after {pos}")
        caches = {"kc": k_all, "vc": v_all}


def test_rope_pattern_switch_and_prefill_rows():
    g, _, _ = attention_input("Q8_0", 1, 64, 4, 2, 8, 16, True)
    fused = [n for n in fuse_gguf_decode(g).nodes if isinstance(n.op, ops.FusedGgufMatMul)]
    assert len(fused) == 1 and fused[0].name == "q" and fused[0].op.head_dim == 8 and fused[0].op.eps > 0
    assert fused[0].shape == (1, 32)
    kept = fuse_gguf_decode(g, rope=False)
    assert any(isinstance(n.op, ops.RopeKvAppend) for n in kept.nodes)
    prefill, _, _ = attention_input("Q8_0", 16, 64, 4, 2, 8, 32, True)
    assert not any(isinstance(n.op, ops.FusedGgufMatMul) for n in fuse_gguf_decode(prefill).nodes)


def test_qkv_with_another_consumer_is_not_fused():
    g, params, _ = attention_input("Q8_0", 1, 64, 4, 2, 8, 16, False)
    g.output(g["qkv"])
    fused = fuse_gguf_decode(g)
    assert any(isinstance(n.op, ops.RopeKvAppend) for n in fused.nodes)
    inputs = {"x": rand((1, 64), 5), "pos": np.array([3], np.int32)}
    want = run_reference(g, inputs, {k: v.copy() for k, v in params.items()})
    got = run_reference(fused, inputs, {k: v.copy() for k, v in params.items()})
    for name in want:
        assert_close(got[name], want[name], 1e-6, 1e-6, name)


@pytest.mark.parametrize("head_dim", [5, 6, 64, 128, 256])
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("x_rows", [1, 3, 8])
def test_rope_plan_keeps_every_pair_in_one_workgroup(head_dim, interleaved, x_rows):
    rope = ops.RopeKvAppend(head_dim, 4 * head_dim, head_dim, head_dim // 2 * 2, interleaved)
    n = 6 * head_dim
    lanes, teams, team_rows = rope_plan(*gemv_plan(18, n, x_rows), rope, x_rows, "test")
    assert lanes * teams <= 256 and team_rows * x_rows <= 8
    block, half = teams * team_rows, rope.rot // 2
    for row in range(n):
        d = row % head_dim
        if d >= rope.rot:
            continue
        if interleaved:
            mate = row + 1 if d % 2 == 0 else row - 1
        else:
            mate = row + half if d < half else row - half
        assert row // block == mate // block, (row, mate, block)


def test_types_without_a_decoder_run_the_fused_epilogue_on_the_host(device):
    """IQ4_NL has no WGSL decoder: the fused op is a host step, which must write the caches back."""
    g, params, tables = attention_input("IQ4_NL", 1, 64, 4, 2, 8, 16, True)
    blocks = params["wqkv"].reshape(-1, 18)
    blocks[:, :2] = np.full((len(blocks), 1), 0.01, np.float16).view(np.uint8)  # sane f16 scales
    exe = compiled(g, params)
    assert [s.kind for s in exe.schedule.steps if s.node == "q"] == ["host"]
    x = rand((1, 64), 6)
    got = exe.run({"x": x, "pos": np.array([9], np.int32)})
    expected = torch_oracle(x, params, tables, "IQ4_NL", 4, 2, 8, 9, True)
    for name, want in zip(("q", "k_all", "v_all"), expected):
        assert_close(got[name], want, 1e-4, 1e-5 * float(np.abs(want).max()), name)
