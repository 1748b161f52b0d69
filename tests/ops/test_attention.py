"""Attention on the GPU vs torch's scaled_dot_product_attention (masks built by hand, bottom-right
aligned; GQA by repeat_interleave) and vs the numpy reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import KERNEL_VARIANTS
from helpers import assert_close

import rlxpy
from rlxpy import env
from rlxpy.errors import GraphError, LimitError, UnsupportedOpError
from rlxpy.ir.reference import run_reference
from rlxpy.wgpu_backend.kernels.params import KERNELS
from rlxpy.wgpu_backend.lowering.attention import flash_fits_loop_budget, rows_fit_loop_budget
from rlxpy.wgpu_backend.lowering.attention_decode import row_fits_loop_budget

TOL = (2e-4, 2e-5)


def shape_of(layout: str, batch: int, heads: int, seq: int, dim: int) -> tuple[int, ...]:
    return {"bhsd": (batch, heads, seq, dim), "bshd": (batch, seq, heads, dim),
            "bs(hd)": (batch, seq, heads * dim), "hsd": (batch * heads, seq, dim)}[layout]


def to_bhsd(x: np.ndarray, layout: str, heads: int, dim: int) -> torch.Tensor:
    """torch [B, H, S, D] float64 view of a tensor in ``layout`` (written apart from the reference)."""
    t = torch.from_numpy(x).double()
    if layout == "bshd":
        return t.permute(0, 2, 1, 3)
    if layout == "bs(hd)":
        return t.unflatten(2, (heads, dim)).permute(0, 2, 1, 3)
    if layout == "hsd":
        return t.unflatten(0, (-1, heads))
    return t


def from_bhsd(t: torch.Tensor, layout: str) -> np.ndarray:
    if layout == "bshd":
        t = t.permute(0, 2, 1, 3)
    elif layout == "bs(hd)":
        t = t.permute(0, 2, 1, 3).flatten(2)
    elif layout == "hsd":
        t = t.flatten(0, 1)
    return t.contiguous().numpy()


def keep_mask(kind: str, s_q: int, s_k: int, window: int) -> torch.Tensor:
    """Bottom-right aligned causal / sliding-window keep mask [S_q, S_k]: query i sits at S_k - S_q + i."""
    pos = torch.arange(s_q)[:, None] + (s_k - s_q)
    keys = torch.arange(s_k)[None, :]
    keep = keys <= pos
    if kind == "sliding_window":
        keep = keep & (keys >= pos - window)
    return keep


def torch_attention(q, k, v, layout, layout_kv, heads, kv_heads, dim, kind="none", mask=None, window=0,
                    scale=None, softcap=None, kv_len=None):
    """Oracle: torch SDPA on float64, with fully masked rows replaced by the mean of V."""
    qt, kt, vt = to_bhsd(q, layout, heads, dim), to_bhsd(k, layout_kv, kv_heads, dim), \
        to_bhsd(v, layout_kv, kv_heads, dim)
    if kv_len is not None:
        kt, vt = kt[:, :, :kv_len], vt[:, :, :kv_len]
    kt = kt.repeat_interleave(heads // kv_heads, dim=1)
    vt = vt.repeat_interleave(heads // kv_heads, dim=1)
    s_q, s_k = qt.shape[2], kt.shape[2]
    attn_mask = None
    if kind in ("causal", "sliding_window"):
        attn_mask = keep_mask(kind, s_q, s_k, window).expand(qt.shape[0], heads, s_q, s_k)
    elif kind == "custom":
        m = torch.from_numpy(np.asarray(mask, dtype=np.float64))
        m = m[:, None, None, :] if m.ndim == 2 else (m[:, None] if m.ndim == 3 else m)
        attn_mask = (m >= 0.5).expand(qt.shape[0], heads, s_q, s_k)
    elif kind == "bias":
        m = torch.from_numpy(np.asarray(mask, dtype=np.float64))
        attn_mask = (m[:, None, None, :] if m.ndim == 2 else (m[:, None] if m.ndim == 3 else m))
    if softcap:  # SDPA has no softcap: the same math, spelled out
        scores = qt @ kt.transpose(-1, -2) * (scale if scale is not None else dim ** -0.5)
        scores = softcap * torch.tanh(scores / softcap)
        if attn_mask is not None:
            scores = scores.masked_fill(~attn_mask, -math.inf) if attn_mask.dtype == torch.bool \
                else scores + attn_mask
        out = torch.softmax(scores, -1) @ vt
    else:
        out = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=attn_mask, scale=scale)
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        dead = ~attn_mask.any(-1, keepdim=True)  # SDPA gives NaN there; rlxpy averages V uniformly
        out = torch.where(dead, vt.mean(-2, keepdim=True).expand_as(out), out)
    return from_bhsd(out, layout)


def build(layout, layout_kv, batch, heads, kv_heads, s_q, s_k, dim, kind="none", mask_shape=None,
          mask_dtype="f32", **attrs):
    g = rlxpy.Graph("attn")
    q = g.input("q", shape_of(layout, batch, heads, s_q, dim))
    k = g.input("k", shape_of(layout_kv, batch, kv_heads, s_k, dim))
    v = g.input("v", shape_of(layout_kv, batch, kv_heads, s_k, dim))
    mask = g.input("mask", mask_shape, mask_dtype) if mask_shape is not None else None
    y = g.attention(q, k, v, heads, dim, num_kv_heads=kv_heads, mask_kind=kind, mask=mask, **attrs)
    g.output(y)
    return g, y


@pytest.fixture(autouse=True, params=KERNEL_VARIANTS)
def kernel_variant(request):
    """Every test runs under both attention variants: workgroup-cooperative and CPU (attention_rows)."""
    with env.override(RLX_WGPU_KERNELS=request.param):
        yield request.param


def feeds_for(g: rlxpy.Graph, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for node in g.inputs():
        feeds[node.name] = rng.standard_normal(node.shape).astype(np.float32)
    return feeds


def run_case(layout, layout_kv, batch, heads, kv_heads, s_q, s_k, dim, kind="none", mask=None,
             mask_dtype="f32", seed=0, expect_kernels=None, **attrs):
    g, y = build(layout, layout_kv, batch, heads, kv_heads, s_q, s_k, dim, kind,
                 None if mask is None else mask.shape, mask_dtype, **attrs)
    feeds = feeds_for(g, seed)
    if mask is not None:
        feeds["mask"] = mask
    exe = rlxpy.compile(g)
    gpu = exe.run(feeds)[y.name]
    ref = run_reference(g, feeds)[y.name]
    want = torch_attention(feeds["q"], feeds["k"], feeds["v"], layout, layout_kv, heads, kv_heads, dim, kind,
                           mask, attrs.get("window", 0), attrs.get("score_scale"), attrs.get("softcap"))
    assert_close(ref, want, *TOL, "reference vs torch")
    assert_close(gpu, want, *TOL, "GPU vs torch")
    if expect_kernels is not None:
        assert [s.kernel for s in exe.schedule.steps] == expect_kernels
    return exe, feeds, gpu


# (layout of q, layout of k/v, batch, heads, kv heads, S_q, S_k, head_dim, mask kind, kernels)
CASES = [
    ("bhsd", "bhsd", 2, 2, 2, 7, 7, 64, "causal", ["attention_flash_rows"]),
    ("bshd", "bshd", 1, 3, 1, 129, 129, 7, "causal", ["attention_flash"]),
    ("bs(hd)", "bs(hd)", 2, 8, 1, 7, 129, 80, "none", ["attention_flash"]),
    ("hsd", "hsd", 2, 3, 3, 1, 129, 1, "none", ["attention_decode", "attention_combine"]),
    ("bhsd", "bhsd", 1, 8, 1, 1, 7, 128, "causal", ["attention_decode_row"]),
    ("bshd", "bshd", 1, 6, 2, 129, 7, 64, "sliding_window", ["attention_flash_rows"]),  # S_q > S_k: dead rows
    ("hsd", "hsd", 1, 3, 3, 17, 129, 128, "sliding_window", ["attention_flash"]),
    ("bshd", "bhsd", 2, 4, 1, 3, 129, 80, "causal", ["attention_decode", "attention_combine"]),
    ("bhsd", "bshd", 1, 2, 1, 33, 40, 256, "causal", ["attention_flash"]),
    ("bs(hd)", "hsd", 1, 2, 2, 2, 300, 256, "sliding_window", ["attention_decode", "attention_combine"]),
    ("bhsd", "bhsd", 2, 6, 2, 4, 9, 17, "causal", ["attention_decode_row"]),  # 3 heads x 4 queries a kv head
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}-H{c[3]}/{c[4]}-q{c[5]}k{c[6]}d{c[7]}-"
                                                       f"{c[8]}")
def test_attention_matches_torch_sdpa(device, case, kernel_variant):
    layout, layout_kv, batch, heads, kv_heads, s_q, s_k, dim, kind, kernels = case
    if kernel_variant == "cpu" and kernels[0].startswith("attention_decode"):
        # attention_rows, unless walking every key in one invocation passes lavapipe's loop limit
        kernels = ["attention_rows"] if rows_fit_loop_budget(s_k, dim) else \
            [k.replace("attention_decode_row", "attention_decode") for k in kernels]
    run_case(layout, layout_kv, batch, heads, kv_heads, s_q, s_k, dim, kind, window=5, expect_kernels=kernels)


def test_long_prefill_walks_its_keys_in_blocks_on_cpu_adapters(device, kernel_variant):
    # attention_flash walks every key in one invocation: with 12000 keys of dim 128 lavapipe stopped it
    # silently at 65535 loop steps (wrong output); there such walks take attention_decode's key blocks
    assert not flash_fits_loop_budget(12000, 128) and flash_fits_loop_budget(129, 256)
    want = ["attention_decode", "attention_combine"] if device.is_cpu else ["attention_flash"]
    run_case("bhsd", "bshd", 1, 2, 1, 5, 12000, 128, "causal", expect_kernels=want)


@pytest.mark.parametrize("mask_shape,s_q,dtype", [
    ("bk", 7, "f32"), ("bqk", 7, "f32"), ("bhqk", 7, "f32"), ("bk", 1, "bool"), ("1hqk", 17, "f32"),
])
def test_attention_custom_keep_mask_shapes(device, mask_shape, s_q, dtype):
    batch, heads, s_k = 2, 3, 129
    shape = {"bk": (batch, s_k), "bqk": (batch, s_q, s_k), "bhqk": (batch, heads, s_q, s_k),
             "1hqk": (1, heads, s_q, s_k)}[mask_shape]
    rng = np.random.default_rng(3)
    mask = rng.uniform(0, 1, size=shape).astype(np.float32)
    if mask_shape == "bk":
        mask[0] = 0.2  # batch 0 sees no key at all: its rows average V
    if dtype == "bool":
        mask = mask >= 0.5
    run_case("bhsd", "bhsd", batch, heads, heads, s_q, s_k, 64, "custom", mask=mask, mask_dtype=dtype)


@pytest.mark.parametrize("s_q", [1, 9])
def test_attention_additive_bias_scale_and_softcap(device, s_q):
    batch, heads, s_k = 1, 2, 19
    bias = np.random.default_rng(4).standard_normal((batch, heads, s_q, s_k)).astype(np.float32) * 3
    bias[..., 5] = -np.inf  # an additive -inf removes that key
    run_case("bshd", "bshd", batch, heads, heads, s_q, s_k, 16, "bias", mask=bias, score_scale=0.7,
             softcap=2.5)


def test_fully_masked_rows_average_v_without_nan(device):
    """CAUSAL with S_q > S_k: the first rows see no key; CUSTOM: an all-zero keep-mask row."""
    for s_q, kind in ((9, "causal"), (2, "causal")):
        s_k = 4 if s_q == 9 else 1  # decode case: S_q = 2 > S_k = 1, row 0 is dead
        _, feeds, gpu = run_case("bhsd", "bhsd", 1, 2, 2, s_q, s_k, 8, kind)
        assert not np.isnan(gpu).any()
        dead = s_q - s_k
        mean_v = np.broadcast_to(feeds["v"].mean(2, keepdims=True), gpu[:, :, :dead].shape)
        assert_close(gpu[:, :, :dead], mean_v, *TOL, "dead rows = mean of V")
    mask = np.ones((1, 3, 5), np.float32)
    mask[0, 1] = 0.0
    _, feeds, gpu = run_case("bhsd", "bhsd", 1, 2, 2, 3, 5, 8, "custom", mask=mask)
    assert not np.isnan(gpu).any()


def test_nan_in_query_stays_in_its_row(device):
    g, y = build("bhsd", "bhsd", 1, 2, 2, 6, 6, 8, "causal")
    feeds = feeds_for(g, 1)
    feeds["q"][0, 1, 2, 3] = np.nan
    gpu = rlxpy.compile(g).run(feeds)[y.name]
    assert np.isnan(gpu[0, 1, 2]).all()
    rest = np.ones(gpu.shape, bool)
    rest[0, 1, 2] = False
    assert not np.isnan(gpu[rest]).any()
    assert_close(gpu, run_reference(g, feeds)[y.name], *TOL, "GPU vs reference")


def set_kv_len(exe, kv_len: int) -> None:
    """Rewrite the scaled ``kv_len`` uniform of each attention step, as the active extent does."""
    for index, step in enumerate(exe.schedule.steps):
        if "kv_len" in step.scales:
            layout = KERNELS[step.kernel].params
            values = layout.unpack(step.uniforms)
            values["kv_len"] = kv_len
            exe.encoder.write_uniforms(index, layout.pack(values))


@pytest.mark.parametrize("s_q,kind", [(1, "causal"), (2, "none"), (9, "causal"), (9, "sliding_window")])
def test_kv_len_limits_the_keys_and_aligns_causal(device, s_q, kind):
    heads, kv_heads, s_k, kv_len, dim = 4, 2, 300, 129, 64
    g, y = build("bshd", "bshd", 1, heads, kv_heads, s_q, s_k, dim, kind, window=6)
    exe = rlxpy.compile(g)
    assert all("kv_len" in s.scales for s in exe.schedule.steps if s.kernel.startswith("attn_") and
               s.kernel != "attention_combine")
    set_kv_len(exe, kv_len)
    feeds = feeds_for(g, 2)
    feeds["k"][:, kv_len:] = np.nan  # an unfilled cache: never read
    feeds["v"][:, kv_len:] = np.nan
    gpu = exe.run(feeds)[y.name]
    want = torch_attention(feeds["q"], feeds["k"], feeds["v"], "bshd", "bshd", heads, kv_heads, dim, kind,
                           window=6, kv_len=kv_len)
    assert_close(gpu, want, *TOL, "GPU vs torch on the first kv_len keys")


def test_head_dim_above_256_is_a_limit_error(device):
    g, _ = build("bhsd", "bhsd", 1, 1, 1, 2, 2, 257)
    with pytest.raises(LimitError, match=r"attention_0 \(Attention\): head_dim 257"):
        rlxpy.compile(g)


def test_bad_attention_inputs_are_named_errors(device):
    g = rlxpy.Graph("bad")
    q = g.input("q", (1, 2, 4, 8), "f16")
    k = g.input("k", (1, 2, 4, 8), "f16")
    g.output(g.attention(q, k, k, 2, 8))
    with pytest.raises(UnsupportedOpError, match=r"\(Attention\): attention_\w+ is lowered for f32 only, "
                                                 r"input 0 q"):
        rlxpy.compile(g)
    g = rlxpy.Graph("bad_batch")  # q batch 2, k batch 3
    y = g.attention(g.input("q", (2, 2, 4, 8)), g.input("k", (3, 2, 4, 8)), g.input("v", (3, 2, 4, 8)), 2, 8)
    g.output(y)
    with pytest.raises(GraphError, match="batch 2 but k"):
        rlxpy.compile(g)
    g = rlxpy.Graph("bad_heads")  # rank-4 q that is neither [B,H,S,D] nor [B,S,H,D] with H = 2
    y = g.attention(g.input("q", (1, 4, 3, 8)), g.input("k", (1, 2, 4, 8)), g.input("v", (1, 2, 4, 8)), 2, 8)
    g.output(y)
    with pytest.raises(GraphError, match="does not fit layout bshd"):
        rlxpy.compile(g)
    g, _ = build("bhsd", "bhsd", 2, 2, 2, 3, 5, 8, "custom", mask_shape=(3, 5))
    with pytest.raises(GraphError, match=r"mask f32\[3, 5\] does not broadcast"):
        rlxpy.compile(g)
    with pytest.raises(GraphError, match="takes 4 inputs"):
        build("bhsd", "bhsd", 1, 2, 2, 3, 5, 8, "custom")


def test_lowering_is_pure_and_checks_workgroup_memory():
    """Lowering needs no device: decode splits the keys (capped by the arena's scratch), and a device
    with too little workgroup memory for attention_flash gets a LimitError naming the node."""
    from rlxpy.wgpu_backend.compiler import lower_graph, prepare
    from rlxpy.wgpu_backend.lowering.attention import ATTENTION_DECODE, scratch_bytes
    from rlxpy.wgpu_backend.schedule import DeviceFacts

    g, y = build("bhsd", "bhsd", 1, 32, 8, 1, 4096, 128, "causal")
    steps = lower_graph(prepare(g), DeviceFacts()).steps
    assert [s.kernel for s in steps] == ["attention_decode", "attention_combine"]
    fields = ATTENTION_DECODE.params.unpack(steps[0].uniforms)
    assert fields["splits"] == steps[0].grid[0] > 1 and fields["kv_len"] == 4096
    assert scratch_bytes(y, g) == 4 * 32 * 32 * (128 + 2)  # what 32 splits would need
    g, _ = build("bhsd", "bhsd", 1, 2, 2, 65, 65, 64)
    with pytest.raises(LimitError, match=r"attention_0 \(Attention\): attention_flash needs 14976 B"):
        lower_graph(prepare(g), DeviceFacts(max_workgroup_storage=8192))


def _query_and_cache(seed: int, s_q: int, heads: int, kv_heads: int, dim: int, capacity: int,
                     filled: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random queries [1, S_q, heads * dim] and a KV cache of `capacity` rows whose first `filled` exist:
    the others are NaN, so reading a never-written row shows in the output."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((1, s_q, heads * dim)).astype(np.float32)
    k = rng.standard_normal((1, capacity, kv_heads * dim)).astype(np.float32)
    v = rng.standard_normal((1, capacity, kv_heads * dim)).astype(np.float32)
    k[:, filled:] = np.nan
    v[:, filled:] = np.nan
    return q, k, v


@pytest.mark.parametrize("s_q,pos", [(1, 0), (1, 3), (1, 40), (3, 17), (8, 33), (17, 100)])
def test_sliding_window_over_a_kv_cache_matches_torch(device, s_q, pos):
    """Gemma's decode and prefill attention: a KV cache of 128 rows of which pos + S_q exist (the pos
    input, dynamic_kv), a sliding window of 6 keys before the query's own, head size 256 with one kv
    head for 4 query heads, its own score scale and a softcap; torch SDPA on float64 over the keys
    that exist, the window and the softcap applied to the scores by hand."""
    heads, kv_heads, dim, capacity, window, scale, cap = 4, 1, 256, 128, 6, 0.0625, 20.0
    q, k, v = _query_and_cache(pos * 31 + s_q, s_q, heads, kv_heads, dim, capacity, pos + s_q)
    n = pos + s_q
    g = rlxpy.Graph()
    qn, kn, vn = g.input("q", q.shape), g.input("k", k.shape), g.input("v", v.shape)
    p = g.input("pos", [1], "i32")
    g.output(g.attention(qn, kn, vn, heads, dim, num_kv_heads=kv_heads, mask_kind="sliding_window",
                         window=window, score_scale=scale, softcap=cap, kv_len=p, name="o"))
    out = rlxpy.compile(g).run({"q": q, "k": k, "v": v, "pos": np.array([pos], np.int32)})["o"]
    tq = torch.from_numpy(q).double().reshape(s_q, heads, dim).transpose(0, 1)
    tk = torch.from_numpy(k[0, :n]).double().reshape(n, kv_heads, dim).transpose(0, 1)
    tv = torch.from_numpy(v[0, :n]).double().reshape(n, kv_heads, dim).transpose(0, 1)
    scores = cap * torch.tanh(scale * tq @ tk.transpose(1, 2) / cap)  # [heads, S_q, n] (kv head broadcast)
    query_at = torch.arange(s_q)[:, None] + pos
    keys = torch.arange(n)[None, :]
    keep = (keys <= query_at) & (keys >= query_at - window)
    want = torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1) @ tv
    assert_close(out, want.transpose(0, 1).reshape(1, s_q, heads * dim).numpy(), *TOL, "attention")


@pytest.mark.parametrize("use_subgroups", [True, False])
@pytest.mark.parametrize("s_q,pos,dim,kind", [(1, 130, 64, "causal"), (1, 700, 64, "causal"),
                                              (2, 0, 128, "none"), (1, 57, 17, "sliding_window"),
                                              (3, 1000, 256, "causal")])
def test_decode_row_over_a_gqa_kv_cache_matches_torch(device, monkeypatch, kernel_variant, use_subgroups, s_q,
                                                      pos, dim, kind):
    """SmolLM2's decode attention (9 heads on 3 kv heads, a KV cache read up to pos + S_q) through
    attention_decode_row, its dot products summed by subgroup shuffles where the device has them
    (lavapipe's subgroups are 8 wide: head dims past 64 take more lanes per key than one holds, and
    fall back at run time to whole dot products) or whole in every lane; torch SDPA on float64."""
    from rlxpy.wgpu_backend.lowering import attention_decode

    monkeypatch.setattr(attention_decode, "USE_SUBGROUPS", use_subgroups)
    heads, kv_heads, capacity, window = 9, 3, 1100, 40
    q, k, v = _query_and_cache(pos + dim, s_q, heads, kv_heads, dim, capacity, pos + s_q)
    n = pos + s_q
    g = rlxpy.Graph()
    qn, kn, vn = g.input("q", q.shape), g.input("k", k.shape), g.input("v", v.shape)
    p = g.input("pos", [1], "i32")
    g.output(g.attention(qn, kn, vn, heads, dim, num_kv_heads=kv_heads, mask_kind=kind, window=window,
                         kv_len=p, name="o"))
    exe = rlxpy.compile(g)
    out = exe.run({"q": q, "k": k, "v": v, "pos": np.array([pos], np.int32)})["o"]
    if kernel_variant == "gpu" and device.is_cpu and not row_fits_loop_budget(capacity, dim):
        assert [s.kernel for s in exe.schedule.steps] == ["attention_decode"]  # whole dot products a key
    elif kernel_variant == "gpu":
        [step] = exe.schedule.steps
        assert step.kernel == "attention_decode_row"
        assert ("subgroupShuffleXor" in step.source) == (use_subgroups and "subgroup" in device.features)
    else:  # attention_rows walks every key of the cache in one invocation: past lavapipe's loop limit
        assert [s.kernel for s in exe.schedule.steps] == ["attention_decode"]  # 1100 x (2 x dim + 1) steps
    want = torch_attention(q, k, v, "bs(hd)", "bs(hd)", heads, kv_heads, dim, kind, window=window, kv_len=n)
    assert_close(out, want, *TOL, "attention")


def test_long_kv_cache_of_wide_heads_within_the_loop_limit(device, kernel_variant):
    # attention_decode_row sums each dot product whole on lavapipe past 64 dims (4 x 256 loop steps per
    # 32 keys): 2151 keys passed 65535 steps and the output was silently wrong; CPU adapters now take
    # attention_decode there
    heads, kv_heads, dim, capacity, pos = 4, 2, 256, 2200, 2150
    q, k, v = _query_and_cache(11, 1, heads, kv_heads, dim, capacity, pos + 1)
    g = rlxpy.Graph()
    p = g.input("pos", [1], "i32")
    g.output(g.attention(g.input("q", q.shape), g.input("k", k.shape), g.input("v", v.shape), heads, dim,
                         num_kv_heads=kv_heads, mask_kind="causal", kv_len=p, name="o"))
    exe = rlxpy.compile(g)
    out = exe.run({"q": q, "k": k, "v": v, "pos": np.array([pos], np.int32)})["o"]
    row = kernel_variant == "gpu" and not device.is_cpu
    assert [s.kernel for s in exe.schedule.steps] == ["attention_decode_row" if row else "attention_decode"]
    want = torch_attention(q, k, v, "bs(hd)", "bs(hd)", heads, kv_heads, dim, "causal", kv_len=pos + 1)
    assert_close(out, want, *TOL, "attention")


def test_decode_row_minus_inf_bias_weighs_zero_and_a_row_of_them_is_nan(device, kernel_variant):
    """An additive -inf removes its key even when a key group meets it before any finite score; a row
    whose every score is -inf is NaN, as the reference's softmax (and torch's) gives
    (attention_decode_row)."""
    bias = np.random.default_rng(5).standard_normal((1, 2, 1, 120)).astype(np.float32)
    bias[..., :100] = -np.inf  # every key group's first keys
    kernels = ["attention_decode_row"] if kernel_variant == "gpu" else ["attention_rows"]
    run_case("bshd", "bshd", 1, 2, 2, 1, 120, 32, "bias", mask=bias, expect_kernels=kernels)
    bias[0, 1] = -np.inf
    g, y = build("bshd", "bshd", 1, 2, 2, 1, 120, 32, "bias", mask_shape=bias.shape)
    feeds = {**feeds_for(g, 0), "mask": bias}
    gpu = rlxpy.compile(g).run(feeds)[y.name]
    with np.errstate(invalid="ignore"):  # the reference's -inf - -inf
        assert np.isnan(run_reference(g, feeds)[y.name][0, 0, 1]).all()
    if kernel_variant == "gpu":
        assert np.isnan(gpu[0, 0, 1]).all()
    assert not np.isnan(gpu[0, 0, 0]).any()
