"""Rope on the GPU vs transformers' apply_rotary_pos_emb (half-split), a torch complex multiply
(interleaved), and the numpy reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import TOL, assert_close

import rlxpy
from rlxpy.errors import GraphError, UnsupportedOpError
from rlxpy.ir.reference import run_reference


def tables(max_pos: int, n_rot: int, base: float = 10000.0) -> tuple[np.ndarray, np.ndarray]:
    """llama-style cos/sin tables [max_pos, n_rot/2]."""
    inv_freq = 1.0 / base ** (np.arange(0, n_rot, 2) / n_rot)
    angles = np.arange(max_pos)[:, None] * inv_freq[None, :]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def to_heads(x: np.ndarray, head_dim: int) -> torch.Tensor:
    """[..., S, H*D] -> torch [..., H, S, D] float64."""
    t = torch.from_numpy(x).double()
    return t.unflatten(-1, (-1, head_dim)).transpose(-2, -3)


def from_heads(t: torch.Tensor) -> np.ndarray:
    return t.transpose(-2, -3).flatten(-2).numpy()


def oracle_half_split(x, cos, sin, head_dim, n_rot, positions):
    """transformers' llama apply_rotary_pos_emb on the first n_rot dims (partial rotary as in
    GPT-NeoX / Phi: rotate x[..., :n_rot], pass the rest through)."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    heads = to_heads(x, head_dim)
    c = torch.from_numpy(cos[positions]).double()
    s = torch.from_numpy(sin[positions]).double()
    c, s = torch.cat([c, c], -1)[None], torch.cat([s, s], -1)[None]  # [1, S, n_rot], as LlamaRotaryEmbedding
    flat = heads.reshape(-1, *heads.shape[-3:])  # [batch, H, S, D]
    rotated, _ = apply_rotary_pos_emb(flat[..., :n_rot], flat[..., :n_rot], c, s)
    out = torch.cat([rotated, flat[..., n_rot:]], -1).reshape(heads.shape)
    return from_heads(out)


def oracle_interleaved(x, cos, sin, head_dim, n_rot, positions):
    """Pairs (2i, 2i+1) as complex numbers times cos + i sin (llama.cpp / Meta llama style)."""
    heads = to_heads(x, head_dim)
    rot = torch.view_as_complex(heads[..., :n_rot].unflatten(-1, (-1, 2)).contiguous())
    turn = torch.complex(torch.from_numpy(cos[positions]).double(), torch.from_numpy(sin[positions]).double())
    out = torch.cat([torch.view_as_real(rot * turn).flatten(-2), heads[..., n_rot:]], -1)
    return from_heads(out)


