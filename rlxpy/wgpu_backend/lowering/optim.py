"""Optim family on f32: the updates are one optim_update dispatch each (one thread per element, the
parameter and state written in place: the kernel declares them ``mutates``), and an AdamStepGroup one
optim_adam_group dispatch per 8 parameters (the dispatch's fixed cost, not its bytes, is what a bias or
a norm gain's update costs); GradClipScale is one
optim_norm dispatch per 8 gradients (partial sums of squares, one per workgroup, into declared scratch)
and one that combines them into the factor. A GradClipScale whose scratch lies outside its bind window
runs its reference as a host step.
"""

from __future__ import annotations

import math

from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Graph, Node
from rlxpy.wgpu_backend.host_step import host_steps
from rlxpy.wgpu_backend.kernels.contract import accepts
from rlxpy.wgpu_backend.kernels.params import F32, U32, kernel, params
from rlxpy.wgpu_backend.lowering.backward import scratch_in_window
from rlxpy.wgpu_backend.schedule import LowerCtx, Step, lowers

OPTIM_UPDATE = kernel("optim_update", params(
    "OptimUpdateParams", n=U32, param=U32, grad=U32, m=U32, v=U32, hyper=U32, scale=U32, token=U32,
    has_scale=U32, has_state=U32, beta1=F32, beta2=F32, eps=F32, weight_decay=F32, decoupled=U32,
    momentum=F32, dampening=F32, nesterov=U32), dtypes=accepts(rest=DType.F32, out=DType.F32),
    mutates=("param", "m", "v"))
#: parameters per optim_adam_group dispatch (its fields param0..7, grad0..7, m0..7, v0..7, n0..7)
GROUP_SLOTS = 8
GROUP_LANES = 256
MAX_GROUPS_X = 65535
_SLOT_FIELDS = ("param", "grad", "m", "v", "n")
OPTIM_ADAM_GROUP = kernel("optim_adam_group", params(
    "OptimAdamGroupParams", first=U32, hyper=U32, scale=U32, token=U32, has_scale=U32, beta1=F32, beta2=F32,
    eps=F32, weight_decay=F32, decoupled=U32,
    **{f"{name}{k}": U32 for name in _SLOT_FIELDS for k in range(GROUP_SLOTS)}),
    dtypes=accepts(rest=DType.F32, out=DType.F32),
    mutates=tuple(f"{name}{k}" for name in ("param", "m", "v") for k in range(GROUP_SLOTS)))
NORM_LANES = 256
NORM_CHUNK = 16  # elements per lane of a partial sum
NORM_PER_DISPATCH = 8  # gradients summed by one optim_norm dispatch (its fields x0..x7, n0..n7, slot0..slot7)
OPTIM_NORM = kernel("optim_norm", params(
    "OptimNormParams", partial=U32, y=U32, max_norm=F32, scale=F32,
    **{f"{name}{k}": U32 for name in ("x", "n", "slot") for k in range(NORM_PER_DISPATCH)}),
    dtypes=accepts(rest=DType.F32, out=DType.F32), shared_bytes=lambda s: 4 * int(s["WG"]))
SGD, ADAM, ACCUMULATE = 0, 1, 2  # optim_update's MODE

_NO_STATE = dict(m=0, v=0, has_state=0, beta1=0.0, beta2=0.0, eps=0.0, weight_decay=0.0, decoupled=0,
                 momentum=0.0, dampening=0.0, nesterov=0)


def _update(node: Node, ctx: LowerCtx, mode: int, state: list[Node], hyper: Node, scale: Node | None,
            **fields: float | int) -> list[Step]:
    param, grad = ctx.inputs(node)[:2]
    defaults = {**_NO_STATE, **{name: ctx.offset(t) for name, t in zip(("m", "v"), state)}}
    # m/v fields of an absent state point at the param itself: declared mutated, never written
    for name in ("m", "v")[len(state):]:
        defaults[name] = ctx.offset(param)
    return [ctx.dispatch(OPTIM_UPDATE, node, ctx.grid_1d(max(param.numel, 1)), {"MODE": mode},
                         scalable=False, n=param.numel, param=ctx.offset(param), grad=ctx.offset(grad),
                         hyper=ctx.offset(hyper), scale=ctx.offset(scale) if scale is not None else 0,
                         token=ctx.offset(node), has_scale=int(scale is not None), **{**defaults, **fields})]


@lowers(ops.SgdStep)
def lower_sgd_step(node: Node, ctx: LowerCtx) -> list[Step]:
    op: ops.SgdStep = node.op  # type: ignore[assignment]
    ins = ctx.inputs(node)
    state = ins[2:2 + op.state]
    hyper, *scale = ins[2 + op.state:]
    return _update(node, ctx, SGD, state, hyper, scale[0] if scale else None, has_state=op.state,
                   weight_decay=op.weight_decay, momentum=op.momentum, dampening=op.dampening,
                   nesterov=int(op.nesterov))


