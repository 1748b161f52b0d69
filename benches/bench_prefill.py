"""Prefill pieces of SmolLM2-135M (Q4_1) on the GPU: rlxpy beside torch CUDA, in one command.

* ``gemm``: DequantMatMulGguf of M x rows against each SmolLM2 weight shape, 30 distinct weight
  copies (one per layer) in one compute pass bracketed by timestamp queries; the tiled GEMM's plan
  (quant_gguf_gemm) and the blocked GEMV it replaces, vs torch fp32 / fp16 matmuls of the dequantised
  weights (CUDA events over the same 30 copies). TFLOP/s = 2 M N K / time.
* ``attention``: causal GQA attention (9 heads, 3 kv heads, head_dim 64): a 512-token prompt at
  once and a 128-token chunk at the end of a 512-key cache, vs torch SDPA (fp32 / fp16); and
  all-MiniLM-L6-v2's (12 heads of 32, batch 8 x 128, no mask).
* ``model``: the whole prefill of a 512-token prompt through a SmolLM2-shaped transformer with
  random Q4_1 weights (the real GGUF is not needed): tok/s by prefill chunk size, and the GPU
  time by kernel of one chunk (``exe.profile``).
"""

from __future__ import annotations

import argparse
import statistics
import time
from contextlib import contextmanager

import numpy as np
from bench_quant import gpu_pass_seconds, quantised
from common import emit, torch_cuda

import rlxpy
from rlxpy.ir.dtype import DType
from rlxpy.wgpu_backend.lowering import quant_gguf

HIDDEN, FFN, HEADS, KV_HEADS, DIM, LAYERS, VOCAB = 576, 1536, 9, 3, 64, 30, 49152
#: (name, n, k): the fused QKV projection, attention output, FFN gate/up, FFN down
SHAPES = [("qkv", 960, 576), ("o", 576, 576), ("gate_up", 1536, 576), ("down", 576, 1536)]


@contextmanager
def patched(module, **values):
    """Lowering constants set for the block (an older tree may lack some: they are added, then removed)."""
    old = {name: getattr(module, name, None) for name in values}
    for name, value in values.items():
        setattr(module, name, value)
    try:
        yield
    finally:
        for name, value in old.items():
            if value is None:
                delattr(module, name)
            else:
                setattr(module, name, value)


def variants() -> dict[str, dict]:
    """Lowering settings to compare: the blocked GEMV and the tiled GEMM's plan."""
    return {"gemv_blocks": {"TILED_MIN_ROWS": 1 << 30}, "tiled_plan": {}}


def rlxpy_gemm(raw: np.ndarray, n: int, k: int, rows: int, copies: int, settings: dict) -> dict:
    with patched(quant_gguf, **settings):
        g = rlxpy.Graph(f"gemm_{n}x{k}_{rows}")
        x = g.input("x", (rows, k))
        outs = [g.dequant_matmul_gguf(x, g.param(f"w{i}", raw.shape, DType.U8), "Q4_1", n, k, name=f"y{i}")
                for i in range(copies)]
        g.output(*outs)
        exe = rlxpy.compile(g)
    for i in range(copies):
        exe.set_param_bytes(f"w{i}", raw.tobytes())
    xv = np.random.default_rng(1).standard_normal((rows, k)).astype(np.float32)
    got = exe.run({"x": xv}, outputs=["y0"])["y0"]
    from gguf import GGMLQuantizationType, quants

    want = xv.astype(np.float64) @ quants.dequantize(raw, GGMLQuantizationType.Q4_1).astype(np.float64).T
    error = float(np.abs(got - want).max() / np.abs(want).max())
    step = exe.schedule.steps[0]
    timed = gpu_pass_seconds(exe, repeat=9, warmup_s=0.3)
    exe.destroy()
    seconds = timed[0] / copies if timed else float("nan")
    return {"us": seconds * 1e6, "tflops": 2 * rows * n * k / seconds / 1e12, "rel_err": error,
            "kernel": step.kernel, "grid": list(step.grid)}


def torch_gemm(torch, raw: np.ndarray, n: int, k: int, rows: int, copies: int) -> dict:
    from gguf import GGMLQuantizationType, quants

    w = torch.from_numpy(quants.dequantize(raw, GGMLQuantizationType.Q4_1)).cuda()
    out = {}
    for name, dtype in (("torch_fp32", torch.float32), ("torch_fp16", torch.float16)):
        ws = [w.to(dtype).clone() for _ in range(copies)]
        x = torch.randn(rows, k, device="cuda", dtype=dtype)

        def run(ws=ws, x=x):
            for wi in ws:
                torch.matmul(x, wi.T)
        seconds = cuda_events(torch, run) / copies
        out[name] = {"us": seconds * 1e6, "tflops": 2 * rows * n * k / seconds / 1e12}
    return out


def cuda_events(torch, fn, repeat: int = 9) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    return statistics.median(times)


