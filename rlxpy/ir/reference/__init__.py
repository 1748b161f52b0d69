"""The numpy reference interpreter: the executable spec of every op, and the test oracle.

Each op family (``reference/<family>.py``, named as in ``ir/ops``) registers ``@reference(ops.X)``
functions ``fn(op, args, node) -> ndarray`` in the registry of ``core.py``; ``run_reference`` walks
a graph in order. Values are numpy arrays in the op's reference dtype (bf16 computed as f32, bool
as numpy bool). Float math is done in float64 where cheap and cast back, so the reference is at
least as accurate as any kernel it checks. Importing this package imports every family (leaf has
none: run_reference binds Input/Param/Constant itself), so the registry is complete.
"""

from __future__ import annotations

from rlxpy.ir.reference import (  # noqa: F401  (registration, in family order)
    attention,
    backward,
    control,
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
from rlxpy.ir.reference.core import REFERENCE, RefFn, check_value, reference, reference_of, run_reference

__all__ = ["REFERENCE", "RefFn", "check_value", "reference", "reference_of", "run_reference"]
