"""FFTs and a Whisper log-mel front end (issue 14), rlxpy side by side with torch (cuFFT on CUDA).

Cases: batched c64 FFTs of 2^10, 2^13, 2^14 and 2^20 points (one workgroup per line; 2^13 and 2^14
longer than its memory, exchanged in rounds; four-step passes), mixed-radix lengths (480, 1000,
2187 = 3^7), primes through Bluestein (97 in one workgroup, 4099's m = 16384 in one workgroup per line
or in four-step passes), an rfft, and the log-mel of 30 s of 16 kHz speech-like audio (Stft, LogMel
with the per-spectrogram floor: WhisperFeatureExtractor's features) at batch 1 and 8. Every rlxpy
result is checked first (max |diff| / max |want| against numpy / the float64 reference).

Times are medians. rlxpy: the sum of its GPU step times (timestamp queries, ``gpu_ms``) and the wall
time of a run with dispatches only (``ms``: submit and wait, no readback); torch: CUDA events around
back-to-back calls on device tensors (without CUDA, torch runs on the CPU: a smoke run, the ratios
then mean nothing). ``ratio`` = torch ms / rlxpy GPU ms (> 1: rlxpy is faster; ``ratio_wall`` uses
rlxpy's wall time, submit and wait included); ``gpoints_s`` = points transformed per second (1e9) by
rlxpy's GPU time.

Bandwidth: ``passes`` = GPU steps, ``min_mb`` = one read of the input and one write of the output,
``moved_mb`` = what the passes move (each reads and writes its lines once: the four-step scratch counted),
``gb_s`` = moved_mb / GPU time; ``step_ms`` = each pass's GPU time.

One command: ``python benches/bench_fft.py [--quick] [--json out.json] [--cases 2^10,2^20]
[--shape-cap P,I] [--max-radix R] [--pass-radix R] [--row-fast-in F] [--pass-invocations I[,L]]
[--prefetch-roots 0|1] [--ab "NAME=V NAME=V;NAME=V"]``;
``--quick`` uses small batches and a 5 s clip (lavapipe);
``--cases`` keeps the cases whose name contains one of the comma-separated words (``log-mel`` for the
log-mel rows); ``--shape-cap P,I`` shapes the FFT variants for at most P points of workgroup memory
and I invocations (default 2048,256, lowering/signal_fft.py; a large pair means the device's limits);
``--max-radix R`` caps the stages' power-of-two radix (default 4, lowering/signal_fft_code.py);
``--pass-radix R`` fixes it for the four-step passes (default: chosen per line length,
lowering/signal_fft.py ``PASS_MIN_LINES``); ``--row-fast-in F`` sets the lines side by side while a
four-step row pass loads (``ROW_FAST_IN``; 1: each line's points adjacent, regrouped before it stores);
``--pass-invocations I[,L]`` gives the four-step passes over lines of at least L points (default 1024) I
invocations per workgroup (``PASS_INVOCATIONS``: fewer points and registers per invocation);
``--prefetch-roots 1`` loads every stage's roots with the first stage's points
(lowering/signal_fft_code.py ``PREFETCH_ROOTS``);
``--ab`` runs the cases once per ``;``-separated setting in one process, each setting a space-separated
list of module switches of lowering/signal_fft.py or signal_fft_code.py (``ROUNDS_LINES=0``,
``ROUNDS_RADIX=8``, ``ROUNDS_CHUNK=None``; an empty setting: the defaults), torch timed beside every row.
The JSON also records the device's workgroup limits and features.
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

import numpy as np
from common import emit, parse_args, torch_cuda

import rlxpy
from rlxpy.errors import UnsupportedOpError
from rlxpy.ir.ops.signal import fft_plan_length
from rlxpy.ir.reference import run_reference
from rlxpy.wgpu_backend.lowering import signal_fft, signal_fft_code
from rlxpy.wgpu_backend.profile import step_times_ms

#: (name, length, points per batch: batch = points // length); kind "c2c" or "rfft"
CASES = [
    ("c64 2^10", 1 << 10, 1 << 22, "c2c"),
    ("c64 2^13", 1 << 13, 1 << 22, "c2c"),
    ("c64 2^14", 1 << 14, 1 << 22, "c2c"),
    ("c64 2^20", 1 << 20, 1 << 22, "c2c"),
    ("c64 480 (2^5 3 5)", 480, 1 << 22, "c2c"),
    ("c64 1000 (2^3 5^3)", 1000, 1 << 22, "c2c"),
    ("c64 2187 (3^7)", 2187, 1 << 22, "c2c"),
    ("c64 97 (prime, Bluestein)", 97, 1 << 21, "c2c"),
    ("c64 4099 (prime, Bluestein m = 16384)", 4099, 1 << 20, "c2c"),
    ("rfft 2^12", 1 << 12, 1 << 22, "rfft"),
]
QUICK_POINTS = 1 << 14
REPEAT, QUICK_REPEAT = 20, 3


class Torch:
    """torch on CUDA (timed with events over back-to-back calls) or, without CUDA, on the CPU."""

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.cuda = torch_cuda() is not None
        self.device = "cuda" if self.cuda else "cpu"

    def tensor(self, a: np.ndarray):
        return self.torch.from_numpy(np.ascontiguousarray(a)).to(self.device)

    def ms(self, fn, repeat: int) -> float:
        torch = self.torch
        with torch.no_grad():
            for _ in range(3):
                fn()
            if not self.cuda:
                times = []
                for _ in range(repeat):
                    started = time.perf_counter()
                    fn()
                    times.append(time.perf_counter() - started)
                return 1e3 * statistics.median(times)
            torch.cuda.synchronize()
            rounds = []
            for _ in range(5):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(repeat):
                    fn()
                end.record()
                torch.cuda.synchronize()
                rounds.append(start.elapsed_time(end) / repeat)
            return statistics.median(rounds)


def take_option(name: str, sep: str = ",") -> list[str]:
    """This bench's ``--name a,b`` (taken off argv before common.parse_args sees it)."""
    if name not in sys.argv:
        return []
    at = sys.argv.index(name)
    words = sys.argv[at + 1].split(sep)
    del sys.argv[at:at + 2]
    return words


