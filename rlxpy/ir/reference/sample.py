"""Reference semantics of the sample family: threefry2x32 counters and Gumbel-max sampling."""

from __future__ import annotations

import numpy as np

from rlxpy.ir import ops
from rlxpy.ir.reference.core import reference

# -- sampling --------------------------------------------------------------------------------
_ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)


_MASK32 = np.uint64(0xFFFFFFFF)


def threefry2x32(counter: tuple[np.ndarray, np.ndarray],
                 key: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Threefry2x32 with 20 rounds (Random123), vectorised over the counters."""
    k0, k1 = np.uint64(key[0]), np.uint64(key[1])
    ks = (k0, k1, np.uint64(0x1BD11BDA) ^ k0 ^ k1)
    x0 = (counter[0].astype(np.uint64) + ks[0]) & _MASK32
    x1 = (counter[1].astype(np.uint64) + ks[1]) & _MASK32
    for r in range(20):
        rot = np.uint64(_ROTATIONS[r % 8])
        x0 = (x0 + x1) & _MASK32
        x1 = ((x1 << rot) | (x1 >> (np.uint64(32) - rot))) & _MASK32
        x1 ^= x0
        if r % 4 == 3:
            inject = (r + 1) // 4
            x0 = (x0 + ks[inject % 3]) & _MASK32
            x1 = (x1 + ks[(inject + 1) % 3] + np.uint64(inject)) & _MASK32
    return x0.astype(np.uint32), x1.astype(np.uint32)


def sample_rows(logits: np.ndarray, temperature: float, top_k: int, top_p: float, seed: int) -> np.ndarray:
    """Token id per row; temperature 0 is greedy (argmax, ties -> lowest index)."""
    rows = logits.reshape(-1, logits.shape[-1]).astype(np.float64)
    if temperature == 0:
        return np.argmax(rows, axis=-1).astype(np.int32)
    z = rows / max(temperature, 1e-6)
    p = np.exp(z - z.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    vocab = rows.shape[-1]
    if top_k > 0 or 0 < top_p < 1:
        order = np.argsort(-p, axis=-1, kind="stable")
        sorted_p = np.take_along_axis(p, order, -1)
        before = np.cumsum(sorted_p, -1) - sorted_p  # mass of strictly better tokens
        keep_sorted = np.ones_like(sorted_p, dtype=bool)
        if top_k > 0:
            keep_sorted &= np.arange(vocab)[None, :] < top_k
        if 0 < top_p < 1:
            keep_sorted &= before < top_p
        keep = np.zeros_like(keep_sorted)
        np.put_along_axis(keep, order, keep_sorted, -1)
        p = np.where(keep, p, 0.0)
        p /= np.maximum(p.sum(-1, keepdims=True), 1e-12)
    zero = np.zeros(1, np.uint32)
    key = threefry2x32((zero, zero), (seed & 0xFFFFFFFF, seed >> 32 & 0xFFFFFFFF))
    row_ids, token_ids = np.meshgrid(np.arange(rows.shape[0]), np.arange(vocab), indexing="ij")
    bits, _ = threefry2x32((row_ids.ravel().astype(np.uint32), token_ids.ravel().astype(np.uint32)),
                           (int(key[0][0]), int(key[1][0])))
    u = (bits >> np.uint32(8)).astype(np.float64) / float(1 << 24)
    gumbel = -np.log(-np.log(np.maximum(u, 1e-30))).reshape(rows.shape)
    with np.errstate(divide="ignore"):
        score = np.where(p > 0, np.log(p) + gumbel, -np.inf)
    return np.argmax(score, axis=-1).astype(np.int32)


@reference(ops.Sample)
def ref_sample(op: ops.Sample, args, node):
    if op.per_row:  # each row alone, with its own settings and seed
        logits, settings, seeds = args
        return np.array([sample_rows(logits[r: r + 1], float(settings[r, 0]), _top_k(settings[r, 1]),
                                     float(settings[r, 2]), _seed(seeds[r]))[0]
                         for r in range(logits.shape[0])], np.int32).reshape(node.shape)
    seed = op.seed
    if len(args) > 1:
        lo, hi = (int(v) & 0xFFFFFFFF for v in args[1])
        seed = lo | hi << 32
    return sample_rows(args[0], op.temperature, op.top_k, op.top_p, seed).reshape(node.shape)


def _top_k(value: float) -> int:
    return max(0, int(value))


def _seed(pair: np.ndarray) -> int:
    lo, hi = (int(v) & 0xFFFFFFFF for v in pair)
    return lo | hi << 32
