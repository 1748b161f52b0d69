"""No block of WGSL stands in two kernel files: code shared by kernels lives once in kernels/include/.

Every pair of .wgsl files under kernels/ (kernels and includes) is compared: a run of MIN_RUN or more
consecutive lines (whitespace collapsed, blank and comment-only lines and trailing comments dropped)
that appears in both files is a repeat. A run must start on a line of at least MIN_START characters, so
runs of closing braces and ``return;`` lines do not count on their own.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import rlxpy.wgpu_backend.kernels as kernels_pkg

KERNEL_DIR = Path(kernels_pkg.__file__).parent
MIN_RUN = 8
MIN_START = 4

# Pairs that still repeat, each to be removed by moving the shared code into an include. The list is
# exact: a pair listed here that no longer repeats fails the test, so it cannot go stale.
ALLOWED: set[frozenset[str]] = {frozenset(pair) for pair in [
]}


def _lines(path: Path) -> list[str]:
    out = []
    for raw in path.read_text().splitlines():
        line = re.sub(r"//.*", "", raw)
        line = " ".join(line.split())
        if line:
            out.append(line)
    return out


def _runs(lines: list[str]) -> dict[tuple[str, ...], int]:
    """Each run of MIN_RUN lines that starts on a long enough line, with where it first starts."""
    runs: dict[tuple[str, ...], int] = {}
    for i in range(len(lines) - MIN_RUN + 1):
        if len(lines[i]) >= MIN_START:
            runs.setdefault(tuple(lines[i:i + MIN_RUN]), i)
    return runs


def _name(path: Path) -> str:
    return path.relative_to(KERNEL_DIR).as_posix()


def repeated_pairs() -> dict[frozenset[str], tuple[str, ...]]:
    runs = {_name(path): _runs(_lines(path)) for path in sorted(KERNEL_DIR.rglob("*.wgsl"))}
    found = {}
    for (a, runs_a), (b, runs_b) in itertools.combinations(runs.items(), 2):
        shared = runs_a.keys() & runs_b.keys()
        if shared:
            found[frozenset((a, b))] = min(shared, key=runs_a.__getitem__)
    return found


def test_the_comparison_sees_a_repeat(tmp_path):
    block = [f"let v{i} = x + {i}u;" for i in range(MIN_RUN)]
    a = _lines_of(tmp_path / "a.wgsl", ["fn f() {", *block, "}"])
    b = _lines_of(tmp_path / "b.wgsl", ["// other", "fn g() {", *[f"  {s}  // note" for s in block], "}"])
    assert _runs(a).keys() & _runs(b).keys()
    assert not _runs(a[:MIN_RUN]).keys() & _runs(["fn g() {", *block[:-1], "}"]).keys()
    assert not _runs(["}", *block[:MIN_RUN - 1]]).keys() & _runs(["}", *block[:MIN_RUN - 1], "x"]).keys()


def _lines_of(path: Path, text: list[str]) -> list[str]:
    path.write_text("\n".join(text) + "\n")
    return _lines(path)


def test_no_wgsl_block_is_repeated_across_files():
    found = repeated_pairs()
    new = {pair: run for pair, run in found.items() if pair not in ALLOWED}
    report = "\n".join(f"{' ~ '.join(sorted(pair))}: {run[0]!r} ..." for pair, run in sorted(
        new.items(), key=lambda item: sorted(item[0])))
    assert not new, f"WGSL repeated across files (move it into kernels/include/):\n{report}"


def test_the_allowed_pairs_still_repeat():
    found = repeated_pairs()
    stale = sorted(" ~ ".join(sorted(pair)) for pair in ALLOWED if pair not in found)
    assert not stale, f"no longer repeated, drop from ALLOWED: {stale}"


def test_the_allowed_pairs_name_existing_files():
    names = {_name(path) for path in KERNEL_DIR.rglob("*.wgsl")}
    assert set().union(*ALLOWED) <= names
