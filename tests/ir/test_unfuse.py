"""The unfuse pass: explicit broadcasting (property-tested), names and outputs kept, composites
expanded inside control flow, and the verify pass."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlxpy.errors import GraphError
from rlxpy.ir import DType, Graph, Sym, ops
from rlxpy.ir.passes import check_unfused, unfuse, verify
from rlxpy.ir.passes.unfuse import BROADCASTING
from rlxpy.ir.reference import run_reference


def assert_primitive(g: Graph) -> None:
    """Independent of check_unfused: no composite op, no operand shaped unlike its output."""
    for node in g.nodes:
        assert not node.op.composite, node
        if isinstance(node.op, (ops.Binary, ops.Compare, ops.Where)):
            for i in node.inputs:
                assert g.nodes[i].shape == node.shape, (node, g.nodes[i])


# -- property: broadcasting ---------------------------------------------------------------------
@st.composite
def elementwise_graphs(draw):
    """A random graph of Binary/Compare/Where/Activation over inputs whose shapes are random
    sub-shapes (dims set to 1, leading dims dropped, scalars) of one target shape."""
    target = draw(st.lists(st.sampled_from([1, 2, 3, 5]), min_size=0, max_size=4))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))

    def sub_shape():
        keep = draw(st.integers(0, len(target)))
        dims = target[len(target) - keep:]
        return [1 if draw(st.booleans()) else d for d in dims]

    g = Graph("prop")
    floats, values = [], {}
    for i in range(draw(st.integers(2, 4))):
        shape = sub_shape()
        floats.append(g.input(f"x{i}", shape))
        data = rng.standard_normal(shape).astype(np.float32)
        if data.size and draw(st.booleans()):
            data.flat[0] = draw(st.sampled_from([np.nan, np.inf, -np.inf, 0.0]))
        values[f"x{i}"] = data
    bools = []
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["binary", "compare", "where", "activation", "scalar"]))
        a, b = draw(st.sampled_from(floats)), draw(st.sampled_from(floats))
        if kind == "binary":
            op = draw(st.sampled_from(["add", "sub", "mul", "div", "max", "min"]))
            floats.append(g.binary(a, b, op))
        elif kind == "compare":
            bools.append(g.compare(a, b, draw(st.sampled_from(["eq", "ne", "lt", "le", "gt", "ge"]))))
        elif kind == "where":
            cond = draw(st.sampled_from(bools + floats))
            floats.append(g.where(cond, a, b))
        elif kind == "scalar":
            floats.append(g.mul(a, draw(st.floats(-3, 3, width=32))))  # a rank-0 Constant operand
        else:
            floats.append(g.activation(a, draw(st.sampled_from(["tanh", "neg", "abs", "silu"]))))
    g.output(*floats[-2:], *bools[-1:])
    return g, values


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(elementwise_graphs())
def test_unfuse_makes_broadcasting_explicit_and_keeps_values(case):
    g, values = case
    flat = unfuse(g)
    assert_primitive(flat)
    want = run_reference(g, values)
    got = run_reference(flat, values)
    assert list(got) == list(want)
    for name in want:
        assert got[name].dtype == want[name].dtype
        np.testing.assert_array_equal(got[name], want[name])  # Expand copies values: bit-exact


def test_broadcast_skips_reshape_when_ranks_match_and_pads_scalars():
    g = Graph()
    a, b, s = g.input("a", [3, 1]), g.input("b", [1, 4]), g.input("s", [])
    g.output(g.add(g.add(a, b, name="sum"), s, name="shifted"))
    flat = unfuse(g)
    names = [n.name for n in flat.nodes]
    assert "sum/lhs_reshape" not in names and "sum/rhs_reshape" not in names
    assert flat["sum/lhs_expand"].shape == flat["sum/rhs_expand"].shape == (3, 4)
    assert flat["shifted/rhs_reshape"].shape == (1, 1)
    assert flat["shifted/rhs_expand"].inputs == (flat["shifted/rhs_reshape"].id,)
    assert "shifted/lhs_expand" not in names  # already the output's shape


def test_broadcast_over_symbolic_dims():
    g = Graph()
    x, bias = g.input("x", ["T", 4]), g.input("bias", [4])
    g.output(g.where(g.compare(x, 0.0, "gt", name="positive"), x, bias, name="pick"))
    flat = unfuse(g)
    assert_primitive(flat)
    assert flat["pick/on_false_reshape"].shape == (1, 4)
    assert flat["pick/on_false_expand"].shape == (Sym("T"), 4)
    assert flat["positive/rhs_expand"].shape == (Sym("T"), 4)  # the Compare's scalar 0.0


# -- names, outputs, leaves ---------------------------------------------------------------------
def mixed_graph() -> Graph:
    g = Graph("mixed")
    x = g.input("tokens", [2, 3, 8])
    w, a, b = g.param("w", [8, 6]), g.param("lora_a", [8, 2]), g.param("lora_b", [2, 6])
    bias = g.param("bias", [6])
    h = g.lora_matmul(x, w, a, b, scale=0.5, name="blk0.proj")
    act = g.swiglu(h, name="blk0.act")
    fused = g.linear(g.reshape(act, [6, 3], name="flat"), g.param("w2", [3, 6]), bias, "gelu", name="fc")
    scaled = g.mul(fused, g.param("gain", [6]), name="gain_mul")
    dg = g.dot_general(act, act, [2], [2], [0], [0], name="gram")
    g.output(scaled, dg, x)
    return g


def test_unfuse_keeps_output_names_order_and_leaf_names():
    g = mixed_graph()
    before = str(g)
    flat = unfuse(g)
    assert str(g) == before  # the source graph is untouched
    assert [flat.nodes[o].name for o in flat.outputs] == ["gain_mul", "gram", "tokens"]
    assert [(n.name, n.op) for n in flat.inputs()] == [(n.name, n.op) for n in g.inputs()]
    assert [(n.name, n.op) for n in flat.params()] == [(n.name, n.op) for n in g.params()]
    for kept in ("flat", "fc", "gain_mul"):  # 1:1 nodes keep their names and ops
        assert type(flat[kept].op) is type(g[kept].op)
    assert isinstance(flat["fc"].op, ops.FusedMatMulBiasAct)  # has a kernel: not expanded
    generated = [n.name for n in flat.nodes if n.name not in {m.name for m in g.nodes}]
    prefixes = ("blk0.proj", "blk0.act", "gram", "gain_mul")
    assert generated and all(n.split("/")[0] in prefixes for n in generated)
    expected = {"blk0.proj/base", "blk0.proj/down", "blk0.proj/up", "blk0.act/gate", "blk0.act/up"}
    assert expected <= set(generated)
    verify(flat)
    assert_primitive(flat)
    rng = np.random.default_rng(0)
    params = {n.name: rng.standard_normal(n.shape).astype(np.float32) for n in g.params()}
    inputs = {"tokens": rng.standard_normal((2, 3, 8)).astype(np.float32)}
    want, got = run_reference(g, inputs, params), run_reference(flat, inputs, params)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)


def test_unfuse_is_idempotent_on_a_primitive_graph():
    once = unfuse(mixed_graph())
    twice = unfuse(once)
    assert str(twice) == str(once)


def test_generated_names_avoid_existing_node_names():
    g = Graph()
    x = g.input("x", [4])
    s = g.swiglu(g.concat([x, x], 0, name="pair"), name="act")
    clash = g.relu(x, name="act/gate")  # the name the expansion would pick first
    g.output(s, clash)
    flat = unfuse(g)
    assert isinstance(flat["act/gate"].op, ops.Activation) and flat["act/gate"].op.fn is ops.ActKind.RELU
    assert isinstance(flat["act/gate_1"].op, ops.Narrow)


def test_dot_general_with_a_symbolic_batch_dim():
    g = Graph()
    a, b = g.input("a", ["B", 3, 4]), g.input("b", [5, "B", 4])
    g.output(g.dot_general(a, b, [2], [2], [0], [1], name="bmm"))
    flat = unfuse(g)
    assert [type(n.op).__name__ for n in flat.nodes] == ["Input", "Input", "Transpose", "MatMul"]
    assert flat["bmm/rhs_t"].shape == (Sym("B"), 4, 5) and flat["bmm"].shape == (Sym("B"), 3, 5)


def test_dot_general_refuses_to_flatten_two_symbols():
    g = Graph()
    a, b = g.input("a", ["B", "T", 4]), g.input("b", [4, 5])
    g.output(g.dot_general(a, b, [2], [0], name="proj"))
    with pytest.raises(GraphError, match=r"proj \(DotGeneral\): cannot flatten lhs free dims \[B, T\]"):
        unfuse(g)


# -- control flow -------------------------------------------------------------------------------
def sub(name: str, fn, shapes) -> Graph:
    graph = Graph(name)
    graph.output(fn(graph, *[graph.input(f"in{i}", s) for i, s in enumerate(shapes)]))
    return graph


def test_if_with_captured_param_and_nested_composites():
    """Each branch holds a composite (LoraMatMul / DotGeneral): expanded after inlining."""
    then = Graph("then")
    x, w, a, b = (then.input(n, s) for n, s in (("x", [3, 4]), ("w", [4, 4]), ("a", [4, 2]), ("b", [2, 4])))
    then.output(then.lora_matmul(x, w, a, b, 2.0, name="lora"))
    other = Graph("else")
    x, w, _, _ = (other.input(n, s) for n, s in (("x", [3, 4]), ("w", [4, 4]), ("a", [4, 2]), ("b", [2, 4])))
    other.output(other.dot_general(x, w, [1], [1], name="xwT"))
    g = Graph()
    pred, x = g.input("pred", []), g.input("x", [3, 4])
    w, a, b = g.param("w", [4, 4]), g.param("a", [4, 2]), g.param("b", [2, 4])
    g.output(g.if_then_else(pred, then, other, [x, w, a, b], name="gate"))
    flat = unfuse(g)
    assert_primitive(flat)
    assert {"gate/then/lora/base", "gate/then/lora", "gate/else/xwT/rhs_t", "gate/else/xwT"} <= {
        n.name for n in flat.nodes}
    assert [n.name for n in flat.params()] == ["w", "a", "b"]  # no copies of the captured params
    rng = np.random.default_rng(2)
    shapes = {"w": (4, 4), "a": (4, 2), "b": (2, 4)}
    params = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
    xv = rng.standard_normal((3, 4)).astype(np.float32)
    lora = xv @ params["w"] + 2.0 * (xv @ params["a"]) @ params["b"]
    for pv, want in ((1.0, lora), (0.0, xv @ params["w"].T)):
        got = run_reference(flat, {"pred": pv, "x": xv}, params)["gate"]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(run_reference(g, {"pred": pv, "x": xv}, params)["gate"], want, rtol=1e-5,
                                   atol=1e-6)


def test_while_inside_if_branch_and_if_inside_while_body():
    halve = sub("halve", lambda s, v: s.mul(v, 0.5), [[2]])
    double = sub("double", lambda s, v: s.mul(v, 2.0), [[2]])
    body = sub("body", lambda s, v: s.if_then_else(s.compare(s.sum(v, 0), 0.0, "gt"), halve, double, [v],
                                                     name="step"), [[2]])
    cond = sub("cond", lambda s, v: s.compare(s.reduce(s.activation(v, "abs"), "max", 0), 1.0, "gt"), [[2]])
    loop_branch = sub("looping", lambda s, v: s.while_loop([v], cond, body, 6, name="inner"), [[2]])
    plain_branch = sub("plain", lambda s, v: s.activation(v, "neg"), [[2]])
    g = Graph()
    pred, v = g.input("pred", [1]), g.input("v", [2])
    g.output(g.if_then_else(pred, loop_branch, plain_branch, [v], name="outer"))
    flat = unfuse(g)
    assert_primitive(flat)
    assert "outer/then/inner/iter5/body/step" in {n.name for n in flat.nodes}
    for pv in (1.0, 0.0):
        for start in ([9.0, -3.0], [-5.0, 0.25], [0.5, 0.5]):
            inputs = {"pred": [pv], "v": np.array(start, np.float32)}
            expected = np.array(start, np.float64)
            if pv:
                for _ in range(6):
                    if not np.abs(expected).max() > 1.0:
                        break
                    expected = expected * (0.5 if expected.sum() > 0 else 2.0)
            else:
                expected = -expected
            np.testing.assert_allclose(run_reference(g, inputs)["outer"], expected)
            np.testing.assert_allclose(run_reference(flat, inputs)["outer"], expected)


def test_while_with_zero_iterations_aliases_its_input():
    cond = sub("cond", lambda s, v: s.compare(s.sum(v, 0), 0.0, "gt"), [[3]])
    body = sub("body", lambda s, v: s.add(v, 1.0), [[3]])
    g = Graph()
    g.output(g.while_loop([g.input("v", [3])], cond, body, 0, name="never"))
    flat = unfuse(g)
    assert isinstance(flat["never"].op, ops.Reshape) and flat.outputs == [flat["never"].id]
    np.testing.assert_array_equal(run_reference(flat, {"v": [1, 2, 3]})["never"], [1, 2, 3])


def test_while_bool_and_float_predicates_nan_counts_as_true():
    """A float cond value NaN is truthy (as Where); a later 0 still stops the loop."""
    cond = Graph("cond")
    i, flags = cond.input("i", []), cond.input("flags", [4])
    cond.output(cond.gather(flags, cond.cast(i, "i32"), name="flag"))
    body = sub("body", lambda s, i, f: s.add(i, 1.0), [[], [4]])
    g = Graph()
    i, flags = g.input("i", []), g.input("flags", [4])
    g.output(g.while_loop([i, flags], cond, body, 4, name="loop"))
    flat = unfuse(g)
    assert_primitive(flat)
    cases = (([1, np.nan, 0, 1], 2.0), ([np.nan, np.nan, np.nan, np.nan], 4.0), ([0, 1, 1, 1], 0.0))
    for flags_value, want in cases:
        inputs = {"i": 0.0, "flags": np.array(flags_value, np.float32)}
        assert run_reference(g, inputs)["loop"] == want
        assert run_reference(flat, inputs)["loop"] == want


def test_control_flow_unfuses_to_where_named_after_the_op():
    then = sub("t", lambda s, x: s.exp(x), [[2, 2]])
    other = sub("e", lambda s, x: s.tanh(x), [[2, 2]])
    g = Graph()
    pred, x = g.input("pred", [], DType.BOOL), g.input("x", [2, 2])
    g.output(g.if_then_else(pred, then, other, [x], name="choice"))
    flat = unfuse(g)
    assert isinstance(flat["choice"].op, ops.Where)
    operands = [type(flat.nodes[i].op) for i in flat["choice"].inputs]
    assert operands == [ops.Expand, ops.Activation, ops.Activation]
    assert flat["choice/cond_reshape"].shape == (1, 1)


def test_check_unfused_reports_leftovers():
    g = Graph()
    a, b = g.input("a", [3, 1]), g.input("b", [4])
    g.output(g.add(a, b, name="implicit"))
    with pytest.raises(GraphError, match=r"implicit \(Binary\): operand shapes .* broadcasting is implicit"):
        check_unfused(g)
    g2 = Graph()
    g2.output(g2.swiglu(g2.input("x", [4]), name="act"))
    with pytest.raises(GraphError, match=r"act \(FusedSwiGLU\): composite op left after unfuse"):
        check_unfused(g2)
    assert set(BROADCASTING) == {ops.Binary, ops.Compare, ops.Where}


# -- verify -------------------------------------------------------------------------------------
def test_verify_accepts_a_good_graph_and_rejects_no_outputs():
    g = mixed_graph()
    assert verify(g) is g
    empty = Graph("empty")
    empty.input("x", [1])
    with pytest.raises(GraphError, match="graph 'empty' has no outputs"):
        verify(empty)


def test_verify_rejects_duplicate_input_and_param_names():
    g = Graph()
    x = g.input("x", [2])
    y = g.apply(ops.Input("x", (2,)), [], "x_again")
    g.output(g.add(x, y))
    with pytest.raises(GraphError, match=r"x_again \(Input\): Input name 'x' is already used by x \(Input\)"):
        verify(g)
    g2 = Graph()
    x = g2.input("w", [2])
    w = g2.apply(ops.Param("w", (2,)), [], "weight")
    g2.output(g2.mul(x, w))
    with pytest.raises(GraphError, match=r"weight \(Param\): Param name 'w' is already used by w \(Input\)"):
        verify(g2)


def test_if_rejects_duplicate_input_names_in_a_branch():
    bad = Graph("bad")
    x = bad.input("x", [2])
    bad.apply(ops.Input("x", (2,)), [], "x2")
    bad.output(bad.relu(x))
    good = sub("good", lambda s, v, w: s.relu(v), [[2], [2]])
    g = Graph()
    with pytest.raises(GraphError, match=r"pick \(If\): else_branch has duplicate Input names \['x', 'x'\]"):
        g.if_then_else(g.input("p", [1]), good, bad, [g.input("v", [2]), g.input("w", [2])], name="pick")


def test_verify_names_the_node_of_a_broken_sub_graph():
    good = sub("good", lambda s, v: s.relu(v), [[2]])
    g = Graph()
    node = g.if_then_else(g.input("p", [1]), good, good, [g.input("v", [2])], name="pick")
    g.output(node)
    good.outputs.clear()  # broken after the fact
    with pytest.raises(GraphError, match=r"pick \(If\): then_branch has 0 outputs"):
        verify(g)


def test_composite_flag_only_on_composite_ops():
    flagged = {op for op in ops.ALL_OPS if op.composite}
    assert flagged == set(ops.COMPOSITE_OPS)
