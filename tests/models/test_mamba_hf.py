"""rlxpy's Mamba graph against transformers' MambaForCausalLM with the same (random) weights: prefill
logits over chunked prompts, decode logits step by step, greedy tokens; every step on the GPU."""

from __future__ import annotations

import numpy as np
import pytest

from rlxpy.frontends.hf_mamba import config_from_hf, load_into
from rlxpy.models.mamba import MambaGenerator

VOCAB = 101


@pytest.fixture(scope="module")
def tiny_mamba():
    import torch
    from transformers import MambaConfig, MambaForCausalLM

    torch.manual_seed(0)
    cfg = MambaConfig(vocab_size=VOCAB, hidden_size=32, state_size=8, num_hidden_layers=2, conv_kernel=4,
                      expand=2, use_conv_bias=True, tie_word_embeddings=False)
    model = MambaForCausalLM(cfg).eval()
    with torch.no_grad():  # livelier than the default init, so greedy tokens differ from step to step
        model.backbone.embeddings.weight.normal_(0.0, 1.0)
        model.lm_head.weight.normal_(0.0, 1.0)
        for layer in model.backbone.layers:
            layer.mixer.x_proj.weight.mul_(4.0)
            layer.mixer.out_proj.weight.mul_(4.0)
    return model


@pytest.fixture(scope="module")
def generator(device, tiny_mamba):
    gen = MambaGenerator(config_from_hf(tiny_mamba.config), chunk=8)
    load_into(gen, tiny_mamba.state_dict())
    return gen


def _hf_logits(model, ids):
    import torch

    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].numpy()


def test_every_step_runs_on_the_gpu(generator):
    assert {s.kind for s in generator.exe.schedule.steps} == {"gpu"}


@pytest.mark.parametrize("length", [1, 8, 19])
def test_prefill_logits_match_transformers(tiny_mamba, generator, length):
    """Chunks of 8 (the last one padded) and a single trailing token through the decode branch."""
    ids = [int(t) for t in np.random.default_rng(length).integers(0, VOCAB, size=length)]
    want = _hf_logits(tiny_mamba, ids)[-1]
    got = generator.logits(ids)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_decode_logits_match_transformers_step_by_step(tiny_mamba, generator):
    ids = [int(t) for t in np.random.default_rng(3).integers(0, VOCAB, size=22)]
    want = _hf_logits(tiny_mamba, ids)
    generator.reset()
    generator.prefill(ids[:11])
    for t in range(11, 22):
        got = generator.decode(ids[t])
        np.testing.assert_allclose(got, want[t], rtol=1e-4, atol=1e-4 * np.abs(want[t]).max(),
                                   err_msg=f"decode step {t}")


def test_greedy_tokens_match_generate(tiny_mamba, generator):
    import torch

    ids = [5, 17, 42, 3, 99, 64, 7, 1, 33, 2]
    with torch.no_grad():
        out = tiny_mamba.generate(torch.tensor([ids]), max_new_tokens=16, min_new_tokens=16, do_sample=False,
                                  pad_token_id=0)
    want = out[0, len(ids):].tolist()
    assert len(set(want)) > 3, "the test model should not repeat one token"
    assert generator.generate(ids, 16) == want
