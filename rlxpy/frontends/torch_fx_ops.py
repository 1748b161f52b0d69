"""The aten op table of the torch.compile frontend: one translator per aten packet.

Each translator maps one aten op onto rlxpy builder calls with torch's semantics: dtype promotion
(an int tensor plus a float scalar computes in f32), numpy broadcasting, torch's index wrapping for
negative indices. Where rlxpy has no exact equivalent (float floor division, round half-to-even,
is_causal with S_q != S_k) the translator raises UnsupportedOpError instead of approximating; the
backend then falls back to eager torch, or reports the error.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch.fx as fx

from rlxpy.frontends.onnx_ops import erf
from rlxpy.frontends.torch_fx_ops_signal import complex_abs
from rlxpy.frontends.torch_fx_translate import Dim, FxTranslator, Host, translator
from rlxpy.ir import DType, Node, Sym, ops
from rlxpy.ir.ops.base import ActKind, BinaryOp, CmpOp

T = FxTranslator
Args = dict[str, Any]


def _float_like(*values: Any) -> bool:
    return any(isinstance(v, float) or isinstance(v, Node) and v.dtype.is_float
               or isinstance(v, Host) and v.node.meta["val"].dtype.is_floating_point for v in values)


def _compute_dtype(t: T, *values: Any) -> DType:
    """torch's promotion over the operands we accept: any float -> f32, else any int -> i32, else bool."""
    if _float_like(*values):
        return DType.F32
    kinds = [t.tensor(v).dtype if isinstance(v, (Node, Host)) else None for v in values]
    def is_int(kind: DType | None, value: Any) -> bool:
        return kind is DType.I32 or kind is None and isinstance(value, int) and not isinstance(value, bool) \
            or isinstance(value, Sym)
    if any(is_int(k, v) for k, v in zip(kinds, values)):
        return DType.I32
    return DType.BOOL


def _binary(t: T, node: fx.Node, kind: BinaryOp, a: Any, b: Any) -> Node:
    out = t.out_dtype(node)
    if out is DType.C64:
        raise t.unsupported(f"complex arithmetic ({kind.name.lower()})")
    compute = DType.F32 if out.is_float else out
    if out is DType.BOOL and kind in (BinaryOp.MAX, BinaryOp.MIN, BinaryOp.MUL):
        compute = DType.BOOL
    result = t.g.binary(t.tensor(a, compute), t.tensor(b, compute), kind, name=node.name)
    return t.cast(result, out)


def _unary(t: T, node: fx.Node, fn: ActKind, x: Any) -> Node:
    return t.cast(t.g.activation(t.tensor(x, DType.F32), fn, name=node.name), t.out_dtype(node))


# -- element-wise ---------------------------------------------------------------------------------
_UNARY = {"relu": ActKind.RELU, "sigmoid": ActKind.SIGMOID, "tanh": ActKind.TANH, "exp": ActKind.EXP,
          "log": ActKind.LOG, "sqrt": ActKind.SQRT, "rsqrt": ActKind.RSQRT, "neg": ActKind.NEG,
          "abs": ActKind.ABS, "silu": ActKind.SILU, "sin": ActKind.SIN, "cos": ActKind.COS,
          "tan": ActKind.TAN, "atan": ActKind.ATAN, "hardsigmoid": ActKind.HARDSIGMOID,
          "hardswish": ActKind.HARDSWISH}


def _make_unary(fn: ActKind):
    def translate(t: T, node: fx.Node, a: Args) -> Node:
        x = t.tensor(a["self"])
        if x.dtype is DType.C64:  # only |z| is defined on complex tensors here
            if fn is ActKind.ABS:
                return complex_abs(t, x, node.name)
            raise t.unsupported(f"{fn.name.lower()} of a complex tensor")
        if fn in (ActKind.NEG, ActKind.ABS, ActKind.RELU) and x.dtype is DType.I32:
            zero = t.constant(0, DType.I32)  # exact integer forms: torch keeps int64 for these
            if fn is ActKind.NEG:
                return t.g.sub(zero, x, name=node.name)
            if fn is ActKind.RELU:
                return t.g.maximum(x, zero, name=node.name)
            return t.g.maximum(x, t.g.sub(zero, x), name=node.name)
        return _unary(t, node, fn, x)
    return translate


