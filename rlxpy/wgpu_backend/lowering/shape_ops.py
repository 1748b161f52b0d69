"""Lowering family: shape_ops (being written)."""
