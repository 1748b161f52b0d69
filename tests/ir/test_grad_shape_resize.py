"""Gradient rule of Resize (nearest, nearest-exact, linear with half-pixel and align-corners
coordinates; 1-D/2-D/3-D, up and down) vs torch.autograd of F.interpolate in float64 (F32 graph
within grad_helpers.F32_TOL) and central differences of the float64 reference (FD_TOL)."""

from __future__ import annotations

import pytest
import torch.nn.functional as F
from grad_helpers import check_grads, rand

from rlxpy.ir.ops.base import ResizeCoord, ResizeMode

_MODES = {
    "nearest": (ResizeMode.NEAREST_FLOOR, ResizeCoord.ASYMMETRIC, {}),
    "nearest-exact": (ResizeMode.NEAREST_ROUND_PREFER_CEIL, ResizeCoord.HALF_PIXEL, {}),
    "linear": (ResizeMode.LINEAR, ResizeCoord.HALF_PIXEL, {"align_corners": False}),
    "align": (ResizeMode.LINEAR, ResizeCoord.ALIGN_CORNERS, {"align_corners": True}),
}
_TORCH_MODE = {1: "linear", 2: "bilinear", 3: "trilinear"}

# (shape, sizes, mode)
CASES = [((1, 1, 1), (3,), "nearest"), ((2, 3, 17), (5,), "nearest"), ((1, 3, 5, 3), (9, 7), "nearest"),
         ((2, 3, 17), (40,), "nearest-exact"), ((1, 2, 5, 3), (3, 7), "nearest-exact"),
         ((2, 3, 17), (5,), "linear"), ((1, 5, 5, 3), (9, 2), "linear"),
         ((1, 2, 3, 4, 3), (5, 2, 4), "linear"),
         ((2, 3, 17), (33,), "align"), ((1, 1, 5, 3), (2, 7), "align")]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_resize_gradients(case):
    shape, sizes, mode = case
    kind, coord, extra = _MODES[mode]
    spatial = len(sizes)
    torch_mode = mode if mode.startswith("nearest") else _TORCH_MODE[spatial]
    check_grads(lambda g, x: g.resize(x, sizes, kind, coord),
                lambda x: F.interpolate(x, size=sizes, mode=torch_mode, **extra), {"x": rand(shape, 0)})
