"""IR -> IR passes, run in this order by the compile flow: verify, bind dynamic dims, unfuse,
detect patterns (the pattern engine, rewrite.py, with the sets patterns.py and patterns_transformer.py)."""

from rlxpy.ir.passes import unfuse_control, unfuse_layers  # noqa: F401  (register their expansions)
from rlxpy.ir.passes.unfuse import check_unfused, unfuse
from rlxpy.ir.passes.verify import verify

__all__ = ["check_unfused", "unfuse", "verify"]