@lowers(ops.AdamStep)
def lower_adam_step(node: Node, ctx: LowerCtx) -> list[Step]:
    op: ops.AdamStep = node.op  # type: ignore[assignment]
    ins = ctx.inputs(node)
    hyper, *scale = ins[4:]
    return _update(node, ctx, ADAM, ins[2:4], hyper, scale[0] if scale else None, has_state=1, beta1=op.beta1,
                   beta2=op.beta2, eps=op.eps, weight_decay=op.weight_decay, decoupled=int(op.decoupled))


@lowers(ops.AdamStepGroup)
def lower_adam_step_group(node: Node, ctx: LowerCtx) -> list[Step]:
    """One optim_adam_group dispatch per GROUP_SLOTS parameters (grid y = the parameter; x = blocks of
    the largest, in several dispatches past MAX_GROUPS_X); unused slots repeat the first parameter's
    offsets with n = 0 (declared mutated, never written)."""
    op: ops.AdamStepGroup = node.op  # type: ignore[assignment]
    ins = ctx.inputs(node)
    quads = [ins[4 * i:4 * i + 4] for i in range(op.count)]
    hyper, *scale = ins[4 * op.count:]
    fields = dict(hyper=ctx.offset(hyper), scale=ctx.offset(scale[0]) if scale else 0, token=ctx.offset(node),
                  has_scale=int(bool(scale)), beta1=op.beta1, beta2=op.beta2, eps=op.eps,
                  weight_decay=op.weight_decay, decoupled=int(op.decoupled))
    steps = []
    for first in range(0, op.count, GROUP_SLOTS):
        group = quads[first:first + GROUP_SLOTS]
        slots: dict[str, int] = {}
        for k in range(GROUP_SLOTS):
            quad = group[k] if k < len(group) else group[0]
            slots |= {f"{name}{k}": ctx.offset(t) for name, t in zip(_SLOT_FIELDS, quad)}
            slots[f"n{k}"] = quad[0].numel if k < len(group) else 0
        blocks = max(1, max(math.ceil(quad[0].numel / GROUP_LANES) for quad in group))
        operands = [t for quad in group for t in quad] + [hyper, *scale]
        for x0 in range(0, blocks, MAX_GROUPS_X):
            grid = (min(MAX_GROUPS_X, blocks - x0), len(group), 1)
            steps.append(ctx.dispatch(OPTIM_ADAM_GROUP, node, grid, {"WG": GROUP_LANES}, scalable=False,
                                      operands=operands, first=x0 * GROUP_LANES, **fields, **slots))
    return steps


@lowers(ops.AccumulateGrad)
def lower_accumulate_grad(node: Node, ctx: LowerCtx) -> list[Step]:
    return _update(node, ctx, ACCUMULATE, [], ctx.inputs(node)[2], None)


def _partials(x: Node) -> int:
    return max(1, math.ceil(x.numel / (NORM_LANES * NORM_CHUNK)))


def norm_scratch(node: Node, graph: Graph) -> int:
    return 4 * sum(_partials(graph.nodes[i]) for i in node.inputs)


@lowers(ops.GradClipScale, scratch=norm_scratch)
def lower_grad_clip_scale(node: Node, ctx: LowerCtx) -> list[Step]:
    op: ops.GradClipScale = node.op  # type: ignore[assignment]
    partial = scratch_in_window(ctx, norm_scratch(node, ctx.graph))
    if partial is None:
        return host_steps(node, ctx)
    fields = dict(partial=partial, y=ctx.offset(node), max_norm=op.max_norm, scale=op.scale)
    unused = {f"{name}{k}": 0 for name in ("x", "n", "slot") for k in range(NORM_PER_DISPATCH)}
    grads = ctx.inputs(node) if op.max_norm else []
    steps, slot = [], 0
    subs = {"PHASE": 0, "CHUNK": NORM_CHUNK, "WG": NORM_LANES}
    for first in range(0, len(grads), NORM_PER_DISPATCH):
        group = grads[first:first + NORM_PER_DISPATCH]
        slots = {}
        for k, x in enumerate(group):
            slots |= {f"x{k}": ctx.offset(x), f"n{k}": x.numel, f"slot{k}": slot}
            slot += _partials(x)
        grid = (max(_partials(x) for x in group), len(group), 1)
        steps.append(ctx.dispatch(OPTIM_NORM, node, grid, subs, scalable=False, operands=group,
                                  **{**fields, **unused, **slots}))
    subs = {"PHASE": 1, "CHUNK": NORM_CHUNK, "WG": NORM_LANES}
    steps.append(ctx.dispatch(OPTIM_NORM, node, (1, 1, 1), subs, scalable=False,
                              **{**fields, **unused, "n0": slot}))
    return steps
