"""IR -> IR passes, run in this order by the compile flow: verify, bind dynamic dims, unfuse,
detect patterns (the pattern engine, rewrite.py, with the sets patterns.py, patterns_conv.py and
patterns_transformer.py)."""

from rlxpy.ir.passes import (  # importing them registers their patterns (in run order) and expansions
    patterns,  # noqa: F401
    patterns_conv,  # noqa: F401
    patterns_transformer,  # noqa: F401
    unfuse_control,  # noqa: F401
    unfuse_layers,  # noqa: F401
    unfuse_signal,  # noqa: F401
)
from rlxpy.ir.passes.unfuse import check_unfused, unfuse
from rlxpy.ir.passes.verify import verify

__all__ = ["check_unfused", "unfuse", "verify"]
