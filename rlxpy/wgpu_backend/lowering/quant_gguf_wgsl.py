"""The GGUF types with a WGSL decoder, and the placeholders that pick one for the quant_gguf_* kernels.

A type's decoder is ``kernels/include/quant_gguf_decode_<DECODER>.wgsl``: its ``q_scale`` /
``q_chunk`` / ``q_unit`` contract, the unit / half / chunk cut of a row and why the dequantised
values match gguf-py bit for bit are written in ``include/quant_gguf_layout.wgsl``. The block
geometry a decoder addresses (``BLOCK_BYTES``, ``UNIT_SHIFT``) is filled in from ``GGUF_BLOCKS``
(gguf-py's ``GGML_QUANT_SIZES``), so no block size is written in WGSL or in a second table.
"""

from __future__ import annotations

from rlxpy.ir.ops.quant import GGUF_BLOCKS

UNIT = 32  # elements per decode unit

#: type -> the placeholders naming its decoder (F16 and BF16 share one, widened by {{HALF}}_to_f32)
_DECODERS: dict[str, dict[str, str]] = {
    "F32": {"DECODER": "f32"}, "F16": {"DECODER": "half", "HALF": "f16"},
    "BF16": {"DECODER": "half", "HALF": "bf16"},
    **{name: {"DECODER": name.lower()} for name in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K",
                                                     "Q4_K", "Q5_K", "Q6_K")},
}
GPU_TYPES = frozenset(_DECODERS)
#: Types whose two unit halves share one scale (the GEMV then decodes it once per unit).
SCALE_PER_UNIT = frozenset({"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "F32", "F16", "BF16"})


def decode_subs(qtype: str) -> dict[str, object]:
    """The placeholders of a kernel that decodes ``qtype``: which decoder, and its block geometry
    (bytes per block, or per element for float types; log2 of the 32-element units per block)."""
    elements, nbytes = GGUF_BLOCKS[qtype]
    units = max(1, elements // UNIT)
    if units & (units - 1) or (elements > 1 and elements % UNIT):
        raise ValueError(f"{qtype}: blocks of {elements} elements are not whole powers of two of units")
    return {**_DECODERS[qtype], "BLOCK_BYTES": nbytes, "UNIT_SHIFT": units.bit_length() - 1}
