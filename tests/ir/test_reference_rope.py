"""The numpy reference of Rope against transformers' rotate_half and a complex-multiply rope."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from reference_helpers import close_loose as close
from reference_helpers import rand_plain as rand
from reference_helpers import run, t
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from rlxpy.errors import InputError
from rlxpy.ir.ops import Rope


# -- rotary embedding --------------------------------------------------------------------------------
def rope_tables(max_pos: int, rot: int, base: float = 10000.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """cos/sin [max_pos, rot/2] and the angles, theta_i = pos * base^(-2i/rot)."""
    inv_freq = base ** (-np.arange(0, rot, 2, dtype=np.float64) / rot)
    angles = np.arange(max_pos, dtype=np.float64)[:, None] * inv_freq[None, :]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32), angles


def rope(x, cos, sin, position=None, **attrs) -> np.ndarray:
    """Run one Rope node. (Graph.rope calls self.add; build the op with apply.)"""
    arrays = dict(x=x, cos=cos, sin=sin) | ({"position": position} if position is not None else {})
    return run(lambda g, *xs: g.apply(Rope(**attrs), list(xs), "rope"), **arrays)


def hf_rope(x_bhsd: torch.Tensor, cos: np.ndarray, sin: np.ndarray, positions: np.ndarray, rot: int):
    """transformers' llama apply_rotary_pos_emb on the first ``rot`` dims; the rest pass through."""
    c = torch.from_numpy(np.concatenate([cos, cos], -1)[positions]).double()[None]  # [1, S, rot]
    s = torch.from_numpy(np.concatenate([sin, sin], -1)[positions]).double()[None]
    rotated, _ = apply_rotary_pos_emb(x_bhsd[..., :rot], x_bhsd[..., :rot], c, s, unsqueeze_dim=1)
    return torch.cat([rotated, x_bhsd[..., rot:]], -1)


def complex_rope(x_bhsd: torch.Tensor, angles: np.ndarray, positions: np.ndarray, rot: int):
    """Interleaved (GPT-J / llama.cpp) rope as a complex product: (x_2i + j x_2i+1) * e^(j theta_i)."""
    pairs = torch.view_as_complex(x_bhsd[..., :rot].reshape(*x_bhsd.shape[:-1], rot // 2, 2).contiguous())
    phase = torch.polar(torch.ones(len(positions), rot // 2, dtype=torch.float64),
                        torch.from_numpy(angles[positions]))
    rotated = torch.view_as_real(pairs * phase).reshape(*x_bhsd.shape[:-1], rot)
    return torch.cat([rotated, x_bhsd[..., rot:]], -1)


@pytest.mark.parametrize("interleaved", [False, True], ids=["half_split", "interleaved"])
@pytest.mark.parametrize("head_dim,n_rot", [(8, 0), (16, 8), (17, 16), (2, 2), (64, 24)])
@pytest.mark.parametrize("seq", [1, 3, 17])
def test_rope_bhsd_matches_oracle(seq, head_dim, n_rot, interleaved):
    rot = n_rot or head_dim
    cos, sin, angles = rope_tables(40, rot)
    cos64, sin64 = np.cos(angles), np.sin(angles)
    x = rand((2, 3, seq, head_dim), 42)
    offset = 5
    out = rope(x, cos, sin, head_dim=head_dim, n_rot=n_rot, interleaved=interleaved, position_offset=offset)
    positions = np.arange(seq) + offset
    if interleaved:
        expected = complex_rope(t(x).double(), angles, positions, rot)
    else:
        expected = hf_rope(t(x).double(), cos64, sin64, positions, rot)
    close(out, expected, atol=1e-6)


@pytest.mark.parametrize("interleaved", [False, True], ids=["half_split", "interleaved"])
def test_rope_bs_hd_layout_with_position_input(interleaved):
    b, s, heads, head_dim = 2, 3, 4, 8
    cos, sin, angles = rope_tables(64, head_dim)
    x = rand((b, s, heads * head_dim), 43)
    position = np.array([17], dtype=np.int32)  # decode step: rows sit at 17 + 2 + s
    out = rope(x, cos, sin, position, head_dim=head_dim, interleaved=interleaved, position_offset=2)
    positions = np.arange(s) + 19
    x_bhsd = t(x).double().reshape(b, s, heads, head_dim).transpose(1, 2)
    if interleaved:
        expected = complex_rope(x_bhsd, angles, positions, head_dim)
    else:
        expected = hf_rope(x_bhsd, np.cos(angles), np.sin(angles), positions, head_dim)
    close(out, expected.transpose(1, 2).reshape(b, s, heads * head_dim), atol=1e-6)


def test_rope_position_input_past_the_tables_is_an_input_error():
    cos, sin, _ = rope_tables(8, 4)
    with pytest.raises(InputError, match=r"rope \(Rope\): positions 7..9 exceed the 8-row cos/sin tables"):
        rope(rand((1, 3, 4), 45), cos, sin, np.array([6], np.int32), head_dim=4, position_offset=1)


def test_rope_at_position_zero_is_identity():
    cos, sin, _ = rope_tables(4, 8)
    x = rand((1, 1, 1, 8), 44)
    np.testing.assert_array_equal(rope(x, cos, sin, head_dim=8), x)