for _name, _fn in _UNARY.items():
    translator(_name)(_make_unary(_fn))


@translator("gelu")
def tr_gelu(t: T, node: fx.Node, a: Args) -> Node:
    return _unary(t, node, ActKind.GELU_APPROX if a["approximate"] == "tanh" else ActKind.GELU, a["self"])


@translator("erf")
def tr_erf(t: T, node: fx.Node, a: Args) -> Node:
    return erf(t.g, t.tensor(a["self"], DType.F32), node.name)


@translator("reciprocal")
def tr_reciprocal(t: T, node: fx.Node, a: Args) -> Node:
    return t.g.div(t.constant(1.0, DType.F32), t.tensor(a["self"], DType.F32), name=node.name)


@translator("add", "sub")
def tr_add_sub(t: T, node: fx.Node, a: Args) -> Node:
    other = a["other"]
    if a.get("alpha", 1) != 1:
        other = t.g.mul(t.tensor(other, t.out_dtype(node)), t.tensor(a["alpha"], t.out_dtype(node)))
    kind = BinaryOp.ADD if node.target._schema.name.endswith("add") else BinaryOp.SUB
    return _binary(t, node, kind, a["self"], other)


@translator("rsub")
def tr_rsub(t: T, node: fx.Node, a: Args) -> Node:
    scaled = a["self"] if a.get("alpha", 1) == 1 else t.g.mul(t.tensor(a["self"], t.out_dtype(node)),
                                                                t.tensor(a["alpha"], t.out_dtype(node)))
    return _binary(t, node, BinaryOp.SUB, a["other"], scaled)


@translator("mul")
def tr_mul(t: T, node: fx.Node, a: Args) -> Node:
    return _binary(t, node, BinaryOp.MUL, a["self"], a["other"])


@translator("maximum", "minimum")
def tr_max_min(t: T, node: fx.Node, a: Args) -> Node:
    kind = BinaryOp.MAX if "maximum" in node.target._schema.name else BinaryOp.MIN
    return _binary(t, node, kind, a["self"], a["other"])


@translator("div")
def tr_div(t: T, node: fx.Node, a: Args) -> Node:
    mode = a.get("rounding_mode")
    if mode is None:
        return t.g.div(t.tensor(a["self"], DType.F32), t.tensor(a["other"], DType.F32), name=node.name)
    if t.out_dtype(node).is_float:
        raise t.unsupported(f"float division with rounding_mode={mode!r} (no floor/trunc op in rlxpy)")
    x, y = t.tensor(a["self"], DType.I32), t.tensor(a["other"], DType.I32)
    q = t.g.div(x, y)  # rlxpy integer division truncates toward zero
    if mode == "floor":  # step down where the remainder is non-zero and the signs differ
        r = t.g.sub(x, t.g.mul(q, y))
        differ = t.g.compare(t.g.compare(r, 0, "lt"), t.g.compare(y, 0, "lt"), "ne")
        step = t.g.where(t.g.compare(r, 0, "ne"), differ, t.constant(False, DType.BOOL))
        q = t.g.sub(q, t.cast(step, DType.I32))
    return t.cast(q, t.out_dtype(node))


@translator("remainder", "fmod")
def tr_remainder(t: T, node: fx.Node, a: Args) -> Node:
    """Integer remainders: fmod keeps the dividend's sign (C's %), remainder the divisor's (Python's %)."""
    if t.out_dtype(node).is_float:
        raise t.unsupported("float remainder (no floor/trunc op in rlxpy)")
    x, y = t.tensor(a["self"], DType.I32), t.tensor(a["other"], DType.I32)
    r = t.g.sub(x, t.g.mul(t.g.div(x, y), y))  # integer division truncates toward zero
    if node.target._schema.name.endswith("remainder"):
        differ = t.g.compare(t.g.compare(r, 0, "lt"), t.g.compare(y, 0, "lt"), "ne")
        shift = t.g.where(t.g.compare(r, 0, "ne"), differ, t.constant(False, DType.BOOL))
        r = t.g.add(r, t.g.mul(t.cast(shift, DType.I32), y))
    return t.cast(r, t.out_dtype(node))


