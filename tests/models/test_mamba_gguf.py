"""A Mamba-1 GGUF (llama.cpp's layout, written with gguf-py's GGUFWriter from a random transformers
model) loaded by rlxpy and by transformers' GGUF loader, the oracle: prompt logits and greedy tokens.
Some matrices are stored as Q8_0 so the dequantising path is exercised; both sides read the same bytes."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch  # test oracles: missing is a failure, not a skip
import transformers

from rlxpy.errors import ModelError
from rlxpy.frontends.gguf_mamba import load_mamba_gguf

VOCAB = 67
Q8_0 = ("ssm_in.weight", "ssm_out.weight")


def _tensors(model) -> dict[str, np.ndarray]:
    """GGUF name -> array in llama.cpp's converter's form."""
    state = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    out = {"token_embd.weight": state["backbone.embeddings.weight"],
           "output_norm.weight": state["backbone.norm_f.weight"]}
    if "lm_head.weight" in state and not model.config.tie_word_embeddings:
        out["output.weight"] = state["lm_head.weight"]
    names = {"norm.weight": "attn_norm.weight", "mixer.in_proj.weight": "ssm_in.weight",
             "mixer.conv1d.bias": "ssm_conv1d.bias", "mixer.x_proj.weight": "ssm_x.weight",
             "mixer.dt_proj.weight": "ssm_dt.weight", "mixer.dt_proj.bias": "ssm_dt.bias", "mixer.D": "ssm_d",
             "mixer.out_proj.weight": "ssm_out.weight"}
    for i in range(model.config.num_hidden_layers):
        p = f"backbone.layers.{i}."
        for hf, name in names.items():
            out[f"blk.{i}.{name}"] = state[p + hf]
        out[f"blk.{i}.ssm_conv1d.weight"] = state[p + "mixer.conv1d.weight"][:, 0, :]
        out[f"blk.{i}.ssm_a"] = -np.exp(state[p + "mixer.A_log"])
    return out


def write_mamba_gguf(path, model, drop: str = "", reshape: str = "") -> None:
    cfg = model.config
    writer = gguf.GGUFWriter(str(path), "mamba")
    writer.add_uint32("mamba.vocab_size", cfg.vocab_size)
    writer.add_uint32("mamba.context_length", 1024)
    writer.add_uint32("mamba.embedding_length", cfg.hidden_size)
    writer.add_uint32("mamba.block_count", cfg.num_hidden_layers)
    writer.add_uint32("mamba.ssm.conv_kernel", cfg.conv_kernel)
    writer.add_uint32("mamba.ssm.inner_size", cfg.intermediate_size)
    writer.add_uint32("mamba.ssm.state_size", cfg.state_size)
    writer.add_uint32("mamba.ssm.time_step_rank", cfg.time_step_rank)
    writer.add_float32("mamba.attention.layer_norm_rms_epsilon", cfg.layer_norm_epsilon)
    for name, array in _tensors(model).items():
        if name == drop:
            continue
        if name == reshape:
            array = array[..., :-1]
        if name.endswith(Q8_0) and array.shape[-1] % 32 == 0:
            q = gguf.quants.quantize(array, gguf.GGMLQuantizationType.Q8_0)
            writer.add_tensor(name, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            writer.add_tensor(name, np.ascontiguousarray(array, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.fixture(scope="module")
def mamba_files(tmp_path_factory):
    torch.manual_seed(0)
    cfg = transformers.MambaConfig(vocab_size=VOCAB, hidden_size=64, state_size=8, num_hidden_layers=2,
                                   conv_kernel=4, expand=2, time_step_rank=5)
    model = transformers.MambaForCausalLM(cfg).eval()
    folder = tmp_path_factory.mktemp("mamba_gguf")
    write_mamba_gguf(folder / "tiny.gguf", model)
    oracle = transformers.AutoModelForCausalLM.from_pretrained(str(folder), gguf_file="tiny.gguf",
                                                               torch_dtype=torch.float32).eval()
    return folder, model, oracle


@pytest.fixture(scope="module")
def generator(mamba_files):
    folder, _, _ = mamba_files
    return load_mamba_gguf(folder / "tiny.gguf", chunk=8)


def test_the_oracle_reads_the_file_as_written(mamba_files):
    _, model, oracle = mamba_files
    ids = torch.tensor([[5, 9, 1]])
    with torch.no_grad():
        diff = (model(ids).logits - oracle(ids).logits).abs().max()
    assert diff < 0.05  # only the Q8_0 rounding of two matrices separates them


@pytest.mark.parametrize("length", [1, 3, 17])
def test_prompt_logits_match_transformers_on_the_same_gguf(mamba_files, generator, length):
    _, _, oracle = mamba_files
    ids = [int(t) for t in np.random.default_rng(length).integers(0, VOCAB, length)]
    got = generator.logits(ids)
    with torch.no_grad():
        want = oracle(torch.tensor([ids])).logits[0, -1].double().numpy()
    assert np.abs(got - want).max() / np.abs(want).max() < 1e-4


def test_greedy_tokens_match_transformers_generate(mamba_files, generator):
    _, _, oracle = mamba_files
    ids = [3, 14, 15, 9, 2]
    got = generator.generate(ids, 16)
    with torch.no_grad():
        want = oracle.generate(torch.tensor([ids]), max_new_tokens=16, min_new_tokens=16, do_sample=False,
                               pad_token_id=0)[0, len(ids):].tolist()
    assert got == want


@pytest.mark.parametrize("drop, reshape, named", [("blk.1.ssm_a", "", "blk.1.ssm_a"),
                                                  ("", "blk.0.ssm_x.weight", "blk.0.ssm_x.weight")])
def test_a_missing_or_misshapen_tensor_is_refused_naming_it(mamba_files, tmp_path, drop, reshape, named):
    _, model, _ = mamba_files
    path = tmp_path / "bad.gguf"
    write_mamba_gguf(path, model, drop=drop, reshape=reshape)
    with pytest.raises(ModelError, match=named) as info:
        load_mamba_gguf(path)
    assert "bad.gguf" in str(info.value)
