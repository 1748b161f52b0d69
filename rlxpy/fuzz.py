"""The loop and the oracle's bookkeeping shared by rlxpy's input fuzzers (issue 17, "Hostile inputs").

A fuzzer (frontends/gguf_fuzz.py, frontends/onnx_fuzz.py, ir/serialize_fuzz.py) supplies seeds (each
with a ``name``), ``make_case(rng, seed)`` (a case: ``notes`` and ``write_to(path)``) and
``check(path, seed)`` (an :class:`Outcome`); :func:`run` draws every case from one
``numpy.random.default_rng(seed)``, so a run is reproducible, and keeps each failing case on disk.
A case passes when the loader loads it or refuses it with one of rlxpy's errors whose message names
the file and leaks no Python internals (:func:`judge_refusal`); anything else, or a case over its
time limit (:func:`time_limit`), is a failure.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import signal
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

#: Words of Python / library internals that must not reach a refusal message.
LEAKS = re.compile(r"\b[A-Z][A-Za-z]*Error\b|out of bounds for axis|Traceback|object has no attribute")


class CaseTimeout(BaseException):
    """Raised by the per-case timer (a BaseException, so no ``except Exception`` swallows it)."""


def _alarm(signum: int, frame: Any) -> None:
    raise CaseTimeout()


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`CaseTimeout` inside the block after ``seconds`` (SIGALRM: main thread only)."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass
class Outcome:
    verdict: str  # "refused", "loaded" or "failure"
    detail: str
    seconds: float


def judge_refusal(path: Path, error: Exception, leaks: bool = True) -> tuple[str, str]:
    """("refused", message) for a message that names the file (and, with ``leaks``, carries no
    Python/library internals), else ("failure", why)."""
    message = str(error)
    kind = type(error).__name__
    if path.name not in message:
        return "failure", f"{kind} without the file name: {message}"
    if leaks and LEAKS.search(message):
        return "failure", f"{kind} leaking internals: {message}"
    return "refused", message


def guarded(path: Path, body: Callable[[], tuple[str, str]], seconds: float,
            clean: tuple[type[Exception], ...],
            judge: Callable[[Path, Exception], tuple[str, str]] = judge_refusal) -> Outcome:
    """Run ``body`` (which returns (verdict, detail)) under a time limit and judge what it raises:
    an error of the ``clean`` classes by ``judge`` (:func:`judge_refusal`: names the file, no
    internals), anything else as a failure."""
    started = time.perf_counter()
    try:
        with time_limit(seconds):
            try:
                verdict, detail = body()
            except clean as e:
                verdict, detail = judge(path, e)
    except CaseTimeout:
        verdict, detail = "failure", f"over the {seconds:g} s time limit"
    except Exception as e:  # noqa: BLE001  (anything but a clean error is the failure being looked for)
        verdict, detail = "failure", f"{type(e).__name__}: {e}"
    return Outcome(verdict, detail, time.perf_counter() - started)


@dataclass
class Report:
    counts: Counter = field(default_factory=Counter)
    by_seed: dict[str, Counter] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    reasons: Counter = field(default_factory=Counter)
    seconds: float = 0.0
    slowest: float = 0.0

    @property
    def cases(self) -> int:
        return sum(self.counts.values())

    def summary(self) -> str:
        lines = [f"{self.cases} cases in {self.seconds:.1f} s (slowest case {self.slowest * 1000:.0f} ms): "
                 f"{self.counts['refused']} clean refusals, {self.counts['loaded']} loads, "
                 f"{self.counts['failure']} anything else"]
        for name, counts in self.by_seed.items():
            lines.append(f"  {name}: {sum(counts.values())} cases: {counts['refused']} refused, "
                         f"{counts['loaded']} loaded, {counts['failure']} other")
        lines += [f"  FAILURE {text}" for text in self.failures[:20]]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {"cases": self.cases, "seconds": round(self.seconds, 1), "counts": dict(self.counts),
                "by_seed": {k: dict(v) for k, v in self.by_seed.items()}, "failures": self.failures}


def reason(message: str) -> str:
    """A refusal message without its file name and numbers: groups the refusals by rule."""
    text = message.split(": ", 1)[-1]
    text = re.sub(r"'[^']*'", "'…'", text)
    return re.sub(r"-?\d+", "N", text)[:90]


def run(seeds: list[tuple[Any, int]], make_case: Callable[[np.random.Generator, Any], Any],
        check: Callable[[Path, Any], Outcome], workdir: Path, suffix: str, rng_seed: int = 0,
        progress: Callable[[str], None] | None = None) -> Report:
    """``cases`` mutated files per seed, in a seeded random order, each written under ``workdir`` and
    judged by ``check``; a failing case is kept there as ``failure_N_SEED{suffix}``."""
    rng = np.random.default_rng(rng_seed)
    report = Report()
    started = time.perf_counter()
    plan = [seed for seed, cases in seeds for _ in range(cases)]
    order = rng.permutation(len(plan))
    for done, index in enumerate(order, 1):
        seed = plan[index]
        case = make_case(rng, seed)
        path = workdir / f"fuzz_{seed.name}{suffix}"
        case.write_to(path)
        outcome = check(path, seed)
        report.counts[outcome.verdict] += 1
        report.by_seed.setdefault(seed.name, Counter())[outcome.verdict] += 1
        report.slowest = max(report.slowest, outcome.seconds)
        if outcome.verdict == "refused":
            report.reasons[reason(outcome.detail)] += 1
        if outcome.verdict == "failure":
            report.failures.append(f"[{seed.name}] {'; '.join(case.notes)} -> {outcome.detail}")
            path.rename(workdir / f"failure_{len(report.failures)}_{seed.name}{suffix}")
        if progress and done % 500 == 0:
            elapsed = time.perf_counter() - started
            progress(f"{done}/{len(plan)} cases, {elapsed:.0f} s, {dict(report.counts)}")
    report.seconds = time.perf_counter() - started
    return report


def pick(rng: np.random.Generator, items: list | tuple) -> Any:
    return items[int(rng.integers(0, len(items)))]


def weighted(rng: np.random.Generator, table: dict[str, tuple[Callable, float]], count: int) -> list[str]:
    """``count`` names drawn from ``{name: (mutator, weight)}`` by weight."""
    names = list(table)
    weights = np.array([table[n][1] for n in names])
    return [names[i] for i in rng.choice(len(names), size=count, p=weights / weights.sum())]


def stack_count(rng: np.random.Generator) -> int:
    """How many mutations a case stacks: one (70 %), two or three."""
    return int(rng.choice([1, 2, 3], p=[0.7, 0.2, 0.1]))


def print_report(report: Report, top: int = 15) -> None:
    print(report.summary())
    print(f"{len(report.reasons)} distinct refusal messages (numbers and names folded); the most common:")
    for text, count in report.reasons.most_common(top):
        print(f"  {count:6d}  {text}")


# -- byte edits of a serialised case (truncation, flips) ---------------------------------------------
Edit = Callable[[bytearray], None]


class Case:
    """A mutated ``content`` (a ModelProto, decoded JSON, ...), written as ``serialize(content)`` with
    the byte ``edits`` applied in order; ``notes`` say what was done."""

    def __init__(self, content: Any, serialize: Callable[[Any], bytes]) -> None:
        self.content, self.serialize = content, serialize
        self.edits: list[Edit] = []
        self.notes: list[str] = []

    def write_to(self, path: Path) -> None:
        data = bytearray(self.serialize(self.content))
        for edit in self.edits:
            edit(data)
        Path(path).write_bytes(bytes(data))


def byte_mutators(most_flips: int, skew: float = 1.0, weights: tuple[float, float] = (0.5, 0.7)
                  ) -> dict[str, tuple[Callable, float]]:
    """"truncate" and "flip" mutators for a case whose ``edits`` (bytearray -> None) are applied to
    its serialised bytes: a cut at a random fraction of the length, and XORs of 1..``most_flips``
    bytes at random fractions raised to ``skew`` (> 1 puts more of them near the start)."""

    def m_truncate(rng: np.random.Generator, seed: Any, case: Any) -> str:
        fraction = float(rng.random())

        def cut(data: bytearray) -> None:
            del data[int(len(data) * fraction):]
        case.edits.append(cut)
        return f"truncate at {fraction:.4f}"

    def m_flip(rng: np.random.Generator, seed: Any, case: Any) -> str:
        count = int(rng.integers(1, most_flips + 1))
        flips = [(float(rng.random()) ** skew, int(rng.integers(1, 256))) for _ in range(count)]

        def flip(data: bytearray) -> None:
            for where, mask in flips:
                if data:
                    data[int(where * (len(data) - 1))] ^= mask
        case.edits.append(flip)
        return f"{len(flips)} byte flips"

    return {"truncate": (m_truncate, weights[0]), "flip": (m_flip, weights[1])}


# -- the benchmark commands (benches/fuzz_*.py) -----------------------------------------------------
def bench_parser(description: str, time_limit: float) -> argparse.ArgumentParser:
    """--cases, --seed, --time-limit, --keep and --json, shared by the fuzz benchmarks."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--cases", type=int, default=10000, help="total cases (default 10000)")
    parser.add_argument("--seed", type=int, default=0, help="numpy default_rng seed")
    parser.add_argument("--time-limit", type=float, default=time_limit,
                        help="seconds per case (else: a hang)")
    parser.add_argument("--keep", help="directory for the failing cases (default: a temporary one)")
    parser.add_argument("--json", help="write the counts here as JSON")
    return parser


@contextmanager
def bench_dirs(keep: str | None) -> Iterator[tuple[Path, Path]]:
    """(the folder for cases, a temporary folder for seeds): the first is ``keep`` when given."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(keep or tmp)
        work.mkdir(parents=True, exist_ok=True)
        yield work, Path(tmp)


def bench_finish(report: Report, json_path: str | None) -> int:
    """Print the report, write it as JSON if asked; the exit status (1 when anything failed)."""
    print_report(report)
    if json_path:
        Path(json_path).write_text(json.dumps({
            "date": time.strftime("%Y-%m-%d"), "machine": platform.platform(), **report.to_json()}, indent=2))
    return 1 if report.counts["failure"] else 0
