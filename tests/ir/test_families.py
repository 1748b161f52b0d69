"""Every secondary-family op is registered, has a reference, and survives a JSON round trip."""

from __future__ import annotations

import numpy as np

from rlxpy.ir import ops
from rlxpy.ir.graph import Graph
from rlxpy.ir.reference import REFERENCE, run_reference

EXTRA_MODULES = ("backward", "conv", "custom", "region", "scan", "signal")
EXTRA_OPS = {
    "AdaptivePool", "AttentionBackward", "BatchElementwiseRegion", "Conv", "ConvTranspose", "CumsumBackward",
    "Custom",
    "ActivationBackward", "CrossEntropyBackward", "GatedDeltaNetBackward", "PoolBackward",
    "ComplexView", "ElementwiseRegion", "Fft", "GatedDeltaNet", "GatherBackward", "GaussianSplatPrepare",
    "GaussianSplatRasterize", "GaussianSplatRender", "GaussianSplatRenderBackward", "Im2Col",
    "LayerNormBackwardGamma", "LayerNormBackwardInput", "LogMel", "LogMelBackward", "Pool",
    "RmsNormBackwardBeta", "RmsNormBackwardGamma", "RmsNormBackwardInput", "RopeBackward",
    "SelectiveScan", "SelectiveScanBackward", "Stft", "WelchPeaks",
}


def _extra_ops() -> list[type]:
    return [cls for cls in ops.ALL_OPS if cls.__module__.split(".")[-1] in EXTRA_MODULES]


def test_every_extra_op_is_registered_with_a_reference():
    found = {cls.__name__ for cls in _extra_ops()}
    assert found == {name for name in EXTRA_OPS if name in ops.OP_TYPES}
    assert len(found) == 34  # 14 backward, 5 conv, 5 custom/splat, 2 region, 2 sequence, 6 signal
    assert [cls.__name__ for cls in _extra_ops() if cls not in REFERENCE] == []
    assert ops.DequantMatMul in REFERENCE


def _one_of_each() -> tuple[Graph, dict]:
    g = Graph("extra")
    x = g.input("x", (1, 2, 6, 6))
    conv = g.conv(x, g.param("w", (4, 1, 3, 3)), stride=2, padding=1, groups=2)
    pool = g.avg_pool(conv, 2)
    cols = g.im2col(x, 2, stride=2)
    up = g.conv_transpose(conv, g.param("wt", (4, 2, 2, 2)), stride=2, groups=2, activation="relu")
    ada = g.adaptive_max_pool(conv, 2)
    seq = g.input("seq", (1, 3, 2))
    bc = g.input("bc", (1, 3, 4))
    a = g.param("A", (2, 4))
    scan = g.selective_scan(seq, seq, a, bc, bc)
    dscan = g.apply(ops.SelectiveScanBackward(4), [seq, seq, a, bc, bc, seq])
    q = g.input("q", (1, 3, 2, 4))
    gate = g.input("gate", (1, 3, 2))
    gdn = g.gated_delta_net(q, q, q, gate, gate, state=g.param("state", (1, 2, 4, 4)))
    dgdn = g.apply(ops.GatedDeltaNetBackward(4), [q, q, q, gate, gate, q])
    dpool = g.apply(ops.PoolBackward.of(ada.op), [conv, ada, ada])
    spec = g.input("spec", (4, 16))
    fft = g.fft(spec, inverse=True, norm="forward")
    peaks = g.welch_peaks(spec, 2, 2)
    filters = g.param("filters", (3, 5))
    mel = g.log_mel(spec, filters)
    dmel = g.log_mel_backward(spec, filters, mel)
    frames = g.view_as_real(g.stft(g.input("wave", (2, 20)), g.param("window", (8,)), 8, 4))
    scores = g.input("scores", (2, 8))
    gated = g.group_limited_gate(scores, scores, n_group=4, topk_group=2, top_k=2)
    knn = g.umap_knn(g.input("dist", (4, 4)), 2)
    rows, gamma = g.input("rows", (3, 5)), g.param("gamma", (5,))
    grads = [g.rms_norm_backward_input(rows, gamma, rows), g.rms_norm_backward_gamma(rows, gamma, rows),
             g.rms_norm_backward_beta(rows, gamma, rows), g.layer_norm_backward_input(rows, gamma, rows),
             g.layer_norm_backward_gamma(rows, rows), g.cumsum_backward(rows, exclusive=True),
             g.gather_backward(rows, g.input("idx", (3,), "i32"), 7),
             g.cross_entropy_backward(rows, g.input("targets", (3,), "i32"), g.input("drows", (3,))),
             g.activation_backward(rows, rows, "silu")]
    tables = g.param("cos", (8, 2)), g.param("sin", (8, 2))
    rope = g.rope_backward(g.input("dy", (3, 8)), *tables, head_dim=4, interleaved=True)
    attn = g.attention_backward(q, q, q, q, "value", 2, 4, mask_kind="sliding_window", window=1, softcap=3.0)
    g.output(pool, cols, up, ada, scan, dscan, gdn, dgdn, dpool, fft, peaks, mel, dmel, frames, gated, knn,
             *grads, rope, attn)
    rng = np.random.default_rng(0)
    values = {n.name: rng.standard_normal(n.shape).astype(n.dtype.numpy) for n in g.nodes
              if isinstance(n.op, (ops.Input, ops.Param))}
    values["idx"] = np.array([6, 0, 2], np.int32)
    values["targets"] = np.array([4, -100, 0], np.int32)
    values["filters"] = np.abs(values["filters"])
    return g, values


def test_json_round_trip_keeps_every_op_and_result():
    g, values = _one_of_each()
    again = Graph.from_json(g.to_json())
    assert [n.op for n in again.nodes] == [n.op for n in g.nodes]
    assert [n.type for n in again.nodes] == [n.type for n in g.nodes]
    params = {n.name: values[n.name] for n in g.params()}
    inputs = {n.name: values[n.name] for n in g.inputs()}
    first, second = run_reference(g, inputs, params), run_reference(again, inputs, params)
    for name, value in first.items():
        np.testing.assert_array_equal(second[name], value, err_msg=name)
    assert "Conv(%0 x, %1 w) [kernel_size=[3, 3], stride=[2], padding=[1], dilation=[1], groups=2" in str(g)
