"""State-space and mixture-of-experts kernels (issue 15) against torch, side by side.

* SelectiveScan, Mamba-1 prefill (B=1, S=2048, D=1536, N=16) and one decode step (S=1 from the
  carried state): rlxpy's chunked scan against the torch scan of transformers' MambaMixer.slow_forward
  (discretise every step at once, then a Python loop of S state updates, y_t = h_t @ C_t), and against
  a chunked torch formulation (decays as cumulative sums of dt * A in log space inside 64-step chunks,
  one matmul per chunk, a short loop over chunks): the fastest plain-torch scan we could write.
* GatedDeltaNet prefill (chunked: lowering/scan_delta_chunked.py) and decode (B=1, H=16, N=128)
  against a torch loop of the delta rule.
* GroupedMatMul (MoE, f32) with 8 and 64 experts, prefill (4096 routed rows) and decode (8 rows)
  against the per-expert torch matmuls of an HF MoE block (rows sorted by expert, one matmul each).
* A Mamba-1 LM of mamba-130m's shape with random weights (rlxpy.models.mamba): a 512-token prefill
  and 64 greedy tokens against transformers' MambaForCausalLM (torch path) on the same weights.

Every rlxpy result is checked against its torch counterpart first (max |diff| / max |torch|). Times
are medians: rlxpy per run with dispatches only (no readback) and, where the adapter has timestamp
queries, the sum of its GPU step times; torch CUDA with a synchronize. Without CUDA the torch side
runs on the CPU (a smoke run: the ratios then mean nothing). Each ratio is torch ms / rlxpy ms (> 1:
rlxpy is faster): ``wall`` against rlxpy's wall time per run with its inputs already on the GPU (fed
as GpuHandles, like torch's tensors), ``wall_read`` the same with the outputs read back to the host,
``wall_host`` with the inputs hashed and uploaded from the host each run, and ``gpu`` against the sum
of its GPU step times.
One command: ``python benches/bench_scan.py [--quick] [--json out.json]``.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from common import cuda_time, emit, parse_args, timeit, torch_cuda

import rlxpy
from rlxpy.errors import UnsupportedOpError
from rlxpy.wgpu_backend.profile import step_times_ms

FULL = {"scan": (1, 2048, 1536, 16), "delta": (1, 1024, 16, 128),
        "moe": [(8, 2048, 8192), (64, 2048, 1408)], "moe_rows": (4096, 8),
        # mamba-130m's shape (random weights), a 512-token prompt, 64 greedy tokens
        "mamba": ({"vocab_size": 50280, "hidden_size": 768, "state_size": 16, "num_hidden_layers": 24,
                   "conv_kernel": 4, "expand": 2}, 512, 64)}
QUICK = {"scan": (1, 256, 64, 16), "delta": (1, 64, 4, 32), "moe": [(8, 64, 96), (64, 64, 48)],
         "moe_rows": (300, 8),
         "mamba": ({"vocab_size": 500, "hidden_size": 64, "state_size": 8, "num_hidden_layers": 2,
                    "conv_kernel": 4, "expand": 2}, 70, 8)}
CHUNK = 64  # the chunked torch scan's chunk length
GREEDY = 32  # greedy tokens compared with transformers' generate on the same weights


# -- torch implementations --------------------------------------------------------------------------
def scan_loop(torch, x, dt, a, b, c, h):
    """MambaMixer.slow_forward's scan: all steps discretised at once, then S dependent updates."""
    decay = torch.exp(dt.unsqueeze(-1) * a)  # [B, S, D, N]
    drive = (dt * x).unsqueeze(-1) * b.unsqueeze(2)
    ys = []
    for t in range(x.shape[1]):
        h = decay[:, t] * h + drive[:, t]
        ys.append(torch.matmul(h, c[:, t].unsqueeze(-1)).squeeze(-1))
    return torch.stack(ys, dim=1), h


