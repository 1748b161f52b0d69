"""Llama-family decoder graphs: the shared transformer builder (:mod:`rlxpy.models.transformer`)
with every family switch off: RMSNorm, GQA attention with RoPE, SwiGLU MLP, tied or untied head.

``LlamaConfig`` and ``build_llama`` are the names the llama-only code used; they are the shared
builder's config and function."""

from __future__ import annotations

from rlxpy.models.transformer import (
    Features,
    TransformerConfig,
    build_transformer,
    param_sources,
    rope_tables,
)

LlamaConfig = TransformerConfig
build_llama = build_transformer

__all__ = ["Features", "LlamaConfig", "build_llama", "param_sources", "rope_tables"]
