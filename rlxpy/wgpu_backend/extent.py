"""Active extent: run a graph compiled for ``upper`` leading rows on its first ``actual`` rows.

Each step knows (from its kernel's layout) which uniform fields scale and which grid axis
shrinks, and the leading dim of its node. A step scales when that dim equals ``upper``: its
scaled fields become ``min(full, ceil(full * actual / upper))`` and its grid shrinks the same
way. Steps that declare nothing run in full, which is always correct for the first rows.
Uniforms are rewritten only when a value changes (no recompile; tinygrad's JIT patches only its
symbolic vars the same way).
"""

from __future__ import annotations

import math

from rlxpy.errors import InputError
from rlxpy.wgpu_backend.kernels.params import KERNELS
from rlxpy.wgpu_backend.schedule import MAX_GROUPS, Step


def scaled(full: int, actual: int, upper: int) -> int:
    return min(full, math.ceil(full * actual / upper))


def scaled_grid(grid: tuple[int, int, int], axis: int, actual: int, upper: int) -> tuple[int, int, int]:
    if axis == 0:  # a folded 1-D grid: shrink the total, fold again past 65535
        total = scaled(grid[0] * grid[1], actual, upper)
        if total <= MAX_GROUPS:
            return (total, 1, grid[2])
        return (MAX_GROUPS, math.ceil(total / MAX_GROUPS), grid[2])
    dims = list(grid)
    dims[axis] = scaled(dims[axis], actual, upper)
    return (dims[0], dims[1], dims[2])


def apply_extent(steps: list[Step], encoder, actual: int, upper: int) -> int:
    """Rescale every scalable step; returns how many steps were scaled."""
    if not 1 <= actual <= upper:
        raise InputError(f"active extent ({actual}, {upper}): need 1 <= actual <= upper")
    count = 0
    encoder.invalidate()
    for index, step in enumerate(steps):
        if step.kind != "gpu" or not step.scales or step.extent_rows != upper:
            continue
        layout = KERNELS[step.kernel].params
        values = layout.unpack(step.uniforms)
        for field in step.scales:
            values[field] = scaled(int(values[field]), actual, upper)
        encoder.write_uniforms(index, layout.pack(values))
        if step.extent_axis >= 0:
            encoder.grids[index] = scaled_grid(step.grid, step.extent_axis, actual, upper)
        count += 1
    return count
