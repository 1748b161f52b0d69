"""Element-wise family: activations, binary, compare, where, cast, copy.

Operands already have the output's element count (unfuse made broadcasting explicit). Word
dtypes (f32/i32/u32/bool) run on the GPU; casts to or from f16/bf16 run elementwise_cast_half (at the
end of this module); other dtypes fall back to host steps for casts.
"""

from __future__ import annotations

import numpy as np

from rlxpy.errors import UnsupportedOpError, where
from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Node
from rlxpy.ir.ops.base import ActKind, BinaryOp, CmpOp
from rlxpy.ir.reference.elementwise import cast_values
from rlxpy.wgpu_backend.kernels.contract import WORDS, accepts
from rlxpy.wgpu_backend.kernels.params import U32, kernel, params
from rlxpy.wgpu_backend.kernels.wgsl import WORD_TYPES, store_fn, word_type
from rlxpy.wgpu_backend.schedule import LowerCtx, Step, lowers

_WORDS_1 = {"x": U32, "y": U32}  # one input word offset, one output
#: f32/i32/u32/bool on one side of a half cast, f16/bf16 on the other (``is_half_cast``)
_HALF_CASTS = (DType.F16, DType.BF16, *WORDS)
ELEMENTWISE_UNARY = kernel("elementwise_unary", params("ElementwiseUnaryParams", ("n",), n=U32, **_WORDS_1),
                           dtypes=accepts(DType.F32, out=DType.F32), extent_axis=0)
ELEMENTWISE_BINARY = kernel("elementwise_binary", params("ElementwiseBinaryParams", ("n",), n=U32, a=U32,
                                                         b=U32, y=U32),
                            dtypes=accepts(WORDS, WORDS, out=WORDS), extent_axis=0)
#: 16-byte variants for nodes whose element count and offsets are multiples of 4 (``_vec4_fields``)
ELEMENTWISE_UNARY_VEC4 = kernel("elementwise_unary_vec4", params("ElementwiseUnaryVec4Params", ("n",), n=U32,
                                                                 **_WORDS_1),
                                dtypes=accepts(DType.F32, out=DType.F32), extent_axis=0)
ELEMENTWISE_BINARY_VEC4 = kernel("elementwise_binary_vec4",
                                 params("ElementwiseBinaryVec4Params", ("n",), n=U32, a=U32, b=U32, y=U32),
                                 dtypes=accepts(DType.F32, DType.F32, out=DType.F32), extent_axis=0)
ELEMENTWISE_CAST_VEC4 = kernel("elementwise_cast_vec4", params("ElementwiseCastVec4Params", ("n",), n=U32,
                                                               **_WORDS_1),
                               dtypes=accepts(WORDS, out=WORDS), extent_axis=0)
ELEMENTWISE_COMPARE = kernel("elementwise_compare", params("ElementwiseCompareParams", ("n",), n=U32, a=U32,
                                                           b=U32, y=U32),
                             dtypes=accepts(WORDS, WORDS, out=DType.BOOL), extent_axis=0)
ELEMENTWISE_WHERE = kernel("elementwise_where", params("ElementwiseWhereParams", ("n",), n=U32, c=U32, a=U32,
                                                       b=U32, y=U32),
                           dtypes=accepts(WORDS, WORDS, WORDS, out=WORDS), extent_axis=0)
ELEMENTWISE_CAST = kernel("elementwise_cast", params("ElementwiseCastParams", ("n",), n=U32, **_WORDS_1),
                          dtypes=accepts(WORDS, out=WORDS), extent_axis=0)
# also the compiler's staging copies, for any node: words whatever they hold
ELEMENTWISE_COPY_WORDS = kernel("elementwise_copy_words", params("ElementwiseCopyWordsParams", ("n",), n=U32,
                                                                 **_WORDS_1), dtypes=accepts(), extent_axis=0)
ELEMENTWISE_CAST_HALF = kernel("elementwise_cast_half", params("ElementwiseCastHalfParams", ("n",), n=U32,
                                                               **_WORDS_1),
                               dtypes=accepts(_HALF_CASTS, out=_HALF_CASTS), extent_axis=0)