def scan_chunked(torch, x, dt, a, b, c, h):
    """Chunked torch scan: inside a chunk h_t = sum_s exp(L_t - L_s) drive_s + exp(L_t) h_0 with L the
    cumulative sum of dt * A (a causal-masked [T, T] weight per (channel, state)); a loop over chunks."""
    batch, steps, channels = x.shape
    ys = []
    for t0 in range(0, steps, CHUNK):
        sl = slice(t0, min(t0 + CHUNK, steps))
        log_decay = torch.cumsum(dt[:, sl].unsqueeze(-1) * a, dim=1)  # [B, T, D, N]
        drive = (dt[:, sl] * x[:, sl]).unsqueeze(-1) * b[:, sl].unsqueeze(2)
        diff = log_decay.unsqueeze(2) - log_decay.unsqueeze(1)  # [B, T(t), T(s), D, N]
        mask = torch.tril(torch.ones(diff.shape[1], diff.shape[2], dtype=torch.bool, device=x.device))
        weights = torch.where(mask[None, :, :, None, None], torch.exp(diff), torch.zeros((), device=x.device))
        states = (weights * drive.unsqueeze(1)).sum(2) + torch.exp(log_decay) * h.unsqueeze(1)
        ys.append((states * c[:, sl].unsqueeze(2)).sum(-1))
        h = states[:, -1]
    return torch.cat(ys, dim=1), h


def delta_loop(torch, q, k, v, g, beta, s):
    outs = []
    n = q.shape[-1]
    for t in range(q.shape[1]):
        s = s * torch.exp(g[:, t])[..., None, None]
        d = (v[:, t] - torch.einsum("bhij,bhi->bhj", s, k[:, t])) * beta[:, t, :, None]
        s = s + k[:, t, :, :, None] * d[:, :, None, :]
        outs.append(torch.einsum("bhij,bhi->bhj", s, q[:, t]) / math.sqrt(n))
    return torch.stack(outs, dim=1), s


def moe_experts(torch, x, w, idx):
    """HF-style MoE experts: rows sorted by expert, one matmul per expert with rows."""
    out = torch.zeros(x.shape[0], w.shape[2], device=x.device, dtype=x.dtype)
    order = torch.argsort(idx)
    counts = torch.bincount(idx, minlength=w.shape[0]).tolist()
    start = 0
    for e, count in enumerate(counts):
        if count:
            rows = order[start:start + count]
            out[rows] = x[rows] @ w[e]
            start += count
    return out


# -- timing -----------------------------------------------------------------------------------------
class Side:
    """Where torch runs: CUDA when present (timed with a synchronize), else the CPU."""

    def __init__(self) -> None:
        import torch

        self.cuda = torch_cuda()
        self.torch = torch
        self.device = "cuda" if self.cuda is not None else "cpu"

    def tensor(self, a: np.ndarray):
        return self.torch.from_numpy(np.ascontiguousarray(a)).to(self.device)

    def time_ms(self, fn: Callable[[], Any], repeat: int) -> float:
        with self.torch.no_grad():
            if self.cuda is not None:
                return 1e3 * cuda_time(self.cuda, fn, repeat=repeat)
            return 1e3 * timeit(fn, repeat=repeat, warmup=1)


def rlxpy_ms(exe, feeds: dict[str, np.ndarray], repeat: int) -> dict[str, Any]:
    """Median ms per run (dispatches only, one wait per run) with the inputs already on the GPU (fed
    from their own arena slots, as torch's tensors are: ``resident_ms``) and uploaded from the host
    each run (``ms``: hashed, compared with the last upload, copied); ``resident_readback_ms``: inputs
    on the GPU and the outputs read back to the host (a whole ``run``); plus the GPU step times when
    measurable."""
    exe.run(feeds)
    resident = {name: exe.handle(name) for name in feeds}

    def median_ms(run: Callable[[], Any]) -> float:
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            run()
            exe.sync()
            times.append(time.perf_counter() - started)
        return 1e3 * statistics.median(times)

    exe.run(feeds=resident)
    readback_ms = 1e3 * timeit(lambda: exe.run(feeds=resident), repeat=repeat, warmup=1)
    with exe.flags.override(dispatch_only=1):
        exe.run(feeds=resident)
        resident_ms = median_ms(lambda: exe.run(feeds=resident))
        host_ms = median_ms(lambda: exe.run(feeds))
        try:
            steps = step_times_ms(exe)
        except UnsupportedOpError:  # no timestamp queries on this adapter
            steps = {}
    kernels = [s.kernel or s.kind for s in exe.schedule.steps]
    return {"resident_ms": resident_ms, "ms": host_ms, "resident_readback_ms": readback_ms,
            "gpu_ms": sum(steps.values()) if steps else None, "steps": kernels}


