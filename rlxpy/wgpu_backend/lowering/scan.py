"""Scan family: SelectiveScan (Mamba-1) and GatedDeltaNet on the GPU.

SelectiveScan is a linear recurrence per (batch, channel, state): ``h_t = d_t * h_{t-1} + u_t``. It
runs parallel over (batch, channel) lanes and over time in chunks, so a long prefill is not S
dependent steps of one invocation:

1. scan_selective, phase local: each (lane, chunk) scans its chunk from h = 0, storing the chunk's
   end state and decay (the product of its d_t) in scratch;
2. scan_selective_carry: each (lane, state) walks the chunks, turning end states into the state
   entering each chunk (and writing the final state back when the op carries one);
3. scan_selective, phase output: each (lane, chunk) rescans its chunk from that state, writing y.

A sequence that fits one chunk (decode: S = 1 from the carried state) is one dispatch (phase whole).
The chunk length gives the GPU enough invocations (``TARGET_INVOCATIONS``) and keeps each within the
loop budget of reduce.py; without room in the scratch area the op runs as a host step.

GatedDeltaNet: sequences of at least scan_delta_chunked.MIN_STEPS steps run in chunks
(lowering/scan_delta_chunked.py). Shorter ones (decode) and those whose chunk records find no room
in the scratch run step by step: one workgroup per (batch, head), lane j holding column j of the
N x N state (the delta rule's columns evolve independently given k, q, g, beta); split into
dispatches by the loop budget, the state kept in the carried state tensor or scratch between them.
"""

from __future__ import annotations

import math

from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Graph, Node
from rlxpy.wgpu_backend.host_step import host_steps
from rlxpy.wgpu_backend.kernels.contract import accepts
from rlxpy.wgpu_backend.kernels.params import F32, U32, kernel, params
from rlxpy.wgpu_backend.lowering import scan_delta_chunked as delta_chunked
from rlxpy.wgpu_backend.lowering.reduce import LOOP_BUDGET, chunks
from rlxpy.wgpu_backend.schedule import DeviceFacts, LowerCtx, Step, lowers

F32_ONLY = accepts(rest=DType.F32, out=DType.F32)
SCAN_SELECTIVE = kernel("scan_selective", params(
    "ScanSelectiveParams", batch=U32, steps=U32, channels=U32, chunk=U32, x=U32, delta=U32, a=U32, bm=U32,
    cm=U32, y=U32, state=U32, has_state=U32, carry=U32, decay=U32), dtypes=F32_ONLY, workgroup=(64, 1, 1),
    mutates=("state",), sizes={"N": 16, "PHASE": 0})
SCAN_SELECTIVE_CARRY = kernel("scan_selective_carry", params(
    "ScanSelectiveCarryParams", batch=U32, channels=U32, states=U32, chunks=U32, state=U32, has_state=U32,
    carry=U32, decay=U32), dtypes=F32_ONLY, mutates=("state",))

#: scan_selective phases (its PHASE placeholder).
WHOLE, LOCAL, OUTPUT = 0, 1, 2
#: Invocations the chunked scan aims for (lanes x chunks): an H100 keeps ~270k threads in flight, a
#: CPU adapter a few per core (more chunks there only add the second pass's work).
TARGET_INVOCATIONS = 1 << 16
TARGET_INVOCATIONS_CPU = 256
#: Shortest chunk: the carry pass walks S / chunk chunks one after another.
MIN_CHUNK = 16
#: Gated delta rule: k/q rows of up to this many elements (TT steps x N) staged per tile.
DELTA_TILE_ELEMENTS = 1024

SCAN_GATED_DELTA = kernel("scan_gated_delta", params(
    "ScanGatedDeltaParams", heads=U32, steps=U32, start=U32, count=U32, q=U32, k=U32, v=U32, g=U32, beta=U32,
    o=U32, state=U32, load=U32, store=U32, scale=F32), dtypes=F32_ONLY, workgroup=(16, 1, 1),
    shared_bytes=lambda s: 2 * 4 * int(s["TT"]) * int(s["N"]), mutates=("state",), sizes={"N": 16, "TT": 16})


