"""The cost of the debug flags when they are off, and what each costs when on.

Off: µs per ``exe.run`` of a one-op graph (the host path every run takes) and decode tok/s of a
tiny GGUF llama (two Q8_0 layers, pipelined decode fed on the GPU). On: the same decode per flag.
Run it on two checkouts to compare before/after: ``python benches/bench_debug_flags.py --quick``.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from common import emit, parse_args, timeit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import rlxpy  # noqa: E402
from rlxpy import env  # noqa: E402
from rlxpy.frontends.gguf import load_generator  # noqa: E402
from rlxpy.models.generate import Generator  # noqa: E402


def decode_tps(gen: Generator, tokens: int) -> float:
    list(gen.generate([1, 260, 265], 2))  # warm-up: pipelines compiled, caches touched
    started = time.perf_counter()
    produced = len(list(gen.generate([1, 260, 265], tokens)))
    return (produced - 1) / (time.perf_counter() - started - gen.stats.prefill_seconds)


def main() -> None:
    args = parse_args(__doc__)
    from tiny_llama import write_tiny_llama

    g = rlxpy.Graph("one_op")
    x = g.input("x", [256])
    g.output(g.exp(x, name="y"))
    exe = rlxpy.compile(g)
    value = np.ones(256, np.float32)
    results = {"run_us": timeit(lambda: exe.run({"x": value}), repeat=200, warmup=20) * 1e6}
    tokens = 8 if args.quick else 32
    with tempfile.TemporaryDirectory() as tmp:
        gen, _ = load_generator(write_tiny_llama(Path(tmp) / "tiny.gguf"), chunk=8)
        results["decode_tps_off"] = decode_tps(gen, tokens)
        if hasattr(env, "run_debug_flags"):  # absent before the flags were reworked
            names = {"nan": "nan_trace", "dump": "dump_nodes", "profile": "profile"}
            for name, field in names.items():
                # an executable copies the flags when it is built: change the built one's copy (older
                # versions read the environment on every run)
                copied = hasattr(gen.exe, "flags")
                scope = gen.exe.flags.override(**{field: 1}) if copied else \
                    env.override(**{f"RLX_WGPU_{field.upper()}": 1})
                with scope:
                    results[f"decode_tps_{name}"] = decode_tps(gen, tokens)
    emit(results, args.json)


if __name__ == "__main__":
    main()
