"""The run-time debug flags (NaN trace, node dumps, profile, Chrome trace) on every way a graph runs:
``rlxpy generate`` (a tiny GGUF written with GGUFWriter; the real SmolLM2 once), feeds and
submit(), dynamic dims, torch.compile GPT-2 and an imported ONNX model. A flag must not change a
result, and its output must be there."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from tiny_llama import write_tiny_llama

import rlxpy
from rlxpy import env
from rlxpy.cli import main
from rlxpy.errors import NumericsError
from rlxpy.frontends.gguf import load_generator

FLAGS = {
    "nan": ({"RLX_WGPU_NAN_TRACE": 1}, "rlxpy NaN trace: every node finite"),
    "dump": ({"RLX_WGPU_DUMP_NODES": 1, "RLX_WGPU_DUMP_NODES_LIMIT": 4, "RLX_WGPU_DUMP_FLAT": 1},
             "rlxpy dump: "),
    "profile": ({"RLX_WGPU_PROFILE": 2}, "by layer  layer "),
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_llama(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


def generate(capsys, model, *extra):
    code = main(["generate", "--model", str(model), "--no-chat", "--max-tokens", "2", "--chunk", "8", *extra,
                 "the cat"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def check_trace(path) -> list[dict]:
    """The trace-event schema: a traceEvents list of complete events with ph, ts, dur, name."""
    events = json.loads(path.read_text())["traceEvents"]
    assert events
    for event in events:
        assert {"ph", "ts", "dur", "name"} <= set(event) and event["ph"] == "X", event
        assert event["dur"] >= 0 and event["ts"] >= 0
    return events


# -- rlxpy generate ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("flag", FLAGS)
def test_generate_under_each_flag_produces_the_same_text(device, tiny, capsys, flag):
    flags, expected = FLAGS[flag]
    code, plain, _ = generate(capsys, tiny)
    with env.override(**flags):
        code_flagged, text, err = generate(capsys, tiny)
    assert code == code_flagged == 0 and text == plain and len(text) > len("the cat\n")
    assert expected in err
    if flag == "nan":  # the prefill run and one decode run, each explained
        assert err.count("every node finite") == 2
    if flag == "dump":  # each run dumps the nodes it computed, first values included
        assert "rlxpy dump: prefill_tokens" in err and "rlxpy dump: decode_tokens" in err and "first=[" in err
    if flag == "profile":
        assert "by kernel quant_gguf" in err and "by layer  outside layers" in err


def test_generate_trace_has_one_span_per_step_of_each_run(device, tiny, tmp_path, capsys):
    path = tmp_path / "gen.json"
    with env.override(RLX_WGPU_TRACE=str(path)):
        code, text, _ = generate(capsys, tiny, "--max-tokens", "3")
    assert code == 0 and text.strip() != "the cat"
    events = check_trace(path)
    gen = load_generator(tiny, chunk=8)[0]  # the same graph: count its steps per branch
    for run, branch in enumerate(("prefill_next", "decode_next", "decode_next")):
        steps = sorted(e["args"]["step"] for e in events if e["args"]["run"] == run and "step" in e["args"])
        assert steps == gen.exe.step_indices([branch]), branch
    # the second decode step takes its token from the first on the GPU: the feed copy is a span
    assert [e["args"]["run"] for e in events if e["name"] == "feed copies"] == [2]


def test_nan_trace_names_the_first_node_reading_a_poisoned_weight(device, tmp_path, capsys):
    bad = write_tiny_llama(tmp_path / "bad.gguf", poison="blk.1.ffn_norm.weight")
    with env.override(RLX_WGPU_NAN_TRACE=1):
        code, _, err = generate(capsys, bad)
        assert code == 2
        assert ("rlxpy: error: NaN trace: generation stopped at token position 0 (prefill step): the first "
                "bad node is prefill.1.swiglu (FusedGgufMatMul) [8, 96], layer 1:") in err
        assert "reads NaN/Inf from blk.1.ffn_norm.weight (param)" in err
        with env.override(RLX_WGPU_NO_PATTERNS=1):  # unfused: the RMSNorm itself
            code, _, err = generate(capsys, bad)
        assert code == 2 and "the first bad node is prefill.1.ffn_norm (RmsNorm) [8, 64], layer 1" in err
    assert err.count("generation stopped") == 1


def test_nan_trace_names_the_first_bad_node_of_a_backward_graph(device, capsys):
    """A forward that stays finite, a gradient that does not: sqrt's slope at 0 is inf, times a zero
    upstream gradient NaN. The trace names that backward node, not a forward one."""
    from rlxpy.ir.passes.autodiff import grad

    g = rlxpy.Graph("grad_nan")
    x, scale = g.param("x", (5,)), g.input("scale", (5,))
    g.output(g.sum(g.mul(g.activation(x, "sqrt", name="root"), scale, name="scaled"), [0], name="loss"))
    result = grad(g, "loss", ["x"])
    exe = rlxpy.compile(result.graph)
    exe.set_param("x", np.array([0.0, 1.0, 4.0, 9.0, 0.25], np.float32))
    feeds = {"scale": np.array([0.0, 1.0, 1.0, 1.0, 1.0], np.float32)}
    first = exe.first_nan_node(feeds)
    assert first is not None and first["op"] == "ActivationBackward" and first["index"] == (0,)
    assert first["inputs_finite"]  # it made the NaN; the forward nodes before it are finite
    with env.override(RLX_WGPU_NAN_TRACE=1):
        traced = rlxpy.compile(result.graph)
        traced.set_param("x", np.array([0.0, 1.0, 4.0, 9.0, 0.25], np.float32))
        grads = traced.run(feeds)[result.grads["x"]]
    assert np.isnan(grads[0]) and np.isfinite(grads[1:]).all()
    err = capsys.readouterr().err
    assert f"rlxpy NaN trace: {first['node']} (ActivationBackward) [5]: 1 NaN" in err
    assert "its inputs are finite <- the first bad node" in err


def test_nan_at_a_decode_step_names_its_token_position(device, tiny):
    prompt = [1, 260, 265, 270]
    with env.override(RLX_WGPU_NAN_TRACE=1):  # an executable copies the flags when it is built
        gen, _ = load_generator(tiny, chunk=8)
        tokens = gen.generate(prompt, 8)
        next(tokens)  # prefill: finite
        next(tokens)  # the first decode step: finite
        gen.exe.set_param("blk.0.attn_norm.weight", np.full(64, np.nan, np.float32))
        with pytest.raises(NumericsError, match=r"token position 5 \(decode step\).* layer 0") as caught:
            next(tokens)
    assert "blk.0.attn_norm.weight (param)" in str(caught.value)


def test_real_model_generate_under_every_flag(device, tmp_path, capsys):
    """SmolLM2-135M (the default model), every flag at once: the text and each flag's output."""
    path = tmp_path / "smol.json"
    flags = {"RLX_WGPU_NAN_TRACE": 1, "RLX_WGPU_DUMP_NODES": 1, "RLX_WGPU_DUMP_NODES_LIMIT": 3,
             "RLX_WGPU_PROFILE": 1, "RLX_WGPU_TRACE": str(path)}
    with env.override(**flags):
        code = main(["generate", "--no-chat", "--max-tokens", "2", "--context", "128",
                     "The capital of France is"])
    out, err = capsys.readouterr()
    assert code == 0 and "Paris" in out
    assert err.count("every node finite") == 2 and "rlxpy dump: decode.embd" in err
    assert "by layer  layer 29" in err and "by kernel" in err
    events = check_trace(path)
    assert {e["args"]["run"] for e in events} == {0, 1}


