"""Reference semantics: fused element-wise regions, by interpreting the chain.

Each step runs the registered reference of the standalone op it names (``ChainStep.as_op``),
so a region and its unfused ops agree bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rlxpy.ir.dtype import DType
from rlxpy.ir.ops.base import TensorType
from rlxpy.ir.ops.region import (
    MAX_REGION_INPUTS,
    BatchElementwiseRegion,
    ChainStep,
    ElementwiseRegion,
    RegionPrologue,
)
from rlxpy.ir.reference import elementwise  # noqa: F401  (registers the standalone ops' references)
from rlxpy.ir.reference.core import REFERENCE, reference
from rlxpy.ir.shape import Shape


@dataclass(frozen=True)
class _StepNode:
    """What a standalone op's reference reads from its node."""

    type: TensorType
    name: str

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    @property
    def shape(self) -> Shape:
        return self.type.shape


def run_chain(chain: Sequence[ChainStep], values: Sequence[np.ndarray], label: str = "region") -> np.ndarray:
    """Evaluate the chain on flat, equally long operand arrays; returns the last step's result."""
    results: list[np.ndarray] = []
    for j, step in enumerate(chain):
        operands = [results[a.index] if a.is_step else values[a.index] for a in step.args]
        op = step.as_op()
        out_type = op.infer([TensorType(o.shape, DType.parse(o.dtype)) for o in operands])
        out = REFERENCE[type(op)](op, operands, _StepNode(out_type, f"{label}.step{j}"))
        results.append(np.asarray(out).astype(out_type.dtype.numpy, copy=False))
    return results[-1]


def read_input(x: np.ndarray, index: int, out_shape: Shape, scalar_mask: int, modulus: Sequence[int],
               prologue: RegionPrologue, prologue_input: int) -> np.ndarray:
    """Input ``index`` as a flat array with one value per output element (ir/ops/region.py's read rule)."""
    numel = math.prod(out_shape)  # type: ignore[arg-type]
    if prologue is RegionPrologue.RESIZE_NEAREST_2X and index == prologue_input:
        return x.repeat(2, axis=2).repeat(2, axis=3).reshape(-1)  # (n, c, h//2, w//2)
    flat = x.reshape(-1)
    if scalar_mask >> index & 1:
        return np.broadcast_to(flat[:1], (numel,))
    if index < len(modulus) and modulus[index]:
        return np.resize(flat, numel)  # element e reads flat[e % modulus]
    return flat


@reference(ElementwiseRegion)
def ref_elementwise_region(op: ElementwiseRegion, args, node):
    shape = tuple(node.shape)
    values = [read_input(x, i, shape, op.scalar_input_mask, op.input_modulus, op.prologue, op.prologue_input)
              for i, x in enumerate(args)]
    return run_chain(op.chain, values, node.name).reshape(shape)


@reference(BatchElementwiseRegion)
def ref_batch_elementwise_region(op: BatchElementwiseRegion, args, node):
    slice_shape = op.slice_shape(len(args))
    pieces = []
    for x in args:
        # every Input(k) of the chain reads this slice, with input 0's read rule
        flat = read_input(x, 0, slice_shape, op.scalar_input_mask, op.input_modulus, op.prologue,
                          op.prologue_input)
        pieces.append(run_chain(op.chain, [flat] * MAX_REGION_INPUTS))
    return np.concatenate(pieces).reshape(node.shape)