@translator("pow")
def tr_pow(t: T, node: fx.Node, a: Args) -> Node:
    base, exponent = a["self"], a["exponent"]
    if not t.out_dtype(node).is_float:
        raise t.unsupported("integer pow (rlxpy computes pow in f32)")
    if exponent == 2 and not isinstance(exponent, bool):
        x = t.tensor(base, DType.F32)
        return t.g.mul(x, x, name=node.name)  # torch computes x**2 as x*x
    return t.g.pow(t.tensor(base, DType.F32), t.tensor(exponent, DType.F32), name=node.name)


_COMPARE = {"eq": CmpOp.EQ, "ne": CmpOp.NE, "lt": CmpOp.LT, "le": CmpOp.LE, "gt": CmpOp.GT, "ge": CmpOp.GE}


def _make_compare(kind: CmpOp):
    def translate(t: T, node: fx.Node, a: Args) -> Node:
        compute = _compute_dtype(t, a["self"], a["other"])
        compute = DType.I32 if compute is DType.BOOL else compute
        return t.g.compare(t.tensor(a["self"], compute), t.tensor(a["other"], compute), kind, name=node.name)
    return translate


for _name, _kind in _COMPARE.items():
    translator(_name)(_make_compare(_kind))


@translator("bitwise_and", "logical_and", "bitwise_or", "logical_or", "bitwise_xor", "logical_xor")
def tr_logical(t: T, node: fx.Node, a: Args) -> Node:
    name = node.target._schema.name
    if "bitwise" in name and t.out_dtype(node) is not DType.BOOL:
        raise t.unsupported("bitwise ops on integers (only on bool)")
    x = t.cast(t.g.compare(t.tensor(a["self"]), 0, "ne"), DType.I32)
    y = t.cast(t.g.compare(t.tensor(a["other"]), 0, "ne"), DType.I32)
    if name.endswith("xor"):
        return t.g.compare(x, y, "ne", name=node.name)
    joined = t.g.minimum(x, y) if name.endswith("and") else t.g.maximum(x, y)
    return t.g.compare(joined, 0, "ne", name=node.name)


@translator("logical_not", "bitwise_not")
def tr_not(t: T, node: fx.Node, a: Args) -> Node:
    if "bitwise" in node.target._schema.name and t.out_dtype(node) is not DType.BOOL:
        raise t.unsupported("bitwise_not on integers (only on bool)")
    return t.g.compare(t.tensor(a["self"]), 0, "eq", name=node.name)


@translator("isnan")
def tr_isnan(t: T, node: fx.Node, a: Args) -> Node:
    x = t.tensor(a["self"])
    return t.g.compare(x, x, "ne", name=node.name)  # only NaN differs from itself


@translator("where")
def tr_where(t: T, node: fx.Node, a: Args) -> Node:
    out = t.out_dtype(node)
    return t.g.where(t.tensor(a["condition"]), t.tensor(a["self"], out), t.tensor(a["other"], out),
                     name=node.name)


@translator("masked_fill")
def tr_masked_fill(t: T, node: fx.Node, a: Args) -> Node:
    out = t.out_dtype(node)
    return t.g.where(t.tensor(a["mask"]), t.tensor(a["value"], out), t.tensor(a["self"], out), name=node.name)


@translator("clamp", "clamp_min", "clamp_max", "hardtanh")
def tr_clamp(t: T, node: fx.Node, a: Args) -> Node:
    out = t.out_dtype(node)
    compute = DType.F32 if out.is_float else out
    x = t.tensor(a["self"], compute)
    name = node.target._schema.name
    low = a.get("min", a.get("min_val")) if not name.endswith("clamp_max") else None
    high = a.get("max", a.get("max_val")) if not name.endswith("clamp_min") else None
    if low is not None:
        x = t.g.maximum(x, t.tensor(low, compute))
    if high is not None:
        x = t.g.minimum(x, t.tensor(high, compute))
    return t.cast(x, out)


