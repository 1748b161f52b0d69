"""rlxpy's BERT builder (all-MiniLM-L6-v2, real weights) against transformers' BertModel, and the
``embed`` command against sentence-transformers-style pooling computed with torch on the same weights."""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import pytest
import torch

import rlxpy
from rlxpy.frontends.embed import SentenceEmbedder, add_embed_parser, default_model_dir, load_tokenizer
from rlxpy.ir.passes.dynamic import bind_graph
from rlxpy.ir.reference import run_reference
from rlxpy.models.bert import BertConfig, bert_params, build_bert, load_bert_dir, read_safetensors

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A man is playing a guitar on stage.",
    "Hello!",
    "Quantum chromodynamics describes the strong interaction between quarks and gluons.",
    "I love pizza.",
    "Pizza is my favourite food, especially with extra cheese and basil.",
    "Das ist ein deutscher Satz.",
    "¿Dónde está la biblioteca?",
    "The stock market fell sharply on Tuesday after the announcement.",
    "GPUs execute thousands of threads in parallel.",
    "WebGPU brings modern GPU compute to the browser.",
    "It was raining cats and dogs.",
    "numbers: 3.14159, 2.71828 and 42",
    "Short.",
    "She sells sea shells by the sea shore.",
    "Python is a programming language; pythons are snakes.",
    "The cat sat on the mat.",
    "A feline rested on a rug.",
    "emoji 🙂 and symbols #@!",
    "Transformers use self-attention to mix information across tokens.",
]


@pytest.fixture(scope="module")
def model_dir():
    return default_model_dir()


@pytest.fixture(scope="module")
def torch_bert(model_dir):
    from transformers import BertModel

    return BertModel.from_pretrained(str(model_dir)).eval()


@pytest.fixture(scope="module")
def embedder(device, model_dir):
    return SentenceEmbedder(model_dir)


def torch_sentence_embedding(bert, ids: list[int]) -> np.ndarray:
    """sentence-transformers' Pooling(mean) + Normalize on one unpadded sentence, in torch."""
    with torch.no_grad():
        tokens = bert(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long))
        hidden = tokens.last_hidden_state[0]
        pooled = hidden.sum(0) / torch.clamp(torch.tensor(float(len(ids))), min=1e-9)
        return torch.nn.functional.normalize(pooled, p=2, dim=0).numpy()


