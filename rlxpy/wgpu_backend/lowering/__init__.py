"""Lowerers, one module per op family (named as in ``ir/ops``); importing this package registers
them all. A big family is split by sub-family under its own prefix (``quant_gguf``, ``quant_generic``,
``matmul_skinny``), imported by the family module.

The list is explicit so the order is fixed and a missing family is visible in review. The leaf
family has no lowerers (the executable binds inputs, params and constants), nor has control (If and
While are expanded by the unfuse pass before lowering).
"""

from rlxpy.wgpu_backend.lowering import (  # noqa: F401
    attention,
    backward,
    conv,
    custom,
    elementwise,
    kv,
    loss,
    matmul,
    norm,
    optim,
    quant,
    reduce,
    region,
    rope,
    sample,
    scan,
    shape,
    signal,
)
