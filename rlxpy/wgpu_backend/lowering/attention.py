"""Lowering family: attention (being written)."""
