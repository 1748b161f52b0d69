"""The conv epilogue pattern on the IR: where it fires, where it must not, and that the numpy
reference gives the same answer with and without it."""

from __future__ import annotations

import numpy as np

import rlxpy
from rlxpy.ir import ops
from rlxpy.ir.ops.base import ActKind
from rlxpy.ir.passes.rewrite import PATTERNS
from rlxpy.ir.reference import run_reference

FUSE = PATTERNS["conv_epilogue"].apply


def _values(g: rlxpy.Graph) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    inputs = [n for n in g.nodes if isinstance(n.op, ops.Input)]
    return {n.name: rng.standard_normal(n.shape).astype(np.float32) for n in inputs}


def _same_results(g: rlxpy.Graph, fused: rlxpy.Graph) -> None:
    """Equal up to f32 rounding: the reference rounds a fused epilogue once (float64 inside),
    the unfused graph after the conv, the add and the activation (the GPU kernels round alike, so
    there the results are bit-identical: tests/ops/test_conv.py)."""
    values = _values(g)
    want, got = run_reference(g, values), run_reference(fused, values)
    assert [fused.nodes[i].name for i in fused.outputs] == [g.nodes[i].name for i in g.outputs]
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5, err_msg=name)


def _convs(g: rlxpy.Graph) -> list[rlxpy.ir.graph.Node]:
    return [n for n in g.nodes if isinstance(n.op, (ops.Conv, ops.ConvTranspose))]


def test_conv_add_bias_relu_becomes_one_conv():
    g = rlxpy.Graph()
    x = g.input("x", (2, 3, 9, 9))
    y = g.conv(x, g.input("w", (8, 3, 3, 3)), padding=1)
    y = g.relu(g.add(y, g.input("b", (1, 8, 1, 1))), name="act")
    t = g.conv_transpose(y, g.input("wt", (8, 4, 2, 2)), 2)
    t = g.add(g.input("bt", (4, 1, 1)), t, name="up")  # bias first, no activation
    g.output(t)
    fused = FUSE(g)
    convs = _convs(fused)
    assert [(c.name, len(c.inputs), c.op.activation) for c in convs] == [("act", 3, ActKind.RELU),
                                                                          ("up", 3, None)]
    assert not [n for n in fused.nodes if isinstance(n.op, (ops.Binary, ops.Activation))]
    _same_results(g, fused)


def test_conv_then_activation_only():
    g = rlxpy.Graph()
    y = g.conv(g.input("x", (1, 4, 7)), g.input("w", (4, 1, 3)), groups=4)
    g.output(g.gelu(y, name="g"))
    fused = FUSE(g)
    assert [(c.name, c.op.activation) for c in _convs(fused)] == [("g", ActKind.GELU)]
    _same_results(g, fused)


def test_the_pattern_leaves_convs_it_cannot_fold():
    g = rlxpy.Graph()
    x = g.input("x", (1, 4, 6, 6))
    w = g.input("w", (4, 4, 3, 3))
    shared = g.conv(x, w)  # read twice
    outs = [g.relu(shared), g.add(shared, shared)]
    outs.append(g.add(g.conv(x, w), g.input("wide", (4, 4, 1))))  # not one value per channel
    outs.append(g.add(g.conv(x, w), g.input("row", (4,))))
    shown = g.conv(x, w, name="shown")  # a graph output itself
    outs += [shown, g.relu(shown)]
    outs.append(g.relu(g.conv(x, w, bias=g.input("b", (4,)), activation="relu")))  # already has an epilogue
    g.output(*outs)
    fused = FUSE(g)
    assert len(fused.nodes) == len(g.nodes)
    assert [c.op.activation for c in _convs(fused)] == [None, None, None, None, ActKind.RELU]


def test_a_resnet_shortcut_add_joins_the_epilogue():
    """conv -> add(bias) -> add(shortcut) -> relu is one conv with a residual; a downsample block's add
    of two conv chains goes to one of them (the other chain ends at its bias), never to both."""
    g = rlxpy.Graph()
    x = g.input("x", (2, 4, 6, 6))
    w, b = g.input("w", (4, 4, 3, 3)), g.input("b", (1, 4, 1, 1))
    y = g.relu(g.add(g.add(g.conv(x, w, padding=1), b), x), name="block")  # identity shortcut
    main = g.add(g.conv(y, w, padding=1), b)
    down = g.add(g.conv(y, g.input("wd", (4, 4, 1, 1))), g.input("bd", (4, 1, 1)))
    z = g.relu(g.add(main, down), name="down_block")
    plain = g.add(g.conv(z, w, padding=1), z, name="no_bias")  # residual without bias or activation
    g.output(plain)
    fused = FUSE(g)
    got = sorted((len(c.inputs), c.op.residual, c.op.activation is not None, c.name) for c in _convs(fused))
    want = [(3, False, False), (3, True, False), (4, True, True), (4, True, True)]
    assert [entry[:3] for entry in got] == want
    assert {entry[3] for entry in got[2:]} == {"block", "down_block"} and got[1][3] == "no_bias"
    assert not [n for n in fused.nodes if isinstance(n.op, (ops.Binary, ops.Activation))]
    _same_results(g, fused)
