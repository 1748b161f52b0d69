"""AttentionBackward alone (issue 16's training step spends most of its attention time here): the GPU
time of rlxpy's kernels (statistics, dQ, dK/dV; timestamp queries, median over runs) for the gradients
wrt q, k and v of causal attention at the 6-layer GPT's shape (batch 16, 6 heads, 256 tokens, head_dim
64, q/k/v as [B, S, H*D]), beside torch CUDA's autograd of F.scaled_dot_product_attention (the
backward alone, CUDA events), and the largest error of rlxpy's gradients relative to torch's in float64.

    python benches/bench_attention_backward.py [--quick] [--json results.json]

``--quick`` shrinks the shape (lavapipe smoke run). Prints the results as JSON.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
from common import emit, torch_cuda  # noqa: E402

import rlxpy  # noqa: E402


def rlxpy_side(batch: int, heads: int, seq: int, dim: int, feeds: dict, runs: int) -> dict:
    g = rlxpy.Graph("attention_backward")
    q, k, v, dy = (g.input(name, [batch, seq, heads * dim]) for name in ("q", "k", "v", "dy"))
    g.output(g.attention_backward(q, k, v, dy, "all", heads, dim, mask_kind="causal", name="grads"))
    exe = rlxpy.compile(g)
    got = exe.run(feeds)["grads"]
    per_kernel: dict[str, list[float]] = {}
    for _ in range(runs):
        for group in exe.profile(feeds).by_kernel():
            per_kernel.setdefault(group["key"], []).append(group["ms"])
    ms = {key: round(statistics.median(times), 4) for key, times in per_kernel.items()}
    return {"grads": got, "gpu_ms_by_kernel": ms, "gpu_ms": round(sum(ms.values()), 4)}


def torch_side(batch: int, heads: int, seq: int, dim: int, feeds: dict, runs: int) -> dict:
    torch = torch_cuda()
    device = "cuda" if torch is not None else "cpu"
    if torch is None:
        import torch
    import torch.nn.functional as F

    def heads_first(x, dtype):
        return torch.tensor(x, dtype=dtype, device=device).view(batch, seq, heads, dim).transpose(1, 2)

    def grads(dtype):
        q, k, v = (heads_first(feeds[n], dtype).requires_grad_() for n in "qkv")
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return out, (q, k, v), heads_first(feeds["dy"], dtype)

    out, qkv, dy = grads(torch.float64)
    want = torch.autograd.grad(out, qkv, dy)
    flat = np.concatenate([w.transpose(1, 2).reshape(-1).cpu().numpy() for w in want])
    result = {"want": flat, "torch_device": device}
    if device == "cuda":
        out, qkv, dy = grads(torch.float32)
        times = []
        for _ in range(runs + 3):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.autograd.grad(out, qkv, dy, retain_graph=True)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        result["torch_backward_ms"] = round(statistics.median(times[3:]), 4)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args()
    batch, heads, seq, dim = (1, 2, 70, 64) if args.quick else (16, 6, 256, 64)
    runs = 3 if args.quick else 9
    rng = np.random.default_rng(0)
    shape = (batch, seq, heads * dim)
    feeds = {n: rng.standard_normal(shape).astype(np.float32) for n in ("q", "k", "v", "dy")}
    ours = rlxpy_side(batch, heads, seq, dim, feeds, runs)
    theirs = torch_side(batch, heads, seq, dim, feeds, runs)
    got, want = ours.pop("grads").reshape(-1), theirs.pop("want")
    results = {"shape": {"batch": batch, "heads": heads, "seq": seq, "head_dim": dim, "mask": "causal"},
               **ours, **theirs,
               "max_error_relative_to_max": float(np.abs(got - want).max() / np.abs(want).max())}
    if "torch_backward_ms" in results:
        results["torch_over_rlxpy"] = round(results["torch_backward_ms"] / results["gpu_ms"], 3)
    emit(results, args.json)


if __name__ == "__main__":
    main()
