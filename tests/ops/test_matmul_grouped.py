"""GroupedMatMul runs as a host step (no grouped-matmul kernel yet), checked against torch."""

from __future__ import annotations

import numpy as np
from helpers import assert_close, check_op, rand


def test_grouped_matmul_host_step_matches_torch(device):
    import torch

    x, w = rand((5, 6), 4), rand((3, 6, 7), 5)
    idx = np.array([2, 0, 1, 2, 0], np.int32)

    def oracle(a, b, e):
        return torch.stack([a[i] @ b[int(e[i])] for i in range(a.shape[0])])

    got = check_op(lambda g, a, b, e: g.grouped_matmul(a, b, e), [x, w, idx], oracle, tol="matmul")
    assert_close(next(iter(got.values())), oracle(*(torch.from_numpy(v) for v in (x, w, idx))).numpy(),
                 1e-4, 1e-5)
