"""The autodiff traversal (rlxpy/ir/passes/autodiff.py): wiring, fan-out, skipped inputs, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from grad_helpers import F32_TOL, rand

import rlxpy
from rlxpy.errors import GraphError, RegistryError, UnsupportedOpError
from rlxpy.ir import ops
from rlxpy.ir.grad import VJP, vjp
from rlxpy.ir.passes.autodiff import grad
from rlxpy.ir.reference import run_reference


def _mlp_with_tied_embedding() -> rlxpy.Graph:
    g = rlxpy.Graph("tied")
    tokens, targets = g.input("tokens", (6,), "i32"), g.input("targets", (6,), "i32")
    wte = g.param("wte", (11, 4))
    w1, b1 = g.param("w1", (4, 8)), g.param("b1", (8,))
    w2 = g.param("w2", (8, 4))
    h = g.gather(wte, tokens)
    h = g.add(h, g.matmul(g.linear(h, w1, b1, activation="gelu"), w2))
    logits = g.matmul(g.layer_norm(h, g.param("ln", (4,))), g.transpose(wte, (1, 0)))
    g.output(g.cross_entropy(logits, targets, name="loss"))
    return g


def test_tied_weights_sum_their_gradients_and_match_torch():
    g = _mlp_with_tied_embedding()
    result = grad(g, "loss")
    assert list(result.grads) == ["wte", "w1", "b1", "w2", "ln"]  # every float param, in order
    assert [result.graph.nodes[i].name for i in result.graph.outputs] == ["loss", *result.grads.values()]
    rng = np.random.default_rng(0)
    params = {p.name: rng.standard_normal(p.shape).astype(np.float32) for p in g.params()}
    feeds = {"tokens": np.array([1, 3, 3, 10, 0, 5], np.int32),
             "targets": np.array([3, 3, 0, 2, 9, 10], np.int32)}
    out = run_reference(result.graph, feeds, params)
    t = {k: torch.from_numpy(v.astype(np.float64)).requires_grad_() for k, v in params.items()}
    h = t["wte"][torch.from_numpy(feeds["tokens"]).long()]
    h = h + F.gelu(h @ t["w1"] + t["b1"]) @ t["w2"]
    logits = F.layer_norm(h, (4,), t["ln"]) @ t["wte"].T
    loss = F.cross_entropy(logits, torch.from_numpy(feeds["targets"]).long())
    loss.backward()
    np.testing.assert_allclose(out["loss"], loss.item(), rtol=1e-5)
    for name, grad_name in result.grads.items():
        np.testing.assert_allclose(out[grad_name], t[name].grad.numpy(), *F32_TOL, err_msg=name)


def test_unreached_tensors_get_zeros_and_indices_get_nothing():
    g = rlxpy.Graph()
    x = g.input("x", (3, 4))
    g.param("unused", (2,))
    idx = g.input("idx", (2,), "i32")
    y = g.gather(x, idx)
    g.output(g.sum(g.reshape(g.mul(y, y), (8,)), 0, name="loss"))
    result = grad(g, "loss", ["x", "unused"])
    assert result.unreached == ("unused",)
    values = {"x": rand((3, 4), 1), "idx": np.array([2, 2], np.int32)}
    out = run_reference(result.graph, values, {"unused": np.ones(2, np.float32)})
    np.testing.assert_array_equal(out["grad/unused"], np.zeros(2, np.float32))
    want = np.zeros((3, 4), np.float32)
    want[2] = 4 * values["x"][2]
    np.testing.assert_allclose(out["grad/x"], want, rtol=1e-6)


def test_source_graph_is_left_alone_and_the_result_round_trips_json():
    g = _mlp_with_tied_embedding()
    before = len(g.nodes)
    result = grad(g, "loss", ["w1"])
    assert len(g.nodes) == before
    again = rlxpy.Graph.from_json(result.graph.to_json())
    def ops_of(graph):  # Constant compares by identity: compare the attributes
        return [(type(n.op).__name__, n.op.attrs(), n.inputs, n.name) for n in graph.nodes]

    assert ops_of(again) == ops_of(result.graph)


def test_a_missing_rule_names_the_node_and_op():
    g = rlxpy.Graph()
    x = g.input("x", (4, 32))  # block-layout spectra, N = 16
    y = g.log_mel_backward(x, g.input("f", (3, 9)), g.input("dy", (4, 3)), name="the_backward")
    g.output(g.sum(g.reshape(y, (y.numel,)), 0, name="loss"))
    with pytest.raises(UnsupportedOpError, match=r"the_backward \(LogMelBackward\): no gradient rule"):
        grad(g, "loss", ["x"])
    grad(g, "loss", [])  # nothing to differentiate: the backward is never asked for a gradient


def test_bad_requests_are_graph_errors():
    g = rlxpy.Graph()
    x = g.input("x", (3,))
    g.input("idx", (3,), "i32")
    g.output(g.sum(x, 0, name="loss"))
    with pytest.raises(GraphError, match="idx .*i32"):
        grad(g, "loss", ["idx"])
    with pytest.raises(GraphError, match="'nope' is not a node"):
        grad(g, "loss", ["nope"])
    with pytest.raises(GraphError, match="loss must be a float"):
        grad(g, "idx", ["x"])


def test_a_rule_is_registered_once():
    with pytest.raises(RegistryError, match="MatMul already has a gradient rule"):
        vjp(ops.MatMul)(lambda ctx, node, dy: [])
    assert ops.MatMul in VJP


def test_control_flow_is_differentiated_through_its_unfused_form():
    then_branch = rlxpy.Graph("then")
    a = then_branch.input("a", (3,))
    then_branch.output(then_branch.mul(a, a))
    else_branch = rlxpy.Graph("else")
    b = else_branch.input("a", (3,))
    else_branch.output(else_branch.mul(b, -1.0))
    g = rlxpy.Graph()
    x = g.input("x", (3,))
    pred = g.constant(np.array([1], np.int32), "i32")
    y = g.if_then_else(pred, then_branch, else_branch, [x])
    g.output(g.sum(y, 0, name="loss"))
    result = grad(g, "loss", ["x"])
    value = rand((3,), 4)
    out = run_reference(result.graph, {"x": value})
    np.testing.assert_allclose(out["grad/x"], 2 * value, rtol=1e-6)