def rel_error(got: np.ndarray, want) -> float:
    want = want.detach().double().cpu().numpy() if hasattr(want, "detach") else np.asarray(want)
    return float(np.abs(got.astype(np.float64) - want).max() / (np.abs(want).max() or 1.0))


def ratio(torch_ms: float, ours: dict[str, Any]) -> dict[str, float | None]:
    """torch ms over rlxpy's wall ms with its inputs on the GPU (``wall``: the same footing as torch,
    whose tensors stay on the GPU), the same with the outputs read back to the host (``wall_read``:
    torch's side keeps its outputs on the GPU), over its wall ms with host inputs (``wall_host``: each
    run also hashes and uploads them) and over its GPU ms (``gpu``: its steps alone)."""
    gpu = ours["gpu_ms"]
    return {"wall": torch_ms / ours["resident_ms"], "wall_read": torch_ms / ours["resident_readback_ms"],
            "wall_host": torch_ms / ours["ms"], "gpu": torch_ms / gpu if gpu else None}


# -- cases --------------------------------------------------------------------------------------------
def bench_selective_scan(side: Side, shape, repeat: int) -> dict[str, Any]:
    batch, steps, channels, n = shape
    r = np.random.default_rng(0)
    x = r.standard_normal((batch, steps, channels), dtype=np.float32)
    dt = np.log1p(np.exp(r.standard_normal((batch, steps, channels)) - 2.0)).astype(np.float32)
    a = -np.exp(r.uniform(0.0, np.log(16.0), (channels, n))).astype(np.float32)  # Mamba's A init range
    b, c = (r.standard_normal((batch, steps, n), dtype=np.float32) for _ in range(2))
    results = {}
    for mode, s in (("prefill", steps), ("decode", 1)):
        g = rlxpy.Graph(f"scan_{mode}")
        seq = g.input("x", (batch, s, channels)), g.input("dt", (batch, s, channels))
        bc = g.input("b", (batch, s, n)), g.input("c", (batch, s, n))
        state = g.param("state", (batch, channels, n))
        y = g.selective_scan(*seq, g.param("A", (channels, n)), *bc, state=state, name="y")
        g.output(y)
        exe = rlxpy.compile(g)
        exe.set_param("A", a)
        zeros = np.zeros((batch, channels, n), np.float32)
        exe.set_param("state", zeros)
        feeds = {"x": x[:, :s], "dt": dt[:, :s], "b": b[:, :s], "c": c[:, :s]}
        got = exe.run(feeds)["y"]
        tx, tdt, tb, tc = (side.tensor(feeds[k]) for k in ("x", "dt", "b", "c"))
        targs = (side.torch, tx, tdt, side.tensor(a), tb, tc, side.tensor(zeros))
        want, _ = scan_loop(*targs)
        chunked, _ = scan_chunked(*targs)
        ours = rlxpy_ms(exe, feeds, repeat)
        loop_ms = side.time_ms(lambda args=targs: scan_loop(*args), max(3, repeat // 4))
        chunk_ms = side.time_ms(lambda args=targs: scan_chunked(*args), repeat)
        results[mode] = {"shape": [batch, s, channels, n], "rlxpy": ours, "torch_loop_ms": loop_ms,
                         "torch_chunked_ms": chunk_ms, "ratio_vs_loop": ratio(loop_ms, ours),
                         "ratio_vs_chunked": ratio(chunk_ms, ours), "rel_error": rel_error(got, want),
                         "chunked_torch_rel_error": rel_error(chunked.cpu().numpy(), want)}
        exe.destroy()
    return results


def bench_gated_delta(side: Side, shape, repeat: int) -> dict[str, Any]:
    batch, steps, heads, n = shape
    r = np.random.default_rng(1)

    def unit(shape):
        t = r.standard_normal(shape)
        return (t / np.linalg.norm(t, axis=-1, keepdims=True)).astype(np.float32)

    full = {"q": unit((batch, steps, heads, n)), "k": unit((batch, steps, heads, n)),
            "v": r.standard_normal((batch, steps, heads, n), dtype=np.float32),
            "g": -np.abs(0.1 * r.standard_normal((batch, steps, heads))).astype(np.float32),
            "beta": (1 / (1 + np.exp(-r.standard_normal((batch, steps, heads))))).astype(np.float32)}
    results = {}
    for mode, s in (("prefill", steps), ("decode", 1)):
        g = rlxpy.Graph(f"delta_{mode}")
        ins = [g.input(nm, (batch, s, heads, n)) for nm in "qkv"] + [g.input(nm, (batch, s, heads))
                                                                       for nm in ("g", "beta")]
        g.output(g.gated_delta_net(*ins, state=g.param("state", (batch, heads, n, n)), name="o"))
        exe = rlxpy.compile(g)
        zeros = np.zeros((batch, heads, n, n), np.float32)
        exe.set_param("state", zeros)
        feeds = {k: v[:, :s] for k, v in full.items()}
        got = exe.run(feeds)["o"]
        tensors = [side.tensor(feeds[k]) for k in ("q", "k", "v", "g", "beta")]
        targs = (side.torch, *tensors, side.tensor(zeros))
        want, _ = delta_loop(*targs)
        ours = rlxpy_ms(exe, feeds, repeat)
        loop_ms = side.time_ms(lambda args=targs: delta_loop(*args), max(3, repeat // 4))
        results[mode] = {"shape": [batch, s, heads, n], "rlxpy": ours, "torch_loop_ms": loop_ms,
                         "ratio_vs_loop": ratio(loop_ms, ours), "rel_error": rel_error(got, want)}
        exe.destroy()
    return results


def bench_grouped(side: Side, experts: int, k: int, n: int, rows: int, repeat: int) -> dict[str, Any]:
    r = np.random.default_rng(experts * rows)
    x = r.standard_normal((rows, k), dtype=np.float32)
    w = (r.standard_normal((experts, k, n), dtype=np.float32) / np.float32(math.sqrt(k)))
    idx = r.integers(0, experts, rows).astype(np.int32)
    g = rlxpy.Graph(f"moe_{experts}_{rows}")
    nodes = g.input("x", (rows, k)), g.param("w", (experts, k, n)), g.input("idx", (rows,), "i32")
    g.output(g.grouped_matmul(*nodes, name="y"))
    exe = rlxpy.compile(g)
    exe.set_param("w", w)
    feeds = {"x": x, "idx": idx}
    got = exe.run(feeds)["y"]
    tx, tw, ti = side.tensor(x), side.tensor(w), side.tensor(idx.astype(np.int64))
    want = moe_experts(side.torch, tx, tw, ti)
    exact = moe_experts(side.torch, tx.double(), tw.double(), ti).cpu().numpy()
    rms = {name: float(np.sqrt(np.mean((v - exact) ** 2)))
           for name, v in (("rlxpy", got), ("torch", want.cpu().numpy()))}
    ours = rlxpy_ms(exe, feeds, repeat)
    torch_ms = side.time_ms(lambda: moe_experts(side.torch, tx, tw, ti), repeat)
    flops = 2.0 * rows * k * n
    ours_ms = ours["gpu_ms"] or ours["resident_ms"]
    exe.destroy()
    return {"experts": experts, "rows": rows, "k": k, "n": n, "rlxpy": ours, "torch_ms": torch_ms,
            "ratio": ratio(torch_ms, ours), "rlxpy_tflops": flops / ours_ms / 1e9,
            "torch_tflops": flops / torch_ms / 1e9, "rel_error": rel_error(got, want),
            # rms error against the float64 product, rlxpy's over torch f32's
            "err_vs_torch": rms["rlxpy"] / rms["torch"]}


def bench_mamba_model(side: Side, shape: dict[str, int], prompt: int, steps: int) -> dict[str, Any]:
    """A Mamba-1 LM of that shape with random weights: prompt prefill (rlxpy in chunks of 64) and greedy
    decode, rlxpy against transformers' MambaForCausalLM (its torch path) on the same weights."""
    import torch
    from transformers import MambaConfig, MambaForCausalLM

    from rlxpy.frontends.hf_mamba import config_from_hf, load_into
    from rlxpy.models.mamba import MambaGenerator

    torch.manual_seed(0)
    model = MambaForCausalLM(MambaConfig(**shape)).eval()
    started = time.perf_counter()
    gen = MambaGenerator(config_from_hf(model.config), chunk=64)
    compile_s = time.perf_counter() - started
    load_into(gen, model.state_dict())
    ids = [int(t) for t in np.random.default_rng(0).integers(0, shape["vocab_size"], prompt)]
    got = gen.logits(ids)
    model = model.to(side.device)
    tids = torch.tensor([ids], device=side.device)
    with torch.no_grad():
        want = model(tids).logits[0, -1]
    gen.reset()
    gen.prefill(ids, ("next",))  # warm: every pipeline of both branches
    gen.generate(ids[:3], 2)

    def ours_prefill() -> None:
        gen.reset()
        gen.prefill(ids, ("next",))

    prefill_ms = 1e3 * timeit(ours_prefill, repeat=3, warmup=1)
    started = time.perf_counter()
    tokens = gen.generate(ids, steps)
    decode_s = time.perf_counter() - started - prefill_ms / 1e3
    with torch.no_grad():
        torch_prefill_ms = side.time_ms(lambda: model(tids), 3)
        torch_total_ms = side.time_ms(lambda: model.generate(tids, max_new_tokens=steps, min_new_tokens=steps,
                                                             do_sample=False, pad_token_id=0), 1)
    torch_decode_s = max(1e-9, (torch_total_ms - torch_prefill_ms) / 1e3)
    with torch.no_grad():
        greedy = model.generate(tids, max_new_tokens=GREEDY, min_new_tokens=GREEDY, do_sample=False,
                                pad_token_id=0)[0, prompt:].tolist()
    same = gen.generate(ids, GREEDY) == greedy
    return {"shape": shape, "prompt": prompt, "decode_steps": steps, "compile_s": compile_s,
            "rel_error": rel_error(got, want), "tokens": tokens[:8],
            f"greedy_{GREEDY}_identical": same, "decode_ms_by_position": decode_by_position(gen, shape),
            "prefill_ms": prefill_ms, "torch_prefill_ms": torch_prefill_ms,
            "prefill_ratio": torch_prefill_ms / prefill_ms,
            "decode_tok_s": (steps - 1) / max(decode_s, 1e-9),
            "torch_decode_tok_s": (steps - 1) / torch_decode_s,
            "decode_ratio": torch_decode_s / max(decode_s, 1e-9)}


def decode_by_position(gen, shape: dict[str, int], far: int = 2000, repeat: int = 20) -> dict[str, float]:
    """Median ms of one decode step (token in, logits read back) after 16 and after ``far``
    prompt tokens: the carried state makes it independent of the position."""
    ids = [int(t) for t in np.random.default_rng(1).integers(0, shape["vocab_size"], far)]
    out = {}
    for position in (16, far):
        gen.reset()
        gen.prefill(ids[:position], ("next",))
        out[str(position)] = 1e3 * timeit(lambda: gen.decode(ids[0]), repeat=repeat)
    return out


def main() -> None:
    args = parse_args(__doc__)
    sizes = QUICK if args.quick else FULL
    repeat = 3 if args.quick else 20
    side = Side()
    if side.cuda is not None:
        side.torch.backends.cuda.matmul.allow_tf32 = False  # f32 against f32
        side.torch.backends.cudnn.allow_tf32 = False  # convolutions too (cuDNN's default is TF32)
    results: dict[str, Any] = {"torch_device": side.device, "quick": bool(args.quick)}
    results["selective_scan"] = bench_selective_scan(side, sizes["scan"], repeat)
    results["gated_delta_net"] = bench_gated_delta(side, sizes["delta"], repeat)
    results["grouped_matmul"] = [bench_grouped(side, e, k, n, rows, repeat)
                                 for e, k, n in sizes["moe"] for rows in sizes["moe_rows"]]
    results["mamba_model"] = bench_mamba_model(side, *sizes["mamba"])
    emit(results, args.json)


if __name__ == "__main__":
    main()
