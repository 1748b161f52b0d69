"""SmolLM2-135M-Instruct (the real Q4_1 GGUF) against transformers loading the same file."""

from __future__ import annotations

import os

import numpy as np
import pytest

from rlxpy.frontends.gguf import default_model_path, load_generator
from rlxpy.frontends.gguf_tokenizer import GgufTokenizer

PROMPT = "The three primary colors are"


@pytest.fixture(scope="module")
def path():
    return default_model_path()


@pytest.fixture(scope="module")
def hf_model(path):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, torch_dtype="float32"
    ).eval()


@pytest.fixture(scope="module")
def generator(device, path):
    gen, model = load_generator(path, context=256, chunk=16)
    return gen, model


@pytest.fixture(scope="module")
def prompt_ids(path):
    return GgufTokenizer.from_gguf(path).encode(PROMPT)


def test_prompt_logits_match_transformers(hf_model, generator, prompt_ids):
    import torch

    gen, _ = generator
    with torch.no_grad():
        want = hf_model(torch.tensor([prompt_ids])).logits[0, -1].numpy()
    got = gen.logits(prompt_ids)
    rel = np.abs(got - want).max() / np.abs(want).max()
    assert rel < 1e-3, rel
    assert int(np.argmax(got)) == int(np.argmax(want))


def test_gpu_kernel_variants_match_transformers_on_a_longer_prompt(device, hf_model, path):
    """The kernels a GPU gets (RLX_WGPU_KERNELS=gpu): the tiled quantised GEMM from 9 rows, here a
    16-row chunk and then a 3-row one (its active extent), on the real file's weights."""
    import torch

    from rlxpy import env
    from rlxpy.models.generate import CPU_CHUNK, GPU_CHUNK, default_chunk

    ids = GgufTokenizer.from_gguf(path).encode(" ".join([PROMPT, "red, yellow and blue, and the three"] * 2))
    assert 16 < len(ids) < 32
    with env.override(RLX_WGPU_KERNELS="cpu"):
        assert default_chunk() == CPU_CHUNK
    with env.override(RLX_WGPU_KERNELS="gpu"):
        assert default_chunk() == GPU_CHUNK
        gen, _ = load_generator(path, context=256, chunk=16)
        assert "quant_gguf_gemm" in {s.kernel for s in gen.exe.schedule.steps}
        got = gen.logits(ids)
    with torch.no_grad():
        want = hf_model(torch.tensor([ids])).logits[0, -1].numpy()
    rel = np.abs(got - want).max() / np.abs(want).max()
    assert rel < 1e-3, rel
    assert int(np.argmax(got)) == int(np.argmax(want))


def test_32_greedy_tokens_match_transformers(hf_model, generator, prompt_ids):
    import torch

    gen, _ = generator
    with torch.no_grad():
        out = hf_model.generate(
            torch.tensor([prompt_ids]), max_new_tokens=32, min_new_tokens=32, do_sample=False
        )
    want = out[0, len(prompt_ids) :].tolist()
    assert list(gen.generate(prompt_ids, 32)) == want


def test_arena_is_small_next_to_the_file(generator):
    gen, model = generator
    cfg = model.config
    kv_bytes = 2 * cfg.layers * cfg.context * cfg.kv_heads * cfg.dim * 4
    arena = gen.exe.arena.size
    mib = 2**20
    print(f"arena {arena / mib:.1f} MiB, file {model.file_size() / mib:.1f} MiB, KV {kv_bytes / mib:.1f} MiB")
    assert arena <= 1.5 * model.file_size() + kv_bytes


def test_cli_generate_streams_text_and_reports_speed(device, capsys):
    from rlxpy.cli import main

    assert (
        main(
            [
                "generate",
                "--max-tokens",
                "6",
                "--context",
                "128",
                "--chunk",
                "16",
                "What is the capital of France?",
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    assert "Paris" in captured.out
    assert "decode" in captured.err and "tok/s" in captured.err


def test_cli_generate_refuses_a_prompt_longer_than_the_context(device, capsys):
    from rlxpy.cli import main

    assert main(["generate", "--context", "16", "--no-chat", "word " * 40]) == 2
    assert "does not fit the context of 16 tokens" in capsys.readouterr().err
