"""Lowering family: reduce (being written)."""
