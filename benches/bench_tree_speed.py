"""Decode ms/token and prefill tok/s of the default model, for the tree this file is run from.

For a before/after comparison of a change, run it alternately from two checkouts (say, ``git worktree
add ../before <rev>``) on a quiet machine, several times each, and compare the pairs:

    (cd ../before && python benches/bench_tree_speed.py before)
    python benches/bench_tree_speed.py after
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench_cpu import prompt_ids  # noqa: E402


def main() -> None:
    from rlxpy.frontends.gguf import default_model_path, load_generator

    path = default_model_path()
    ids = prompt_ids(path)
    gen, _ = load_generator(path, context=512)
    list(gen.generate(ids[:4], 2))  # warm-up: every pipeline compiled once
    list(gen.generate(ids, 12))
    steps = np.array(gen.stats.step_seconds)
    print(json.dumps({"tree": sys.argv[1] if len(sys.argv) > 1 else "", "device": gen.exe.device.name,
                      "prefill_tps": gen.stats.prefill_tps, "decode_ms": float(np.median(steps)) * 1e3}))


if __name__ == "__main__":
    main()
