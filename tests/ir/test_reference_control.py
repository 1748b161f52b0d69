"""Control family (If, While): shape rules, the direct numpy reference against Python control
flow, the unfused graph against the reference, JSON, and bad input; every composite is marked."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from reference_helpers import ATOL, RTOL, run_both, t64
from reference_helpers import rand_plain_seeded as rand

from rlxpy.errors import GraphError
from rlxpy.ir import Graph, ops
from rlxpy.ir.passes import unfuse
from rlxpy.ir.reference import run_reference


# -- If -----------------------------------------------------------------------------------------
def branch(name: str, fn, shapes) -> Graph:
    sub = Graph(name)
    args = [sub.input(f"in{i}", s) for i, s in enumerate(shapes)]
    sub.output(fn(sub, *args))
    return sub


def if_graph(pred_shape=(1,)) -> Graph:
    then = branch("then", lambda s, x, w: s.mul(s.exp(x), w), [[3, 4], [4]])
    other = branch("else", lambda s, x, w: s.sub(x, w), [[3, 4], [4]])
    g = Graph()
    pred, x, w = g.input("pred", pred_shape), g.input("x", [3, 4]), g.param("w", [4])
    g.output(g.if_then_else(pred, then, other, [x, w], name="choose"))
    return g


@pytest.mark.parametrize("pred", [1.0, 0.0, np.nan, -np.inf])
def test_if_picks_a_branch_like_python(pred):
    g = if_graph()
    x, w = rand((3, 4), 1), rand((4,), 2)
    got = run_both(g, {"pred": [pred], "x": x}, {"w": w})
    taken = bool(torch.tensor(pred) != 0)  # truthiness as Where: NaN and -inf are true
    want = torch.exp(t64(x)) * t64(w) if taken else t64(x) - t64(w)
    np.testing.assert_allclose(got, want.numpy(), rtol=RTOL, atol=ATOL)


def test_if_takes_a_one_element_pred_of_higher_rank():
    then = branch("then", lambda s, x: s.exp(x), [[]])
    other = branch("else", lambda s, x: s.activation(x, "neg"), [[]])
    g = Graph()
    pred, x = g.input("pred", [1, 1]), g.input("x", [])
    g.output(g.if_then_else(pred, then, other, [x], name="pick"))
    assert g["pick"].shape == ()
    for pv, want in ((1.0, np.exp(np.float32(0.5))), (0.0, -0.5)):
        np.testing.assert_allclose(run_both(g, {"pred": [[pv]], "x": 0.5}), want, rtol=RTOL)


def test_if_with_elementwise_pred_is_torch_where():
    g = if_graph(pred_shape=(3, 1))
    x, w = rand((3, 4), 3), rand((4,), 4)
    pred = np.array([[1.0], [0.0], [2.0]], np.float32)
    got = run_both(g, {"pred": pred, "x": x}, {"w": w})
    want = torch.where(t64(pred) != 0, torch.exp(t64(x)) * t64(w), t64(x) - t64(w))
    np.testing.assert_allclose(got, want.numpy(), rtol=RTOL, atol=ATOL)


def test_if_rejects_branch_with_two_outputs():
    then = Graph("then")
    x = then.input("x", [3])
    then.output(then.relu(x), then.exp(x))
    other = branch("else", lambda s, x: s.relu(x), [[3]])
    g = Graph()
    pred, x = g.input("pred", [1]), g.input("x", [3])
    with pytest.raises(GraphError, match=r"^pick \(If\): then_branch has 2 outputs, needs exactly 1"):
        g.if_then_else(pred, then, other, [x], name="pick")


@pytest.mark.parametrize("then_shapes, other_shapes, pred_shape, message", [
    ([[3]], [[3], [3]], [1], "else_branch has 2 Inputs, but 1 values are bound"),
    ([[4]], [[3]], [1], "then_branch Input 'in0' is f32[4], but the value bound to it is f32[3]"),
    ([[3]], [[3]], [2], "pred f32[2] must hold one element or broadcast to the branch output [3]"),
])
def test_if_rejects_mismatched_branches(then_shapes, other_shapes, pred_shape, message):
    then = branch("then", lambda s, *a: s.relu(a[0]), then_shapes)
    other = branch("else", lambda s, *a: s.relu(a[0]), other_shapes)
    g = Graph()
    pred, x = g.input("pred", pred_shape), g.input("x", [3])
    with pytest.raises(GraphError, match=r"^pick \(If\): ") as info:
        g.if_then_else(pred, then, other, [x], name="pick")
    assert message in str(info.value)


def test_if_rejects_params_inside_a_branch():
    then = Graph("then")
    x = then.input("x", [3])
    then.output(then.mul(x, then.param("w", [3])))
    other = branch("else", lambda s, x: s.relu(x), [[3]])
    g = Graph()
    pred, x = g.input("pred", [1]), g.input("x", [3])
    with pytest.raises(GraphError, match=r"pick \(If\): then_branch declares Params \['w'\]: pass the outer"):
        g.if_then_else(pred, then, other, [x], name="pick")


# -- While --------------------------------------------------------------------------------------
def counting_loop(max_iterations, limit: float = 10.0) -> Graph:
    """state (i, acc, w): while i < limit: i += 1; acc = acc * 0.5 + w (w is a captured Param)."""
    cond = Graph("cond")
    i, acc, w = cond.input("i", []), cond.input("acc", [2, 3]), cond.input("w", [3])
    cond.output(cond.compare(i, limit, "lt"))
    body = Graph("body")
    i, acc, w = body.input("i", []), body.input("acc", [2, 3]), body.input("w", [3])
    body.output(body.add(i, 1.0), body.add(body.mul(acc, 0.5), w))
    g = Graph()
    acc0 = g.input("acc0", [2, 3])
    start = g.input("start", [])
    w = g.param("w", [3])
    loop = g.while_loop([start, acc0, w], cond, body, max_iterations, name="loop")
    g.output(loop)
    return g


def python_loop(start, acc, w, limit, max_iterations):
    i = torch.tensor(start, dtype=torch.float64)
    acc, w = t64(acc), t64(w)
    for _ in range(max_iterations):
        if not i < limit:
            break
        i, acc = i + 1, acc * 0.5 + w
    return i, acc


@pytest.mark.parametrize("start, max_iterations", [(7.0, 8), (0.0, 5), (3.0, 0), (12.0, 4), (9.5, 1)])
def test_while_counts_like_a_python_loop(start, max_iterations):
    g = counting_loop(max_iterations)
    acc0, w = rand((2, 3), 1), rand((3,), 2)
    got = run_both(g, {"start": start, "acc0": acc0}, {"w": w})
    want, _ = python_loop(start, acc0, w, 10.0, max_iterations)
    np.testing.assert_allclose(got, want.numpy(), rtol=RTOL)


def test_while_second_state_value_uses_captured_param():
    """Loop state (acc, i, w): body returns two outputs, w stays a fixed capture."""
    cond = branch("cond", lambda s, acc, i, w: s.compare(i, 3.0, "lt"), [[2, 3], [], [3]])
    body = Graph("body")
    acc, i, w = body.input("acc", [2, 3]), body.input("i", []), body.input("w", [3])
    body.output(body.add(body.mul(acc, 0.5), w), body.add(i, 1.0))
    g = Graph()
    acc0, start, w = g.input("acc0", [2, 3]), g.input("start", []), g.param("w", [3])
    g.output(g.while_loop([acc0, start, w], cond, body, 10, name="loop"))
    acc0v, wv = rand((2, 3), 3), rand((3,), 4)
    got = run_both(g, {"acc0": acc0v, "start": 0.0}, {"w": wv})
    _, want = python_loop(0.0, acc0v, wv, 3.0, 10)
    np.testing.assert_allclose(got, want.numpy(), rtol=RTOL)


def test_while_rejects_missing_max_iterations():
    g = counting_loop(4)
    loop = g["loop"]
    with pytest.raises(GraphError, match=r"^loop2 \(While\): max_iterations is required"):
        g.apply(ops.While(loop.op.cond, loop.op.body), loop.inputs, "loop2")


@pytest.mark.parametrize("make, message", [
    (lambda: (branch("c", lambda s, x: s.compare(x, 1.0, "lt"), [[2]]),
              branch("b", lambda s, x: s.exp(x), [[2]])),
     "cond's output must hold one element, got bool[2]"),
    (lambda: (branch("c", lambda s, x: s.sum(x, 0), [[2]]),
              branch("b", lambda s, x: s.sum(x, 0, True), [[2]])),
     "body output 0 is f32[1], but the state value it replaces is f32[2]"),
])
def test_while_rejects_bad_cond_and_body(make, message):
    cond, body = make()
    g = Graph()
    x = g.input("x", [2])
    with pytest.raises(GraphError, match=r"^loop \(While\): ") as info:
        g.while_loop([x], cond, body, 3, name="loop")
    assert message in str(info.value)


# -- JSON ---------------------------------------------------------------------------------------
def test_json_round_trip_keeps_if_and_while():
    """A While whose body holds an If, next to a top-level If: text round trip, same values."""
    inner_then = branch("t", lambda s, x: s.mul(x, 2.0), [[3]])
    inner_else = branch("e", lambda s, x: s.sub(x, 1.0), [[3]])
    body = Graph("body")
    x = body.input("x", [3])
    body.output(body.if_then_else(body.compare(body.sum(x, 0), 0.0, "gt"), inner_then, inner_else, [x]))
    cond = branch("cond", lambda s, x: s.compare(s.sum(x, 0), 50.0, "lt"), [[3]])
    g = if_graph()
    start = g.input("start", [3])
    g.output(g.while_loop([start], cond, body, max_iterations=7, name="loop"))
    text = g.to_json()
    assert '"$graph"' in text
    again = Graph.from_json(text)
    assert str(again) == str(g)
    loop = again["loop"].op
    assert isinstance(loop, ops.While) and loop.max_iterations == 7
    assert isinstance(loop.body["if_0"].op, ops.If)
    inputs = {"pred": [0.0], "x": rand((3, 4), 1), "start": np.array([1.0, 2.0, -0.5], np.float32)}
    params = {"w": rand((4,), 2)}
    first, second = run_reference(g, inputs, params), run_reference(again, inputs, params)
    for name in first:
        np.testing.assert_array_equal(first[name], second[name])
    flat = run_reference(unfuse(again), inputs, params)
    for name in first:
        np.testing.assert_allclose(flat[name], first[name], rtol=RTOL)


def test_composite_ops_are_marked_and_registered():
    from rlxpy.ir.reference import REFERENCE

    for op_type in ops.COMPOSITE_OPS:
        assert op_type.composite and op_type in ops.ALL_OPS and op_type in REFERENCE
