"""Training (issue 16): the acceptance run and a training-step timing, rlxpy beside torch.

1. Acceptance: a 2-layer byte-level GPT (d=128, 4 heads, batch 8 x 128 bytes) trained with AdamW
   (lr 1e-3, weight decay 0.1) and global-norm clipping (1.0) on bytes of Python's stdlib sources,
   from the same initialisation and batches in rlxpy (rlxpy.train.Trainer) and torch (CUDA when
   present, else the CPU; f32, TF32 off). Reports the per-step losses, the relative difference at
   step 1 (must be < 1e-4) and its maximum over the steps (must be < 1e-3).
2. Timing: one training step (forward, backward, clipping, AdamW; batch in, loss out) of a 6-layer
   GPT (d=384, 6 heads) at batch 16 x 256: the median wall time of rlxpy's Trainer.step and of torch
   CUDA eager (when present), and torch / rlxpy (> 1: rlxpy is faster); plus rlxpy's GPU time by
   kernel (timestamp queries) for the top kernels; and torch.compile's (inductor's) step time. Memory:
   rlxpy's arena bytes (parameters, optimizer state, activations, gradients and scratch, all of the
   step) beside torch's peak allocated bytes over its eager steps (torch.cuda.max_memory_allocated:
   the same parameters, AdamW state, activations and gradients, excluding the CUDA context).

    python benches/bench_train.py [--quick] [--json results.json] [--steps 50]

``--quick`` shrinks both (lavapipe smoke run). Prints the results as JSON.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
from common import emit, timeit, torch_cuda  # noqa: E402

from rlxpy.models.gpt import GptConfig, build_gpt, init_params, sample_batch, stdlib_corpus  # noqa: E402
from rlxpy.train import AdamW, Trainer  # noqa: E402

LR, WEIGHT_DECAY, CLIP = 1e-3, 0.1, 1.0


def parse_args():
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the results here as JSON")
    parser.add_argument("--quick", action="store_true", help="small models, few steps (lavapipe smoke run)")
    parser.add_argument("--steps", type=int, default=0, help="acceptance steps (default 50; --quick 5)")
    parser.add_argument("--repeat", type=int, default=0, help="timed steps (default 10; --quick 2)")
    return parser.parse_args()


def torch_module():
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return torch


def acceptance(cfg: GptConfig, steps: int, device: str) -> dict:
    from tests.gpt_torch import torch_train

    corpus = stdlib_corpus()
    rng = np.random.default_rng(0)
    batches = [sample_batch(corpus, cfg, rng) for _ in range(steps)]
    params = init_params(cfg, seed=0)
    trainer = Trainer(build_gpt(cfg), AdamW(lr=LR, weight_decay=WEIGHT_DECAY), clip_norm=CLIP)
    trainer.set_params(params)
    ours = [trainer.step(b) for b in batches]
    torch_module()
    theirs = torch_train(params, batches, cfg.layers, cfg.heads, LR, WEIGHT_DECAY, CLIP, device=device)
    relative = np.abs(np.array(ours) - np.array(theirs)) / np.abs(np.array(theirs))
    return {"config": cfg.__dict__, "steps": steps, "torch_device": device,
            "loss_rlxpy": [round(x, 6) for x in ours], "loss_torch": [round(x, 6) for x in theirs],
            "step1_relative_diff": float(relative[0]), "max_relative_diff": float(relative.max()),
            "passes": bool(relative[0] < 1e-4 and relative.max() < 1e-3)}


def timing(cfg: GptConfig, repeat: int) -> dict:
    corpus = stdlib_corpus()
    rng = np.random.default_rng(1)
    batch = sample_batch(corpus, cfg, rng)
    params = init_params(cfg, seed=0)
    started = time.perf_counter()
    trainer = Trainer(build_gpt(cfg), AdamW(lr=LR, weight_decay=WEIGHT_DECAY), clip_norm=CLIP)
    compile_s = time.perf_counter() - started
    trainer.set_params(params)
    ours = timeit(lambda: trainer.step(batch), repeat=repeat, warmup=2)
    # one more step, every dispatch timed (one pass per step: the sum exceeds a plain step's time)
    hyper = np.array([LR, trainer.steps + 1, 1.0], np.float32)
    profile = trainer.exe.profile({**batch, "train/hyper": hyper})
    kernels = sorted(profile.by_kernel(), key=lambda group: -group["ms"])[:12]
    out = {"config": cfg.__dict__, "steps_in_schedule": len(trainer.exe.schedule.steps),
           "compile_s": round(compile_s, 2), "rlxpy_step_ms": round(ours * 1e3, 3),
           "rlxpy_arena_bytes": trainer.exe.arena.size,
           "rlxpy_profiled_gpu_ms_by_kernel": {g["key"]: round(g["ms"], 3) for g in kernels}}
    torch = torch_cuda()
    if torch is not None:
        from tests.gpt_torch import gpt_loss

        torch_module()
        p = {k: torch.nn.Parameter(torch.tensor(v, device="cuda")) for k, v in params.items()}
        opt = torch.optim.AdamW(list(p.values()), lr=LR, weight_decay=WEIGHT_DECAY)
        tokens, targets = (torch.tensor(batch[k], device="cuda") for k in ("tokens", "targets"))

        def torch_step() -> float:
            opt.zero_grad()
            loss = gpt_loss(p, tokens, targets, cfg.layers, cfg.heads)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(list(p.values()), CLIP)
            opt.step()
            return loss.item()

        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        theirs = timeit(torch_step, repeat=repeat, warmup=3)
        peak = torch.cuda.max_memory_allocated()
        out |= {"torch_cuda_step_ms": round(theirs * 1e3, 3), "torch_over_rlxpy": round(theirs / ours, 3),
                "torch_peak_bytes": peak, "arena_over_torch_peak": round(trainer.exe.arena.size / peak, 3)}
        out |= torch_compiled_timing(torch, p, opt, tokens, targets, cfg, repeat)
    return out


def torch_compiled_timing(torch, p: dict, opt, tokens, targets, cfg: GptConfig, repeat: int) -> dict:
    """The same step with the loss (forward and backward) through torch.compile's default backend
    (inductor); the optimizer stays eager. Reports its error instead when inductor cannot run here."""
    from tests.gpt_torch import gpt_loss

    try:
        compiled = torch.compile(gpt_loss)

        def step() -> float:
            opt.zero_grad()
            loss = compiled(p, tokens, targets, cfg.layers, cfg.heads)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(list(p.values()), CLIP)
            opt.step()
            return loss.item()

        started = time.perf_counter()
        step()
        compile_s = time.perf_counter() - started
        ms = timeit(step, repeat=repeat, warmup=2) * 1e3
    except Exception as e:  # noqa: BLE001 (no triton / no compiler on this machine)
        return {"torch_compile_error": f"{type(e).__name__}: {str(e)[:200]}"}
    return {"torch_compile_step_ms": round(ms, 3), "torch_compile_first_step_s": round(compile_s, 1)}


def main() -> None:
    args = parse_args()
    torch = torch_cuda()
    device = "cuda" if torch is not None else "cpu"
    if args.quick:
        small = GptConfig(vocab=256, d_model=32, heads=4, layers=2, seq=16, batch=4)
        timed = GptConfig(vocab=256, d_model=64, heads=2, layers=2, seq=32, batch=2)
    else:
        small = GptConfig(vocab=256, d_model=128, heads=4, layers=2, seq=128, batch=8)
        timed = GptConfig(vocab=256, d_model=384, heads=6, layers=6, seq=256, batch=16)
    steps = args.steps or (5 if args.quick else 50)
    repeat = args.repeat or (2 if args.quick else 10)
    emit({"bench": "train", "acceptance": acceptance(small, steps, device), "timing": timing(timed, repeat)},
         args.json)


if __name__ == "__main__":
    main()
