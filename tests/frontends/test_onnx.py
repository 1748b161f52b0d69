"""ONNX import checked against independent oracles: eager torch for a transformers BERT exported with
torch.onnx.export, and onnx's own ReferenceEvaluator for hand-built models covering the op table."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import rlxpy
from rlxpy.frontends.embed import default_model_dir
from rlxpy.frontends.onnx import OnnxModel
from rlxpy.frontends.onnx_fuzz import export_bert, pretrained_bert

F32, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "t", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [helper.make_tensor_value_info(n, t, None) for n, t in outputs],
                              [numpy_helper.from_array(v, k) for k, v in dict(initializers).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _check(model, feeds, tol=1e-5, reference_only=False):
    want = ReferenceEvaluator(model).run(None, feeds)
    imported = OnnxModel(model)
    names = imported.output_names
    if reference_only:
        from rlxpy.ir.reference import run_reference

        graph = imported.import_graph({k: v.shape for k, v in feeds.items()})
        ins = {k: v.astype(np.int32) if v.dtype == np.int64 else v for k, v in feeds.items()}
        ref = run_reference(graph.graph, ins, graph.params)
        got = [ref[v] if isinstance(v, str) else v for v in (graph.outputs[n] for n in names)]
    else:
        out = imported.run(feeds)
        got = [out[n] for n in names]
    for name, w, g in zip(names, want, got):
        assert np.asarray(g).shape == np.asarray(w).shape, f"{name}: {np.shape(g)} != {np.shape(w)}"
        np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64), rtol=tol, atol=tol,
                                   err_msg=name)


# -- BERT exported by torch.onnx.export ------------------------------------------------------------------
@pytest.fixture(scope="module")
def bert_onnx(tmp_path_factory):
    bert = pretrained_bert(default_model_dir())
    return bert, export_bert(tmp_path_factory.mktemp("onnx") / "bert.onnx", bert)


def test_bert_export_matches_eager_for_batches_1_and_8(device, bert_onnx):
    bert, path = bert_onnx
    model = OnnxModel(path)
    kinds = [n.op_type for n in model.nodes]
    # the exporter's decomposed GELU / LayerNorm / linears were fused before import
    assert kinds.count("Gelu") == 6 and kinds.count("rlx.LayerNorm") == 13 and kinds.count("rlx.Linear") == 36
    assert "Erf" not in kinds
    gen = torch.Generator().manual_seed(0)
    for batch, seq in [(1, 6), (8, 7)]:
        lengths = torch.randint(2, seq + 1, (batch,), generator=gen)
        lengths[0] = seq
        mask = (torch.arange(seq)[None, :] < lengths[:, None]).long()
        ids = torch.randint(1000, 20000, (batch, seq), generator=gen) * mask
        with torch.no_grad():
            want = bert(input_ids=ids, attention_mask=mask).last_hidden_state.numpy()
        got = model.run({"input_ids": ids.numpy(), "attention_mask": mask.numpy()})["last_hidden_state"]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"batch {batch}")
    assert model.compiles == 2
    imported = model._compiled[next(reversed(model._compiled))][0]
    assert not any(isinstance(n.op, rlxpy.ops.Input) and n.name.startswith("/") for n in imported.graph.nodes)
    assert sum(isinstance(n.op, rlxpy.ops.LayerNorm) for n in imported.graph.nodes) == 13


# -- hand-built models vs onnx.reference ---------------------------------------------------------------------
def _dense_model():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((17, 6)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    gamma, beta = rng.uniform(0.5, 1.5, 6).astype(np.float32), rng.standard_normal(6).astype(np.float32)
    nodes = [
        helper.make_node("Gemm", ["x", "w", "b"], ["g"], transB=1),
        helper.make_node("LayerNormalization", ["g", "gamma", "beta"], ["ln"], epsilon=1e-5),
        helper.make_node("Softmax", ["ln"], ["sm"], axis=-1),
        helper.make_node("Tanh", ["g"], ["t"]),
        helper.make_node("Relu", ["g"], ["r"]),
        helper.make_node("Sigmoid", ["t"], ["s"]),
        helper.make_node("Erf", ["g"], ["e"]),
        helper.make_node("Sub", ["e", "s"], ["d0"]),
        helper.make_node("Div", ["d0", "two"], ["d1"]),
        helper.make_node("Pow", ["r", "two"], ["p"]),
        helper.make_node("Sqrt", ["p"], ["q"]),
        helper.make_node("Mul", ["q", "sm"], ["m"]),
        helper.make_node("MatMul", ["x", "w2"], ["mm"]),
        helper.make_node("ReduceMean", ["mm"], ["rm"], axes=[1], keepdims=0),
    ]
    init = {"w": w.T.copy(), "b": b, "gamma": gamma, "beta": beta, "two": np.array(2.0, np.float32), "w2": w}
    return _model(nodes, [("x", F32, ["n", 17])], [("m", F32), ("d1", F32), ("rm", F32)], init)


def _shape_model():
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["rows"], axis=0),
        helper.make_node("Unsqueeze", ["rows", "axis0"], ["rows1"]),
        helper.make_node("Concat", ["rows1", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"]),
        helper.make_node("Slice", ["flat", "starts", "ends", "axes"], ["sl"]),
        helper.make_node("Transpose", ["sl"], ["tr"], perm=[1, 0]),
        helper.make_node("Unsqueeze", ["tr", "axis0"], ["u"]),
        helper.make_node("Squeeze", ["u", "axis0"], ["sq"]),
        helper.make_node("Gather", ["x", "neg_idx"], ["gx"], axis=1),
        helper.make_node("Equal", ["ids", "zero"], ["is_pad"]),
        helper.make_node("Not", ["is_pad"], ["keep"]),
        helper.make_node("Cast", ["keep"], ["keep_f"], to=F32),
        helper.make_node("Where", ["is_pad", "neg_inf", "keep_f"], ["bias"]),
        helper.make_node("IsNaN", ["bias"], ["nan"]),
        helper.make_node("Or", ["nan", "is_pad"], ["either"]),
        helper.make_node("ConstantOfShape", ["shape"], ["ones"],
                         value=numpy_helper.from_array(np.ones(1, np.float32))),
        helper.make_node("Add", ["x", "ones"], ["x1"]),
        helper.make_node("Expand", ["bias_row", "shape"], ["ex"]),
        helper.make_node("Mul", ["x1", "ex"], ["scaled"]),
        helper.make_node("Flatten", ["scaled"], ["fl"], axis=1),
        helper.make_node("GatherElements", ["x", "ge_idx"], ["gel"], axis=1),
        helper.make_node("Split", ["x", "split"], ["a", "b2"], axis=1),
        helper.make_node("Gather", ["emb", "ids"], ["looked"], axis=0),
    ]
    int64 = {"zero": 0, "axis0": [0], "minus_one": [-1], "starts": [1], "ends": [-1], "axes": [1]}
    init = {**{k: np.array(v, np.int64) for k, v in int64.items()},
            "neg_idx": np.array([-1, 0, 2]),
            "neg_inf": np.array(-np.inf, np.float32), "bias_row": np.linspace(-1, 1, 5).astype(np.float32),
            "ge_idx": np.array([[4, 0], [1, 1], [0, 3]], np.int64), "split": np.array([2, 3], np.int64),
            "emb": np.arange(40, dtype=np.float32).reshape(10, 4)}
    outs = [("sq", F32), ("gx", F32), ("bias", F32), ("either", TensorProto.BOOL), ("fl", F32), ("gel", F32),
            ("a", F32), ("b2", F32), ("looked", F32)]
    return _model(nodes, [("x", F32, [3, 5]), ("ids", I64, [3])], outs, init, opset=14)


def _feeds_shape():
    rng = np.random.default_rng(1)
    return {"x": rng.standard_normal((3, 5)).astype(np.float32), "ids": np.array([3, 0, 9], np.int64)}


@pytest.mark.parametrize("rows", [1, 3, 17])
def test_dense_ops_match_onnx_reference(device, rows):
    feeds = {"x": np.random.default_rng(rows).standard_normal((rows, 17)).astype(np.float32)}
    _check(_dense_model(), feeds, tol=1e-5)


def test_shape_plumbing_and_indexing_match_onnx_reference(device):
    _check(_shape_model(), _feeds_shape())


def test_shape_model_through_numpy_reference():
    _check(_shape_model(), _feeds_shape(), reference_only=True)


def test_gelu_opset20_and_old_softmax_semantics(device):
    x = np.random.default_rng(2).standard_normal((2, 3, 4)).astype(np.float32) * 3
    nodes = [helper.make_node("Gelu", ["x"], ["y"]),
             helper.make_node("Gelu", ["x"], ["z"], approximate="tanh")]
    gelu = _model(nodes, [("x", F32, [2, 3, 4])], [("y", F32), ("z", F32)], opset=20)
    _check(gelu, {"x": x}, tol=2e-6)
    old = _model([helper.make_node("Softmax", ["x"], ["y"], axis=1)], [("x", F32, [2, 3, 4])], [("y", F32)],
                 opset=11)
    # opset < 13 coerces x to 2-D [2, 3*4] first (onnx.reference ignores that, so numpy is the oracle)
    flat = x.reshape(2, 12).astype(np.float64)
    exps = np.exp(flat - flat.max(1, keepdims=True))
    want = exps / exps.sum(1, keepdims=True)
    got = OnnxModel(old).run({"x": x})["y"]
    np.testing.assert_allclose(got, want.reshape(2, 3, 4), rtol=1e-5, atol=1e-6)


def test_erf_gelu_pattern_is_fused_in_every_grouping():
    def export(order):
        nodes = [helper.make_node("Div", ["x", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
                 helper.make_node("Add", ["e", "one"], ["a"])]
        first, second = {"x*a*0.5": (["x", "a"], ["m", "half"]), "a*0.5*x": (["a", "half"], ["m", "x"]),
                         "(x*0.5)*a": (["x", "half"], ["m", "a"])}[order]
        nodes += [helper.make_node("Mul", first, ["m"]), helper.make_node("Mul", second, ["y"])]
        init = {"sqrt2": np.array(np.sqrt(2.0), np.float32), "one": np.array(1.0, np.float32),
                "half": np.array(0.5, np.float32)}
        return _model(nodes, [("x", F32, [4, 9])], [("y", F32)], init)
    feeds = {"x": np.linspace(-5, 5, 36, dtype=np.float32).reshape(4, 9)}
    for order in ("x*a*0.5", "a*0.5*x", "(x*0.5)*a"):
        model = export(order)
        assert "Gelu" in [n.op_type for n in OnnxModel(model).nodes], order
        _check(model, feeds, tol=2e-6, reference_only=True)


# -- errors --------------------------------------------------------------------------------------------------
def test_unsupported_operators_are_all_listed():
    model = _model([helper.make_node("NonZero", ["x"], ["nz"]), helper.make_node("Einsum", ["x", "x"], ["e"],
                                                                                 equation="ij,ij->i")],
                   [("x", F32, [3, 4])], [("nz", I64), ("e", F32)])
    with pytest.raises(rlxpy.UnsupportedOpError, match="unsupported ONNX operators: Einsum, NonZero"):
        OnnxModel(model)


def test_runtime_reshape_target_is_a_clear_error():
    nodes = [helper.make_node("Cast", ["s"], ["target"], to=I64),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    model = _model(nodes, [("x", F32, [2, 6]), ("s", F32, [2])], [("y", F32)])
    with pytest.raises(rlxpy.UnsupportedOpError, match="shape must be known at import time"):
        OnnxModel(model).run({"x": np.zeros((2, 6), np.float32), "s": np.array([3, 4], np.float32)})


def test_bad_inputs_and_dtypes_are_clear_errors():
    relu = _model([helper.make_node("Relu", ["x"], ["y"])], [("x", F32, ["n", 3])], [("y", F32)])
    model = OnnxModel(relu)
    with pytest.raises(rlxpy.InputError, match="dtype float64"):
        model.run({"x": np.zeros((2, 3))})
    with pytest.raises(rlxpy.InputError, match="missing ONNX input 'x'"):
        model.run({})
    with pytest.raises(rlxpy.InputError, match="unknown ONNX inputs"):
        model.run({"x": np.zeros((2, 3), np.float32), "z": 1})
    with pytest.raises(rlxpy.InputError, match="does not match the declared"):
        model.import_graph({"x": (2, 4)})
    with pytest.raises(rlxpy.InputError, match="needs a shape"):
        model.import_graph({})
    double = _model([helper.make_node("Relu", ["x"], ["y"])], [("x", TensorProto.DOUBLE, [3])],
                    [("y", TensorProto.DOUBLE)])
    with pytest.raises(rlxpy.UnsupportedOpError, match="unsupported input element types: 11"):
        OnnxModel(double)
    with pytest.raises(rlxpy.ModelError, match="not a readable ONNX model"):
        OnnxModel(__file__)


def test_missing_onnx_package_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(rlxpy.ModelError, match="pip install 'rlxpy\\[onnx\\]'"):
        OnnxModel(b"")


def test_finalize_drops_dead_nodes_merges_duplicates_and_fuses_activations():
    from rlxpy.frontends.rewrite import finalize
    from rlxpy.ir.reference import run_reference

    g = rlxpy.Graph("rewrite")
    x = g.input("x", [3, 4])
    unused = g.input("unused", [2])
    w, b = g.param("w", [4, 5]), g.param("b", [5])
    hidden = g.reshape(g.linear(x, w, b), [15])
    act = g.gelu(hidden)
    twice_a, twice_b = g.mul(act, 2.0), g.mul(act, 2.0)  # one value computed twice
    g.exp(x, name="dead")
    g.output(g.add(twice_a, twice_b, name="y"))
    out = finalize(g)
    kinds = [type(n.op) for n in out.nodes]
    assert rlxpy.ops.Activation not in kinds and "dead" not in [n.name for n in out.nodes]
    fused = next(n for n in out.nodes if isinstance(n.op, rlxpy.ops.FusedMatMulBiasAct))
    assert fused.op.activation is rlxpy.ops.ActKind.GELU
    binaries = [n.op.op for n in out.nodes if isinstance(n.op, rlxpy.ops.Binary)]
    assert binaries.count(rlxpy.ops.BinaryOp.MUL) == 1
    assert unused.name in [n.name for n in out.inputs()] and [out[o].name for o in out.outputs] == ["y"]
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((3, 4)).astype(np.float32), "unused": np.zeros(2, np.float32)}
    params = {"w": rng.standard_normal((4, 5)).astype(np.float32),
              "b": rng.standard_normal(5).astype(np.float32)}
    np.testing.assert_allclose(run_reference(out, feeds, params)["y"], run_reference(g, feeds, params)["y"],
                               rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("exponent_shape", [(), (1,), (1, 1)])
def test_pow_by_a_one_element_constant_of_any_rank(device, exponent_shape):
    """x ** 2 and x ** 0.5 with the exponent as a 0-d, [1] or [1, 1] initializer (exporters write
    all three); squares of negative values too (x ** 2 runs as x * x)."""
    nodes = [helper.make_node("Pow", ["x", "two"], ["y"]), helper.make_node("Pow", ["x", "half"], ["z"])]
    constants = {"two": np.full(exponent_shape, 2, np.float32),
                 "half": np.full(exponent_shape, 0.5, np.float32)}
    outputs = [("y", TensorProto.FLOAT), ("z", TensorProto.FLOAT)]
    model = _model(nodes, [("x", TensorProto.FLOAT, [3, 17])], outputs, constants)
    x = np.random.default_rng(7).uniform(-3, 3, (3, 17)).astype(np.float32)
    x[0, :4] = [0.0, -0.0, np.inf, -np.inf]
    out = OnnxModel(model).run({"x": x})
    np.testing.assert_allclose(out["y"], x.astype(np.float64) ** 2, rtol=1e-6)
    positive = x >= 0
    np.testing.assert_allclose(out["z"][positive], np.sqrt(x[positive].astype(np.float64)), rtol=1e-6)