@translator("leaky_relu")
def tr_leaky_relu(t: T, node: fx.Node, a: Args) -> Node:
    x = t.tensor(a["self"], DType.F32)
    return t.g.where(t.g.compare(x, 0.0, "gt"), x, t.g.mul(x, float(a["negative_slope"])), name=node.name)


# -- copies, casts, views -------------------------------------------------------------------------
@translator("clone", "alias", "detach", "lift_fresh_copy", "contiguous")
def tr_identity(t: T, node: fx.Node, a: Args) -> Node:
    return t.tensor(a["self"])


@translator("_to_copy", "to")
def tr_to_copy(t: T, node: fx.Node, a: Args) -> Node:
    return t.cast(t.tensor(a["self"]), t.out_dtype(node))


@translator("view", "_unsafe_view", "reshape", "view_copy", "unsqueeze", "squeeze", "flatten", "unflatten",
            "view_as")
def tr_reshape(t: T, node: fx.Node, a: Args) -> Node:
    x = t.tensor(a["self"])
    shape = t.out_shape(node)
    return x if tuple(x.shape) == shape else t.g.reshape(x, shape, name=node.name)


@translator("expand", "expand_copy")
def tr_expand(t: T, node: fx.Node, a: Args) -> Node:
    x = t.tensor(a["self"])
    shape = t.out_shape(node)
    return x if tuple(x.shape) == shape else t.g.expand(x, shape, name=node.name)


@translator("permute", "transpose", "t", "numpy_T")
def tr_permute(t: T, node: fx.Node, a: Args) -> Node:
    x = t.tensor(a["self"])
    rank = x.rank
    key = node.target._schema.name.split("::")[-1]
    if key == "permute":
        perm = [d % rank for d in a["dims"]]
    elif key == "transpose":
        perm = list(range(rank))
        d0, d1 = a["dim0"] % max(rank, 1), a["dim1"] % max(rank, 1)
        perm[d0], perm[d1] = perm[d1], perm[d0]
    else:
        perm = list(reversed(range(rank)))
    if isinstance(x.op, ops.Transpose):  # transpose of a transpose: one permutation (or none)
        perm = [x.op.perm[p] for p in perm]
        x = t.g[x.inputs[0]]
    return x if perm == sorted(perm) else t.g.transpose(x, perm, name=node.name)


@translator("slice")
def tr_slice(t: T, node: fx.Node, a: Args) -> Node:
    x = t.tensor(a["self"])
    axis = a["dim"] % x.rank
    if a["step"] != 1:
        raise t.unsupported(f"slice with step {a['step']}")
    size = x.shape[axis]
    out_len = t.out_shape(node)[axis]
    start = a["start"] or 0
    if isinstance(start, int) and start < 0 and isinstance(size, int):
        start += size
    if isinstance(start, int) and isinstance(out_len, int):
        if start == 0 and out_len == size:
            return x
        return t.g.narrow(x, axis, max(start, 0), out_len, name=node.name)
    # a symbolic start or length: gather the rows start + iota(length)
    rows = t.iota(out_len)
    if start != 0:
        rows = t.g.add(rows, t.tensor(start, DType.I32))
    return t.g.gather(x, rows, axis, name=node.name)


@translator("select")
def tr_select(t: T, node: fx.Node, a: Args) -> Node:
    x = t.tensor(a["self"])
    axis, index = a["dim"] % x.rank, a["index"]
    if isinstance(index, int) and isinstance(x.shape[axis], int):
        row = t.g.narrow(x, axis, index % x.shape[axis], 1)
    else:
        size = t.tensor(x.shape[axis], DType.I32)
        position = t.tensor(index, DType.I32)
        position = t.g.where(t.g.compare(position, 0, "lt"), t.g.add(position, size), position)
        row = t.g.gather(x, t.g.reshape(position, [1]), axis)
    return t.g.reshape(row, t.out_shape(node), name=node.name)


