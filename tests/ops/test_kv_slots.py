"""Batched decode's forms of the KV ops (one position per row, the cache split into equal slots):
CacheWrite, RopeKvAppend, Rope with a position per [S, L] block and Attention with a kv length per
batch entry, against numpy / torch expectations (and the reference interpreter)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import assert_close, rand
from test_kv import rope_torch

import rlxpy
from rlxpy.ir.reference import run_reference

SLOTS, SLOT_ROWS = 3, 6


def tables(rows: int, head_dim: int) -> tuple[np.ndarray, np.ndarray]:
    angles = np.arange(rows)[:, None] * (1.0 / 100 ** (np.arange(0, head_dim, 2) / head_dim))[None]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def test_cache_write_puts_each_row_in_its_slot_and_drops_a_full_one(device):
    g = rlxpy.Graph()
    cache = g.param("cache", [SLOTS * SLOT_ROWS, 5])
    g.output(g.cache_write(cache, g.input("rows", [SLOTS, 5]), g.input("pos", [SLOTS], "i32"), name="w"))
    start, rows = rand((SLOTS * SLOT_ROWS, 5), 1), rand((SLOTS, 5), 2)
    pos = np.array([2, 0, SLOT_ROWS], np.int32)  # the last slot is full: its row is dropped
    exe = rlxpy.compile(g)
    exe.set_param("cache", start)
    out = exe.run({"rows": rows, "pos": pos})["w"]
    want = start.copy()
    want[0 * SLOT_ROWS + 2], want[1 * SLOT_ROWS + 0] = rows[0], rows[1]
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(run_reference(g, {"rows": rows, "pos": pos}, {"cache": start})["w"], want)


@pytest.mark.parametrize("interleaved", [False, True])
def test_rope_kv_append_rotates_each_row_at_its_position_into_its_slot(device, interleaved):
    head_dim, heads, kv_heads = 8, 3, 1
    qw, kw = heads * head_dim, kv_heads * head_dim
    cos, sin = tables(SLOT_ROWS, head_dim)
    g = rlxpy.Graph()
    qkv = g.input("qkv", [SLOTS, qw + 2 * kw])
    p = g.input("pos", [SLOTS], "i32")
    kc, vc = g.param("kc", [SLOTS * SLOT_ROWS, kw]), g.param("vc", [SLOTS * SLOT_ROWS, kw])
    q = g.rope_kv_append(qkv, kc, vc, g.constant(cos), g.constant(sin), p, head_dim, qw, kw,
                         interleaved=interleaved, name="q")
    g.output(q, g.add(kc, 0.0, name="k_all"), g.add(vc, 0.0, name="v_all"))
    exe = rlxpy.compile(g)
    start_k, start_v = rand((SLOTS * SLOT_ROWS, kw), 3), rand((SLOTS * SLOT_ROWS, kw), 4)
    exe.set_param("kc", start_k)
    exe.set_param("vc", start_v)
    x = rand((SLOTS, qw + 2 * kw), 5)
    pos = np.array([5, 0, 3], np.int32)
    out = exe.run({"qkv": x, "pos": pos})
    want_k, want_v = start_k.copy(), start_v.copy()
    for s, at in enumerate(pos):
        row = x[s: s + 1]
        want_q = rope_torch(row[:, :qw], cos, sin, at, head_dim, interleaved)
        assert_close(out["q"][s: s + 1], want_q, 1e-5, 1e-6, f"q row {s}")
        want_k[s * SLOT_ROWS + at] = rope_torch(row[:, qw: qw + kw], cos, sin, at, head_dim, interleaved)[0]
        want_v[s * SLOT_ROWS + at] = row[0, qw + kw:]
    assert_close(out["k_all"], want_k, 1e-5, 1e-6, "k cache")
    assert_close(out["v_all"], want_v, 0, 0, "v cache")
    ref = run_reference(g, {"qkv": x, "pos": pos}, {"kc": start_k, "vc": start_v})
    assert_close(ref["k_all"], want_k, 1e-5, 1e-6, "reference k cache")


def test_rope_with_a_position_per_block(device):
    head_dim, width = 8, 16
    cos, sin = tables(12, head_dim)
    g = rlxpy.Graph()
    x = g.input("x", [SLOTS, 2, width])
    g.output(g.rope(x, g.constant(cos), g.constant(sin), head_dim, position=g.input("pos", [SLOTS], "i32"),
                    name="y"))
    values, pos = rand((SLOTS, 2, width), 6), np.array([7, 0, 10], np.int32)
    out = rlxpy.compile(g).run({"x": values, "pos": pos})["y"]
    want = np.stack([rope_torch(values[b], cos, sin, pos[b], head_dim, False) for b in range(SLOTS)])
    assert_close(out, want, 1e-5, 1e-6, "rope")
    assert_close(run_reference(g, {"x": values, "pos": pos})["y"], want, 1e-5, 1e-6, "reference rope")


def test_attention_gives_each_batch_entry_its_own_kv_length(device):
    heads, kv_heads, dim, capacity = 4, 2, 8, 40
    rng = np.random.default_rng(7)
    pos = np.array([0, 17, 39], np.int32)
    q = rng.standard_normal((SLOTS, 1, heads * dim)).astype(np.float32)
    k = rng.standard_normal((SLOTS, capacity, kv_heads * dim)).astype(np.float32)
    v = rng.standard_normal((SLOTS, capacity, kv_heads * dim)).astype(np.float32)
    for b, at in enumerate(pos):  # rows past each entry's length are never read
        k[b, at + 1:], v[b, at + 1:] = np.nan, np.nan
    g = rlxpy.Graph()
    qn, kn, vn = g.input("q", q.shape), g.input("k", k.shape), g.input("v", v.shape)
    g.output(g.attention(qn, kn, vn, heads, dim, num_kv_heads=kv_heads, mask_kind="causal",
                         kv_len=g.input("pos", [SLOTS], "i32"), name="o"))
    feed = {"q": q, "k": k, "v": v, "pos": pos}
    out = rlxpy.compile(g).run(feed)["o"]
    for b, at in enumerate(pos):
        n = at + 1
        tq = torch.from_numpy(q[b: b + 1]).reshape(1, 1, heads, dim).transpose(1, 2)
        tk = torch.from_numpy(k[b: b + 1, :n]).reshape(1, n, kv_heads, dim).transpose(1, 2)
        tv = torch.from_numpy(v[b: b + 1, :n]).reshape(1, n, kv_heads, dim).transpose(1, 2)
        want = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, enable_gqa=True)
        want = want.transpose(1, 2).reshape(1, 1, heads * dim).numpy()
        assert_close(out[b: b + 1], want, 1e-5, 1e-5, f"attention entry {b}")
        assert_close(run_reference(g, feed)["o"][b: b + 1], want, 1e-5, 1e-5, f"reference entry {b}")


def test_per_row_positions_need_equal_slots():
    g = rlxpy.Graph()
    with pytest.raises(rlxpy.GraphError, match="not 3 equal slots"):
        g.cache_write(g.param("c", [10, 4]), g.input("r", [3, 4]), g.input("p", [3], "i32"))
    with pytest.raises(rlxpy.GraphError, match=r"pos must be i32\[1\] or one per row"):
        g.cache_write(g.param("c2", [12, 4]), g.input("r2", [3, 4]), g.input("p2", [2], "i32"))