def rlxpy_ms(exe, feeds: dict[str, np.ndarray], repeat: int) -> dict[str, Any]:
    """Median wall ms of a run with dispatches only, the median sum of GPU step times and each step's."""
    exe.run(feeds)
    walls, gpu, per_step = [], [], []
    with exe.flags.override(dispatch_only=1):
        for _ in range(repeat):
            started = time.perf_counter()
            exe.run(feeds)
            exe.sync()
            walls.append(time.perf_counter() - started)
        try:
            for _ in range(min(repeat, 5)):
                times = step_times_ms(exe)
                gpu.append(sum(times.values()))
                per_step.append([times[i] for i in sorted(times)])
        except UnsupportedOpError:  # no timestamp queries on this adapter
            gpu = []
    step_ms = [statistics.median(column) for column in zip(*per_step)] if per_step else []
    return {"ms": 1e3 * statistics.median(walls), "gpu_ms": statistics.median(gpu) if gpu else None,
            "steps": [s.kernel or s.kind for s in exe.schedule.steps], "step_ms": step_ms}


def rel_error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got.astype(np.complex128) - want).max() / (np.abs(want).max() or 1.0))


def bench_fft(side: Torch, name: str, n: int, points: int, kind: str, repeat: int) -> dict[str, Any]:
    batch = max(1, points // n)
    rng = np.random.default_rng(n)
    g = rlxpy.Graph("fft")
    if kind == "rfft":
        x = rng.standard_normal((batch, n)).astype(np.float32)
        y = g.rfft(g.input("x", x.shape))
        want = np.fft.rfft(x[:4].astype(np.float64))
    else:
        x = (rng.standard_normal((batch, n)) + 1j * rng.standard_normal((batch, n))).astype(np.complex64)
        y = g.fft(g.input("x", x.shape, "c64"))
        want = np.fft.fft(x[:4].astype(np.complex128))
    g.output(y)
    exe = rlxpy.compile(g)
    got = exe.run({"x": x})[y.name]
    ours = rlxpy_ms(exe, {"x": x}, repeat)
    tx = side.tensor(x)
    fft = side.torch.fft.rfft if kind == "rfft" else side.torch.fft.fft
    theirs = side.ms(lambda: fft(tx), repeat)
    gpu = ours["gpu_ms"]
    passes = len([s for s in exe.schedule.steps if s.kind == "gpu"])
    min_bytes = x.nbytes + got.nbytes
    # a single pass moves the lines once each way; each four-step pass (2 per line, Bluestein's 4, however
    # many chunks of lines run them) moves the plan length's c64 points once each way
    per_line = 2 if fft_plan_length(n) == n else 4
    moved = min_bytes if passes == 1 else per_line * 2 * batch * fft_plan_length(n) * 8
    return {"case": name, "n": n, "batch": batch, "plan_length": fft_plan_length(n),
            "rel_err": rel_error(got[:4], want), **ours, "torch_ms": theirs,
            "ratio": theirs / gpu if gpu else None, "ratio_wall": theirs / ours["ms"],
            "gpoints_s": batch * n / gpu / 1e6 if gpu else None, "passes": passes,
            "min_mb": min_bytes / 2**20, "moved_mb": moved / 2**20,
            "gb_s": moved / gpu / 1e6 if gpu else None}


def speech_like(seconds: float, seed: int, rate: int = 16000) -> np.ndarray:
    """Two chirps (one gated on and off like syllables) plus noise (tests/ops/test_signal.py's clip)."""
    t = np.arange(int(rate * seconds)) / rate
    low = 0.3 * np.sin(2 * np.pi * (200 * t + 40 * t**2))
    high = 0.2 * np.sin(2 * np.pi * (3000 * t - 30 * t**2)) * (np.sin(2 * np.pi * 1.5 * t) > 0)
    return (low + high + 0.01 * np.random.default_rng(seed).standard_normal(t.size)).astype(np.float32)


def bench_log_mel(side: Torch, seconds: float, batch: int, repeat: int) -> dict[str, Any]:
    rate, n_fft, hop, n_mels = 16000, 400, 160, 80
    audio = np.stack([speech_like(seconds, seed) for seed in range(batch)])
    samples = audio.shape[-1]
    frames = samples // hop
    window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)).astype(np.float32)
    try:
        from transformers import WhisperFeatureExtractor

        filters = WhisperFeatureExtractor(feature_size=n_mels).mel_filters.T.astype(np.float32)
    except ImportError:  # any non-negative filterbank times the same
        filters = np.abs(np.random.default_rng(0).standard_normal((n_mels, n_fft // 2 + 1)), dtype=np.float32)
    g = rlxpy.Graph("log_mel")
    spectrum = g.stft(g.input("audio", audio.shape), g.param("window", window.shape), n_fft, hop)
    mel = g.log_mel(g.narrow(spectrum, 1, 0, frames), g.param("filters", filters.shape), floor_axes=2)
    out = g.transpose(mel, [0, 2, 1])  # [batch, n_mels, frames], as WhisperFeatureExtractor gives
    g.output(out)
    exe = rlxpy.compile(g)
    exe.set_param("window", window)
    exe.set_param("filters", filters)
    got = exe.run({"audio": audio})[out.name]
    want = run_reference(g, {"audio": audio}, {"window": window, "filters": filters})[out.name]
    ours = rlxpy_ms(exe, {"audio": audio}, repeat)
    torch = side.torch
    ta, tw, tf = side.tensor(audio), side.tensor(window), side.tensor(filters)

    def torch_log_mel():  # transformers' _torch_extract_fbank_features
        stft = torch.stft(ta, n_fft, hop, window=tw, return_complex=True)
        power = stft[..., :-1].abs() ** 2
        logs = torch.clamp(tf @ power, min=1e-10).log10()
        top = logs.amax(dim=(-2, -1), keepdim=True)
        return (torch.maximum(logs, top - 8.0) + 4.0) / 4.0

    theirs = side.ms(torch_log_mel, repeat)
    gpu = ours["gpu_ms"]
    return {"case": f"log-mel {seconds:g} s x {batch}", "samples": samples, "rate": rate,
            "abs_err": float(np.abs(got - want).max()), **ours, "torch_ms": theirs,
            "ratio": theirs / gpu if gpu else None, "ratio_wall": theirs / ours["ms"]}


def table(results: list[dict[str, Any]]) -> str:
    """The short table printed last."""
    rows = [f"{'case':38} batch passes  GPU ms  torch ms  torch/rlxpy   GB/s  setting"]
    for r in results:
        gpu, ratio, rate = r.get("gpu_ms"), r.get("ratio"), r.get("gb_s")
        gpu_text = "-" if gpu is None else f"{gpu:.4f}"
        ratio_text = "-" if ratio is None else f"{ratio:.3f}"
        rate_text = "-" if rate is None else f"{rate:.0f}"
        rows.append(f"{r['case'][:38]:38} {r.get('batch', ''):>5} {r.get('passes', ''):>6} {gpu_text:>7} "
                    f"{r['torch_ms']:9.4f} {ratio_text:>12} {rate_text:>6}  {r.get('setting', '')}")
    return "\n".join(rows)


def apply_setting(setting: str, defaults: dict[tuple[object, str], object]) -> None:
    """Reset the switches an earlier setting changed, then set ``NAME=V ...`` (ints; None) on
    signal_fft or signal_fft_code, whichever has the name."""
    for (module, name), value in defaults.items():
        setattr(module, name, value)
    for pair in setting.split():
        name, value = pair.split("=")
        module = signal_fft if hasattr(signal_fft, name) else signal_fft_code
        if not hasattr(module, name):
            raise SystemExit(f"--ab: no switch {name} in lowering/signal_fft*.py")
        defaults.setdefault((module, name), getattr(module, name))
        setattr(module, name, None if value == "None" else int(value))


def device_limits() -> dict[str, Any]:
    from rlxpy.wgpu_backend.device import get_device

    dev = get_device()
    keys = ("max-compute-workgroup-storage-size", "max-compute-invocations-per-workgroup")
    return {**{key: dev.limits[key] for key in keys}, "features": sorted(dev.features)}


def main() -> None:
    cases = take_option("--cases")
    cap = take_option("--shape-cap")
    if cap:  # the workgroup budget of the FFT variants (lowering/signal_fft.py SHAPE_*), for an A/B run
        signal_fft.SHAPE_POINTS, signal_fft.SHAPE_INVOCATIONS = int(cap[0]), int(cap[1])
    radix = take_option("--max-radix")
    if radix:  # the largest power-of-two radix of a stage (lowering/signal_fft_code.py MAX_RADIX)
        signal_fft_code.MAX_RADIX = int(radix[0])
    pass_radix = take_option("--pass-radix")
    if pass_radix:  # the four-step passes' radix (lowering/signal_fft.py PASS_MAX_RADIX)
        signal_fft.PASS_MAX_RADIX = int(pass_radix[0])
    row_in = take_option("--row-fast-in")
    if row_in:  # lines side by side while a row pass loads (lowering/signal_fft.py ROW_FAST_IN)
        signal_fft.ROW_FAST_IN = int(row_in[0])
    wide = take_option("--pass-invocations")
    if wide:  # invocations of the four-step passes over long lines (lowering/signal_fft.py PASS_INVOCATIONS)
        signal_fft.PASS_INVOCATIONS = int(wide[0])
        signal_fft.PASS_WIDE_FROM = int(wide[1]) if len(wide) > 1 else signal_fft.PASS_WIDE_FROM
    settings = take_option("--ab", ";") or [""]
    prefetch = take_option("--prefetch-roots")
    if prefetch:  # stage roots loaded up front or in their stage (lowering/signal_fft_code.py)
        signal_fft_code.PREFETCH_ROOTS = prefetch[0] == "1"
    args = parse_args("FFT and log-mel throughput, rlxpy vs torch (cuFFT)")
    side = Torch()
    repeat = QUICK_REPEAT if args.quick else REPEAT
    results = []

    def wanted(name: str) -> bool:
        return not cases or any(word in name for word in cases)

    defaults: dict[tuple[object, str], object] = {}
    for setting in settings:
        apply_setting(setting, defaults)
        for name, n, points, kind in CASES:
            if not wanted(name):
                continue
            if args.quick:
                points = max(n, QUICK_POINTS)  # 2^20 at batch 1
            results.append({"setting": setting, **bench_fft(side, name, n, points, kind, repeat)})
            print(results[-1], flush=True)
    for seconds, batch in ([(5.0, 1)] if args.quick else [(30.0, 1), (30.0, 8)]):
        if wanted("log-mel"):
            results.append(bench_log_mel(side, seconds, batch, repeat))
            print(results[-1], flush=True)
    emit({"bench": "fft", "torch_device": side.device, "quick": args.quick, "shape_cap": cap or None,
          "max_radix": signal_fft_code.MAX_RADIX, "pass_radix": signal_fft.PASS_MAX_RADIX,
          "row_fast_in": signal_fft.ROW_FAST_IN, "pass_invocations": signal_fft.PASS_INVOCATIONS,
          "pass_wide_from": signal_fft.PASS_WIDE_FROM, "prefetch_roots": signal_fft_code.PREFETCH_ROOTS,
          "limits": device_limits(), "results": results}, args.json)
    print(table(results))


if __name__ == "__main__":
    main()