def bench_gemm(torch, rows_list: list[int], copies: int, names: list[str] | None) -> list[dict]:
    torch_old = torch.backends.cuda.matmul.allow_tf32 if torch else None
    if torch:
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32
    results = []
    for name, n, k in SHAPES:
        raw = quantised("Q4_1", n, k, seed=n + k)
        for rows in rows_list:
            row = {"shape": name, "n": n, "k": k, "rows": rows}
            for label, settings in variants().items():
                if names and label not in names:
                    continue
                row[label] = rlxpy_gemm(raw, n, k, rows, copies, settings)
            if torch:
                row.update(torch_gemm(torch, raw, n, k, rows, copies))
            results.append(row)
            cells = "  ".join(f"{key} {v['us']:7.1f}us {v['tflops']:5.2f}TF" for key, v in row.items()
                              if isinstance(v, dict))
            errors = [v["rel_err"] for v in row.values() if isinstance(v, dict) and "rel_err" in v]
            cells += f"  max rel err {max(errors, default=0.0):.1e}"
            print(f"gemm {name:7s} M={rows:4d}  {cells}", flush=True)
    if torch:
        torch.backends.cuda.matmul.allow_tf32 = torch_old
    return results


CASE_KEYS = ("s_q", "s_k", "heads", "kv_heads", "dim", "batch")


def rlxpy_attention(case: dict, copies: int) -> dict:
    """``copies`` attentions of one shape (distinct K/V each) in one timed pass."""
    s_q, s_k, heads, kv_heads, dim, batch = (case[k] for k in CASE_KEYS)
    g = rlxpy.Graph(f"attn_{s_q}x{s_k}")
    q = g.input("q", (batch, s_q, heads * dim))
    outs = []
    for i in range(copies):
        k = g.input(f"k{i}", (batch, s_k, kv_heads * dim))
        v = g.input(f"v{i}", (batch, s_k, kv_heads * dim))
        outs.append(g.attention(q, k, v, heads, dim, kv_heads, mask_kind=case["kind"], name=f"o{i}"))
    g.output(*outs)
    exe = rlxpy.compile(g)
    rng = np.random.default_rng(3)
    feeds = {"q": rng.standard_normal((batch, s_q, heads * dim)).astype(np.float32)}
    for i in range(copies):
        feeds[f"k{i}"] = rng.standard_normal((batch, s_k, kv_heads * dim)).astype(np.float32)
        feeds[f"v{i}"] = rng.standard_normal((batch, s_k, kv_heads * dim)).astype(np.float32)
    got = exe.run(feeds, outputs=["o0"])["o0"]
    timed = gpu_pass_seconds(exe, repeat=9, warmup_s=0.3)
    step = exe.schedule.steps[-1]
    exe.destroy()
    return {"us": timed[0] / copies * 1e6 if timed else float("nan"), "kernel": step.kernel,
            "grid": list(step.grid), "out": got, "feeds": feeds}


