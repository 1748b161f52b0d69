"""Graph building: every shape-rule error names the node, the op and the input types; JSON round
trips keep structure and reference results; the text listing; verify(); names."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import typed

from rlxpy.errors import GraphError, InputError
from rlxpy.ir import DType, Graph, Node, Sym, ops
from rlxpy.ir.ops import ActKind, Attention, MaskKind, Rope
from rlxpy.ir.reference import run_reference


# -- builder error paths ----------------------------------------------------------------------------
def _inputs(g: Graph, *specs) -> list[Node]:
    """specs: (shape) or (shape, dtype); named a, b, c, ..."""
    nodes = []
    for i, spec in enumerate(specs):
        shape, dtype = (spec, "f32") if not (len(spec) == 2 and isinstance(spec[1], str)) else spec
        nodes.append(g.input("abcdefgh"[i], shape, dtype))
    return nodes


def _attention(g, q, k, v, *mask, **attrs):
    return g.apply(Attention(**attrs), [q, k, v, *mask], "bad")


def _rope(g, x, cos, sin, *position, **attrs):
    return g.apply(Rope(**attrs), [x, cos, sin, *position], "bad")


# (op name, input specs, builder call, message fragment). Every call names its node "bad".
ERRORS = [
    ("Reshape", [(2, 3)], lambda g, x: g.reshape(x, (4, 2), name="bad"),
     "cannot reshape [2, 3] (6 elements) to [4, 2]"),
    ("Reshape", [(2, 3)], lambda g, x: g.reshape(x, (-1, -1), name="bad"), "at most one -1"),
    ("Reshape", [(2, 3)], lambda g, x: g.reshape(x, (-1, 4), name="bad"), "cannot reshape [2, 3] to [-1, 4]"),
    ("Reshape", [("T", 3)], lambda g, x: g.reshape(x, (-1,), name="bad"),
     "reshape with -1 needs static shapes"),
    ("Activation", [((3,), "i32")], lambda g, x: g.relu(x, name="bad"),
     "activation RELU needs a float input"),
    ("Binary", [(2, 3), (4,)], lambda g, a, b: g.add(a, b, name="bad"), "cannot broadcast [2, 3] and [4]"),
    ("Compare", [(2, 3), (2,)], lambda g, a, b: g.compare(a, b, "lt", name="bad"), "cannot broadcast"),
    ("Where", [(2,), (3,), (3,)], lambda g, c, a, b: g.where(c, a, b, name="bad"),
     "cannot broadcast [2] and [3]"),
    ("Transpose", [(2, 3)], lambda g, x: g.transpose(x, (0, 0), name="bad"),
     "perm (0, 0) is not a permutation"),
    ("Transpose", [(2, 3)], lambda g, x: g.transpose(x, (0, 1, 2), name="bad"), "of rank 2"),
    ("Narrow", [(17, 5)], lambda g, x: g.narrow(x, 1, 3, 3, name="bad"),
     "narrow 3:6 exceeds axis 1 of [17, 5]"),
    ("Narrow", [(17, 5)], lambda g, x: g.narrow(x, 2, 0, 1, name="bad"), "axis 2 out of range for rank 2"),
    ("Narrow", [(17, 5)], lambda g, x: g.narrow(x, 0, -1, 2, name="bad"), "narrow start -1, length 2"),
    ("Concat", [(2, 3), (2, 4)], lambda g, a, b: g.concat([a, b], 0, name="bad"),
     "concat inputs differ outside axis 0"),
    ("Concat", [(2,), ((2,), "i32")], lambda g, a, b: g.concat([a, b], 0, name="bad"), "f32[2], i32[2]"),
    ("Concat", [(2, 3), (3,)], lambda g, a, b: g.concat([a, b], 0, name="bad"), "differ outside axis 0"),
    ("Expand", [(3,)], lambda g, x: g.expand(x, (2, 4), name="bad"), "cannot expand [3] to [2, 4]"),
    ("Expand", [(2, 3)], lambda g, x: g.expand(x, (3,), name="bad"), "cannot expand [2, 3] to [3]"),
    ("Gather", [(5, 4), ((3,), "f16")], lambda g, a, i: g.gather(a, i, name="bad"), "gather indices must be"),
    ("Gather", [(5, 4), ((3,), "i32")], lambda g, a, i: g.gather(a, i, 2, name="bad"), "axis 2 out of range"),
    ("ScatterAdd", [(3, 2), ((4,), "i32")], lambda g, u, i: g.scatter_add(u, i, 5, name="bad"),
     "scatter_add wants updates [U, ...] and indices [U]"),
    ("MatMul", [(3, 4), (5, 6)], lambda g, a, b: g.matmul(a, b, name="bad"), "matmul inner dims differ"),
    ("MatMul", [(4,), (4, 2)], lambda g, a, b: g.matmul(a, b, name="bad"), "matmul needs rank >= 2"),
    ("MatMul", [(2, 3, 4), (3, 4, 5)], lambda g, a, b: g.matmul(a, b, name="bad"), "identical leading dims"),
    ("MatMul", [(1, 3, 4), (2, 4, 5)], lambda g, a, b: g.matmul(a, b, name="bad"), "identical leading dims"),
    ("MatMul", [(3, 4), (2, 4, 5)], lambda g, a, b: g.matmul(a, b, name="bad"), "identical leading dims"),
    ("FusedMatMulBiasAct", [(3, 4), (2, 4, 5), (5,)], lambda g, a, w, b: g.linear(a, w, b, name="bad"),
     "fused matmul weight must be 2-D"),
    ("FusedMatMulBiasAct", [(3, 4), (4, 5), (4,)], lambda g, a, w, b: g.linear(a, w, b, "relu", name="bad"),
     "bias must be [5], got f32[4]"),
    ("GroupedMatMul", [(3, 4), (2, 5, 6), (3,)], lambda g, a, w, i: g.grouped_matmul(a, w, i, name="bad"),
     "grouped matmul wants x [M,K], w [E,K,N], idx [M]"),
    ("LayerNorm", [(3, 5), (4,)], lambda g, x, gm: g.layer_norm(x, gm, name="bad"),
     "layer_norm gamma/beta must be [5]"),
    ("LayerNorm", [(), (1,)], lambda g, x, gm: g.layer_norm(x, gm, name="bad"), "layer_norm needs rank >= 1"),
    ("RmsNorm", [(3, 5), (5,), (6,)], lambda g, x, gm, b: g.rms_norm(x, gm, b, name="bad"),
     "rms_norm gamma/beta must be [5], got f32[6]"),
    ("FusedResidualLN", [(2, 5), (3, 5), (5,), (5,)],
     lambda g, x, r, gm, b: g.residual_layer_norm(x, r, gm, b, name="bad"), "and residual f32[3, 5] differ"),
    ("FusedResidualRmsNorm", [(2, 5), (2, 5), (5,), (4,), (5,)],
     lambda g, x, r, bias, gm, b: g.residual_rms_norm(x, r, gm, b, bias, name="bad"),
     "bias/gamma/beta must be [5], got f32[4]"),
    ("FusedResidualLN", [(2, 5), (2, 5), (5,), (5,)],
     lambda g, x, r, gm, b: g.apply(ops.FusedResidualLN(has_bias=True), [x, r, gm, b], "bad"),
     "takes 5 inputs (has_bias=True)"),
    ("GroupNorm", [(2, 6, 5), (6,)], lambda g, x, gm: g.group_norm(x, 4, gm, name="bad"),
     "groups=4 must divide C=6"),
    ("GroupNorm", [(2, 6, 5), (5,)], lambda g, x, gm: g.group_norm(x, 2, gm, name="bad"),
     "per-channel inputs must be f32[6], got f32[5]"),
    ("BatchNorm", [(6,), (6,), (6,), (6,), (6,)], lambda g, x, *a: g.batch_norm(x, *a, name="bad"),
     "batch_norm takes x [N, C, *spatial]"),
    ("Resize", [(2, 3, 4)], lambda g, x: g.resize(x, (2, 2, 2, 2), name="bad"), "resize takes 1 to 3 sizes"),
    ("Resize", [(2, 3, 4)], lambda g, x: g.resize(x, (5,), steps=(0.5, 1.0), name="bad"),
     "must be 1 positive numbers"),
    ("Resize", [((2, 3, 4), "i32")], lambda g, x: g.resize(x, (5,), name="bad"),
     "resize needs a float input"),
    ("Reduce", [(2, 3, 4)], lambda g, x: g.sum(x, (0, 2), name="bad"),
     "reduce axes (0, 2) must be contiguous"),
    ("Reduce", [(2, 3, 4)], lambda g, x: g.mean(x, 3, name="bad"), "axis 3 out of range for rank 3"),
    ("Reduce", [(2, 3, 4)], lambda g, x: g.reduce(x, "max", (), name="bad"),
     "reduce needs at least one axis"),
    ("Softmax", [(2, 3)], lambda g, x: g.softmax(x, 2, name="bad"), "axis 2 out of range for rank 2"),
    ("Cumsum", [(2, 3)], lambda g, x: g.cumsum(x, -3, name="bad"), "axis -3 out of range for rank 2"),
    ("TopK", [(3, 5)], lambda g, x: g.topk(x, 6, name="bad"), "k=6 for last dim 5"),
    ("TopK", [(3, 5)], lambda g, x: g.topk(x, 0, name="bad"), "k=0 for last dim 5"),
    ("TopK", [()], lambda g, x: g.topk(x, 1, name="bad"), "topk needs rank >= 1"),
    ("Argmax", [()], lambda g, x: g.argmax(x, name="bad"), "argmax needs rank >= 1"),
    ("Sample", [(2, 9)], lambda g, x: g.sample(x, temperature=-1.0, name="bad"), "temperature -1.0"),
    ("Sample", [(2, 9)], lambda g, x: g.sample(x, top_p=1.5, name="bad"), "top_p 1.5"),
    ("Sample", [(2, 9), ((3,), "u32")], lambda g, x, s: g.sample(x, seed_input=s, name="bad"),
     "seed input must be [2], got u32[3]"),
    ("Attention", [(1, 3, 5, 4), (1, 2, 5, 4), (1, 2, 5, 4)],
     lambda g, q, k, v: _attention(g, q, k, v, num_heads=3, head_dim=4, num_kv_heads=2),
     "num_heads 3 is not a multiple of num_kv_heads 2"),
    ("Attention", [(1, 2, 5, 4), (1, 2, 5, 4), (1, 2, 5, 4)],
     lambda g, q, k, v: _attention(g, q, k, v, num_heads=2, head_dim=4, mask_kind=MaskKind.CUSTOM),
     "mask kind CUSTOM takes 4 inputs, got 3"),
    ("Attention", [(1, 2, 5, 4), (1, 2, 5, 4), (1, 2, 5, 4), (1, 5)],
     lambda g, q, k, v, m: _attention(g, q, k, v, m, num_heads=2, head_dim=4),
     "mask kind NONE takes 3 inputs, got 4"),
    ("Attention", [(5, 4), (5, 4), (5, 4)],
     lambda g, q, k, v: _attention(g, q, k, v, num_heads=1, head_dim=4),
     "attention tensors must be rank 3 or 4, got f32[5, 4]"),
    ("Attention", [(1, 2, 5, 4), (1, 2, 5, 4), (1, 2, 6, 4)],
     lambda g, q, k, v: _attention(g, q, k, v, num_heads=2, head_dim=4), "must share a layout"),
    ("Attention", [(1, 2, 5, 8), (1, 2, 5, 8), (1, 2, 5, 8)],
     lambda g, q, k, v: _attention(g, q, k, v, num_heads=2, head_dim=6), "head_dim 6 does not match"),
    ("Attention", [(1, 2, 5, 4), (1, 5, 8), (1, 5, 8)],
     lambda g, q, k, v: _attention(g, q, k, v, num_heads=2, head_dim=4), "q, k, v ranks differ"),
    ("Attention", [(2, 2, 5, 4), (2, 2, 17, 4), (2, 2, 17, 4), (2, 5)],
     lambda g, q, k, v, m: _attention(g, q, k, v, m, num_heads=2, head_dim=4, mask_kind=MaskKind.CUSTOM),
     "CUSTOM mask f32[2, 5] must be [B, S_k], [B, S_q, S_k] or [B, H, S_q, S_k] with S_k = 17"),
    ("Attention", [(2, 2, 5, 4), (2, 2, 17, 4), (2, 2, 17, 4), (17,)],
     lambda g, q, k, v, m: _attention(g, q, k, v, m, num_heads=2, head_dim=4, mask_kind=MaskKind.BIAS),
     "BIAS mask f32[17] must be"),
    ("Attention", [(1, 2, 5, 4), (1, 2, 9, 4), (1, 2, 9, 4), ((2,), "i32")],
     lambda g, q, k, v, p: _attention(g, q, k, v, p, num_heads=2, head_dim=4, dynamic_kv=True),
     "dynamic_kv needs a last input pos i32[1] or i32[batch 1], got i32[2]"),
    ("Rope", [(8,), (4, 4), (4, 4)], lambda g, x, c, s: _rope(g, x, c, s, head_dim=8),
     "rope needs x [..., S, L]"),
    ("Rope", [(3, 10), (4, 2), (4, 2)], lambda g, x, c, s: _rope(g, x, c, s, head_dim=4),
     "last dim of f32[3, 10] is not a multiple of head_dim 4"),
    ("Rope", [(3, 8), (4, 2), (4, 2)], lambda g, x, c, s: _rope(g, x, c, s, head_dim=8, n_rot=3),
     "n_rot 3 must be even, <= head_dim"),
    ("Rope", [(3, 8), (4, 2), (4, 2)], lambda g, x, c, s: _rope(g, x, c, s, head_dim=8, n_rot=10),
     "n_rot 10 must be even"),
    ("Rope", [(3, 8), (4, 3), (4, 3)], lambda g, x, c, s: _rope(g, x, c, s, head_dim=8),
     "cos/sin must be [max_pos, 4], got f32[4, 3] and f32[4, 3]"),
    ("Rope", [(5, 8), (6, 4), (6, 4)], lambda g, x, c, s: _rope(g, x, c, s, head_dim=8, position_offset=2),
     "positions 2..6 exceed the 6-row cos/sin tables"),
    ("Rope", [(3, 8), (4, 4), (4, 4), ((1,), "f32")], lambda g, x, c, s, p: _rope(g, x, c, s, p, head_dim=8),
     "position input must be i32[1] or one per [S, L] block i32[1], got f32[1]"),
    ("DequantMatMulGguf", [(3, 32), ((4, 34), "u8")],
     lambda g, x, w: g.dequant_matmul_gguf(x, w, "Q9_9", 4, 32, name="bad"), "unknown GGUF type 'Q9_9'"),
    ("DequantMatMulGguf", [(3, 48), ((4, 34), "u8")],
     lambda g, x, w: g.dequant_matmul_gguf(x, w, "Q8_0", 4, 48, name="bad"),
     "row size (48) is not a multiple of Q8_0 block size (32)"),
    ("DequantMatMulGguf", [(3, 32), ((4, 33), "u8")],
     lambda g, x, w: g.dequant_matmul_gguf(x, w, "Q8_0", 4, 32, name="bad"),
     "Q8_0 weight must be u8[4, 34], got u8[4, 33]"),
    ("DequantMatMulGguf", [(3, 32), (4, 34)],
     lambda g, x, w: g.dequant_matmul_gguf(x, w, "Q8_0", 4, 32, name="bad"), "got f32[4, 34]"),
    ("DequantMatMulGguf", [(3, 31), ((4, 34), "u8")],
     lambda g, x, w: g.dequant_matmul_gguf(x, w, "Q8_0", 4, 32, name="bad"),
     "x f32[3, 31] last dim must be k=32"),
    ("GatherGguf", [((9, 18), "u8"), ((3,), "i32")], lambda g, tb, i: g.gather_gguf(tb, i,
     "Q4_1", 32, name="bad"),
     "Q4_1 table must be u8[rows, 20], got u8[9, 18]"),
    ("GatherGguf", [((9, 20), "u8"), ((3,), "i64")], lambda g, tb, i: g.gather_gguf(tb, i,
     "Q4_1", 32, name="bad"),
     "indices must be i32/u32/f32, got i64[3]"),
    ("DequantGroupedMatMul", [(3, 32), ((2, 4, 18), "u8"), ((3,), "i32")],
     lambda g, x, w, i: g.dequant_grouped_matmul(x, w, i, "Q8_0", 4, 32, name="bad"),
     "Q8_0 experts must be u8[E, 4, 34], got u8[2, 4, 18]"),
    ("DequantGroupedMatMul", [(3, 32), ((2, 4, 34), "u8"), ((2,), "i32")],
     lambda g, x, w, i: g.dequant_grouped_matmul(x, w, i, "Q8_0", 4, 32, name="bad"),
     "wants x [M, 32], idx [M]"),
    ("CacheWrite", [(8, 2, 4), (3, 2, 5), ((1,),
     "i32")], lambda g, c, r, p: g.cache_write(c, r, p, name="bad"),
     "rows f32[3, 2, 5] must be [S, 2, 4] for cache f32[8, 2, 4]"),
    ("CacheWrite", [(8, 4), ((3, 4), "f16"), ((1,),
     "i32")], lambda g, c, r, p: g.cache_write(c, r, p, name="bad"),
     "rows f16[3, 4] and cache f32[8, 4] dtypes differ"),
    ("CacheWrite", [(8, 4), (3, 4), ((2,), "i32")], lambda g, c, r, p: g.cache_write(c, r, p, name="bad"),
     "pos must be i32[1] or one per row i32[3], got i32[2]"),
    ("RopeKvAppend", [(1, 39), (4, 8), (4, 8), (4, 4), (4, 4), ((1,), "i32")],
     lambda g, qkv, k, v, c, s, p: g.rope_kv_append(qkv, k, v, c, s, p, 8, 24, 8, name="bad"),
     "qkv must be [S, 40], got f32[1, 39]"),
    ("RopeKvAppend", [(1, 40), (4, 8), (4, 8), (4, 3), (4, 3), ((1,), "i32")],
     lambda g, qkv, k, v, c, s, p: g.rope_kv_append(qkv, k, v, c, s, p, 8, 24, 8, name="bad"),
     "cos/sin must be [max_pos, 4]"),
    ("MatMul", [(3, 4)], lambda g, x: g.apply(ops.MatMul(), [x], "bad"), "takes 2 inputs, got 1"),
    ("Concat", [], lambda g: g.apply(ops.Concat(0), [], "bad"), "takes 1..n inputs, got 0"),
    ("Constant", [], lambda g: g.apply(ops.Constant(b"abc", (2,), DType.F32), [], "bad"),
     "constant has 3 bytes, shape needs 8"),
    ("Constant", [], lambda g: g.apply(ops.Constant(b"", (Sym("T"),), DType.F32), [], "bad"),
     "constant shape [T] must be static"),
]


@pytest.mark.parametrize("op_name,specs,build,fragment", ERRORS,
                         ids=[f"{e[0]}-{i}" for i, e in enumerate(ERRORS)])
def test_shape_rule_error_names_node_op_and_input_types(op_name, specs, build, fragment):
    g = Graph("g")
    nodes = _inputs(g, *specs)
    with pytest.raises(GraphError) as info:
        build(g, *nodes)
    message = str(info.value)
    assert message.startswith(f"bad ({op_name}): "), message
    assert fragment in message, message
    types = ", ".join(str(n.type) for n in nodes)
    assert message.endswith(f"[inputs: {types or 'none'}]"), message
    assert "bad" not in g._by_name and len(g) == len(nodes)  # a failed node is not added


CORE_FAMILIES = ("leaf", "elementwise", "shape", "matmul", "norm", "reduce", "attention", "rope", "kv",
                 "sample")
#: Made by the pattern passes (tested in tests/ir/test_patterns*.py), not by users.
PATTERN_OPS = ("SplitMatMul", "ResidualNormTee", "PackedAttention")


def _core_ops(*families: str) -> list[type]:
    """The primitive (non-composite, non-pattern) op classes of the given families."""
    return [cls for cls in ops.ALL_OPS if ops.family_of(cls) in families and not cls.composite
            and cls.__name__ not in PATTERN_OPS]


def test_every_core_op_has_an_error_case():
    covered = {e[0] for e in ERRORS}
    checked = {cls.__name__ for cls in _core_ops(*CORE_FAMILIES)}
    # leaves without a shape rule to break, and Copy/Cast accept anything
    assert checked - covered == {"Input", "Param", "Copy", "Cast"}


def test_wiring_errors_name_the_node():
    g, other = Graph("g"), Graph("other")
    x = g.input("x", (3,))
    y = other.input("y", (3,))
    with pytest.raises(GraphError, match=r"^bad \(Copy\): 99 is not a node of graph 'g'"):
        g.apply(ops.Copy(), [99], "bad")
    with pytest.raises(GraphError, match=r"^bad \(Copy\): True is not a node"):
        g.apply(ops.Copy(), [True], "bad")
    with pytest.raises(GraphError, match=r"^bad: node 'y' belongs to another graph"):
        g.apply(ops.Copy(), [y], "bad")
    with pytest.raises(GraphError, match=r"^bad: 'relu' is not an IR op"):
        g.apply("relu", [x], "bad")  # type: ignore[arg-type]
    with pytest.raises(GraphError, match=r"^output: 7 is not a node of graph 'g'"):
        g.output(7)


def test_duplicate_names_are_refused_and_auto_names_skip_taken_ones():
    g = Graph("g")
    x = g.input("x", (3,))
    with pytest.raises(GraphError, match=r"^x \(Input\): a node with this name already exists"):
        g.input("x", (4,))
    with pytest.raises(GraphError, match=r"^x \(Activation\): a node with this name already exists"):
        g.relu(x, name="x")
    g.relu(x, name="activation_0")
    assert g.relu(x).name == "activation_1"
    assert g.apply(ops.Copy(), [x]).name == "copy_0"
    gamma, beta = g.param("gm", (3,)), g.param("bt", (3,))
    assert g.apply(ops.FusedResidualLN(), [x, x, gamma, beta]).name == "fused_residual_l_n_0"


def test_attention_and_rope_builders_make_the_ops():
    g = Graph("g")
    q, k = g.input("q", (1, 4, 3, 8)), g.input("k", (1, 2, 5, 8))
    att = g.attention(q, k, k, 4, 8, num_kv_heads=2, mask_kind="causal", softcap=30.0, name="att")
    assert att.op == Attention(4, 8, 2, MaskKind.CAUSAL, None, 30.0) and att.inputs == (q.id, k.id, k.id)
    cos = g.input("cos", (16, 4))
    rope = g.rope(q, cos, cos, 8, interleaved=True, position_offset=2, name="rope")
    assert rope.op == Rope(8, 0, True, 2) and rope.type == q.type


# -- queries ------------------------------------------------------------------------------------------
def test_lookup_and_queries():
    g = Graph("g")
    x = g.input("x", ("B", 3))
    w = g.param("w", (3, 4))
    h = g.matmul(x, w, name="h")
    y = g.relu(h, name="y")
    g.output(y, y)
    assert g["h"] is h and g[h.id] is h and g[h] is h and len(g) == 4
    with pytest.raises(KeyError, match="no node named 'nope' in graph 'g'"):
        g["nope"]
    assert g.inputs() == [x] and g.params() == [w] and g.outputs == [y.id]
    assert g.consumers() == {0: [2], 1: [2], 2: [3], 3: []}
    assert g.symbols() == {"B"} and not g.is_static()
    assert h.shape == (Sym("B"), 4) and h.dtype is DType.F32 and h.rank == 2
    assert w.numel == 12 and w.nbytes == 48 and repr(h) == "%2 h: MatMul -> f32[B, 4]"


# -- verify ---------------------------------------------------------------------------------------------
def _small() -> tuple[Graph, Node]:
    g = Graph("g")
    x = g.input("x", (2, 3))
    y = g.relu(x, name="y")
    g.output(y)
    return g, x


def test_verify_accepts_a_built_graph():
    g, _ = _small()
    assert g.verify() is g


def test_verify_errors():
    g = Graph("empty")
    g.input("x", (3,))
    with pytest.raises(GraphError, match="graph 'empty' has no outputs"):
        g.verify()

    g, x = _small()
    g.nodes.append(Node(2, ops.Copy(), (0,), x.type, "y"))
    with pytest.raises(GraphError, match="^y: node name used twice"):
        g.verify()

    g, x = _small()
    g.nodes.append(Node(2, ops.Copy(), (5,), x.type, "late"))
    with pytest.raises(GraphError, match=r"^late \(Copy\): input ids \(5,\) not before node 2"):
        g.verify()

    g, x = _small()
    g.nodes.append(Node(2, ops.Copy(), (0,), ops.TensorType((3, 2), DType.F32), "wrong"))
    with pytest.raises(GraphError, match=r"^wrong \(Copy\): stored type f32\[3, 2\] != inferred f32\[2, 3\]"):
        g.verify()

    g, x = _small()
    ints = g.input("i", (3,), "i32")
    g.nodes.append(Node(3, ops.Activation(ActKind.EXP), (ints.id,), ints.type, "exp"))
    with pytest.raises(GraphError, match=r"^exp \(Activation\): activation EXP needs a float input, got i32"):
        g.verify()

    g, x = _small()
    g.outputs.append(9)
    with pytest.raises(GraphError, match="output id 9 is not a node"):
        g.verify()


# -- text listing ---------------------------------------------------------------------------------------
def test_str_lists_one_line_per_node_and_marks_outputs():
    g = Graph("demo")
    x = g.input("x", (2, "T"))
    w = g.param("w", ("T", 4))
    h = g.matmul(x, w, name="h")
    r = g.relu(h)
    g.constant(np.ones(2, np.float32))
    flat = g.reshape(r, (-1,))
    g.output(g.softmax(h, name="y"), flat)
    assert str(g).splitlines() == [
        "graph demo (7 nodes)",
        " %0    x = Input() -> f32[2, T]",
        " %1    w = Param() -> f32[T, 4]",
        " %2    h = MatMul(%0 x, %1 w) [transpose_a=False, transpose_b=False] -> f32[2, 4]",
        " %3    activation_0 = Activation(%2 h) [fn=relu] -> f32[2, 4]",
        " %4    constant_0 = Constant() -> f32[2]",
        "*%5    reshape_0 = Reshape(%3 activation_0) [new_shape=[-1]] -> f32[8]",
        "*%6    y = Softmax(%2 h) [axis=-1] -> f32[2, 4]",
    ]


# -- JSON round trip ------------------------------------------------------------------------------------
def _block(qtype: str, rows: int, k: int, seed: int) -> np.ndarray:
    from gguf import GGMLQuantizationType, quants

    data = np.random.default_rng(seed).standard_normal((rows, k)).astype(np.float32)
    return quants.quantize(data, GGMLQuantizationType[qtype])


def kitchen_sink() -> tuple[Graph, dict, dict]:
    """A graph with every core op that has a reference, plus inputs and params for it."""
    g = Graph("sink")
    rng = np.random.default_rng(0)
    x = g.input("x", (3, 8))
    w = g.param("w", (8, 4))
    idx = g.input("idx", (3,), "i32")
    c = g.constant(np.linspace(-1, 1, 4, dtype=np.float32))
    h = g.linear(x, w, c, ActKind.GELU_APPROX, name="h")
    m = g.matmul(x, w)
    s = g.binary(h, m, "pow")
    cmp = g.compare(h, 0.0, "gt")
    wh = g.where(cmp, h, m)
    r = g.reshape(wh, (-1, 2))
    tr = g.transpose(r, (1, 0))
    nr = g.narrow(tr, 1, 1, 5)
    cat = g.concat([nr, nr], 1)
    ex = g.expand(g.reshape(c, (4, 1)), (2, 4, 3))
    cast = g.cast(g.activation(cat, ActKind.ROUND), "i32")
    gat = g.gather(x, idx, 1)
    sc = g.scatter_add(h, idx, 5)
    ew = g.param("ew", (2, 8, 4))
    gm = g.grouped_matmul(x, ew, idx)
    gamma, beta = g.param("gamma", (4,)), g.param("beta", (4,))
    ln = g.layer_norm(gm, gamma, beta)
    rn = g.rms_norm(gm, gamma)
    rln = g.residual_layer_norm(ln, rn, gamma, beta, bias=c)
    rrn = g.residual_rms_norm(ln, rn, gamma, beta)
    gn = g.group_norm(ex, 2, gamma, beta)
    bn = g.batch_norm(ex, gamma, beta, gamma, beta)
    rs = g.resize(ex, (5,), "linear", "half_pixel")
    red = g.reduce(ex, "prod", (1, 2), keep_dim=True)
    sm = g.softmax(ex, 0)
    cs = g.cumsum(ex, 1, exclusive=True)
    tk = g.topk(h, 2)
    am = g.argmax(h)
    sa = g.sample(h, temperature=0.8, top_k=3, top_p=0.9, seed=2**33 + 1)
    cp = g.copy(s)
    q = g.input("q", (1, 5, 4, 2))
    kv = g.input("kv", (1, 7, 2, 2))
    bias = g.input("bias", (1, 5, 7))
    att = g.apply(Attention(4, 2, 2, MaskKind.BIAS, 0.5, 20.0), [q, kv, kv, bias], "att")
    cos, sin = g.param("cos", (16, 1)), g.param("sin", (16, 1))
    pos = g.input("pos", (1,), "i32")
    rope = g.apply(Rope(2, 2, True, 3), [g.reshape(q, (5, 8)), cos, sin, pos], "rope")
    table = g.param("table", (6, 34), "u8")
    gg = g.gather_gguf(table, idx, "Q8_0", 32)
    xq = g.input("xq", (2, 32))
    dm = g.dequant_matmul_gguf(xq, table, "Q8_0", 6, 32)
    experts = g.param("experts", (2, 6, 34), "u8")
    dg = g.dequant_grouped_matmul(g.narrow(xq, 0, 0, 2), experts, g.narrow(idx, 0, 0, 2), "Q8_0", 6, 32)
    cache = g.cache_write(g.param("cache", (6, 4)), ln, g.narrow(idx, 0, 0, 1))
    g.output(cast, gat, sc, rln, rrn, red, sm, cs, tk, am, sa, cp, att, rope, gg, dm, dg, cache, gn, bn, rs)
    inputs = {"x": rng.standard_normal((3, 8)), "idx": np.array([1, 0, 7]),
              "q": rng.standard_normal((1, 5, 4, 2)),
              "kv": rng.standard_normal((1, 7, 2, 2)), "bias": rng.standard_normal((1, 5, 7)),
              "pos": np.array([4]), "xq": rng.standard_normal((2, 32))}
    params = {"w": rng.standard_normal((8, 4)), "ew": rng.standard_normal((2, 8, 4)), "gamma": rng.random(4),
              "beta": rng.random(4), "cos": rng.random((16, 1)), "sin": rng.random((16, 1)),
              "cache": rng.standard_normal((6, 4)), "table": _block("Q8_0", 6, 32, 1),
              "experts": np.stack([_block("Q8_0", 6, 32, s) for s in (2, 3)])}
    return g, typed(g, inputs), typed(g, params)


def _structure(g: Graph) -> list:
    return [(type(n.op).__name__, n.name, n.inputs, n.op.attrs(), n.type) for n in g.nodes]


def test_json_round_trip_covers_every_core_op():
    g, _, _ = kitchen_sink()
    present = {type(n.op) for n in g.nodes}
    core = set(_core_ops(*CORE_FAMILIES, "quant"))
    # DequantMatMul: reference in reference/quant.py (tests/ir/test_extra_quant.py); the fused
    # decode ops have their own round trips in tests/ir/test_patterns.py and tests/ops/test_kv.py
    assert core - present == {ops.DequantMatMul, ops.FusedGgufMatMul, ops.RopeKvAppend}


def test_json_round_trip_preserves_structure_and_reference_results():
    g, inputs, params = kitchen_sink()
    text = g.to_json()
    json.loads(text)  # plain JSON
    back = Graph.from_json(text)
    assert back.name == "sink" and back.outputs == g.outputs
    assert _structure(back) == _structure(g)
    assert back.to_json() == text
    before, after = run_reference(g, inputs, params), run_reference(back.verify(), inputs, params)
    assert before.keys() == after.keys() and len(before) == 21
    for name in before:
        np.testing.assert_array_equal(after[name], before[name], err_msg=name)
        assert after[name].dtype == before[name].dtype


def test_json_round_trip_keeps_symbols_bytes_enums_and_optional_attrs():
    g = Graph("sym")
    x = g.input("x", ("B", Sym("T"), 8), "bf16")
    g.output(g.dequant_matmul(x, g.param("wq", (8, 4), "u8"), g.param("s", (1, 4)), None, "int8", 8, 4, 8),
             g.linear(x, g.param("w", (8, 3), "bf16"), g.constant(np.ones(3), "bf16"), None),
             g.reduce(x, ops.ReduceOp.SUM, (-1,)))
    back = Graph.from_json(g.to_json())
    assert _structure(back) == _structure(g)
    assert back["x"].shape == (Sym("B"), Sym("T"), 8) and back["x"].dtype is DType.BF16
    constant = next(n for n in g.nodes if isinstance(n.op, ops.Constant))
    assert back[constant.name].op.data == constant.op.data and len(constant.op.data) == 6  # bf16 bytes


def test_from_json_errors_name_the_node():
    g, _ = _small()
    data = json.loads(g.to_json())
    data["nodes"][1]["op"] = "Frobnicate"
    with pytest.raises(GraphError, match="^y: unknown op 'Frobnicate' in JSON"):
        Graph.from_json(json.dumps(data))
    data = json.loads(g.to_json())
    data["nodes"][0]["attrs"]["dtype"] = {"$enum": "DType", "name": "I32"}
    with pytest.raises(GraphError, match=r"^y \(Activation\): activation RELU needs a float input"):
        Graph.from_json(json.dumps(data))


# -- run_reference input validation ----------------------------------------------------------------------
def test_run_reference_validates_inputs():
    g, _ = _small()
    with pytest.raises(InputError, match=r"missing input 'x' \(f32\[2, 3\]\)"):
        run_reference(g, {})
    with pytest.raises(InputError, match=r"input 'x': expected shape \[2, 3\] \(f32\), got \[3, 2\]"):
        run_reference(g, {"x": np.zeros((3, 2))})
    with pytest.raises(InputError, match=r"got \[6\] \(shapes must match exactly\)"):
        run_reference(g, {"x": np.arange(6, dtype=np.float32)})  # a flat array is not reshaped
    gi = Graph("ints")
    gi.output(gi.copy(gi.input("i", (2,), "i32")))
    with pytest.raises(InputError, match="got float64 data, expected int32"):
        run_reference(gi, {"i": np.array([0.5, 1.0])})
    with pytest.raises(InputError, match="non-integer values"):
        run_reference(gi, {"i": [0.5, 1.0]})
    gp = Graph("params")
    gp.output(gp.copy(gp.param("p", (2,))))
    with pytest.raises(InputError, match="missing param 'p'"):
        run_reference(gp)
