"""Fuzz the JSON IR loader (issue 17): seeded structure-aware mutations of serialised graphs (the
tests' transformer block, a CNN and an If graph, tests/ir_fuzz_seeds.py); prints clean refusals /
loads / anything else, and the most common refusal rules. A load must serialise and load back to the
same JSON; a case that is neither that nor refused with an rlxpy error saying where in the JSON is
kept under --keep for replay with ``Graph.from_json(open(FILE).read())``.

    python benches/fuzz_ir.py --cases 10000
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from ir_fuzz_seeds import seeds  # noqa: E402

from rlxpy.fuzz import bench_dirs, bench_finish, bench_parser  # noqa: E402
from rlxpy.ir.serialize_fuzz import run  # noqa: E402


def main() -> int:
    args = bench_parser(__doc__.split("\n\n")[0], time_limit=10.0).parse_args()
    graphs = seeds()
    share, extra = divmod(args.cases, len(graphs))
    plan = [(seed, share + (i < extra)) for i, seed in enumerate(graphs)]
    print("seeds: " + ", ".join(f"{s.name} ({len(s.data['nodes'])} nodes, {len(s.text)} bytes of JSON)"
                                for s in graphs) + f"; rng seed {args.seed}, {args.time_limit:g} s per case",
          flush=True)
    with bench_dirs(args.keep) as (work, _):
        report = run(plan, work, rng_seed=args.seed, time_limit=args.time_limit,
                     progress=lambda line: print(line, flush=True))
    return bench_finish(report, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
