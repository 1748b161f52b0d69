"""Fuzz the JSON IR loader (issue 17): seeded structure-aware mutations of serialised graphs (the
tests' transformer block, a CNN and an If graph, tests/ir_fuzz_seeds.py); prints clean refusals /
loads / anything else, and the most common refusal rules. A load must serialise and load back to the
same JSON; a case that is neither that nor refused with an rlxpy error saying where in the JSON is
kept under --keep for replay with ``Graph.from_json(open(FILE).read())``.

    python benches/fuzz_ir.py --cases 10000
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
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from ir_fuzz_seeds import seeds  # noqa: E402

from rlxpy.fuzz import print_report  # noqa: E402
from rlxpy.ir.serialize_fuzz import run  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=10000, help="total cases, split evenly (default 10000)")
    parser.add_argument("--seed", type=int, default=0, help="numpy default_rng seed")
    parser.add_argument("--time-limit", type=float, default=10.0, help="seconds per case (else: a hang)")
    parser.add_argument("--keep", help="directory for the failing cases (default: a temporary one)")
    parser.add_argument("--json", help="write the counts here as JSON")
    args = parser.parse_args()

    graphs = seeds()
    share, extra = divmod(args.cases, len(graphs))
    plan = [(seed, share + (i < extra)) for i, seed in enumerate(graphs)]
    print("seeds: " + ", ".join(f"{s.name} ({len(s.data['nodes'])} nodes, {len(s.text)} bytes of JSON)"
                                for s in graphs) + f"; rng seed {args.seed}, {args.time_limit:g} s per case",
          flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.keep or tmp)
        work.mkdir(parents=True, exist_ok=True)
        report = run(plan, work, rng_seed=args.seed, time_limit=args.time_limit,
                     progress=lambda line: print(line, flush=True))
    print_report(report)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "date": time.strftime("%Y-%m-%d"), "machine": platform.platform(), **report.to_json()}, indent=2))
    return 1 if report.counts["failure"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
