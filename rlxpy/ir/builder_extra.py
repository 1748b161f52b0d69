"""Builder methods for the secondary op families (conv, sequence, signal, custom, backward)
and the composite ops. Mixed into Graph next to builder.Builder."""

from __future__ import annotations


class BuilderExtra:
    """Filled in by the secondary-families work."""
