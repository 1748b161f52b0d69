"""transformers' MambaForCausalLM config and weights -> rlxpy's Mamba graph (rlxpy.models.mamba).

Only needs the config object and a state dict of array-likes (torch tensors work; torch itself is not
imported). Matrices are transposed to [in, out], the conv weight [I, 1, k] to [k, I], and A is stored
as -exp(A_log), as the mixer uses it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rlxpy.errors import ModelError
from rlxpy.models.mamba import MambaConfig, MambaGenerator, dt_rank_of

#: transformers' mixer weight -> (rlxpy name, transpose)
_MIXER = {"in_proj.weight": ("in_proj", True), "in_proj.bias": ("in_proj_b", False),
          "conv1d.bias": ("conv_b", False), "x_proj.weight": ("x_proj", True),
          "dt_proj.weight": ("dt_proj", True), "dt_proj.bias": ("dt_b", False), "D": ("D", False),
          "out_proj.weight": ("out_proj", True), "out_proj.bias": ("out_proj_b", False)}


def config_from_hf(hf: Any) -> MambaConfig:
    if getattr(hf, "hidden_act", "silu") != "silu":
        raise ModelError(f"mamba: activation {hf.hidden_act!r} is not supported (silu only)")
    return MambaConfig(
        vocab_size=hf.vocab_size, hidden=hf.hidden_size, layers=hf.num_hidden_layers,
        inner=hf.intermediate_size, state=hf.state_size, conv=hf.conv_kernel,
        dt_rank=dt_rank_of(hf.hidden_size, hf.time_step_rank), eps=hf.layer_norm_epsilon,
        use_bias=bool(hf.use_bias), use_conv_bias=bool(hf.use_conv_bias))


def _array(value: Any) -> np.ndarray:
    array = value.detach().cpu().float().numpy() if hasattr(value, "detach") else np.asarray(value)
    return np.ascontiguousarray(array, dtype=np.float32)


def weights_from_hf(state: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """rlxpy-named f32 arrays from a MambaForCausalLM state dict (the LM head tied to the embedding
    when the dict has none)."""
    out: dict[str, np.ndarray] = {}
    for key, value in state.items():
        array = _array(value)
        if key == "backbone.embeddings.weight":
            out["embed"] = array
        elif key == "backbone.norm_f.weight":
            out["norm_f"] = array
        elif key == "lm_head.weight":
            out["lm_head"] = np.ascontiguousarray(array.T)
        elif key.startswith("backbone.layers."):
            _, _, index, rest = key.split(".", 3)
            prefix = f"blk.{index}."
            if rest == "norm.weight":
                out[prefix + "norm"] = array
            elif rest == "mixer.A_log":
                out[prefix + "A"] = -np.exp(array)
            elif rest == "mixer.conv1d.weight":  # [I, 1, k] -> [k, I]
                out[prefix + "conv_w"] = np.ascontiguousarray(array[:, 0, :].T)
            elif rest.startswith("mixer.") and rest[6:] in _MIXER:
                name, transpose = _MIXER[rest[6:]]
                out[prefix + name] = np.ascontiguousarray(array.T) if transpose else array
    if "lm_head" not in out and "embed" in out:
        out["lm_head"] = np.ascontiguousarray(out["embed"].T)
    return out


def load_into(generator: MambaGenerator, state: Mapping[str, Any]) -> None:
    """Set every weight of ``generator`` from a MambaForCausalLM state dict; zero the sequence state."""
    generator.set_weights(weights_from_hf(state))
    generator.reset()