#: WGSL expression of each activation on ``v`` (f32), matching the reference's formulas.
ACTIVATION_WGSL = {
    ActKind.RELU: "select(max(v, 0.0), v, is_nan(v))",
    ActKind.SIGMOID: "1.0 / (1.0 + exp(-v))",
    ActKind.TANH: "tanh_safe(v)",
    ActKind.EXP: "exp(v)",
    ActKind.LOG: "log(v)",
    ActKind.SQRT: "sqrt(v)",
    ActKind.RSQRT: "1.0 / sqrt(v)",
    ActKind.NEG: "-v",
    ActKind.ABS: "abs(v)",
    ActKind.GELU: "0.5 * v * (1.0 + erf_f32(v * 0.70710678118654752))",
    ActKind.SILU: "v / (1.0 + exp(-v))",
    ActKind.GELU_APPROX: "0.5 * v * (1.0 + tanh_safe(0.7978845608028654 * (v + 0.044715 * v * v * v)))",
    # half away from zero without adding 0.5 in f32 (0.49999997 + 0.5 rounds up to 1.0, and
    # 2^23 + 1 + 0.5 rounds to 2^23 + 2): v - trunc(v) is exact
    ActKind.ROUND: "select(trunc(v), trunc(v) + sign(v), abs(v - trunc(v)) >= 0.5)",
    ActKind.SIN: "sin_f32(v)",
    ActKind.COS: "cos_f32(v)",
    ActKind.TAN: "tan_f32(v)",
    ActKind.ATAN: "atan_f32(v)",
    # min/max of NaN differ between backends: NaN is passed through explicitly
    ActKind.HARDSIGMOID: "select(min(max(v + 3.0, 0.0), 6.0), v, is_nan(v)) / 6.0",
    ActKind.HARDSWISH: "v * select(min(max(v + 3.0, 0.0), 6.0), v, is_nan(v)) / 6.0",
}

FLOAT_BINARY_WGSL = {
    BinaryOp.ADD: "a + b", BinaryOp.SUB: "a - b", BinaryOp.MUL: "a * b", BinaryOp.DIV: "a / b",
    BinaryOp.MAX: "maxp(a, b)", BinaryOp.MIN: "minp(a, b)", BinaryOp.POW: "pow_f32(a, b)",
}
#: Integer variants (T = i32/u32; pow_int from include/elementwise_pow_int.wgsl).
INT_BINARY_WGSL = {
    **FLOAT_BINARY_WGSL, BinaryOp.MAX: "max(a, b)", BinaryOp.MIN: "min(a, b)", BinaryOp.POW: "pow_int(a, b)",
    BinaryOp.DIV: "select(a / b, a, b == T(0))",  # trunc division; x / 0 = x like the reference
}

_CMP_SYMBOL = {CmpOp.EQ: "==", CmpOp.NE: "!=", CmpOp.LT: "<", CmpOp.LE: "<=", CmpOp.GT: ">", CmpOp.GE: ">="}
COMPARE_WGSL = {op: f"a {symbol} b" for op, symbol in _CMP_SYMBOL.items()}
#: Mixed i32 / u32 operands are ordering keys (elementwise_compare.wgsl): the sign of order(a, b).
_MIXED_COMPARE = {op: f"order(a, b) {symbol} 0" for op, symbol in _CMP_SYMBOL.items()}
# WGSL lets a compiler assume no NaN (lavapipe's NaN != x is false), so f32 compares test NaN by bits
_NAN_GUARD = "(is_nan(a) || is_nan(b))"
FLOAT_COMPARE_WGSL = {op: (f"{_NAN_GUARD} || a != b" if op is CmpOp.NE else f"!{_NAN_GUARD} && {expr}")
                      for op, expr in COMPARE_WGSL.items()}


def _compute_type(node: Node, dtype: DType) -> str:
    return word_type(dtype, where(node))[0]


@lowers(ops.Activation)
def lower_activation(node: Node, ctx: LowerCtx) -> list[Step]:
    (x,) = ctx.inputs(node)
    subs = {"TX": "f32", "TY": "f32", "LOAD_X": "ld_f32", "STORE": "st_f32",
            "CONVERT": ACTIVATION_WGSL[node.op.fn]}
    fields = {"x": ctx.offset(x), "y": ctx.offset(node)}
    vec4 = _vec4_fields(node, fields)
    if vec4:
        return [ctx.dispatch(ELEMENTWISE_UNARY_VEC4, node, ctx.grid_1d(vec4["n"]), subs, **vec4)]
    return [ctx.dispatch(ELEMENTWISE_UNARY, node, ctx.grid_1d(node.numel), subs, n=node.numel, **fields)]