def rope_graph(shape, max_pos, head_dim, n_rot, interleaved, offset, with_position):
    g = rlxpy.Graph("rope")
    x = g.input("x", shape)
    cos = g.input("cos", (max_pos, (n_rot or head_dim) // 2))
    sin = g.input("sin", (max_pos, (n_rot or head_dim) // 2))
    pos = g.input("pos", (1,), "i32") if with_position else None
    y = g.rope(x, cos, sin, head_dim, n_rot=n_rot, interleaved=interleaved, position_offset=offset,
               position=pos)
    g.output(y)
    return g, y


# (x shape [..., S, H*D], head_dim, n_rot, position_offset)
CASES = [
    ((1, 2), 2, 0, 0),
    ((3, 17, 5 * 6), 6, 4, 0),
    ((2, 3, 9, 64), 64, 0, 3),
    ((255, 2 * 8), 8, 2, 1),
    ((1, 7, 3 * 80), 80, 32, 5),
]


@pytest.mark.parametrize("interleaved", [False, True], ids=["half_split", "interleaved"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"x{c[0]}-d{c[1]}-rot{c[2]}-off{c[3]}")
def test_rope_matches_transformers_and_complex_multiply(device, case, interleaved):
    shape, head_dim, n_rot, offset = case
    rot = n_rot or head_dim
    max_pos = shape[-2] + offset + 2
    g, y = rope_graph(shape, max_pos, head_dim, n_rot, interleaved, offset, False)
    x = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
    cos, sin = tables(max_pos, rot)
    feeds = {"x": x, "cos": cos, "sin": sin}
    exe = rlxpy.compile(g)
    assert [s.kernel for s in exe.schedule.steps] == ["rope_rotate"]
    gpu = exe.run(feeds)[y.name]
    positions = np.arange(shape[-2]) + offset
    oracle = oracle_interleaved if interleaved else oracle_half_split
    want = oracle(x, cos, sin, head_dim, rot, positions)
    assert_close(run_reference(g, feeds)[y.name], want, *TOL["transcendental"], "reference vs torch")
    assert_close(gpu, want, *TOL["transcendental"], "GPU vs torch")


def test_rope_position_input_is_read_at_run_time(device):
    """One compiled graph, three decode positions: position = s + offset attr + pos input."""
    shape, head_dim = (2, 1, 4 * 16), 16
    g, y = rope_graph(shape, 40, head_dim, 0, False, 2, True)
    exe = rlxpy.compile(g)
    cos, sin = tables(40, head_dim)
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    for value in (0, 7, 37):
        feeds = {"x": x, "cos": cos, "sin": sin, "pos": np.array([value], np.int32)}
        gpu = exe.run(feeds)[y.name]
        want = oracle_half_split(x, cos, sin, head_dim, head_dim, np.array([value + 2]))
        assert_close(gpu, want, *TOL["transcendental"], f"position {value}")
        assert_close(gpu, run_reference(g, feeds)[y.name], *TOL["transcendental"], f"reference, {value}")


def test_rope_propagates_nan_and_inf_to_its_pair_only(device):
    shape, head_dim = (3, 8), 8
    g, y = rope_graph(shape, 3, head_dim, 0, False, 0, False)
    x = np.ones(shape, np.float32)
    x[1, 0] = np.nan
    x[2, 5] = np.inf
    cos, sin = tables(3, head_dim)
    feeds = {"x": x, "cos": cos, "sin": sin}
    gpu = rlxpy.compile(g).run(feeds)[y.name]
    assert np.isnan(gpu[1, [0, 4]]).all() and np.isfinite(gpu[1, [1, 2, 3, 5, 6, 7]]).all()
    assert not np.isfinite(gpu[2, [1, 5]]).any() and np.isfinite(gpu[2, [0, 2, 3, 4, 6, 7]]).all()
    assert_close(gpu, run_reference(g, feeds)[y.name], *TOL["transcendental"], "GPU vs reference")


def test_rope_bad_inputs_are_named_errors(device):
    with pytest.raises(GraphError, match=r"rope_0 \(Rope\): positions 0..4 exceed"):
        rope_graph((1, 5, 8), 4, 8, 0, False, 0, False)  # 5 positions, 4-row tables
    g = rlxpy.Graph("rope_f16")
    y = g.rope(g.input("x", (2, 8), "f16"), g.input("c", (2, 4), "f16"), g.input("s", (2, 4), "f16"), 8)
    g.output(y)
    with pytest.raises(UnsupportedOpError, match=r"\(Rope\): rope_rotate is lowered for f32 only, "
                                                 r"input 0 x is f16"):
        rlxpy.compile(g)
    g = rlxpy.Graph("rope_bad")
    x, c = g.input("x", (2, 8)), g.input("c", (2, 4))
    with pytest.raises(GraphError, match="n_rot 3 must be even"):
        g.rope(x, c, c, 8, n_rot=3)
    with pytest.raises(GraphError, match="position input must be i32"):
        g.rope(x, c, c, 8, position=g.input("p", (1,), "f32"))
    with pytest.raises(GraphError, match="not a multiple of head_dim"):
        g.rope(x, c, c, 3)
