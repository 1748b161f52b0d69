"""SmolLM2-135M decode and prefill speed: rlxpy (WebGPU) beside transformers (CUDA, eager).

rlxpy runs the Q4_1 GGUF as is (weights stay quantised); transformers loads the same GGUF,
dequantised to fp32 and fp16. Reports tok/s for batch-1 greedy decode and for prefill of a
512-token prompt, and where one decode token's time goes.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
from common import emit, parse_args, torch_cuda

from rlxpy.frontends.gguf import default_model_path
from rlxpy.models.generate import Generator


def rlxpy_side(path, prompt_len: int, decode_tokens: int, chunk: int) -> dict:
    started = time.perf_counter()
    gen, model = Generator.from_gguf(path, context=max(1024, prompt_len + decode_tokens + 8), chunk=chunk)
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
    t0 = time.perf_counter()
    for _ in range(20):
        enc = exe.device.device.create_command_encoder()
        for s in segments:
            if s.kind == "gpu":
                exe.encoder._encode_pass(enc, s)
        enc.finish()
    encode_ms = (time.perf_counter() - t0) / 20 * 1e3
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
        "decode_encode_ms": encode_ms,
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
    args = parse_args(__doc__)
    path = Path(args.model) if args.model else default_model_path()
    prompt_len, decode_tokens = (40, 4) if args.quick else (512, 128)
    results = {
        "model": path.name,
        "rlxpy": rlxpy_side(path, prompt_len, decode_tokens, 32 if args.quick else 128),
    }
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
