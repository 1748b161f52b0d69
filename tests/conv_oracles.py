"""Independent oracles for the conv family's tests (tests/ir and tests/ops)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

TORCH_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


def zero_stuffed_conv_transpose(x, w, stride, padding, output_padding, dilation, groups=1):
    """ConvTranspose as the docstring defines it: a float64 conv over x with stride-1 zeros between
    elements, padded by d(k-1) - pb before and d(k-1) - pb + output_padding after (negative crops),
    with the kernel flipped and its in/out channels swapped per group."""
    x, w = torch.as_tensor(x).double(), torch.as_tensor(w).double()
    rank = x.dim() - 2
    k = w.shape[2:]
    z = torch.zeros(x.shape[:2] + tuple((n - 1) * stride + 1 for n in x.shape[2:]), dtype=torch.float64)
    z[(slice(None), slice(None)) + (slice(None, None, stride),) * rank] = x
    pads = []
    for i in reversed(range(rank)):
        span = dilation * (k[i] - 1)
        pads += [span - padding, span - padding + output_padding]
    z = F.pad(z, pads)
    c_in, o_group = w.shape[:2]
    wc = w.reshape((groups, c_in // groups, o_group) + tuple(k)).transpose(1, 2)
    wc = wc.reshape((groups * o_group, c_in // groups) + tuple(k)).flip(list(range(2, 2 + rank)))
    return TORCH_CONV[rank](z, wc, None, 1, 0, dilation, groups)
