"""GGUF loading: the real SmolLM2 file's config, and clear errors on bad files."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGUFWriter

from rlxpy.errors import ModelError
from rlxpy.frontends.gguf import default_model_path, load_gguf


def test_smollm2_config_comes_from_the_metadata():
    model = load_gguf(default_model_path(), context=512)
    cfg = model.config
    assert (cfg.layers, cfg.hidden, cfg.heads, cfg.kv_heads, cfg.ffn, cfg.vocab_size) == (
        30,
        576,
        9,
        3,
        1536,
        49152,
    )
    assert cfg.dim == 64 and cfg.rope_theta == 100000.0 and cfg.context == 512
    assert cfg.tied_embeddings and cfg.rope_interleaved
    assert (
        cfg.weight_types["blk.0.attn_q.weight"] == "Q4_1" and cfg.weight_types["token_embd.weight"] == "Q8_0"
    )
    raw = model.tensor_bytes("blk.0.attn_q.weight")
    assert raw.dtype == np.uint8 and raw.nbytes == 576 * 360


def test_truncated_file_is_refused_with_its_name(tmp_path):
    data = default_model_path().read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelError, match=r"cut\.gguf"):
        load_gguf(cut)


def test_not_a_gguf_and_missing_files(tmp_path):
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"definitely not a gguf file" * 10)
    with pytest.raises(ModelError, match=r"junk\.gguf: not a GGUF file"):
        load_gguf(junk)
    with pytest.raises(ModelError, match="no such GGUF file"):
        load_gguf(tmp_path / "absent.gguf")


def test_unsupported_architecture_is_named(tmp_path):
    path = tmp_path / "bert.gguf"
    writer = GGUFWriter(str(path), "bert")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ModelError, match="architecture 'bert' is not supported"):
        load_gguf(path)