def test_embed_under_the_flags(device, capsys):
    """``rlxpy embed`` (all-MiniLM-L6-v2): the same vector, a NaN trace and a per-layer profile."""
    assert main(["embed", "hello world", "--digits", "4"]) == 0
    plain = capsys.readouterr().out
    with env.override(RLX_WGPU_NAN_TRACE=1, RLX_WGPU_PROFILE=1):
        assert main(["embed", "hello world", "--digits", "4"]) == 0
    captured = capsys.readouterr()
    assert captured.out == plain and "every node finite" in captured.err
    assert "by layer  layer 5 " in captured.err  # six encoder layers, named l0.. l5


def test_layer_of_reads_the_usual_namings():
    from rlxpy.wgpu_backend.profile import layer_of

    names = {"decode.3.attn_norm": 3, "transformer_h_10_attn_c_attn": 10, "/layers.1/mm": 1, "l5.qkv": 5,
             "blk.0.ffn_norm.weight": 0, "add_12": None, "prefill_logits": None, "emb.norm": None}
    assert {name: layer_of(name) for name in names} == names


# -- executables: feeds, submit, host steps, dynamic dims -----------------------------------------------
def test_fed_runs_are_explained_with_the_fed_values(device, capsys):
    """A run fed on the GPU (no host inputs at all) is explained with the value it was fed."""
    g = rlxpy.Graph("fed_log")
    x = g.input("x", [4])
    g.output(g.activation(x, "log", name="log_x"))
    with env.override(RLX_WGPU_NAN_TRACE=1, RLX_WGPU_PROFILE=1):  # copied when the executable is built
        exe = rlxpy.compile(g)
        exe.run({"x": np.array([1.0, np.e, 2.0, 3.0], np.float32)})
        pending = exe.submit(feeds={"x": exe.handle("log_x")})  # log(log(1)) = log(0) = -inf
        assert exe.last_nan["node"] == "log_x" and exe.last_nan["inf"] == 1 and exe.last_nan["index"] == (0,)
        assert pending()["log_x"][0] == -np.inf
    err = capsys.readouterr().err
    assert "NaN trace: log_x (Activation) [4]: 0 NaN, 1 Inf (first at [0])" in err
    assert "feed copies" in err


