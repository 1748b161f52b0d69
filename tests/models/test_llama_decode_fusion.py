"""The llama decode step with the QKV GEMV's RoPE + KV-append epilogue (and the other decode
patterns) against the same graph unfused (RLX_WGPU_NO_PATTERNS) and against its numpy reference."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType, quants

from rlxpy import env
from rlxpy.ir.dtype import DType
from rlxpy.ir.reference import run_reference
from rlxpy.models.generate import Generator
from rlxpy.models.llama import LlamaConfig

CHUNK = 4


def config(interleaved: bool) -> LlamaConfig:
    names = ["token_embd.weight", "output.weight"] + [
        f"blk.{i}.{part}.weight" for i in range(2)
        for part in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")]
    return LlamaConfig(vocab_size=67, hidden=64, layers=2, heads=6, kv_heads=2, ffn=96, head_dim=16,
                       context=24, rope_interleaved=interleaved,
                       weight_types=dict.fromkeys(names, "Q8_0"))


def random_params(gen: Generator) -> dict[str, np.ndarray]:
    """Q8_0 blocks for the matrices, norms near 1, empty KV caches."""
    rng = np.random.default_rng(3)
    values = {}
    for node in gen.exe.graph.params():
        name, shape = node.op.name, tuple(node.shape)
        if name.endswith("_cache"):
            values[name] = np.zeros(shape, np.float32)
        elif node.dtype is DType.U8:
            k = shape[1] // 34 * 32
            values[name] = quants.quantize(rng.standard_normal((shape[0], k)).astype(np.float32) * 0.3,
                                           GGMLQuantizationType.Q8_0).reshape(shape)
        else:
            values[name] = rng.uniform(0.5, 1.5, shape).astype(np.float32)
    return values


def load(gen: Generator, values: dict[str, np.ndarray]) -> None:
    for name, value in values.items():
        if value.dtype == np.uint8:
            gen.exe.set_param_bytes(name, value)
        else:
            gen.exe.set_param(name, value)


def decode_kernels(gen: Generator) -> list[str]:
    exe = gen.exe
    steps = exe._needed([exe.graph["decode_next"]], True)[1]
    return [exe.schedule.steps[i].kernel for i in sorted(steps)]


@pytest.mark.parametrize("interleaved", [True, False])
def test_fused_decode_matches_unfused_graph_and_reference(device, interleaved):
    cfg = config(interleaved)
    fused = Generator(cfg, chunk=CHUNK)
    with env.override(RLX_WGPU_NO_PATTERNS=1):
        plain = Generator(cfg, chunk=CHUNK)
    values = random_params(fused)
    load(fused, values)
    load(plain, values)
    assert "rope_kv_append" not in decode_kernels(fused)
    assert decode_kernels(plain).count("rope_kv_append") == cfg.layers
    assert len(decode_kernels(fused)) == 5 * cfg.layers + 3  # gather, 5 per layer, head, argmax

    prompt = [5, 17, 42, 3]
    inputs = {"prefill_tokens": np.array(prompt, np.int32), "prefill_pos": np.array([0], np.int32),
              "prefill_last": np.array([CHUNK - 1], np.int32), "decode_tokens": np.array([9], np.int32),
              "decode_pos": np.array([CHUNK], np.int32)}
    want = run_reference(fused.graph, inputs, {k: v.copy() for k, v in values.items()})["decode_logits"]
    logits = {}
    for name, gen in (("fused", fused), ("plain", plain)):
        gen.exe.run({k: v for k, v in inputs.items() if k.startswith("prefill")}, outputs=["prefill_next"])
        logits[name] = gen.exe.run({k: v for k, v in inputs.items() if k.startswith("decode")},
                                   outputs=["decode_logits"])["decode_logits"]
    scale = float(np.abs(want).max())
    np.testing.assert_allclose(logits["fused"], logits["plain"], rtol=1e-5, atol=1e-5 * scale)
    np.testing.assert_allclose(logits["fused"], want, rtol=1e-4, atol=1e-5 * scale)

    # greedy decoding from odd positions on: the same tokens with and without the patterns
    tokens = {name: list(gen.generate([7, 1, 60, 33, 2, 11, 4], 12)) for name, gen in
              (("fused", fused), ("plain", plain))}
    assert tokens["fused"] == tokens["plain"]
