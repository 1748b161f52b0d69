"""SmolLM2-135M decode and prefill speed: rlxpy (WebGPU) beside transformers (CUDA, eager).

rlxpy runs the Q4_1 GGUF as is (weights stay quantised); transformers loads the same GGUF,
dequantised to fp32 and fp16. Reports tok/s for batch-1 greedy decode and for prefill of a
512-token prompt, and where one decode token's time goes (dispatches per token by kernel, host
µs per dispatch to record them and to finish the command buffer). ``--compare-rope`` also runs
the decode with the QKV GEMV's RoPE/KV-append epilogue switched off (its own rope_kv_append
dispatch per layer, as before that pattern), in the same process, for a like-for-like ratio.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import os
import sys
import time
from pathlib import Path

import numpy as np
from common import emit, parse_args, torch_cuda

from rlxpy.frontends.gguf import default_model_path, load_generator


@contextlib.contextmanager
def rope_epilogue(enabled: bool):
    """Compile with (the default) or without the RoPE/KV-append fold of the decode pattern."""
    from rlxpy.ir.passes import patterns, rewrite

    original = rewrite.PATTERNS["decode"]
    if not enabled:
        rewrite.PATTERNS["decode"] = dataclasses.replace(
            original, match=functools.partial(patterns.match_decode, rope=False))
    try:
        yield
    finally:
        rewrite.PATTERNS["decode"] = original


def encode_costs(exe, segments: list, dispatches: int, repeat: int = 20) -> dict:
    """Host µs per dispatch of one decode token: recording the pass, and finishing the encoder."""
    record = finish = 0.0
    for _ in range(repeat):
        enc = exe.device.device.create_command_encoder()
        t0 = time.perf_counter()
        for s in segments:
            if s.kind == "gpu":
                exe.encoder._encode_pass(enc, s)
        t1 = time.perf_counter()
        enc.finish()
        record, finish = record + t1 - t0, finish + time.perf_counter() - t1
    return {"decode_encode_ms": (record + finish) / repeat * 1e3,
            "decode_record_us_per_dispatch": record / repeat / dispatches * 1e6,
            "decode_finish_us_per_dispatch": finish / repeat / dispatches * 1e6}


def rlxpy_side(path, prompt_len: int, decode_tokens: int, chunk: int, rope: bool = True) -> dict:
    with rope_epilogue(rope):
        return _rlxpy_side(path, prompt_len, decode_tokens, chunk)


def _rlxpy_side(path, prompt_len: int, decode_tokens: int, chunk: int) -> dict:
    started = time.perf_counter()
    gen, model = load_generator(path, context=max(1024, prompt_len + decode_tokens + 8), chunk=chunk)
    load = time.perf_counter() - started
    rng = np.random.default_rng(0)
    prompt = [int(t) for t in rng.integers(100, 40000, size=prompt_len)]
    list(gen.generate(prompt[:8], 4))  # warm-up: pipelines, first dispatches
    gen.prefill(prompt)
    prefill = gen.stats.prefill_seconds
    short = prompt[:16]
    list(gen.generate(short, decode_tokens))
    steps = np.array(gen.stats.step_seconds)
    exe = gen.exe
    # encode-only cost of one decode step (no submit wait): the host side of a token
    needed = exe._needed([exe.graph["decode_next"]], True)[1]
    segments = exe.encoder.segments_for(needed)
    dispatches = sum(len(s.dispatches) for s in segments if s.kind == "gpu")
    kernels = collections.Counter(exe.schedule.steps[i].kernel for s in segments for _, _, i in s.dispatches)
    return {
        "load_compile_s": load,
        "arena_mib": exe.arena.size / 2**20,
        "file_mib": model.file_size() / 2**20,
        "prefill_tokens": prompt_len,
        "prefill_tps": prompt_len / prefill,
        "decode_tokens": len(steps),
        "decode_tps": 1.0 / float(np.median(steps)),
        "decode_ms_median": float(np.median(steps)) * 1e3,
        "decode_dispatches": dispatches,
        "decode_kernels": dict(kernels),
        **encode_costs(exe, segments, dispatches),
        "decode_host_steps": sum(1 for s in segments if s.kind == "host"),
    }


def transformers_side(torch, path, dtype, prompt_len: int, decode_tokens: int) -> dict:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, torch_dtype=dtype)
    model = model.to("cuda").eval()
    rng = np.random.default_rng(0)
    prompt = torch.tensor([rng.integers(100, 40000, size=prompt_len)], device="cuda")
    with torch.no_grad():
        model(prompt[:, :8])
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        model(prompt)
        torch.cuda.synchronize()
        prefill = time.perf_counter() - t0
        short = prompt[:, :16]
        t0 = time.perf_counter()
        model.generate(short, max_new_tokens=decode_tokens, min_new_tokens=decode_tokens, do_sample=False)
        torch.cuda.synchronize()
        decode = time.perf_counter() - t0
    return {"prefill_tps": prompt_len / prefill, "decode_tps": decode_tokens / decode}


def main() -> None:
    compare_rope = "--compare-rope" in sys.argv
    if compare_rope:
        sys.argv.remove("--compare-rope")
    args = parse_args(__doc__)
    path = Path(args.model) if args.model else default_model_path()
    prompt_len, decode_tokens = (40, 4) if args.quick else (512, 128)
    chunk = 32 if args.quick else 128
    results = {
        "model": path.name,
        "rlxpy": rlxpy_side(path, prompt_len, decode_tokens, chunk),
    }
    if compare_rope:
        before = rlxpy_side(path, prompt_len, decode_tokens, chunk, rope=False)
        results["rlxpy_without_rope_epilogue"] = before
        results["rope_epilogue_decode_speedup"] = results["rlxpy"]["decode_tps"] / before["decode_tps"]
    torch = torch_cuda()
    if torch is not None:
        for name, dtype in (("transformers_fp32", torch.float32), ("transformers_fp16", torch.float16)):
            results[name] = transformers_side(torch, path, dtype, prompt_len, decode_tokens)
        base = results["transformers_fp32"]
        results["decode_ratio_vs_fp32"] = results["rlxpy"]["decode_tps"] / base["decode_tps"]
        results["prefill_ratio_vs_fp32"] = results["rlxpy"]["prefill_tps"] / base["prefill_tps"]
    emit(results, args.json)


if __name__ == "__main__":
    main()
