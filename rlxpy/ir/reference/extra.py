"""Reference semantics of the secondary op families; each family lives in ``extra_<family>.py``."""

from __future__ import annotations

from rlxpy.ir.reference import (  # noqa: F401  (registration)
    extra_backward,
    extra_conv,
    extra_custom,
    extra_region,
    extra_sequence,
    extra_signal,
)
