"""attention_flash_rows (prefill attention for head_dim <= 64, one query row per invocation) against
torch SDPA in float64 (test_attention's oracle, which replaces fully masked rows by the mean of V).

Odd shapes: query blocks of 32 and key blocks of 32 (4 splits x 8) left partial, GQA groups of 1, 3
and 4, head dims 4, 20 and 64, every mask kind, a kv_len below S_k (an unfilled cache, its unread
keys NaN), a query row of NaN, and a prefill chunk at its position of a dynamic (pos) KV cache.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_close
from test_attention import TOL, build, feeds_for, run_case, set_kv_len, torch_attention

import rlxpy
from rlxpy.wgpu_backend.lowering.attention_flash import ROWS_MAX_DIM, rows_fit

ROWS = ["attention_flash_rows"]


@pytest.mark.parametrize(("heads", "kv_heads", "s_q", "s_k", "dim", "kind"), [
    (9, 3, 255, 255, 64, "causal"),  # SmolLM2's heads
    (4, 1, 17, 300, 20, "none"),
    (3, 3, 33, 5, 4, "causal"),  # S_q > S_k: dead rows average V
    (2, 2, 40, 77, 64, "sliding_window"),
    (4, 1, 5, 3, 64, "bias"),
])
def test_flash_rows_match_torch_sdpa(device, heads, kv_heads, s_q, s_k, dim, kind):
    mask = None
    if kind == "bias":
        mask = np.random.default_rng(1).standard_normal((2, heads, s_q, s_k)).astype(np.float32)
    run_case("bshd", "bhsd", 2, heads, kv_heads, s_q, s_k, dim, kind, mask=mask, window=7,
             softcap=30.0 if kind == "none" else None, expect_kernels=ROWS)


@pytest.mark.parametrize(("splits", "keys"), [(8, 4), (2, 16), (16, 2)])
def test_other_key_splits_and_blocks_match_torch_sdpa(device, monkeypatch, splits, keys):
    """The plan's key splits and keys per block set to other values (the workgroup is 32 x splits
    invocations, the generated block code follows both)."""
    from rlxpy.wgpu_backend.lowering import attention_flash

    monkeypatch.setattr(attention_flash, "ROWS_SPLITS", splits)
    monkeypatch.setattr(attention_flash, "ROWS_KEYS", keys)
    run_case("bshd", "bhsd", 1, 6, 2, 70, 70, 64, "causal", expect_kernels=ROWS)


def test_custom_keep_mask_and_nan_query_row(device):
    heads, s_q, s_k, dim = 2, 19, 45, 16
    keep = (np.random.default_rng(2).random((1, s_q, s_k)) > 0.4).astype(np.float32)
    keep[0, 3] = 0.0  # a row with every key masked: -1e9 for all, a plain average
    g, y = build("bhsd", "bhsd", 1, heads, heads, s_q, s_k, dim, "custom", keep.shape, "f32")
    feeds = feeds_for(g, 3)
    feeds["mask"] = keep
    feeds["q"][0, 1, 7] = np.nan
    exe = rlxpy.compile(g)
    assert [s.kernel for s in exe.schedule.steps] == ROWS
    got = exe.run(feeds)[y.name]
    want = torch_attention(feeds["q"], feeds["k"], feeds["v"], "bhsd", "bhsd", heads, heads, dim, "custom",
                           keep)
    assert np.isnan(got[0, 1, 7]).all()
    got[0, 1, 7] = want[0, 1, 7] = 0.0
    assert_close(got, want, *TOL, "GPU vs torch")


def test_kv_len_below_s_k_never_reads_the_rest(device):
    heads, kv_heads, s_q, s_k, kv_len, dim = 6, 2, 37, 200, 101, 64
    g, y = build("bshd", "bshd", 1, heads, kv_heads, s_q, s_k, dim, "causal")
    exe = rlxpy.compile(g)
    assert [s.kernel for s in exe.schedule.steps] == ROWS
    set_kv_len(exe, kv_len)
    feeds = feeds_for(g, 4)
    feeds["k"][:, kv_len:] = np.nan
    feeds["v"][:, kv_len:] = np.nan
    got = exe.run(feeds)[y.name]
    want = torch_attention(feeds["q"], feeds["k"], feeds["v"], "bshd", "bshd", heads, kv_heads, dim, "causal",
                           kv_len=kv_len)
    assert_close(got, want, *TOL, "GPU vs torch on the first kv_len keys")


def test_prefill_chunk_of_a_dynamic_cache(device):
    """A 40-query chunk at position 50 of a 128-key cache (what a chunked prefill runs)."""
    heads, kv_heads, s_q, s_k, dim, pos = 9, 3, 40, 128, 64, 50
    g = rlxpy.Graph("chunk")
    q = g.input("q", (1, s_q, heads, dim))
    k = g.input("k", (1, s_k, kv_heads, dim))
    v = g.input("v", (1, s_k, kv_heads, dim))
    at = g.input("pos", (1,), rlxpy.DType.I32)
    y = g.attention(q, k, v, heads, dim, kv_heads, mask_kind="causal", kv_len=at, name="y")
    g.output(y)
    exe = rlxpy.compile(g)
    assert [s.kernel for s in exe.schedule.steps] == ROWS
    feeds = feeds_for(g, 5)
    feeds["pos"] = np.array([pos], np.int32)
    feeds["k"][:, pos + s_q:] = np.nan
    feeds["v"][:, pos + s_q:] = np.nan
    got = exe.run(feeds)["y"]
    want = torch_attention(feeds["q"], feeds["k"], feeds["v"], "bshd", "bshd", heads, kv_heads, dim, "causal",
                           kv_len=pos + s_q)
    assert_close(got, want, *TOL, "GPU vs torch")


@pytest.mark.parametrize("dim", [2, 6, 80])
def test_other_head_dims_keep_attention_flash(device, dim):
    assert not rows_fit(dim) and (dim > ROWS_MAX_DIM or dim % 4)
    g, _ = build("bhsd", "bhsd", 1, 2, 2, 9, 9, dim, "causal")
    assert [s.kernel for s in rlxpy.compile(g).schedule.steps] == ["attention_flash"]
