"""rlxpy's llama graph against transformers' LlamaForCausalLM with the same (random) weights."""

from __future__ import annotations

import numpy as np
import pytest

from rlxpy.frontends.hf_llama import config_from_hf, load_into, weights_from_hf
from rlxpy.models.generate import Generator


@pytest.fixture(scope="module")
def tiny_llama():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=101, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).eval()
    return model


@pytest.fixture(scope="module")
def generator(device, tiny_llama):
    gen = Generator(config_from_hf(tiny_llama.config, context=64), chunk=8)
    load_into(gen.exe, weights_from_hf(tiny_llama.state_dict()))
    return gen


@pytest.mark.parametrize("length", [1, 7, 19])
def test_prefill_logits_match_transformers(tiny_llama, generator, length):
    import torch

    ids = list(np.random.default_rng(length).integers(0, 101, size=length))
    with torch.no_grad():
        want = tiny_llama(torch.tensor([ids])).logits[0, -1].numpy()
    got = generator.logits(ids)
    scale = np.abs(want).max()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * scale)


def test_greedy_decode_matches_generate(tiny_llama, generator):
    import torch

    ids = [5, 17, 42, 3, 99, 64, 7, 1, 33, 2]
    with torch.no_grad():
        out = tiny_llama.generate(torch.tensor([ids]), max_new_tokens=32, do_sample=False,
                                  min_new_tokens=32, pad_token_id=0)
    want = out[0, len(ids):].tolist()
    got = list(generator.generate(ids, 32))
    assert got == want


def test_prompt_longer_than_context_is_refused(generator):
    from rlxpy.errors import InputError

    with pytest.raises(InputError, match="does not fit the context of 64"):
        generator.prefill(list(range(70)))


def test_prefill_residual_norm_tee_is_exact(device, tiny_llama):
    """A 16-token prefill chunk (past the decode GEMV fusion's 8 rows) runs its residual + RMSNorm
    pairs as tees; without them the logits are the same bits, and both match transformers."""
    import torch

    from rlxpy import env
    from rlxpy.ir import ops

    weights = weights_from_hf(tiny_llama.state_dict())
    gens = {}
    for skip in ("", "residual_norm"):
        with env.override(RLX_WGPU_SKIP_PATTERNS=skip):
            gens[skip] = Generator(config_from_hf(tiny_llama.config, context=64), chunk=16)
        load_into(gens[skip].exe, weights)
    def tees(gen: Generator) -> int:
        return sum(isinstance(n.op, ops.ResidualNormTee) for n in gen.exe.schedule.graph.nodes)

    assert tees(gens[""]) == 3  # resid1 -> ffn_norm in both layers, resid2 of layer 0 -> attn_norm of layer 1
    assert tees(gens["residual_norm"]) == 0
    ids = [5, 17, 42, 3, 99, 64, 7, 1, 33, 2, 11]
    got = gens[""].logits(ids)
    np.testing.assert_array_equal(got, gens["residual_norm"].logits(ids))
    with torch.no_grad():
        want = tiny_llama(torch.tensor([ids])).logits[0, -1].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("depth", [1, 2, 4])
def test_pipelined_generate_stops_cleanly_and_resumes(tiny_llama, generator, depth):
    """generate() keeps ``depth`` decode steps in flight; a stop token discards them, leaves the
    position after the last yielded token, and decoding on by hand continues the same text. A
    caller that stops iterating early leaves the cache holding exactly the tokens it saw."""
    ids = [5, 17, 42, 3, 99, 64, 7, 1, 33, 2]
    generator.depth = depth
    full = list(generator.generate(ids, 12))
    stopped = list(generator.generate(ids, 12, stop=[full[4]]))
    assert stopped == full[: full.index(full[4]) + 1]
    assert generator.position == len(ids) + len(stopped) - 1
    resumed = [generator.decode(stopped[-1])]
    while len(stopped) + len(resumed) < len(full):
        resumed.append(generator.decode(resumed[-1]))
    assert stopped + resumed == full

    seen = []
    for token in generator.generate(ids, 12):
        seen.append(token)
        if len(seen) == 5:
            break  # closes the generator: the steps in flight are drained
    assert seen == full[:5]
    # the cache holds the prompt and the tokens seen (the last one's row only when its step was in flight)
    assert generator.position == len(ids) + len(seen) - (depth == 1)
    resumed = []
    token = seen[-1]
    generator.position = len(ids) + len(seen) - 1  # feed the last seen token again from there
    while len(seen) + len(resumed) < len(full):
        token = generator.decode(token)
        resumed.append(token)
    assert seen + resumed == full
    generator.depth = 4
