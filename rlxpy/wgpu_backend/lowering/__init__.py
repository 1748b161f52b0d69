"""Lowerers, one module per op family; importing this package registers them all.

The list is explicit so the order is fixed and a missing family is visible in review.
"""

from rlxpy.wgpu_backend.lowering import (  # noqa: F401
    attention,
    elementwise,
    fused,
    host_fallback,
    kv,
    matmul,
    norm,
    quant,
    reduce,
    shape_ops,
)
