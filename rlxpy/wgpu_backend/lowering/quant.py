"""Lowering family: quantised matmuls and lookups.

The family is split by sub-family; importing this module registers both:
``quant_gguf`` (GGML block formats: DequantMatMulGguf, DequantGroupedMatMul, GatherGguf) and
``quant_generic`` (group-wise int8/int4/fp8/nvfp4 schemes: DequantMatMul).
"""

from __future__ import annotations

from rlxpy.wgpu_backend.lowering import quant_generic, quant_gguf  # noqa: F401
