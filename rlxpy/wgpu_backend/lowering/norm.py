"""Lowering family: norm (being written)."""