@lowers(ops.Binary)
def lower_binary(node: Node, ctx: LowerCtx) -> list[Step]:
    a, b = ctx.inputs(node)
    compute = _compute_type(node, node.dtype)
    table = FLOAT_BINARY_WGSL if compute == "f32" else INT_BINARY_WGSL
    subs = {"T": compute, "POW": "float" if compute == "f32" else "int",
            "LOAD_A": word_type(a.dtype, where(node))[1], "LOAD_B": word_type(b.dtype, where(node))[1],
            "STORE": store_fn(node.dtype), "EXPR": table[node.op.op]}
    if node.dtype is DType.BOOL:  # bool is stored 0/1: True + True must not store 2
        subs["EXPR"] = f"select(0u, 1u, ({subs['EXPR']}) != 0u)"
    fields = {"a": ctx.offset(a), "b": ctx.offset(b), "y": ctx.offset(node)}
    vec4 = _vec4_fields(node, fields) if a.dtype is b.dtype is node.dtype is DType.F32 else None
    if vec4:
        return [ctx.dispatch(ELEMENTWISE_BINARY_VEC4, node, ctx.grid_1d(vec4["n"]), subs, **vec4)]
    return [ctx.dispatch(ELEMENTWISE_BINARY, node, ctx.grid_1d(node.numel), subs, n=node.numel, **fields)]


