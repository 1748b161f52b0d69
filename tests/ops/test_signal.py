"""FFT runs as a host step (no FFT kernel yet), checked against numpy."""

from __future__ import annotations

import numpy as np
from helpers import check_op, rand


def test_fft_host_step_matches_numpy(device):
    x = rand((3, 2 * 12), 3)

    def oracle(t):
        spec = np.fft.fft(t.numpy()[:, :12] + 1j * t.numpy()[:, 12:], axis=-1)
        return np.concatenate([spec.real, spec.imag], axis=-1).astype(np.float32)

    check_op(lambda g, a: g.fft(a), [x], oracle, tol=(1e-4, 1e-4))
