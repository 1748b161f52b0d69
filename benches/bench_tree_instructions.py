"""Instructions the CPU executes (valgrind's callgrind) for decode tokens or one prefill of the default
model, for a source tree: a before/after comparison of a change on lavapipe that machine load cannot blur.

Wall-clock A/B runs on a shared 2-core machine vary by ±20 % between runs; instruction counts do not
depend on load. The run starts under ``valgrind --tool=callgrind --instr-atstart=no`` (slow but not
instrumented), loads and warms the generator, switches instrumentation on with ``callgrind_control``
only around the measured work, and prints the total and the biggest functions (lavapipe's JIT-compiled
shaders appear as ``???`` addresses: equal counts mean the same kernels did the same work).

    python benches/bench_tree_instructions.py --tree ../before --what decode --tokens 2
    python benches/bench_tree_instructions.py --what prefill

Needs valgrind (``apt-get install valgrind``) and a CPU adapter; each run takes minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()


def measured(what: str, tokens: int) -> None:
    """Inside valgrind, from the tree's root: warm up, then instrument only the measured work."""
    sys.path[:0] = [os.getcwd(), str(HERE.parent)]
    from bench_cpu import prompt_ids

    from rlxpy.frontends import gguf

    path = gguf.default_model_path()
    gen, _ = gguf.load_generator(path, context=512)
    ids = prompt_ids(path)
    list(gen.generate(ids[:4], 2))  # every pipeline compiled and run once
    steps = gen.generate(ids[:4], tokens + 1) if what == "decode" else None
    if steps is not None:
        next(steps)  # prefill and the first token, not measured
    subprocess.run(["callgrind_control", "-i", "on", str(os.getpid())], check=True, capture_output=True)
    time.sleep(1)  # callgrind polls for the command
    if steps is not None:
        for _ in steps:
            pass
    else:
        gen.logits(ids)
    subprocess.run(["callgrind_control", "-i", "off", str(os.getpid())], check=True, capture_output=True)


def top_functions(out_file: Path, count: int = 8) -> list[tuple[int, str]]:
    text = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=99", str(out_file)],
                          check=True, capture_output=True, text=True).stdout
    rows = re.findall(r"^\s*([\d,]+) \([\s\d.]+%\)\s+(\S.*)$", text, re.M)
    return [(int(n.replace(",", "")), name) for n, name in rows if "PROGRAM TOTALS" not in name][:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", default=str(HERE.parent.parent), help="source tree to measure")
    parser.add_argument("--what", choices=("decode", "prefill"), default="decode")
    parser.add_argument("--tokens", type=int, default=2, help="decode tokens measured")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:
        measured(args.what, args.tokens)
        return
    out_file = Path(tempfile.mkdtemp()) / "callgrind.out"
    command = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out_file}",
               sys.executable, str(HERE), "--inside", "--what", args.what, "--tokens", str(args.tokens)]
    run = subprocess.run(command, cwd=args.tree, capture_output=True, text=True)
    total = re.search(r"Collected : (\d+)", run.stderr)
    if run.returncode or total is None:
        sys.exit(f"the measured run failed (exit {run.returncode}):\n{run.stderr[-3000:]}")
    tokens = args.tokens if args.what == "decode" else 0
    print(json.dumps({"tree": args.tree, "what": args.what, "tokens": tokens,
                      "instructions": int(total.group(1)), "top": top_functions(out_file)}, indent=1))


if __name__ == "__main__":
    main()
