"""Lowering family: quant (being written)."""
