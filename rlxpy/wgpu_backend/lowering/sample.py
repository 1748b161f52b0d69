"""Sample lowering: one sample_rows dispatch.

One workgroup per row of logits [..., V] writes one i32 token id. temperature 0 is argmax with
numpy's rules (NaN first, ties -> lowest index). Otherwise, as ``sample_rows`` in the reference:
softmax of logits / T, top-k / top-p keeping the crossing token, Gumbel-max
with Threefry2x32-20 keyed by the seed attribute or the optional u32[2] seed input. The kept set
is found by a binary search over the logits' order-preserving bit keys (no sort, no scratch), so
the logits are only read, never overwritten.

``per_row``: the kernel reads each row's settings (f32 [R, 3]) and seed (u32 [R, 2]) from the arena
instead of the uniforms (lane 0 loads them, the workgroup shares them uniformly), so one dispatch
samples a batched decode step whose rows belong to different requests.
"""

from __future__ import annotations

from rlxpy.errors import GraphError, where
from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Node
from rlxpy.wgpu_backend.kernels.contract import accepts, workgroup_var_bytes
from rlxpy.wgpu_backend.kernels.params import F32, U32, kernel, params
from rlxpy.wgpu_backend.schedule import LowerCtx, Step, fits, lowers

SAMPLE_WG = 256
SMALL_VOCAB = 2048  # below this, 64 threads per row
LARGE_VOCAB = 16384  # from this, 1024 threads per row where the device allows them
SAMPLE_ROWS = kernel("sample_rows", params(
    "SampleRowsParams", rows=U32, vocab=U32, x=U32, y=U32, greedy=U32, temperature=F32, top_k=U32,
    top_p=F32, filtered=U32, seed_lo=U32, seed_hi=U32, seed_input=U32, has_seed=U32, per_row=U32,
    settings=U32),
    dtypes=accepts(DType.F32, out=DType.I32),  # the seed input is checked below (a graph error)
    # three WG-lane reduction arrays, three scalars and the row's settings (1024 lanes: 12 KiB + 80 B)
    workgroup=(SAMPLE_WG, 1, 1),
    shared_bytes=lambda s: 3 * 4 * int(s["WG"]) + 3 * workgroup_var_bytes(4) + workgroup_var_bytes(32))


@lowers(ops.Sample)
def lower_sample(node: Node, ctx: LowerCtx) -> list[Step]:
    op: ops.Sample = node.op  # type: ignore[assignment]
    logits = ctx.inputs(node)[0]
    settings = ctx.inputs(node)[1] if op.per_row else None
    seed_input = ctx.inputs(node)[-1] if len(node.inputs) > 1 else None
    if settings is not None and settings.dtype != DType.F32:
        raise GraphError(f"{where(node)}: per-row settings must be f32[R, 3], got {settings.type}")
    if seed_input is not None and seed_input.dtype not in (DType.U32, DType.I32):
        raise GraphError(f"{where(node)}: seed input must be u32[2] or i32[2] (per row: [R, 2]), "
                         f"got {seed_input.type}")
    vocab = logits.shape[-1]
    if vocab == 0:
        raise GraphError(f"{where(node)}: cannot sample from an empty vocabulary ({logits.type})")
    rows = node.numel
    if rows == 0:
        return []
    top_k = op.top_k if op.top_k < vocab else 0  # keeping every token is no filter
    filtering = top_k > 0 or 0.0 < op.top_p < 1.0
    seed = op.seed & (1 << 64) - 1
    # small vocabularies: 64 lanes idle less in each of the ~40 reductions; large ones: up to 1024 lanes
    # cut the memory round trips of each pass over the row (one workgroup per row)
    threads = 64 if vocab < SMALL_VOCAB else SAMPLE_WG
    if vocab >= LARGE_VOCAB and fits(SAMPLE_ROWS, ctx.facts, {"WG": 1024}):
        threads = 1024
    return [ctx.dispatch(SAMPLE_ROWS, node, ctx.grid_rows(rows), {"WG": threads},
                         rows=rows, vocab=vocab, x=ctx.offset(logits), y=ctx.offset(node),
                         greedy=int(op.temperature == 0.0), temperature=max(op.temperature, 1e-6),
                         top_k=top_k, top_p=op.top_p, filtered=int(filtering),
                         seed_lo=seed & 0xFFFFFFFF, seed_hi=seed >> 32,
                         seed_input=ctx.offset(seed_input) if seed_input is not None else 0,
                         has_seed=int(seed_input is not None), per_row=int(op.per_row),
                         settings=ctx.offset(settings) if settings is not None else 0)]