def _torch_hidden(bert, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return bert(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).last_hidden_state.numpy()


def _padded(sentences):
    tokenizer = load_tokenizer(default_model_dir(), 256)
    rows = [e.ids for e in tokenizer.encode_batch(sentences)]
    length = max(len(r) for r in rows)
    ids = np.zeros((len(rows), length), np.int64)
    mask = np.zeros((len(rows), length), np.int64)
    for i, r in enumerate(rows):
        ids[i, :len(r)], mask[i, :len(r)] = r, 1
    return ids, mask


def test_reference_graph_matches_transformers(model_dir, torch_bert):
    """The builder's graph in rlxpy's numpy reference (no GPU) against BertModel on a padded batch."""
    cfg, params = load_bert_dir(model_dir)
    ids, mask = _padded(SENTENCES[:3])
    graph = bind_graph(build_bert(cfg), {"B": ids.shape[0], "S": ids.shape[1]})
    out = run_reference(graph, {"input_ids": ids.astype(np.int32), "attention_mask": mask.astype(np.float32)},
                        params)
    want = _torch_hidden(torch_bert, ids, mask)
    np.testing.assert_allclose(out["last_hidden_state"], want, rtol=1e-4, atol=1e-4)


def test_embed_matches_torch_pooling_for_20_sentences(embedder, torch_bert):
    got = embedder.embed(SENTENCES, batch_size=32)
    assert got.shape == (20, 384)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    tokenizer = embedder.tokenizer
    for i, sentence in enumerate(SENTENCES):
        want = torch_sentence_embedding(torch_bert, tokenizer.encode(sentence).ids)
        cosine = float(got[i] @ want / np.linalg.norm(want))
        assert cosine >= 0.9999, f"{sentence!r}: cosine {cosine}"
    picked = ["The cat sat on the mat.", "A feline rested on a rug.",
              "GPUs execute thousands of threads in parallel."]
    cat, feline, gpu = (got[SENTENCES.index(s)] for s in picked)
    assert cat @ feline > cat @ gpu + 0.2


def test_padded_batch_hidden_states_match_transformers(embedder, torch_bert):
    ids, mask = _padded(SENTENCES[:3])
    hidden, embeddings = embedder.encoder.encode(ids, mask)
    np.testing.assert_allclose(hidden, _torch_hidden(torch_bert, ids, mask), rtol=1e-4, atol=1e-4)
    assert embedder.encoder.exe.compiles >= 1


def test_fused_qkv_reads_attention_in_place_and_changes_no_bit(embedder, model_dir):
    """The embedder's encoder runs one QKV projection per layer that PackedAttention reads in place;
    the separate q/k/v projections of the checkpoint give exactly the same hidden states."""
    from rlxpy.ir import ops
    from rlxpy.models.bert import BertEncoder

    ids, mask = _padded(SENTENCES[3:7])
    fused, _ = embedder.encoder.encode(ids, mask)
    graph = embedder.encoder.exe.schedule.graph
    assert sum(isinstance(n.op, ops.PackedAttention) for n in graph.nodes) == 6
    assert not any(isinstance(n.op, (ops.Attention, ops.Narrow)) and n.name.endswith((".q", ".k", ".v"))
                   for n in graph.nodes if type(n.op) is not ops.PackedAttention)
    cfg, params = load_bert_dir(model_dir)
    separate, _ = BertEncoder(cfg, params, fuse_qkv=False).encode(ids, mask)
    np.testing.assert_array_equal(fused, separate)


def test_cli_embed_writes_npy_and_json(embedder, tmp_path, capsys, torch_bert):
    parser = argparse.ArgumentParser()
    add_embed_parser(parser.add_subparsers(dest="command"))
    target = tmp_path / "out.npy"
    args = parser.parse_args(["embed", "Hello!", "Short.", "--output", str(target), "--similarity",
                              "--model-dir", str(embedder.model_dir)])
    assert args.func(args) == 0
    vectors = np.load(target)
    assert vectors.shape == (2, 384)
    for row, sentence in zip(vectors, ["Hello!", "Short."]):
        want = torch_sentence_embedding(torch_bert, embedder.tokenizer.encode(sentence).ids)
        assert float(row @ want) >= 0.9999
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert np.allclose(np.diag(printed["cosine"]), 1.0, atol=1e-3)


# -- bad input ----------------------------------------------------------------------------------------------
def test_encoder_rejects_bad_input(embedder):
    encoder = embedder.encoder
    ids = np.array([[101, 2023, 102]])
    with pytest.raises(rlxpy.InputError, match="token ids must lie in"):
        encoder.encode(np.array([[101, 40000, 102]]), np.ones((1, 3)))
    with pytest.raises(rlxpy.InputError, match="must be integers"):
        encoder.encode(ids.astype(np.float32), np.ones((1, 3)))
    with pytest.raises(rlxpy.InputError, match=r"must both be \[B, S\]"):
        encoder.encode(ids, np.ones((1, 4)))
    with pytest.raises(rlxpy.InputError, match="exceed the 512 positions"):
        encoder.encode(np.zeros((1, 513), np.int64), np.ones((1, 513)))
    with pytest.raises(rlxpy.InputError, match="list of strings"):
        embedder.tokenize("not a list")
    with pytest.raises(rlxpy.InputError, match="batch size"):
        embedder.embed(["a"], batch_size=0)


def test_bad_configs_and_weights_are_model_errors(model_dir):
    config = json.loads((model_dir / "config.json").read_text())
    with pytest.raises(rlxpy.ModelError, match="hidden_act 'swish'"):
        BertConfig.from_dict({**config, "hidden_act": "swish"})
    with pytest.raises(rlxpy.ModelError, match="not a multiple of 7 heads"):
        BertConfig.from_dict({**config, "num_attention_heads": 7})
    cfg = BertConfig.from_dict(config)
    state = read_safetensors(model_dir / "model.safetensors")
    del state["encoder.layer.3.output.dense.bias"]
    with pytest.raises(rlxpy.ModelError, match="'encoder.layer.3.output.dense.bias' is missing"):
        bert_params(cfg, state)
    with pytest.raises(rlxpy.ModelError, match="expected config.json and model.safetensors"):
        load_bert_dir(model_dir / "1_Pooling")


def test_safetensors_read_without_the_package(model_dir, monkeypatch):
    want = read_safetensors(model_dir / "model.safetensors")
    monkeypatch.setitem(sys.modules, "safetensors.numpy", None)
    got = read_safetensors(model_dir / "model.safetensors")
    assert set(got) == set(want)
    for name in ("embeddings.word_embeddings.weight", "encoder.layer.5.output.LayerNorm.bias",
                 "embeddings.position_ids"):
        assert got[name].dtype == want[name].dtype and np.array_equal(got[name], want[name])


def test_missing_tokenizers_package_is_a_clear_error(model_dir, monkeypatch):
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(rlxpy.ModelError, match="needs the `tokenizers` package"):
        load_tokenizer(model_dir, 128)


def test_core_and_these_frontends_do_not_import_torch():
    import subprocess

    code = ("import sys, rlxpy, rlxpy.models.bert, rlxpy.frontends.embed, rlxpy.frontends.onnx; "
            "bad = [m for m in ('torch', 'transformers', 'tokenizers', 'onnx') if m in sys.modules]; "
            "print(', '.join(bad)); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"imported: {result.stdout.strip()} {result.stderr.strip()}"
