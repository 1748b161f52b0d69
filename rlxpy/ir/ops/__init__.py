"""The closed op set of the IR, one module per op family.

Each family has the same name everywhere: ``ir/ops/<family>.py`` (shape rules),
``ir/reference/<family>.py`` (numpy semantics), ``wgpu_backend/lowering/<family>.py`` (lowerers),
``wgpu_backend/kernels/<family>_*.wgsl`` and ``tests/ops/test_<family>.py`` /
``tests/ir/test_reference_<family>.py``. ``base.py`` holds the Op base class, TensorType and the
enums. Every op class is ``ops.<Name>``: the namespace is built from the registry (``OP_TYPES``).
docs/ops.md documents every op, one section per family, generated from the docstrings here
(``python -m rlxpy.ir.ops_doc``).
"""

from __future__ import annotations

from rlxpy.ir.ops import (  # noqa: F401  (registration, in family order)
    attention,
    backward,
    control,
    conv,
    custom,
    elementwise,
    kv,
    leaf,
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
from rlxpy.ir.ops.base import (
    ENUMS,
    OP_TYPES,
    ActKind,
    BinaryOp,
    CmpOp,
    FftNorm,
    MaskKind,
    Op,
    ReduceOp,
    ResizeCoord,
    ResizeMode,
    TensorType,
)
from rlxpy.ir.ops.quant import GGUF_BLOCKS

#: The op families, in the order the README lists them; each is a module of this package.
FAMILIES: tuple[str, ...] = (
    "leaf", "elementwise", "shape", "matmul", "quant", "norm", "reduce", "attention", "rope", "kv",
    "sample", "conv", "signal", "scan", "region", "custom", "loss", "backward", "optim", "control",
)


def family_of(op_type: type[Op]) -> str:
    """The family an op class belongs to: the name of the ops module that declares it."""
    return op_type.__module__.rsplit(".", 1)[-1]


globals().update(OP_TYPES)  # every op class is ops.<Name>

ALL_OPS: tuple[type[Op], ...] = tuple(OP_TYPES.values())
LEAF_OPS: tuple[type[Op], ...] = tuple(cls for cls in ALL_OPS if family_of(cls) == "leaf")
VIEW_OPS: tuple[type[Op], ...] = (OP_TYPES["Reshape"],)
#: Ops the unfuse pass expands into primitives; they never reach a backend.
COMPOSITE_OPS: tuple[type[Op], ...] = tuple(cls for cls in ALL_OPS if cls.composite)

__all__ = [
    "ALL_OPS", "COMPOSITE_OPS", "ENUMS", "FAMILIES", "GGUF_BLOCKS", "LEAF_OPS", "OP_TYPES", "VIEW_OPS",
    "ActKind", "BinaryOp", "CmpOp", "FftNorm", "MaskKind", "Op", "ReduceOp", "ResizeCoord", "ResizeMode",
    "TensorType", "family_of",
    *sorted(OP_TYPES),
]