@translator("split_with_sizes", "split")
def tr_split(t: T, node: fx.Node, a: Args) -> list[Node]:
    x = t.tensor(a["self"])
    axis = a["dim"] % x.rank
    outs, start = [], 0
    for part in node.meta["val"]:
        length = t.dim(part.shape[axis])
        if not isinstance(length, int) or not isinstance(start, int):
            raise t.unsupported("split with symbolic sizes")
        outs.append(t.g.narrow(x, axis, start, length))
        start += length
    return outs


@translator("unbind")
def tr_unbind(t: T, node: fx.Node, a: Args) -> list[Node]:
    x = t.tensor(a["self"])
    axis = a["dim"] % x.rank
    return [t.g.reshape(t.g.narrow(x, axis, i, 1), t.shape(part)) for i, part in enumerate(node.meta["val"])]


@translator("cat")
def tr_cat(t: T, node: fx.Node, a: Args) -> Node:
    out = t.out_dtype(node)
    parts = [t.tensor(v, out) for v in a["tensors"]]
    parts = [p for p in parts if not (p.rank == 1 and p.shape[0] == 0)]  # torch skips legacy empty [0]
    axis = a["dim"] % parts[0].rank
    return parts[0] if len(parts) == 1 else t.g.concat(parts, axis, name=node.name)


@translator("getitem")
def tr_getitem(t: T, node: fx.Node, a: Args) -> Any:
    container, index = a["args"]
    return container[index]


# -- factories ------------------------------------------------------------------------------------
def _filled(t: T, node: fx.Node, value: Any) -> Node:
    dtype, shape = t.out_dtype(node), t.out_shape(node)
    scalar = t.tensor(value, dtype) if not isinstance(value, (bool, int, float)) else \
        t.constant(np.asarray(value).astype(dtype.numpy), dtype)
    return t.g.expand(t.g.reshape(scalar, [1] * len(shape)) if shape else scalar, shape, name=node.name) \
        if shape else scalar


@translator("full", "full_like", "new_full")
def tr_full(t: T, node: fx.Node, a: Args) -> Node:
    return _filled(t, node, a["fill_value"])


@translator("new_ones", "ones_like", "ones")
def tr_ones(t: T, node: fx.Node, a: Args) -> Node:
    return _filled(t, node, 1)


@translator("new_zeros", "zeros_like", "zeros")
def tr_zeros(t: T, node: fx.Node, a: Args) -> Node:
    return _filled(t, node, 0)


@translator("scalar_tensor")
def tr_scalar_tensor(t: T, node: fx.Node, a: Args) -> Node:
    return _filled(t, node, a["s"])


@translator("arange")
def tr_arange(t: T, node: fx.Node, a: Args) -> Node:
    dtype = t.out_dtype(node)
    length = t.out_shape(node)[0]
    start, step = a.get("start", 0) or 0, a.get("step", 1)
    values = t.iota(length, DType.F32 if dtype.is_float else DType.I32)
    if step != 1:
        values = t.g.mul(values, t.tensor(step, values.dtype))
    if start != 0:
        values = t.g.add(values, t.tensor(start, values.dtype))
    return t.cast(values, dtype)


@translator("native_dropout", "dropout")
def tr_dropout(t: T, node: fx.Node, a: Args) -> Any:
    if a.get("train") and a.get("p", 0):
        raise t.unsupported("dropout in training mode")
    x = t.tensor(a["input"])
    if node.target._schema.name.endswith("native_dropout"):
        return [x, t.g.expand(t.constant(True, DType.BOOL), x.shape)]  # the mask keeps everything
    return x


