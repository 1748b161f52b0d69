"""Host steps: ops without a WGSL kernel yet run their numpy reference between GPU passes.

Each becomes one host step (kind "H" in the dispatch report): the run loop submits the GPU work
so far, reads the op's inputs from the arena, runs the reference, and writes the output back.
Correct but slow; the report shows the user exactly which ops did not run on the GPU. A family
lowered this way lists its ops in ``HOST_OPS`` (op -> why no kernel yet) of its own
``lowering/<family>.py`` and registers a lowerer there that calls ``host_steps``.
"""

from __future__ import annotations

import numpy as np

from rlxpy.ir.graph import Node
from rlxpy.ir.reference import reference_of
from rlxpy.wgpu_backend.schedule import LowerCtx, Step


def host_steps(node: Node, ctx: LowerCtx, name: str = "") -> list[Step]:
    """One host step running the op's reference; the inputs the op mutates (``Op.mutated_inputs``:
    a carried recurrent state, KV caches), which the reference updates in place, are written back
    to the arena too."""
    reference = reference_of(type(node.op))
    op, input_ids, output_id = node.op, list(node.inputs), node.id
    written_back = node.op.mutated_inputs()

    def run(io) -> None:
        args = [np.array(io.read(i)) for i in input_ids]
        io.write(output_id, reference(op, args, node))
        for index in written_back:
            io.write(input_ids[index], args[index])

    return [ctx.host(node, name or f"host_{type(node.op).__name__}", run)]
