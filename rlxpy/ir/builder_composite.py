"""Builder methods for composite and control-flow ops (expanded by the unfuse pass)."""

from __future__ import annotations


class BuilderComposite:
    """Filled in by the unfuse work."""
