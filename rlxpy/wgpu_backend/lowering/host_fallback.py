"""Host fallback: ops without a WGSL kernel yet run their numpy reference between GPU passes.

Each becomes one host step (kind "H" in the dispatch report): the run loop submits the GPU work
so far, reads the op's inputs from the arena, runs the reference, and writes the output back.
Correct but slow; the report shows the user exactly which ops did not run on the GPU.
"""

from __future__ import annotations

import numpy as np

from rlxpy.ir import ops
from rlxpy.ir.graph import Node
from rlxpy.ir.reference import REFERENCE, _load_families
from rlxpy.wgpu_backend.schedule import LowerCtx, Step, lowers, not_lowered

#: Ops lowered as host steps, with the reason each has no kernel yet.
HOST_OPS: dict[type[ops.Op], str] = {
    ops.RmsNormBackwardInput: "backward ops run on the host",
    ops.RmsNormBackwardGamma: "backward op",
    ops.RmsNormBackwardBeta: "backward op",
    ops.LayerNormBackwardInput: "backward op",
    ops.LayerNormBackwardGamma: "backward op",
    ops.RopeBackward: "backward op",
    ops.CumsumBackward: "backward op",
    ops.GatherBackward: "backward op",
    ops.AttentionBackward: "backward op",
    ops.Conv: "no conv kernel yet",
    ops.Pool: "no pool kernel yet",
    ops.Im2Col: "im2col is a host op (as in the original)",
    ops.Custom: "custom ops are host steps",
    ops.ElementwiseRegion: "no region kernel yet",
    ops.BatchElementwiseRegion: "no region kernel yet",
    ops.SelectiveScan: "no scan kernel yet",
    ops.GatedDeltaNet: "recurrent N×N state: host step",
    ops.Fft: "no FFT kernel yet",
    ops.WelchPeaks: "host step",
    ops.LogMel: "host step",
    ops.LogMelBackward: "host step",
    ops.GroupedMatMul: "no grouped-matmul kernel yet",
}


def mutated_inputs(op: ops.Op) -> list[int]:
    """Inputs an op updates in place (its reference mutates them): written back to the arena."""
    if isinstance(op, ops.GatedDeltaNet) and op.carry_state:
        return [5]
    return []


def lower_on_host(node: Node, ctx: LowerCtx) -> list[Step]:
    _load_families()
    reference = REFERENCE[type(node.op)]
    op, input_ids, output_id = node.op, list(node.inputs), node.id
    written_back = mutated_inputs(op)

    def run(io) -> None:
        args = [np.array(io.read(i)) for i in input_ids]
        io.write(output_id, reference(op, args, node))
        for index in written_back:  # e.g. a carried recurrent state
            io.write(input_ids[index], args[index])

    return [ctx.host(node, f"host_{type(node.op).__name__}", run)]


for _op in HOST_OPS:
    lowers(_op)(lower_on_host)

for _op in (
    ops.GaussianSplatRender,
    ops.GaussianSplatRenderBackward,
    ops.GaussianSplatPrepare,
    ops.GaussianSplatRasterize,
):
    not_lowered(_op, "Gaussian splatting is not implemented (no rasteriser yet)")
