"""Region family: ElementwiseRegion and BatchElementwiseRegion as one kernel per chain (region_chain).

The chain becomes straight-line WGSL (``{{BODY}}``): a load per input the chain reads, following the
region's read rule, then one statement block per step made of the element-wise family's own
expressions and conversions (lowering/elementwise.py), so a region computes exactly what its unfused
kernels would. A batch region runs the same kernel once per slice. Chains the word kernels cannot
express run as host steps: a dtype other than f32/i32/u32/bool, integer steps on both i32 and u32, a
compare of i32 with u32.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Node
from rlxpy.ir.ops.base import BinaryOp, TensorType
from rlxpy.ir.ops.region import MAX_REGION_INPUTS, ChainKind, ChainOperand, ChainStep, RegionPrologue
from rlxpy.ir.shape import Shape
from rlxpy.wgpu_backend.host_step import host_steps
from rlxpy.wgpu_backend.kernels.contract import WORDS, accepts
from rlxpy.wgpu_backend.kernels.params import U32, kernel, params
from rlxpy.wgpu_backend.kernels.wgsl import WORD_TYPES, store_fn
from rlxpy.wgpu_backend.lowering.elementwise import (
    ACTIVATION_WGSL,
    COMPARE_WGSL,
    FLOAT_BINARY_WGSL,
    FLOAT_COMPARE_WGSL,
    INT_BINARY_WGSL,
    cast_expr,
)
from rlxpy.wgpu_backend.schedule import LowerCtx, Step, lowers

REGION_CHAIN = kernel("region_chain", params(
    "RegionChainParams", ("n",), n=U32, y=U32, **{f"in{i}": U32 for i in range(MAX_REGION_INPUTS)}),
    dtypes=accepts(rest=WORDS, out=WORDS), extent_axis=0)


class Unsupported(Exception):
    """A chain the word kernels cannot express (the region then runs as a host step)."""


def _wgsl_type(dtype: DType) -> str:
    if dtype not in WORD_TYPES:
        raise Unsupported(f"dtype {dtype}")
    return WORD_TYPES[dtype][0]


def read_index(index: int, shape: Shape, op: ops.ElementwiseRegion | ops.BatchElementwiseRegion) -> str:
    """WGSL index of input ``index``'s value for output element e (the read rule, ir/ops/region.py)."""
    if op.prologue is RegionPrologue.RESIZE_NEAREST_2X and index == op.prologue_input:
        _, _, h, w = (int(d) for d in shape)
        return (f"(e / {h * w}u) * {h * w // 4}u + ((e / {w}u) % {h}u) / 2u * {w // 2}u + (e % {w}u) / 2u")
    if op.scalar_input_mask >> index & 1:
        return "0u"
    if index < len(op.input_modulus) and op.input_modulus[index]:
        return f"e % {op.input_modulus[index]}u"
    return "e"


