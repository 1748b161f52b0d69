"""transformers' LlamaForCausalLM weights -> rlxpy's llama graph (F32 params, GGML names).

Used to check rlxpy against transformers with the very same weights. Only needs the config
object and a state dict of array-likes (torch tensors work; torch itself is not imported).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rlxpy.models.llama import LlamaConfig, param_sources
from rlxpy.models.transformer import row_block

_LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def config_from_hf(hf: Any, context: int = 256) -> LlamaConfig:
    theta = getattr(hf, "rope_theta", None)
    if theta is None:
        theta = (getattr(hf, "rope_parameters", None) or {}).get("rope_theta", 10000.0)
    return LlamaConfig(
        vocab_size=hf.vocab_size, hidden=hf.hidden_size, layers=hf.num_hidden_layers,
        heads=hf.num_attention_heads, kv_heads=hf.num_key_value_heads, ffn=hf.intermediate_size,
        head_dim=getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads,
        eps=hf.rms_norm_eps, rope_theta=float(theta), rope_interleaved=False, context=context,
        tied_embeddings=bool(getattr(hf, "tie_word_embeddings", False)))


def weights_from_hf(state: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """GGML-named f32 arrays; matrices keep torch's [out, in] layout (= GGML's [n, k])."""
    out: dict[str, np.ndarray] = {}
    for key, value in state.items():
        array = value.detach().cpu().float().numpy() if hasattr(value, "detach") else np.asarray(value)
        array = np.ascontiguousarray(array, dtype=np.float32)
        if key == "model.embed_tokens.weight":
            out["token_embd.weight"] = array
        elif key == "model.norm.weight":
            out["output_norm.weight"] = array
        elif key == "lm_head.weight":
            out["output.weight"] = array
        elif key.startswith("model.layers."):
            _, _, index, rest = key.split(".", 3)
            if rest in _LAYER_NAMES:
                out[f"blk.{index}.{_LAYER_NAMES[rest]}"] = array
    return out


def load_into(exe: Any, weights: Mapping[str, np.ndarray]) -> None:
    """Set every param of a llama executable from GGML-named f32 arrays; zero the KV caches."""
    for name in exe.param_names():
        if name.endswith(("k_cache", "v_cache")):
            exe.set_param_bytes(name, bytes(exe.param_nbytes(name)))
        else:
            parts = [np.ascontiguousarray(weights[source], np.float32) for source in param_sources(name)]
            block = row_block(name)  # a row block of a matrix too big for one binding
            whole = np.concatenate(parts)
            rows = whole if block is None else whole[block[1]: block[1] + block[2]]
            exe.set_param_bytes(name, rows.tobytes())