def _vec4_fields(node: Node, offsets: dict[str, int]) -> dict[str, int] | None:
    """The 16-byte kernels' fields (``n`` counts vec4s, the offsets stay in words), or None where the
    node's element count or an offset is not a multiple of 4 elements. Word-per-lane kernels reach
    about half of the copy bandwidth on a discrete GPU; 16-byte accesses reach 0.87-0.93x of torch's
    copy (H200, benches/bench_elementwise.py)."""
    if node.numel % 4 or any(offset % 4 for offset in offsets.values()):
        return None
    return {"n": node.numel // 4, **offsets}


def _common_type(node: Node, *dtypes: DType) -> str:
    kinds = {_compute_type(node, d) for d in dtypes}
    return "f32" if "f32" in kinds else ("i32" if "i32" in kinds else "u32")


@lowers(ops.Compare)
def lower_compare(node: Node, ctx: LowerCtx) -> list[Step]:
    a, b = ctx.inputs(node)
    common = _common_type(node, a.dtype, b.dtype)
    subs = {"T": common,
            "LOAD_A": word_type(a.dtype, where(node))[1], "LOAD_B": word_type(b.dtype, where(node))[1],
            "EXPR": (FLOAT_COMPARE_WGSL if common == "f32" else COMPARE_WGSL)[node.op.op]}
    if {_compute_type(node, a.dtype), _compute_type(node, b.dtype)} == {"i32", "u32"}:
        keys = {"i32": "key_i32", "u32": "key_u32"}
        subs.update({"T": "vec2<u32>", "LOAD_A": keys[_compute_type(node, a.dtype)],
                     "LOAD_B": keys[_compute_type(node, b.dtype)], "EXPR": _MIXED_COMPARE[node.op.op]})
    return [ctx.dispatch(ELEMENTWISE_COMPARE, node, ctx.grid_1d(node.numel), subs,
                         n=node.numel, a=ctx.offset(a), b=ctx.offset(b), y=ctx.offset(node))]


@lowers(ops.Where)
def lower_where(node: Node, ctx: LowerCtx) -> list[Step]:
    c, a, b = ctx.inputs(node)
    cond_type = word_type(c.dtype, where(node))[0]
    # the condition's bits: an f32 is true unless +-0 (NaN is true), without a float compare
    subs = {"T": _compute_type(node, node.dtype),
            "COND_MASK": "0x7fffffffu" if cond_type == "f32" else "0xffffffffu",
            "LOAD_A": word_type(a.dtype, where(node))[1],
            "LOAD_B": word_type(b.dtype, where(node))[1], "STORE": store_fn(node.dtype)}
    return [ctx.dispatch(ELEMENTWISE_WHERE, node, ctx.grid_1d(node.numel), subs, n=node.numel,
                         c=ctx.offset(c), a=ctx.offset(a), b=ctx.offset(b), y=ctx.offset(node))]


def cast_expr(src: DType, dst: DType) -> str:
    tx, ty = WORD_TYPES[src][0], WORD_TYPES[dst][0]
    if dst is DType.BOOL and tx == "f32":  # bits, not v != 0.0: some compilers order NaN != 0 as false
        return "select(0u, 1u, (bitcast<u32>(v) & 0x7fffffffu) != 0u)"
    if dst is DType.BOOL:
        return f"select(0u, 1u, v != {tx}(0))"
    if tx == "f32" and ty != "f32":
        return f"sat_{ty}(v)"
    return f"{ty}(v)"


@lowers(ops.Cast)
def lower_cast(node: Node, ctx: LowerCtx) -> list[Step]:
    (x,) = ctx.inputs(node)
    if x.dtype in WORD_TYPES and node.dtype in WORD_TYPES:
        subs = {"TX": WORD_TYPES[x.dtype][0], "TY": WORD_TYPES[node.dtype][0],
                "LOAD_X": WORD_TYPES[x.dtype][1], "STORE": store_fn(node.dtype),
                "CONVERT": cast_expr(x.dtype, node.dtype)}
        fields = {"x": ctx.offset(x), "y": ctx.offset(node)}
        vec4 = _vec4_fields(node, fields)
        if vec4:
            return [ctx.dispatch(ELEMENTWISE_CAST_VEC4, node, ctx.grid_1d(vec4["n"]), subs, **vec4)]
        return [ctx.dispatch(ELEMENTWISE_CAST, node, ctx.grid_1d(node.numel), subs, n=node.numel, **fields)]
    if is_half_cast(x.dtype, node.dtype):  # f16/bf16 <-> f32/i32/u32/bool: two elements per thread
        return cast_half_steps(node, ctx)
    # f64/i64/i8/... casts: rare at run time (mostly at graph edges), done on the host
    src_id, dst_id, to = x.id, node.id, node.dtype

    def run(io) -> None:
        io.write(dst_id, cast_values(np.asarray(io.read(src_id)), to))

    return [ctx.host(node, "host_cast", run)]


@lowers(ops.Copy)
def lower_copy(node: Node, ctx: LowerCtx) -> list[Step]:
    (x,) = ctx.inputs(node)
    return [copy_step(node, ctx, x, node, node.nbytes)]


def copy_step(node: Node, ctx: LowerCtx, src: Node | int, dst: Node | int, nbytes: int,
              src_extra: int = 0, dst_extra: int = 0) -> Step:
    """Copy ``nbytes`` (rounded up to words) from ``src`` (+ byte offset) to ``dst`` (+ byte offset)."""
    assert src_extra % 4 == 0 and dst_extra % 4 == 0, "elementwise_copy_words moves whole words"
    words = (nbytes + 3) // 4
    return ctx.dispatch(ELEMENTWISE_COPY_WORDS, node, ctx.grid_1d(words), n=words,
                        x=ctx.offset(src) + src_extra // 4, y=ctx.offset(dst) + dst_extra // 4)


# -- f16 / bf16 casts (called by lower_cast) ----------------------------------------
HALF_TYPES = (DType.F16, DType.BF16)

#: Source element e as f32 (elementwise_cast_half.wgsl's ``load``).
_HALF_LOAD = {
    DType.F16: "f16_to_f32(half_at(e))",
    DType.BF16: "bf16_to_f32(half_at(e))",
    DType.F32: "ld_f32(p.x + e)",
    DType.I32: "f32(ld_i32(p.x + e))",
    DType.U32: "f32(ld_u32(p.x + e))",
    DType.BOOL: "select(0.0, 1.0, ld_u32(p.x + e) != 0u)",
}

def is_half_cast(src: DType, dst: DType) -> bool:
    """Casts this module runs on the GPU: f16/bf16 on one side, f16/bf16/f32/i32/u32/bool on the other."""
    return src != dst and (src in HALF_TYPES or dst in HALF_TYPES) and {src, dst} <= set(_HALF_LOAD)


def cast_half_steps(node: Node, ctx: LowerCtx) -> list[Step]:
    """Cast through f32. f32 -> f16 / bf16 rounds to nearest even with overflow to inf, exactly as
    torch's ``.to(torch.float16 / torch.bfloat16)``; f16 / bf16 -> f32 is exact."""
    (x,) = ctx.inputs(node)
    if not is_half_cast(x.dtype, node.dtype):
        raise UnsupportedOpError(f"{where(node)}: cast {x.dtype} -> {node.dtype} is not a half cast")
    if node.numel == 0:
        return []
    dst = node.dtype
    subs: dict[str, object] = {"LOAD": _HALF_LOAD[x.dtype]}
    if dst in HALF_TYPES:  # the pair is one word
        subs.update(TO="half", PACK="f32_to_f16" if dst is DType.F16 else "f32_to_bf16")
    else:  # float -> int saturates, exactly like elementwise_cast
        subs.update(TO="word", TY=WORD_TYPES[dst][0], STORE=store_fn(dst), CONVERT=cast_expr(DType.F32, dst))
    pairs = -(-node.numel // 2)
    return [ctx.dispatch(ELEMENTWISE_CAST_HALF, node, ctx.grid_1d(pairs), subs, n=node.numel, x=ctx.offset(x),
                         y=ctx.offset(node))]
