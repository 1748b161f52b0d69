"""Unfuse expansions of Fft and Stft: each gets its plan table (ops/signal.py) as a Constant input,
built here in float64 and rounded once to f32, so no backend evaluates sin/cos in f32. Nodes of one
graph with the same transform length share one table."""

from __future__ import annotations

import weakref

import numpy as np

from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Graph, Node
from rlxpy.ir.ops.signal import bluestein_length, fft_plan_length
from rlxpy.ir.passes.unfuse import Unfuser, expands

#: new graph -> {transform length: its table node}
_TABLES: weakref.WeakKeyDictionary[Graph, dict[int, Node]] = weakref.WeakKeyDictionary()


def roots(count: int) -> np.ndarray:
    """exp(-2 pi i k / count), k < count, complex128."""
    return np.exp(-2j * np.pi * np.arange(count) / count)


def chirp(n: int) -> np.ndarray:
    """exp(-pi i k^2 / n), k < n: k^2 is reduced mod 2n in integers first (exact angles)."""
    k = np.arange(n, dtype=np.int64)
    return np.exp(-1j * np.pi * ((k * k) % (2 * n)) / n)


def fft_table(n: int) -> np.ndarray:
    """The plan table of an n-point DFT as f32 (re, im) pairs, flat (layout: ops/signal.py)."""
    m = fft_plan_length(n)
    parts = [roots(m)]
    if m != n:
        c = chirp(n)
        assert m == bluestein_length(n)
        b = np.zeros(m, np.complex128)
        b[:n] = np.conj(c)
        b[m - n + 1:] = np.conj(c[1:][::-1])  # b[m - k] = conj(c[k])
        parts += [c, np.fft.fft(b) / m]
    table = np.concatenate(parts)
    return np.stack([table.real, table.imag], axis=-1).reshape(-1).astype(np.float32)


def _table(unfuser: Unfuser, n: int, name: str) -> Node:
    known = _TABLES.setdefault(unfuser.graph, {})
    if n not in known:
        known[n] = unfuser.constant(fft_table(n), DType.F32, f"{name}/fft_table_{n}")
    return known[n]


@expands(ops.Fft)
def expand_fft(unfuser: Unfuser, node: Node, args: list[Node], name: str) -> Node:
    """Fft with its plan table as the second input (kept when the graph already gives one)."""
    op: ops.Fft = node.op  # type: ignore[assignment]
    if len(args) == 1 and node.dtype is not DType.F64:  # f64 runs on the host, which needs no table
        args = [*args, _table(unfuser, op.length(args[0].type), name)]
    return unfuser.emit(op, args, name, exact=True)


@expands(ops.Stft)
def expand_stft(unfuser: Unfuser, node: Node, args: list[Node], name: str) -> Node:
    """Stft with the plan table of n_fft as the third input."""
    op: ops.Stft = node.op  # type: ignore[assignment]
    if len(args) == 2:
        args = [*args, _table(unfuser, op.n_fft, name)]
    return unfuser.emit(op, args, name, exact=True)