# -- indexing ---------------------------------------------------------------------------------------
def _wrap_index(t: T, idx: Node, size: Dim) -> Node:
    """torch's negative indices count from the end; rlxpy's gather clamps, so wrap them first."""
    idx = t.cast(idx, DType.I32)
    if t.nonnegative(idx):
        return idx
    return t.g.where(t.g.compare(idx, 0, "lt"), t.g.add(idx, t.tensor(size, DType.I32)), idx)


def _note_bound(t: T, idx: Node, size: Dim) -> None:
    spec = t.input_spec(idx)
    if spec is not None:
        spec.index_bound = size


@translator("embedding")
def tr_embedding(t: T, node: fx.Node, a: Args) -> Node:
    weight, idx = t.tensor(a["weight"]), t.tensor(a["indices"])
    _note_bound(t, idx, weight.shape[0])
    return t.g.gather(weight, t.cast(idx, DType.I32), 0, name=node.name)


@translator("index_select")
def tr_index_select(t: T, node: fx.Node, a: Args) -> Node:
    x, idx = t.tensor(a["self"]), t.tensor(a["index"])
    axis = a["dim"] % x.rank
    _note_bound(t, idx, x.shape[axis])
    return t.g.gather(x, _wrap_index(t, idx, x.shape[axis]), axis, name=node.name)


@translator("index")
def tr_index(t: T, node: fx.Node, a: Args) -> Node:
    x = t.tensor(a["self"])
    entries = list(a["indices"])
    used = [i for i, v in enumerate(entries) if v is not None]
    if not used or used != list(range(used[0], used[-1] + 1)):
        raise t.unsupported("advanced indexing with non-adjacent index tensors")
    indices = [t.tensor(entries[i]) for i in used]
    if any(i.dtype is DType.BOOL for i in indices):
        raise t.unsupported("boolean-mask indexing (its size depends on the data)")
    return _index_axes(t, node, x, used[0], indices)


def _index_axes(t: T, node: fx.Node, x: Node, first: int, indices: list[Node]) -> Node:
    """x[..., i0, i1, ...] with broadcastable index tensors on the adjacent axes from ``first``, as
    torch's advanced indexing: one gather from x with those axes merged, at the linear index
    sum_j(i_j * stride_j); a stride over symbolic axes is a run-time dim value."""
    sizes = [x.shape[first + j] for j in range(len(indices))]
    linear = None
    for j, idx in enumerate(indices):
        term = _wrap_index(t, idx, sizes[j])
        for later in sizes[j + 1:]:
            term = t.g.mul(term, t.tensor(later, DType.I32))
        linear = term if linear is None else t.g.add(linear, term)
    table = x
    if len(indices) > 1:
        merged = list(x.shape[:first]) + [_merged_dim(t, sizes)] + list(x.shape[first + len(indices):])
        table = t.g.reshape(x, merged)
    gathered = t.g.gather(table, linear, first)
    shape = t.out_shape(node)
    return gathered if tuple(gathered.shape) == shape else t.g.reshape(gathered, shape, name=node.name)


def _merged_dim(t: T, sizes: list[Dim]) -> Dim:
    if all(isinstance(s, int) for s in sizes):
        return math.prod(sizes)  # type: ignore[arg-type]
    import sympy

    expr = sympy.Integer(1)
    for s in sizes:
        expr = expr * (sympy.Integer(s) if isinstance(s, int) else t.sym_exprs[s.name])
    name = str(expr).replace(" ", "")
    t.sym_exprs.setdefault(name, expr)
    return Sym(name)


@translator("gather")
def tr_gather(t: T, node: fx.Node, a: Args) -> Node:
    """torch.gather: out[i..] = x[i0, .., index[i..], .., in] along ``dim``."""
    x, idx = t.tensor(a["self"]), t.tensor(a["index"])
    axis = a["dim"] % x.rank
    idx_shape = list(idx.shape)
    grids = []
    for ax in range(x.rank):
        if ax == axis:
            grids.append(idx)
        else:
            shape = [1] * x.rank
            shape[ax] = idx_shape[ax]
            grids.append(t.g.reshape(t.iota(idx_shape[ax]), shape))
    return _index_axes(t, node, x, 0, grids)