def max_chunk(states: int) -> int:
    """Longest chunk one invocation may scan: per step 1 + N loop iterations, plus 3N around them."""
    return max(1, (LOOP_BUDGET - 3 * states - 16) // (states + 1))


def chunk_length(steps: int, lanes: int, states: int, cpu: bool) -> int:
    """Time steps per chunk, so that lanes x chunks reaches the target within the loop budget."""
    target = TARGET_INVOCATIONS_CPU if cpu else TARGET_INVOCATIONS
    wanted = math.ceil(steps / max(1, math.ceil(target / max(1, lanes))))
    walk = math.ceil(steps / (LOOP_BUDGET - 16))  # the carry pass loops once per chunk
    return min(max(MIN_CHUNK, wanted, walk), max_chunk(states))


def scan_scratch_bytes(batch: int, steps: int, channels: int, states: int, chunk: int) -> int:
    """Carry + decay records of a chunked scan: 2 floats per (chunk, state, batch, channel)."""
    chunks = math.ceil(steps / chunk)
    return 0 if chunks <= 1 else 2 * 4 * chunks * states * batch * channels


def selective_scratch(node: Node, graph: Graph) -> int:
    """Scratch a SelectiveScan node wants: the GPU chunking's (more chunks than a CPU adapter's)."""
    batch, steps, channels = node.shape
    states = node.op.state_size
    return scan_scratch_bytes(batch, steps, channels, states,
                              chunk_length(steps, batch * channels, states, cpu=False))


def fitting_chunk(ctx: LowerCtx, batch: int, steps: int, channels: int, states: int) -> int | None:
    """The chunk length to use: chunk_length's, made longer while its records do not fit the scratch
    area this step can address; None when no chunk length fits (then: a host step)."""
    facts: DeviceFacts = ctx.facts
    chunk = chunk_length(steps, batch * channels, states, facts.cpu)
    if chunk >= steps:
        return chunk
    if math.ceil(steps / chunk) > LOOP_BUDGET - 16:
        return None
    base, size = ctx.scratch
    if base < ctx.window_base or base + size > ctx.window_base + ctx.window_size:
        size = 0  # the scratch area is outside this step's binding
    per_chunk = scan_scratch_bytes(batch, 2, channels, states, 1) // 2
    room = size // per_chunk if per_chunk else 0
    if room < 2:
        return None
    chunk = max(chunk, math.ceil(steps / room))
    return chunk if chunk <= max_chunk(states) else None


@lowers(ops.SelectiveScan, scratch=selective_scratch)
def lower_selective_scan(node: Node, ctx: LowerCtx) -> list[Step]:
    """The chunked scan above; y and the carried state as the reference (ir/reference/scan.py)."""
    op: ops.SelectiveScan = node.op  # type: ignore[assignment]
    x, delta, a, bm, cm, *state = ctx.inputs(node)
    batch, steps, channels = x.shape
    states = op.state_size
    if node.numel == 0:
        return []
    chunk = fitting_chunk(ctx, batch, steps, channels, states)
    if chunk is None:
        return host_steps(node, ctx)
    chunks = math.ceil(steps / chunk)
    carry = (ctx.scratch[0] - ctx.window_base) // 4
    decay = carry + chunks * states * batch * channels
    fields = {"batch": batch, "steps": steps, "channels": channels, "chunk": chunk, "x": ctx.offset(x),
              "delta": ctx.offset(delta), "a": ctx.offset(a), "bm": ctx.offset(bm), "cm": ctx.offset(cm),
              "y": ctx.offset(node), "state": ctx.offset(state[0]) if state else 0,
              "has_state": int(bool(state))}
    grid = (math.ceil(channels / SCAN_SELECTIVE.workgroup[0]), chunks, batch)
    if chunks == 1:
        return [ctx.dispatch(SCAN_SELECTIVE, node, grid, {"N": states, "PHASE": WHOLE}, False,
                             carry=0, decay=0, **fields)]
    scratch = {"carry": carry, "decay": decay}
    carry_step = ctx.dispatch(SCAN_SELECTIVE_CARRY, node, ctx.grid_1d(batch * channels * states), None, False,
                              batch=batch, channels=channels, states=states, chunks=chunks,
                              state=fields["state"], has_state=fields["has_state"], **scratch)
    local, output = ({"N": states, "PHASE": phase} for phase in (LOCAL, OUTPUT))
    return [ctx.dispatch(SCAN_SELECTIVE, node, grid, local, False, **scratch, **fields),
            carry_step,
            ctx.dispatch(SCAN_SELECTIVE, node, grid, output, False, **scratch, **fields)]


def delta_steps_per_dispatch(states: int) -> int:
    """Time steps one scan_gated_delta dispatch may run: per step 2N + 1 loop iterations plus the
    staging loop's share, plus 2N to load and store the state column."""
    return max(1, (LOOP_BUDGET - 2 * states - 16) // (2 * states + 3))


def delta_scratch(node: Node, graph: Graph) -> int:
    """The chunked form's records (lowering/scan_delta_chunked.py); step by step, a GatedDeltaNet
    without a carried state that needs several dispatches keeps its state in scratch between them."""
    batch, steps, heads, states = node.shape
    if delta_chunked.applies(node):
        return delta_chunked.scratch_bytes(node)
    if node.op.carry_state or steps <= delta_steps_per_dispatch(states):
        return 0
    return 4 * batch * heads * states * states


@lowers(ops.GatedDeltaNet, scratch=delta_scratch)
def lower_gated_delta_net(node: Node, ctx: LowerCtx) -> list[Step]:
    """One workgroup per (batch, head), one lane per state column; a long sequence runs as several
    dispatches over consecutive steps, the state carried between them in the state tensor or scratch."""
    op: ops.GatedDeltaNet = node.op  # type: ignore[assignment]
    q, k, v, g, beta, *state = ctx.inputs(node)
    batch, steps, heads, states = q.shape
    if node.numel == 0:
        return []
    if delta_chunked.applies(node):
        chunked = delta_chunked.lower_chunked(node, ctx, state[0] if state else None)
        if chunked is not None:
            return chunked
    pieces = chunks(steps, delta_steps_per_dispatch(states))
    if state:
        home = ctx.offset(state[0])
    elif len(pieces) == 1:
        home = 0  # one dispatch: the state never leaves the registers
    else:
        base, size = ctx.scratch
        inside = ctx.window_base <= base and base + size <= ctx.window_base + ctx.window_size
        if not inside or size < delta_scratch(node, ctx.graph):
            return host_steps(node, ctx)
        home = (base - ctx.window_base) // 4
    subs = {"N": states, "WG": states, "TT": max(1, min(steps, DELTA_TILE_ELEMENTS // states))}
    fields = {"heads": heads, "steps": steps, "q": ctx.offset(q), "k": ctx.offset(k), "v": ctx.offset(v),
              "g": ctx.offset(g), "beta": ctx.offset(beta), "o": ctx.offset(node), "state": home,
              "scale": 1.0 / math.sqrt(states)}
    last = len(pieces) - 1
    return [ctx.dispatch(SCAN_GATED_DELTA, node, (batch * heads, 1, 1), subs, False, start=start, count=count,
                         load=int(op.carry_state or i > 0), store=int(op.carry_state or i < last), **fields)
            for i, (start, count) in enumerate(pieces)]