def torch_attention(torch, feeds: dict, case: dict, got: np.ndarray) -> dict:
    import torch.nn.functional as F

    s_q, s_k, heads, kv_heads, dim, batch = (case[k] for k in CASE_KEYS)

    def heads_first(x, count, seq):
        return torch.from_numpy(x).cuda().view(batch, seq, count, dim).transpose(1, 2)
    q = heads_first(feeds["q"], heads, s_q).contiguous()
    k = heads_first(feeds["k0"], kv_heads, s_k).repeat_interleave(heads // kv_heads, 1).contiguous()
    v = heads_first(feeds["v0"], kv_heads, s_k).repeat_interleave(heads // kv_heads, 1).contiguous()
    # query i sits at position s_k - s_q + i (a chunk at the end of the cache)
    mask = None
    if case["kind"] == "causal":
        mask = torch.ones(s_q, s_k, dtype=torch.bool, device="cuda").tril(s_k - s_q)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    out = {"max_abs_err": float((heads_first(got, heads, s_q) - want).abs().max())}
    for name, dtype in (("sdpa_fp32", torch.float32), ("sdpa_fp16", torch.float16)):
        qq, kk, vv = q.to(dtype), k.to(dtype), v.to(dtype)
        causal = case["kind"] == "causal" and s_q == s_k

        def run(qq=qq, kk=kk, vv=vv, causal=causal):
            for _ in range(10):
                if causal:
                    F.scaled_dot_product_attention(qq, kk, vv, is_causal=True)
                else:
                    F.scaled_dot_product_attention(qq, kk, vv, attn_mask=mask)
        out[name] = cuda_events(torch, run) / 10 * 1e6
    return out


def bench_attention(torch, copies: int, cases: list[dict]) -> list[dict]:
    results = []
    for case in cases:
        mine = rlxpy_attention(case, copies)
        row = {**case, "rlxpy_us": mine["us"], "kernel": mine["kernel"], "grid": mine["grid"]}
        if torch:
            row.update(torch_attention(torch, mine["feeds"], case, mine["out"]))
        results.append(row)
        print("attention " + ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
                                       for k, v in row.items()), flush=True)
    return results


def synthetic_weights(exe, config) -> None:
    """Random weights of the right GGML types: Q4_1 / Q8_0 blocks with small scales, norms of 1."""
    rng = np.random.default_rng(5)
    for name in exe.param_names():
        size = exe.param_nbytes(name)
        if name.endswith(("k_cache", "v_cache")):
            exe.set_param_bytes(name, bytes(size))
            continue
        kind = config.weight_type(name)
        if kind == "F32":
            exe.set_param_bytes(name, np.ones(size // 4, np.float32).tobytes())
            continue
        block = {"Q4_1": 20, "Q8_0": 34}[kind]
        blocks = rng.integers(0, 256, (size // block, block), dtype=np.uint8)
        d = rng.uniform(0.005, 0.02, len(blocks)).astype(np.float16)
        blocks[:, 0:2] = d.view(np.uint8).reshape(-1, 2)
        if kind == "Q4_1":
            blocks[:, 2:4] = (-8 * d).astype(np.float16).view(np.uint8).reshape(-1, 2)
        exe.set_param_bytes(name, blocks.tobytes())


def bench_model(chunks: list[int], prompt: int, settings: dict, quick: bool = False) -> list[dict]:
    from rlxpy.models.generate import Generator
    from rlxpy.models.transformer import TransformerConfig

    layers, vocab = (2, 512) if quick else (LAYERS, VOCAB)
    types = {"token_embd.weight": "Q8_0"}
    for layer in range(layers):
        for part in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"):
            types[f"blk.{layer}.{part}.weight"] = "Q4_1"
    config = TransformerConfig(vocab_size=vocab, hidden=HIDDEN, layers=layers, heads=HEADS, kv_heads=KV_HEADS,
                               ffn=FFN, rope_theta=100000.0, rope_interleaved=True, context=1024,
                               tied_embeddings=True, weight_types=types)
    ids = [int(i) for i in np.random.default_rng(6).integers(0, vocab, prompt)]
    results = []
    for chunk in chunks:
        with patched(quant_gguf, **settings):
            gen = Generator(config, chunk)
        synthetic_weights(gen.exe, config)
        times = []
        for _ in range(4):
            started = time.perf_counter()
            gen.prefill(ids)
            times.append(time.perf_counter() - started)
        best = min(times[1:])
        tokens = np.zeros(chunk, np.int32)
        tokens[:] = ids[:chunk]
        prof = gen.exe.profile({"prefill_tokens": tokens, "prefill_pos": np.array([0], np.int32),
                                "prefill_last": np.array([chunk - 1], np.int32)}, outputs=["prefill_next"])
        kernels = [{"kernel": g["key"], "steps": g["steps"], "ms": round(g["ms"], 3)}
                   for g in prof.by_kernel()]
        row = {"chunk": chunk, "prefill_tps": prompt / best, "prefill_ms": best * 1e3,
               "first_chunk_profile": kernels}
        results.append(row)
        print(f"model chunk {chunk}: {prompt / best:8.0f} tok/s ({best * 1e3:.2f} ms for {prompt} tokens)")
        for g in sorted(kernels, key=lambda g: -g["ms"])[:10]:
            print(f"  | {g['kernel']:26s} {g['steps']:5d} steps {g['ms']:8.3f} ms")
        gen.exe.destroy()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", help="write the results here as JSON")
    parser.add_argument("--what", default="gemm,attention,model")
    parser.add_argument("--rows", default="32,64,128,512")
    parser.add_argument("--variants", default="", help="comma list of gemm variants (default all)")
    parser.add_argument("--chunks", default="128,512")
    parser.add_argument("--model-runs", default="before,after",
                        help="before: quantised matmuls as blocked GEMVs; after: as lowered")
    parser.add_argument("--quick", action="store_true", help="small sizes (lavapipe smoke run)")
    args = parser.parse_args()
    torch = torch_cuda()
    what = args.what.split(",")
    copies = 2 if args.quick else LAYERS
    results: dict = {}
    if "gemm" in what:
        rows = [int(r) for r in args.rows.split(",")]
        results["gemm"] = bench_gemm(torch, rows, copies, [v for v in args.variants.split(",") if v])
    if "attention" in what:
        smol = dict(heads=HEADS, kv_heads=KV_HEADS, dim=DIM, batch=1, kind="causal")
        shapes = [(40, 64)] if args.quick else [(512, 512), (128, 512), (128, 128)]
        cases = [dict(s_q=s_q, s_k=s_k, **smol) for s_q, s_k in shapes]
        if not args.quick:  # all-MiniLM-L6-v2's attention, batch 8 x 128 tokens
            cases.append(dict(s_q=128, s_k=128, heads=12, kv_heads=12, dim=32, batch=8, kind="none"))
        results["attention"] = bench_attention(torch, copies, cases)
    if "model" in what:
        chunks = [int(c) for c in args.chunks.split(",")]
        prompt = 64 if args.quick else 512
        results["model"] = {}
        runs = {"before": {"TILED_MIN_ROWS": 1 << 30}, "after": {}}
        for label in args.model_runs.split(","):
            settings = runs[label]
            print(f"-- model, {label}")
            results["model"][label] = bench_model(chunks, prompt, settings, args.quick)
    emit(results, args.json)


if __name__ == "__main__":
    main()
