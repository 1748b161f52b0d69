"""The aten op table, CNN part two: ``F.interpolate`` kept whole as rlxpy's Resize op.

aot_autograd would decompose an interpolate call into index arithmetic and gathers (a bilinear one
into four gathers and a dozen element-wise ops), whatever the decomposition table says: torch
registers those decompositions on the upsample ops' composite kernels. So the backend rewrites the
dynamo graph first (``keep_interpolate``): each call Resize can run becomes ``rlxpy::interpolate``,
a torch custom op aot_autograd leaves alone (eager torch runs F.interpolate for it), and
``tr_interpolate`` translates it. Only graphs that need no gradient are rewritten: the custom op has
no backward, so a training graph keeps torch's decomposition.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx as fx
import torch.nn.functional as F

from rlxpy.errors import UnsupportedOpError
from rlxpy.frontends.torch_fx_translate import FxTranslator, translator
from rlxpy.ir import Node
from rlxpy.ir.ops.base import ResizeCoord, ResizeMode

#: F.interpolate modes Resize runs: (ResizeMode, its coordinates; linear modes: without align_corners)
RESIZE_MODES = {
    "nearest": (ResizeMode.NEAREST_FLOOR, ResizeCoord.ASYMMETRIC),
    "nearest-exact": (ResizeMode.NEAREST_ROUND_PREFER_CEIL, ResizeCoord.HALF_PIXEL),
    "linear": (ResizeMode.LINEAR, ResizeCoord.HALF_PIXEL),
    "bilinear": (ResizeMode.LINEAR, ResizeCoord.HALF_PIXEL),
    "trilinear": (ResizeMode.LINEAR, ResizeCoord.HALF_PIXEL),
}
_INTERPOLATE = inspect.signature(F.interpolate)
_SCHEMA = ("(Tensor x, SymInt[]? size, float[]? scale_factor, str mode, bool? align_corners, "
           "bool? recompute_scale_factor) -> Tensor")


def _interpolate(x: torch.Tensor, size: list[int] | None, scale_factor: list[float] | None, mode: str,
                 align_corners: bool | None, recompute_scale_factor: bool | None) -> torch.Tensor:
    return F.interpolate(x, size, scale_factor, mode, align_corners, recompute_scale_factor)


#: F.interpolate as one op: eager torch runs F.interpolate, and so do the fake tensors aot_autograd
#: traces with (the output shape)
interpolate_whole = torch.library.custom_op("rlxpy::interpolate", _interpolate, mutates_args=(),
                                            schema=_SCHEMA)
interpolate_whole.register_fake(_interpolate)


def _per_dim(value: Any, dims: int, kind: type) -> list | None:
    if value is None:
        return None
    values = list(value) if isinstance(value, (list, tuple)) else [value] * dims
    return [kind(v) for v in values]


def _static(value: Any) -> bool:
    values = value if isinstance(value, (list, tuple)) else [value]
    return all(v is None or isinstance(v, (int, float)) for v in values)


def keep_interpolate(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> None:
    """In a dynamo graph that needs no gradient (grad mode off, or no input requiring one), turn each
    F.interpolate call Resize can run (RESIZE_MODES, no antialias, static sizes and scales) into
    rlxpy::interpolate, in place."""
    if torch.is_grad_enabled() and any(getattr(x, "requires_grad", False) for x in example_inputs):
        return
    changed = False
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target is not F.interpolate:
            continue
        try:
            bound = _INTERPOLATE.bind(*node.args, **node.kwargs)
        except TypeError:
            continue
        bound.apply_defaults()
        a = bound.arguments
        x = a["input"]
        example = x.meta.get("example_value") if isinstance(x, fx.Node) else None
        if (a["mode"] not in RESIZE_MODES or a["antialias"] or example is None
                or not (_static(a["size"]) and _static(a["scale_factor"]))):
            continue
        dims = example.dim() - 2
        node.target = interpolate_whole
        node.args = (x, _per_dim(a["size"], dims, int), _per_dim(a["scale_factor"], dims, float), a["mode"],
                     a["align_corners"], a["recompute_scale_factor"])
        node.kwargs = {}
        changed = True
    if changed:
        gm.recompile()


@translator("interpolate")
def tr_interpolate(t: FxTranslator, node: fx.Node, a: dict[str, Any]) -> Node:
    """rlxpy::interpolate as Resize: the output sizes torch computed; steps 1/scale_factor where torch
    samples with the given scale (not recomputed), else in/out (ALIGN_CORNERS: its own ratio)."""
    mode, coord = RESIZE_MODES[a["mode"]]
    if mode is ResizeMode.LINEAR and a["align_corners"]:
        coord = ResizeCoord.ALIGN_CORNERS
    sizes = tuple(node.meta["val"].shape[2:])
    if not all(isinstance(d, int) for d in sizes):
        raise UnsupportedOpError(f"{t.where()}: interpolate to sizes {sizes}: rlxpy needs static sizes")
    scales = a["scale_factor"]
    steps = [1.0 / s for s in scales] if scales and not a["recompute_scale_factor"] else []
    return t.g.resize(t.tensor(a["x"]), sizes, mode, coord, steps, name=node.name)
