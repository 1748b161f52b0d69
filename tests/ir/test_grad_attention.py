"""Gradient rules of the attention and rope families vs torch.autograd and finite differences."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from grad_helpers import check_grads, rand

from rlxpy.errors import UnsupportedOpError
from rlxpy.ir import Graph, ops
from rlxpy.ir.passes.autodiff import grad


def torch_attention(q, k, v, heads, kv_heads, head_dim, layout, mask_kind="none", mask=None, scale=None,
                    softcap=None, window=0):
    """rlxpy's Attention semantics in torch (bhsd or bs(hd) layouts)."""
    if layout == "bs(hd)":
        q = q.reshape(q.shape[0], q.shape[1], heads, head_dim).transpose(1, 2)
        k = k.reshape(k.shape[0], k.shape[1], kv_heads, head_dim).transpose(1, 2)
        v = v.reshape(v.shape[0], v.shape[1], kv_heads, head_dim).transpose(1, 2)
    group = heads // kv_heads
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = q @ k.transpose(-1, -2) * (scale if scale is not None else 1 / math.sqrt(head_dim))
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    s_q, s_k = s.shape[-2:]
    pos = torch.arange(s_q)[:, None] + (s_k - s_q)
    keys = torch.arange(s_k)[None, :]
    if mask_kind in ("causal", "sliding_window"):
        keep = keys <= pos
        if mask_kind == "sliding_window":
            keep = keep & (keys >= pos - window)
        s = torch.where(keep, s, torch.tensor(-3.4e38, dtype=s.dtype))
    elif mask_kind == "custom":
        s = torch.where(mask[:, None, None, :] < 0.5, torch.tensor(-1e9, dtype=s.dtype), s)
    out = torch.softmax(s, -1) @ v
    if layout == "bs(hd)":
        out = out.transpose(1, 2).reshape(out.shape[0], out.shape[2], heads * head_dim)
    return out


CASES = [
    # (batch, s_q, s_k, heads, kv_heads, head_dim, layout, mask_kind, softcap)
    (1, 1, 1, 1, 1, 4, "bhsd", "none", None),
    (2, 3, 5, 2, 2, 8, "bhsd", "none", None),
    (1, 17, 17, 4, 2, 8, "bs(hd)", "causal", None),
    (2, 5, 9, 2, 1, 4, "bhsd", "causal", 5.0),
    (1, 9, 9, 3, 3, 4, "bs(hd)", "sliding_window", None),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_attention_gradients(case):
    batch, s_q, s_k, heads, kv_heads, d, layout, mask_kind, softcap = case
    if layout == "bhsd":
        shapes = (batch, heads, s_q, d), (batch, kv_heads, s_k, d)
    else:
        shapes = (batch, s_q, heads * d), (batch, s_k, kv_heads * d)
    q, k, v = rand(shapes[0], 1), rand(shapes[1], 2), rand(shapes[1], 3)
    check_grads(lambda g, *t: g.attention(*t, heads, d, kv_heads, mask_kind, softcap=softcap, window=2),
                lambda *t: torch_attention(*t, heads, kv_heads, d, layout, mask_kind, softcap=softcap,
                                           window=2),
                {"q": q, "k": k, "v": v})


def test_attention_gradients_with_a_custom_keep_mask_and_scale():
    q, k, v = rand((2, 2, 4, 4), 4), rand((2, 2, 6, 4), 5), rand((2, 2, 6, 4), 6)
    keep = np.array([[1, 1, 0, 1, 0, 1], [0, 1, 1, 1, 1, 1]], np.float32)
    check_grads(lambda g, a, b, c, m: g.attention(a, b, c, 2, 4, mask_kind="custom", mask=m, score_scale=0.3),
                lambda a, b, c, m: torch_attention(a, b, c, 2, 2, 4, "bhsd", "custom", m, scale=0.3),
                {"q": q, "k": k, "v": v, "mask": keep}, wrt=["q", "k", "v"])


@pytest.mark.parametrize("heads, kv_heads, seq, mask_kind", [(2, 2, 5, "causal"), (4, 2, 17, "none"),
                                                             (1, 1, 1, "causal")], ids=str)
def test_attention_gradient_of_a_fused_qkv_is_one_packed_node(heads, kv_heads, seq, mask_kind):
    """q | k | v narrowed from one [B, S, (H + 2 H_kv) D] tensor: one AttentionBackward PACKED whose
    output is that tensor's gradient (no Concat, no Narrow left), equal to torch.autograd's."""
    d = 4
    widths = (heads * d, kv_heads * d, kv_heads * d)

    def build(g, x):
        q, k, v = (g.narrow(x, 2, sum(widths[:i]), widths[i]) for i in range(3))
        return g.attention(q, k, v, heads, d, kv_heads, mask_kind)

    def reference(x):
        q, k, v = torch.split(x, widths, dim=2)
        return torch_attention(q, k, v, heads, kv_heads, d, "bs(hd)", mask_kind)

    x = rand((2, seq, sum(widths)), 11)
    check_grads(build, reference, {"x": x})
    g = Graph("packed")
    y = build(g, g.input("x", x.shape))
    g.output(g.sum(g.reshape(y, (y.numel,)), 0, name="loss"))
    nodes = grad(g, "loss", ["x"]).graph.nodes
    kinds = [type(n.op) for n in nodes]
    backward = [n for n in nodes if isinstance(n.op, ops.AttentionBackward)]
    assert [n.op.wrt.name for n in backward] == ["PACKED"] and backward[0].op.given_output
    assert ops.Concat not in kinds and kinds.count(ops.Narrow) == 3  # the forward's q, k, v only


def test_attention_through_its_mask_is_refused():
    q = rand((1, 1, 3, 4), 7)
    with pytest.raises(UnsupportedOpError, match=r"\(Attention\).*mask"):
        check_grads(lambda g, a, m: g.attention(a, a, a, 1, 4, mask_kind="bias", mask=m),
                    lambda a, m: a, {"q": q, "mask": rand((1, 3), 8)})


def torch_rope(x, cos, sin, head_dim, n_rot, interleaved, offset):
    seq = x.shape[-2]
    heads = x.shape[-1] // head_dim
    c, s = cos[offset:offset + seq][:, None, :], sin[offset:offset + seq][:, None, :]
    xh = x.reshape(*x.shape[:-1], heads, head_dim)
    rot = n_rot or head_dim
    if interleaved:
        even, odd = xh[..., 0:rot:2], xh[..., 1:rot:2]
        turned = torch.stack([even * c - odd * s, odd * c + even * s], -1).flatten(-2)
    else:
        first, second = xh[..., :rot // 2], xh[..., rot // 2:rot]
        turned = torch.cat([first * c - second * s, second * c + first * s], -1)
    return torch.cat([turned, xh[..., rot:]], -1).reshape(x.shape)


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("n_rot, offset", [(0, 0), (4, 3)])
def test_rope_gradient(interleaved, n_rot, offset):
    x = rand((2, 17, 16), 9)
    angles = np.arange(24)[:, None] * (0.3 / (1 + np.arange((n_rot or 8) // 2)))[None, :]
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    check_grads(lambda g, a, c, s: g.rope(a, c, s, 8, n_rot, interleaved, offset),
                lambda a, c, s: torch_rope(a, c, s, 8, n_rot, interleaved, offset),
                {"x": x, "cos": cos, "sin": sin}, wrt=["x"])
