"""gemma2, gemma3, qwen2, qwen3, phi3 and a sliding-window Mistral through the one transformer
builder: a tiny random GGUF of each (tests/tiny_families.py) against transformers loading the same
file (fp32): prompt logits within 1e-3 relative, greedy tokens identical. Prompts run over several
prefill chunks and past the sliding window (5 keys) of gemma and of the llama-architecture Mistral
(every layer slides), in prefill and in decode; gemma2 has attention and logit softcaps."""

from __future__ import annotations

import os

import numpy as np
import pytest
from tiny_families import FAMILIES, write_tiny

from rlxpy.frontends.gguf import load_generator

ARCHS = sorted(FAMILIES)
LENGTHS = (3, 11, 23)


@pytest.fixture(scope="module", params=ARCHS)
def family(request, tmp_path_factory, device):
    arch = request.param
    path = tmp_path_factory.mktemp(arch) / f"tiny-{arch}.gguf"
    tiny = write_tiny(path, arch)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype="float32").eval()
    if arch == "mistral":
        hf = _as_mistral(hf, tiny.sliding_window)
    gen, model = load_generator(path, context=64, chunk=8)
    return arch, tiny, hf, gen, model


def _as_mistral(llama, window: int):
    """transformers' Mistral with the weights its GGUF loader read into a Llama: it loads a llama file
    as Mistral only by name, and that path fails with this gguf-py; its Mistral mapping reads no
    window either (the default is 4096)."""
    from transformers import MistralConfig, MistralForCausalLM

    c = llama.config
    config = MistralConfig(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
        num_hidden_layers=c.num_hidden_layers, num_attention_heads=c.num_attention_heads,
        num_key_value_heads=c.num_key_value_heads, head_dim=c.head_dim, rms_norm_eps=c.rms_norm_eps,
        rope_parameters=c.rope_parameters, max_position_embeddings=c.max_position_embeddings,
        tie_word_embeddings=False, sliding_window=window)
    mistral = MistralForCausalLM(config).eval()
    mistral.load_state_dict(llama.state_dict())
    return mistral


def _relative(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


def test_config_has_the_family_switches(family):
    arch, tiny, _, _, model = family
    cfg, f = model.config, model.config.features
    assert model.arch == tiny.arch and cfg.dim == tiny.head_dim
    assert cfg.rope_interleaved == (arch == "mistral")
    assert f.qkv_bias == (arch == "qwen2")
    assert f.qk_norm == (arch in ("qwen3", "gemma3"))
    gemma = arch.startswith("gemma")
    assert f.post_norms == gemma and (f.gate_act == "gelu_tanh") == gemma
    if gemma:
        assert f.embed_scale == pytest.approx(np.sqrt(tiny.hidden)) and f.attn_scale == 1 / 16
        assert f.sliding_window == 5
    if arch == "gemma3":
        assert f.sliding_layers == (True,) * 5 + (False,) and f.rope_theta_local == 10000.0
        assert (f.attn_softcap, f.final_softcap) == (0.0, 0.0)
    if arch == "mistral":
        assert f.sliding_window == 5 and all(f.sliding(i) for i in range(tiny.layers))
    if arch == "gemma2":
        assert f.sliding_layers == (True, False) and (f.attn_softcap, f.final_softcap) == (50.0, 30.0)
    assert model.packed == (arch == "phi3")


@pytest.mark.parametrize("length", LENGTHS)
def test_prompt_logits_match_transformers(family, length):
    import torch

    _, tiny, hf, gen, _ = family
    ids = np.random.default_rng(length).integers(4, tiny.vocab, size=length).tolist()
    with torch.no_grad():
        want = hf(torch.tensor([ids])).logits[0, -1].numpy()
    got = gen.logits(ids)
    assert _relative(got, want) < 1e-3
    assert int(np.argmax(got)) == int(np.argmax(want))


def test_greedy_tokens_match_transformers(family):
    import torch

    _, tiny, hf, gen, _ = family
    ids = np.random.default_rng(99).integers(4, tiny.vocab, size=9).tolist()
    with torch.no_grad():
        out = hf.generate(torch.tensor([ids]), max_new_tokens=20, min_new_tokens=20, do_sample=False,
                          pad_token_id=0)
    assert list(gen.generate(ids, 20)) == out[0, len(ids):].tolist()


def test_row_blocks_match_the_whole_weights(tmp_path, device):
    """Weights past max_weight_bytes (one storage binding) run as row blocks: the tied embedding's
    gather and the head GEMV of a gemma3 file split into 40 + 40 + 16 rows give transformers' logits
    and tokens, for prompts with tokens from every block."""
    import dataclasses

    import torch
    from transformers import AutoModelForCausalLM

    from rlxpy.frontends.gguf import load_gguf, upload_weights
    from rlxpy.ir import ops
    from rlxpy.ir.ops.quant import gguf_row_bytes
    from rlxpy.models.generate import Generator

    path = tmp_path / "tiny-gemma3.gguf"
    tiny = write_tiny(path, "gemma3", seed=11)
    hf = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=path.name, dtype="float32").eval()
    model = load_gguf(path, context=64)
    cap = 40 * gguf_row_bytes("Q8_0", tiny.hidden)
    gen = Generator(dataclasses.replace(model.config, max_weight_bytes=cap), chunk=8)
    upload_weights(gen.exe, model)
    blocks = sorted(n for n in gen.exe.param_names() if n.startswith("token_embd.weight@"))
    assert blocks == ["token_embd.weight@0+40", "token_embd.weight@40+40", "token_embd.weight@80+16"]
    assert sum(isinstance(n.op, ops.GatherGguf) for n in gen.graph.nodes) == 6  # 3 blocks x 2 branches
    ids = [2, 5, 45, 90, 41, 95, 39, 80, 17, 60, 4]
    with torch.no_grad():
        want = hf(torch.tensor([ids])).logits[0, -1].numpy()
        greedy = hf.generate(torch.tensor([ids]), max_new_tokens=12, min_new_tokens=12, do_sample=False,
                             pad_token_id=0)[0, len(ids):].tolist()
    assert _relative(gen.logits(ids), want) < 1e-3
    assert list(gen.generate(ids, 12)) == greedy
