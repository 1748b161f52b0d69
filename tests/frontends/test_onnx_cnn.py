"""ONNX import of the CNN operators, each checked against onnx's ReferenceEvaluator on hand-built
models: auto_pad (SAME_UPPER / SAME_LOWER / VALID) and asymmetric pads, ConvTranspose with
output_shape, pooling modes, batch norm folding, resize modes, Pad modes; unsupported attributes
are errors naming the node."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from rlxpy.errors import UnsupportedOpError
from rlxpy.frontends.onnx import OnnxModel
from rlxpy.ir import ops

F32 = TensorProto.FLOAT


def _model(nodes, inputs, outputs, initializers=None, opset=18):
    init = [numpy_helper.from_array(np.asarray(v), k) for k, v in (initializers or {}).items()]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info(n, F32, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, F32, None) for n in outputs], init)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _check(model, feeds, tol=1e-5) -> OnnxModel:
    want = ReferenceEvaluator(model).run(None, feeds)
    imported = OnnxModel(model)
    got = imported.run(feeds)
    for name, expected in zip(imported.output_names, want):
        assert got[name].shape == expected.shape, f"{name}: {got[name].shape} != {expected.shape}"
        np.testing.assert_allclose(got[name], expected, rtol=tol, atol=tol, err_msg=name)
    return imported


def _ops(imported: OnnxModel, shapes) -> set[type]:
    return {type(n.op) for n in imported.import_graph(shapes).graph.nodes}


def rand(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


CONV_CASES = [  # (attrs, x shape, w shape)
    ({"auto_pad": "SAME_UPPER", "strides": [2, 2]}, (2, 3, 9, 8), (4, 3, 4, 3)),
    ({"auto_pad": "SAME_LOWER", "strides": [2, 1], "dilations": [1, 2], "group": 2}, (1, 4, 7, 10),
     (6, 2, 2, 3)),
    ({"auto_pad": "VALID", "group": 2}, (1, 4, 7, 10), (6, 2, 2, 3)),
    ({"pads": [0, 1, 2, 0], "strides": [1, 2]}, (2, 3, 6, 7), (5, 3, 3, 3)),
    ({"pads": [2, 1], "strides": [3]}, (2, 3, 17), (4, 3, 5)),
    ({"pads": [1, 0, 1, 0, 1, 1], "group": 3}, (1, 3, 4, 5, 6), (3, 1, 2, 3, 2)),
]


@pytest.mark.parametrize("attrs,x_shape,w_shape", CONV_CASES, ids=str)
def test_conv_auto_pad_and_asymmetric_pads(device, attrs, x_shape, w_shape):
    w, b = rand(w_shape, 1), rand((w_shape[0],), 2)
    model = _model([helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs),
                    helper.make_node("Relu", ["y"], ["r"])], [("x", list(x_shape))], ["r"], {"w": w, "b": b})
    imported = _check(model, {"x": rand(x_shape, 3)}, tol=1e-4)
    assert ops.Conv in _ops(imported, {"x": x_shape})


@pytest.mark.parametrize("attrs", [{"strides": [2, 2], "pads": [1, 0, 0, 1], "output_padding": [1, 0]},
                                   {"strides": [2, 3], "output_shape": [10, 16], "auto_pad": "SAME_UPPER"},
                                   {"strides": [1, 2], "pads": [2, 0, 0, 1], "dilations": [1, 2]},
                                   {"auto_pad": "SAME_LOWER", "strides": [2, 2]}], ids=str)
def test_conv_transpose_pads_and_output_shape(device, attrs):
    x, w, b = rand((1, 4, 5, 6), 4), rand((4, 3, 3, 4), 5), rand((3 * attrs.get("group", 1),), 6)
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)
    model = _model([node], [("x", [1, 4, 5, 6])], ["y"], {"w": w, "b": b})
    _check(model, {"x": x}, tol=1e-4)


POOL_CASES = [
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("MaxPool", {"kernel_shape": [2, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ("MaxPool", {"kernel_shape": [2, 2], "dilations": [2, 1], "pads": [0, 1, 1, 0]}),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                     "count_include_pad": 1}),
    ("AveragePool", {"kernel_shape": [3, 2], "auto_pad": "SAME_LOWER", "strides": [2, 1]}),
    ("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
    ("GlobalAveragePool", {}), ("GlobalMaxPool", {}),
]


@pytest.mark.parametrize("op,attrs", POOL_CASES, ids=str)
def test_pools(device, op, attrs):
    x = rand((2, 3, 9, 11), 7)
    if "Max" in op:  # a NaN in a window makes its max NaN (onnx's reference skips NaN in averages)
        x[0, 0, 0, 0] = np.nan
    model = _model([helper.make_node(op, ["x"], ["y"], **attrs)], [("x", [2, 3, 9, 11])], ["y"])
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    got = OnnxModel(model).run({"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)


def test_batch_norm_after_a_conv_is_folded_and_alone_is_the_batch_norm_op(device):
    c = 4
    stats = {"scale": rand((c,), 8) + 2, "bias": rand((c,), 9), "mean": rand((c,), 10),
             "var": np.abs(rand((c,), 11)) + 0.5}
    w = rand((c, 3, 3, 3), 12)
    nodes = [helper.make_node("Conv", ["x", "w"], ["conv"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["conv", "scale", "bias", "mean", "var"], ["bn"],
                              epsilon=1e-3),
             helper.make_node("Relu", ["bn"], ["r"]),
             helper.make_node("BatchNormalization", ["r", "scale", "bias", "mean", "var"], ["y"])]
    model = _model(nodes, [("x", [2, 3, 6, 7])], ["y"], {"w": w, **stats})
    imported = _check(model, {"x": rand((2, 3, 6, 7), 13)}, tol=1e-4)
    graph = imported.import_graph({"x": (2, 3, 6, 7)}).graph
    assert [type(n.op) for n in graph.nodes].count(ops.BatchNorm) == 1  # the second; the first is in the conv


def test_instance_and_group_normalization(device):
    c = 6
    scale, bias, gscale, gbias = rand((c,), 14), rand((c,), 15), rand((3,), 16), rand((3,), 17)
    nodes = [helper.make_node("InstanceNormalization", ["x", "scale", "bias"], ["i"], epsilon=1e-4),
             helper.make_node("GroupNormalization", ["x", "gscale", "gbias"], ["g"], num_groups=3)]
    model = _model(nodes, [("x", [2, c, 5, 4])], ["i", "g"],
                   {"scale": scale, "bias": bias, "gscale": gscale, "gbias": gbias})
    _check(model, {"x": rand((2, c, 5, 4), 18) * 3 + 1}, tol=1e-4)


RESIZE_CASES = [  # (attrs, scales or None, sizes or None)
    ({"mode": "nearest"}, [1, 1, 2, 2], None),
    ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
     [1, 1, 1.5, 0.5], None),
    ({"mode": "nearest", "nearest_mode": "ceil", "coordinate_transformation_mode": "align_corners"}, None,
     [2, 3, 11, 4]),
    ({"mode": "nearest", "nearest_mode": "round_prefer_ceil"}, None, [2, 3, 7, 13]),
    ({"mode": "linear"}, [1, 1, 2, 3], None),
    ({"mode": "linear", "coordinate_transformation_mode": "align_corners"}, None, [2, 3, 9, 5]),
    ({"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}, None, [2, 3, 1, 12]),
    ({"mode": "linear", "coordinate_transformation_mode": "asymmetric"}, [1, 1, 0.5, 1.25], None),
]


@pytest.mark.parametrize("attrs,scales,sizes", RESIZE_CASES, ids=str)
def test_resize(device, attrs, scales, sizes):
    inputs = ["x", "", "scales" if scales else "", "sizes" if sizes else ""]
    init = {"scales": np.array(scales, np.float32)} if scales else {"sizes": np.array(sizes, np.int64)}
    model = _model([helper.make_node("Resize", inputs, ["y"], **attrs)], [("x", [2, 3, 6, 8])], ["y"], init)
    _check(model, {"x": rand((2, 3, 6, 8), 19)}, tol=1e-5)


def test_hard_activations_clip_flatten_and_pads(device):
    nodes = [helper.make_node("HardSigmoid", ["x"], ["hs"], alpha=0.3, beta=0.4),
             helper.make_node("HardSwish", ["x"], ["hw"]),
             helper.make_node("Clip", ["x", "lo", "hi"], ["cl"]),
             helper.make_node("Flatten", ["x"], ["fl"], axis=2),
             helper.make_node("Pad", ["x", "pads", "value"], ["pc"], mode="constant"),
             helper.make_node("Pad", ["x", "pads"], ["pr"], mode="reflect"),
             helper.make_node("Pad", ["x", "pads"], ["pe"], mode="edge"),
             helper.make_node("Pad", ["x", "pads"], ["pw"], mode="wrap")]
    init = {"lo": np.float32(-0.5), "hi": np.float32(0.7), "value": np.float32(1.5),
            "pads": np.array([0, 0, 2, 0, 0, 1, 1, 3], np.int64)}
    outputs = ["hs", "hw", "cl", "fl", "pc", "pr", "pe", "pw"]
    model = _model(nodes, [("x", [2, 3, 5, 6])], outputs, init, opset=19)
    _check(model, {"x": rand((2, 3, 5, 6), 20) * 4})


@pytest.mark.parametrize("node,what", [
    (helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="cubic"), "mode 'cubic'"),
    (helper.make_node("MaxPool", ["x"], ["y", "idx"], kernel_shape=[2, 2]), "Indices output of MaxPool"),
    (helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[2, 2]), "unsupported ONNX operators: LpPool"),
])
def test_unsupported_attributes_and_ops_name_the_node(node, what):
    outputs = list(node.output)
    model = _model([node], [("x", [1, 2, 4, 4])], outputs, {"scales": np.array([1, 1, 2, 2], np.float32)})
    with pytest.raises(UnsupportedOpError, match=what):
        OnnxModel(model).import_graph({"x": (1, 2, 4, 4)})
