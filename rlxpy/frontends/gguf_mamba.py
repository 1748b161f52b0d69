"""A Mamba-1 GGUF (``general.architecture = "mamba"``) -> rlxpy's Mamba generator (rlxpy.models.mamba).

The layout is llama.cpp's converter's (the one gguf-py's tensor-name map and transformers' GGUF loader
read). Hyperparameters under ``mamba.``: ``embedding_length`` (hidden), ``block_count``,
``ssm.inner_size``, ``ssm.state_size``, ``ssm.conv_kernel``, ``ssm.time_step_rank`` and
``attention.layer_norm_rms_epsilon``; the vocabulary is the embedding's row count. Tensors, in numpy
shape order (GGUF lists dims the other way round):

==============================  ==========================  =====================================
GGUF tensor                     shape                       meaning
==============================  ==========================  =====================================
token_embd.weight               [vocab, hidden]             embedding
blk.i.attn_norm.weight          [hidden]                    the block's RMSNorm
blk.i.ssm_in.weight             [2 inner, hidden]           in_proj (mixer input, then the gate)
blk.i.ssm_conv1d.weight / .bias [inner, conv] / [inner]     causal depthwise conv (squeezed)
blk.i.ssm_x.weight              [dt_rank + 2 state, inner]  x_proj into dt_in, B, C
blk.i.ssm_dt.weight / .bias     [inner, dt_rank] / [inner]  dt_proj
blk.i.ssm_a                     [inner, state]              A itself (-exp(A_log), not A_log)
blk.i.ssm_d                     [inner]                     the D skip
blk.i.ssm_out.weight            [hidden, inner]             out_proj
output_norm.weight              [hidden]                    final RMSNorm
output.weight                   [vocab, hidden]             LM head (absent: tied to the embedding)
==============================  ==========================  =====================================

Weights of any GGUF type are dequantised to f32 on load (gguf-py's ``quants.dequantize``): the Mamba
graph's matmuls are f32. Every missing tensor or wrong shape is a ``ModelError`` naming the file and
the tensor, raised before anything is compiled.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from gguf.quants import dequantize

from rlxpy.errors import ModelError
from rlxpy.frontends.gguf_check import GgufLayout, read_layout
from rlxpy.models.mamba import MambaConfig, MambaGenerator

ARCH = "mamba"
#: GGUF tensor suffix of a block -> (rlxpy param suffix, transpose to [in, out])
_BLOCK = {"attn_norm.weight": ("norm", False), "ssm_in.weight": ("in_proj", True),
          "ssm_conv1d.weight": ("conv_w", True), "ssm_conv1d.bias": ("conv_b", False),
          "ssm_x.weight": ("x_proj", True), "ssm_dt.weight": ("dt_proj", True),
          "ssm_dt.bias": ("dt_b", False),
          "ssm_a": ("A", False), "ssm_d": ("D", False), "ssm_out.weight": ("out_proj", True)}


def _integer(layout: GgufLayout, key: str) -> int:
    value = layout.value(f"{ARCH}.{key}")
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ModelError(f"{layout.path}: metadata {ARCH}.{key} must be a positive integer, got {value!r}")
    return int(value)


def mamba_config(layout: GgufLayout) -> MambaConfig:
    """The model's shape from the metadata and the embedding's rows."""
    arch = layout.value("general.architecture")
    if arch != ARCH:
        raise ModelError(f"{layout.path}: general.architecture is {arch!r}, not {ARCH!r}")
    embed = layout.tensors.get("token_embd.weight")
    if embed is None:
        raise ModelError(f"{layout.path}: tensor token_embd.weight is missing")
    eps = layout.value(f"{ARCH}.attention.layer_norm_rms_epsilon", 1e-5)
    if not isinstance(eps, (float, int)) or not 0 < eps < 1:
        raise ModelError(f"{layout.path}: metadata {ARCH}.attention.layer_norm_rms_epsilon must be in "
                         f"(0, 1), got {eps!r}")
    return MambaConfig(vocab_size=int(embed.shape[-1]), hidden=_integer(layout, "embedding_length"),
                       layers=_integer(layout, "block_count"), inner=_integer(layout, "ssm.inner_size"),
                       state=_integer(layout, "ssm.state_size"), conv=_integer(layout, "ssm.conv_kernel"),
                       dt_rank=_integer(layout, "ssm.time_step_rank"), eps=float(eps),
                       use_bias=False, use_conv_bias="blk.0.ssm_conv1d.bias" in layout.tensors)


def expected_shapes(cfg: MambaConfig, tied: bool) -> dict[str, tuple[int, ...]]:
    """Every tensor the builder needs, by GGUF name, in numpy shape order."""
    h, i, n, r = cfg.hidden, cfg.inner, cfg.state, cfg.dt_rank
    shapes: dict[str, tuple[int, ...]] = {"token_embd.weight": (cfg.vocab_size, h),
                                          "output_norm.weight": (h,)}
    if not tied:
        shapes["output.weight"] = (cfg.vocab_size, h)
    block = {"attn_norm.weight": (h,), "ssm_in.weight": (2 * i, h), "ssm_conv1d.weight": (i, cfg.conv),
             "ssm_x.weight": (r + 2 * n, i), "ssm_dt.weight": (i, r), "ssm_dt.bias": (i,), "ssm_a": (i, n),
             "ssm_d": (i,), "ssm_out.weight": (h, i)}
    if cfg.use_conv_bias:
        block["ssm_conv1d.bias"] = (i,)
    for layer in range(cfg.layers):
        shapes |= {f"blk.{layer}.{suffix}": shape for suffix, shape in block.items()}
    return shapes


def _tensor(layout: GgufLayout, name: str, shape: tuple[int, ...]) -> np.ndarray:
    info = layout.tensors.get(name)
    if info is None:
        raise ModelError(f"{layout.path}: tensor {name} is missing (a {ARCH} model needs it, "
                         f"shape {list(shape)})")
    got = tuple(reversed(info.shape))
    if got != shape:
        raise ModelError(f"{layout.path}: tensor {name} has shape {list(got)}, expected {list(shape)}")
    try:
        values = dequantize(np.asarray(layout.tensor_bytes(name)), info.tensor_type)
    except (ValueError, NotImplementedError) as error:
        raise ModelError(f"{layout.path}: tensor {name} ({info.type_name}): cannot be read as f32: {error}"
                         ) from None
    return np.ascontiguousarray(values.reshape(shape), np.float32)


def mamba_weights(layout: GgufLayout, cfg: MambaConfig) -> dict[str, np.ndarray]:
    """rlxpy-named f32 weights (matrices [in, out]) for MambaGenerator.set_weights."""
    tied = "output.weight" not in layout.tensors
    shapes = expected_shapes(cfg, tied)
    for name, shape in shapes.items():  # every name and shape first: refuse before reading any data
        info = layout.tensors.get(name)
        if info is None or tuple(reversed(info.shape)) != shape:
            _tensor(layout, name, shape)
    out = {"embed": _tensor(layout, "token_embd.weight", shapes["token_embd.weight"]),
           "norm_f": _tensor(layout, "output_norm.weight", shapes["output_norm.weight"])}
    head = out["embed"] if tied else _tensor(layout, "output.weight", shapes["output.weight"])
    out["lm_head"] = np.ascontiguousarray(head.T)
    for layer in range(cfg.layers):
        for suffix, (name, transpose) in _BLOCK.items():
            key = f"blk.{layer}.{suffix}"
            if key in shapes:
                value = _tensor(layout, key, shapes[key])
                out[f"blk.{layer}.{name}"] = np.ascontiguousarray(value.T) if transpose else value
    return out


def load_mamba_gguf(path: str | os.PathLike, chunk: int = 16) -> MambaGenerator:
    """A compiled MambaGenerator with the file's weights (the sequence state zeroed)."""
    layout = read_layout(Path(path))
    cfg = mamba_config(layout)
    weights = mamba_weights(layout, cfg)
    generator = MambaGenerator(cfg, chunk=chunk)
    generator.set_weights(weights)
    generator.reset()
    return generator
