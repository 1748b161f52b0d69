"""Kernel contracts: what a kernel takes and needs, declared once in ``kernel(...)`` (params.py) and
enforced once, by ``LowerCtx.dispatch`` (schedule.py), for every step made of it.

* ``dtypes`` (an ``Accepts``): the dtypes of the node's inputs by position, of named inputs (ops
  with ``input_roles()``), of the inputs past the positional ones, and of the output. A mismatch
  is an UnsupportedOpError naming the node.
* ``workgroup`` and ``shared_bytes``: the workgroup size and the bytes of workgroup memory, fixed or
  computed from the dispatch's substitutions (``Kernel.launch``); over the device's
  ``max_invocations`` / ``max_workgroup_storage`` is a LimitError.
* ``mutates``: uniform fields addressing inputs the kernel may write in place (KV caches). Which
  inputs a node mutates is the op's declaration (``Op.mutated_inputs``); lowering checks that a GPU
  step writes each of them through such a field.

Scratch space depends on the node, not the kernel: a lowerer declares it (``@lowers(..., scratch=)``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlxpy.ir.dtype import DType

if TYPE_CHECKING:
    from rlxpy.ir.graph import Node

DTypes = frozenset[DType]
ANY: DTypes = frozenset(DType)
FLOAT32: DTypes = frozenset({DType.F32})
#: Word-sized element types the element-wise kernels load and store (bool is stored as a u32).
WORDS: DTypes = frozenset({DType.F32, DType.I32, DType.U32, DType.BOOL})


def dtype_set(spec: DType | Iterable[DType]) -> DTypes:
    return frozenset({spec}) if isinstance(spec, DType) else frozenset(spec)


def dtype_names(allowed: DTypes) -> str:
    return "/".join(d.value for d in DType if d in allowed)


@dataclass(frozen=True)
class Accepts:
    """The dtypes a kernel takes (``accepts`` builds one)."""

    inputs: tuple[DTypes, ...] = ()  # by input position
    rest: DTypes = ANY  # inputs past the positional ones
    out: DTypes = ANY  # the node itself
    roles: tuple[tuple[str, DTypes], ...] = ()  # by input role, for ops that name their inputs

    def sets(self) -> list[DTypes]:
        return [*self.inputs, self.rest, self.out, *(allowed for _, allowed in self.roles)]

    def refusal(self, inputs: Sequence[Node], output: Node, roles: Mapping[str, Node]
                ) -> tuple[str, Node, DTypes] | None:
        """(what, tensor, allowed dtypes) of the first tensor the kernel does not take, or None."""
        for i, t in enumerate(inputs):
            allowed = self.inputs[i] if i < len(self.inputs) else self.rest
            if t.dtype not in allowed:
                return f"input {i}", t, allowed
        for role, allowed in self.roles:
            t = roles.get(role)
            if t is not None and t.dtype not in allowed:
                return role, t, allowed
        if output.dtype not in self.out:
            return "output", output, self.out
        return None


def accepts(*inputs: DType | Iterable[DType], rest: DType | Iterable[DType] = ANY,
            out: DType | Iterable[DType] = ANY, **roles: DType | Iterable[DType]) -> Accepts:
    """``accepts(F32, F32, rest=ANY, out=F32, gamma=F32)``: inputs 0 and 1 f32, the others any dtype,
    an f32 output, and the input named ``gamma`` (``Op.input_roles``), when present, f32."""
    return Accepts(tuple(dtype_set(s) for s in inputs), dtype_set(rest), dtype_set(out),
                   tuple((role, dtype_set(s)) for role, s in roles.items()))


def workgroup_var_bytes(size: int) -> int:
    """What one ``var<workgroup>`` of ``size`` bytes counts against the limit (rounded up to 16)."""
    return -(-size // 16) * 16