class ChainBody:
    """The WGSL statements of one chain: ``lines`` and the integer compute type ``int_type`` (T)."""

    def __init__(self, input_dtypes: Sequence[DType], reader: Callable[[int], str]) -> None:
        self.input_dtypes = list(input_dtypes)
        self.reader = reader
        self.lines: list[str] = []
        self.loaded: set[int] = set()
        self.step_dtypes: list[DType] = []
        self.int_type = ""

    def operand(self, a: ChainOperand) -> tuple[str, DType]:
        if a.is_step:
            return f"s{a.index}", self.step_dtypes[a.index]
        dtype = self.input_dtypes[a.index]
        if a.index not in self.loaded:  # loaded once, where first used
            loader = WORD_TYPES[dtype][1] if dtype in WORD_TYPES else ""
            if not loader:
                raise Unsupported(f"input {a.index} of dtype {dtype}")
            self.lines.append(f"    let in{a.index} = {loader}(p.in{a.index} + {self.reader(a.index)});")
            self.loaded.add(a.index)
        return f"in{a.index}", dtype

    def integer(self, compute: str) -> None:
        """Integer steps use T (INT_BINARY_WGSL's T(0), pow_int): one integer type per chain."""
        if self.int_type and self.int_type != compute:
            raise Unsupported("integer steps on both i32 and u32")
        self.int_type = compute

    def add(self, j: int, step: ChainStep) -> None:
        args = [self.operand(a) for a in step.args]
        dtype = step.as_op().infer([TensorType((1,), d) for _, d in args]).dtype
        ty = _wgsl_type(dtype)
        self.step_dtypes.append(dtype)
        self.lines.append(f"    var s{j}: {ty};")
        self.lines.append(f"    {{ {self.statement(j, step, args, dtype, ty)} }}")

    def statement(self, j: int, step: ChainStep, args: list[tuple[str, DType]], dtype: DType, ty: str) -> str:
        types = [_wgsl_type(d) for _, d in args]
        if step.kind is ChainKind.ACTIVATION:
            return f"let v = {args[0][0]}; s{j} = {ACTIVATION_WGSL[step.sub]};"  # type: ignore[index]
        if step.kind is ChainKind.CAST:
            return f"let v = {args[0][0]}; s{j} = {cast_expr(args[0][1], dtype)};"
        if step.kind is ChainKind.BINARY:  # computed in the output's type, as elementwise_binary
            if ty != "f32" and step.sub in (BinaryOp.DIV, BinaryOp.POW):  # their expressions use T
                self.integer(ty)
            expr = (FLOAT_BINARY_WGSL if ty == "f32" else INT_BINARY_WGSL)[step.sub]  # type: ignore[index]
            if dtype is DType.BOOL:  # bool is stored 0/1: True + True must not give 2
                expr = f"select(0u, 1u, ({expr}) != 0u)"
            return f"let a = {ty}({args[0][0]}); let b = {ty}({args[1][0]}); s{j} = {expr};"
        if step.kind is ChainKind.COMPARE:  # in the operands' common type, as elementwise_compare
            if set(types) == {"i32", "u32"}:
                raise Unsupported("a compare of i32 with u32")
            common = "f32" if "f32" in types else types[0]
            expr = (FLOAT_COMPARE_WGSL if common == "f32" else COMPARE_WGSL)[step.sub]  # type: ignore[index]
            operands = f"let a = {common}({args[0][0]}); let b = {common}({args[1][0]});"
            return f"{operands} s{j} = select(0u, 1u, {expr});"
        # Where: the condition's bits (an f32 is true unless +-0, NaN is true), as elementwise_where
        mask = "0x7fffffffu" if types[0] == "f32" else "0xffffffffu"
        cond, on_true, on_false = (name for name, _ in args)
        keep = f"let keep = (bitcast<u32>({cond}) & {mask}) != 0u;"
        return f"{keep} s{j} = select({ty}({on_false}), {ty}({on_true}), keep);"


def chain_source(chain: Sequence[ChainStep], input_dtypes: Sequence[DType], reader: Callable[[int], str],
                 out: DType) -> dict[str, object]:
    """region_chain's placeholders for one chain (raises Unsupported)."""
    body = ChainBody(input_dtypes, reader)
    for j, step in enumerate(chain):
        body.add(j, step)
    body.lines.append(f"    {store_fn(out)}(p.y + e, s{len(chain) - 1});")
    return {"T": body.int_type or "i32", "BODY": "\n".join(body.lines)}


@lowers(ops.ElementwiseRegion)
def lower_elementwise_region(node: Node, ctx: LowerCtx) -> list[Step]:
    op: ops.ElementwiseRegion = node.op  # type: ignore[assignment]
    inputs = ctx.inputs(node)
    if node.numel == 0:
        return []
    try:
        subs = chain_source(op.chain, [t.dtype for t in inputs], lambda i: read_index(i, node.shape, op),
                            node.dtype)
    except Unsupported:
        return host_steps(node, ctx)
    offsets = {f"in{i}": ctx.offset(inputs[i]) if i < len(inputs) else 0 for i in range(MAX_REGION_INPUTS)}
    # the active extent may shrink n: every input is read at e, 0, e % m or the prologue pixel under e
    return [ctx.dispatch(REGION_CHAIN, node, ctx.grid_1d(node.numel), subs, n=node.numel, y=ctx.offset(node),
                         **offsets)]


@lowers(ops.BatchElementwiseRegion)
def lower_batch_elementwise_region(node: Node, ctx: LowerCtx) -> list[Step]:
    """One region_chain dispatch per slice, every input field pointing at that slice's tensor."""
    op: ops.BatchElementwiseRegion = node.op  # type: ignore[assignment]
    slices = ctx.inputs(node)
    if node.numel == 0:
        return []
    shape = op.slice_shape(len(slices))
    per_slice = node.numel // len(slices)
    try:
        subs = chain_source(op.chain, [slices[0].dtype] * MAX_REGION_INPUTS,
                            lambda i: read_index(0, shape, op), node.dtype)
    except Unsupported:
        return host_steps(node, ctx)
    return [ctx.dispatch(REGION_CHAIN, node, ctx.grid_1d(per_slice), subs, False, n=per_slice,
                         y=ctx.offset(node) + s * per_slice,
                         **{f"in{i}": ctx.offset(t) for i in range(MAX_REGION_INPUTS)})
            for s, t in enumerate(slices)]