def test_host_steps_are_timed_and_traced(device, tmp_path, capsys):
    g = rlxpy.Graph("host_step")
    x = g.input("x", [3, 16])
    # llada2.group_limited_gate is a host step (no kernel), between GPU activations
    sig = g.relu(x, name="l0.relu")
    route = g.activation(x, "sigmoid", name="l0.route")
    gate = g.group_limited_gate(sig, route, n_group=4, topk_group=2, top_k=2, name="l0.gate")
    g.output(g.activation(gate, "abs", name="l0.out"))
    feeds = {"x": np.linspace(-1, 1, 48, dtype=np.float32).reshape(3, 16)}
    with env.override(RLX_WGPU_NAN_TRACE=1, RLX_WGPU_PROFILE=1):  # copied when the executable is built
        exe = rlxpy.compile(g)
        exe.run(feeds)
    assert "every node finite" in capsys.readouterr().err
    prof = exe.profile(feeds)
    kinds = [r["kind"] for r in prof.rows]
    assert kinds[:4] == ["G", "G", "H", "G"] and prof.rows[2]["host_ms"] > 0
    events = check_trace(prof.save(tmp_path / "host.json"))
    assert [(e["cat"], e["tid"]) for e in events] == [("host", 2) if k == "H" else ("gpu", 1) for k in kinds]
    assert len(events) == exe.report().summary["steps"]


def test_dynamic_dims_under_the_flags_and_profile(device, tmp_path, capsys):
    g = rlxpy.Graph("dyn_flags")
    x = g.input("x", ["T", 6])
    g.output(g.softmax(g.linear(x, g.param("w", [6, 4]), g.param("b", [4]), "silu", name="layers.0.y"),
                       name="p"))
    exe = rlxpy.compile(g)
    exe.set_param("w", np.ones((6, 4), np.float32))
    exe.set_param("b", np.zeros(4, np.float32))
    with env.override(RLX_WGPU_NAN_TRACE=1, RLX_WGPU_DUMP_NODES=1, RLX_WGPU_PROFILE=1):
        for rows in (3, 5):
            assert exe.run({"x": np.ones((rows, 6), np.float32)})["p"].shape == (rows, 4)
    err = capsys.readouterr().err
    assert err.count("every node finite") == 2 and "rlxpy dump: layers.0.y" in err and "layer 0" in err
    prof = exe.profile({"x": np.ones((2, 6), np.float32)})
    events = check_trace(prof.save(tmp_path / "dyn.json"))
    assert len([e for e in events if "step" in e["args"]]) == exe.report().summary["steps"]


# -- torch.compile and ONNX --------------------------------------------------------------------------------
@pytest.mark.parametrize("flag", FLAGS)
def test_torch_compile_gpt2_under_each_flag(device, capsys, flag):
    from transformers import GPT2Config, GPT2Model

    from rlxpy.frontends.torch_fx import make_backend

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=1, n_head=2, bos_token_id=0,
                     eos_token_id=0, attn_implementation="sdpa")
    model = GPT2Model(cfg).eval()
    ids = torch.randint(0, 64, (1, 5))
    flags, expected = FLAGS[flag]
    torch._dynamo.reset()
    with torch.no_grad():
        want = model(ids).last_hidden_state
        with env.override(**flags):
            got = torch.compile(model, backend=make_backend("error"))(ids).last_hidden_state
    torch._dynamo.reset()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    err = capsys.readouterr().err
    assert expected in err


def onnx_model():
    """Two named 'layers' (MatMul + Relu) with a symbolic batch dim."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["/layers.0/mm"]),
             helper.make_node("Relu", ["/layers.0/mm"], ["/layers.0/relu"]),
             helper.make_node("MatMul", ["/layers.0/relu", "w1"], ["/layers.1/mm"]),
             helper.make_node("Tanh", ["/layers.1/mm"], ["y"])]
    init = [numpy_helper.from_array(rng.standard_normal((8, 16)).astype(np.float32), "w0"),
            numpy_helper.from_array(rng.standard_normal((16, 4)).astype(np.float32), "w1")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "layers", [x], [y], init)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("flag", FLAGS)
def test_onnx_model_under_each_flag(device, capsys, flag):
    from rlxpy.frontends.onnx import OnnxModel

    x = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
    want = OnnxModel(onnx_model()).run({"x": x})["y"]
    flags, expected = FLAGS[flag]
    with env.override(**flags):
        got = OnnxModel(onnx_model()).run({"x": x})["y"]
    np.testing.assert_array_equal(got, want)
    err = capsys.readouterr().err
    assert expected in err
    if flag == "profile":
        assert "by layer  layer 1 " in err and "/layers.1/mm" in err  # level 2: one line per step too


def test_onnx_trace_step_count_equals_the_dispatch_report(device, tmp_path, capsys):
    from rlxpy.frontends.onnx import OnnxModel

    path = tmp_path / "onnx.json"
    with env.override(RLX_WGPU_TRACE=str(path), RLX_DISPATCH_REPORT=1):
        OnnxModel(onnx_model()).run({"x": np.ones((2, 8), np.float32)})
    reported = int(re.search(r"rlxpy: (\d+) steps", capsys.readouterr().err).group(1))
    events = check_trace(path)
    last = max(e["args"]["run"] for e in events)
    steps = [e for e in events if "step" in e["args"] and e["args"]["run"] == last]
    assert len(steps) == reported
    assert {e["args"]["layer"] for e in steps} >= {0, 1}
