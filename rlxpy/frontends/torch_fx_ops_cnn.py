"""The aten op table, part three: convolutional networks (convolution, pooling, the channel norms,
padding, repeat).

Same conventions as torch_fx_ops.py. Inference batch norm after a convolution whose weights and
statistics are all weights (parameters or buffers) is folded into that convolution: its weight and
bias are recomputed by torch when the weights are uploaded (a *derived* host value, see
``Derived``), so the graph holds one Conv with a bias and the BatchNorm disappears. Batch norm with
run-time statistics, or after anything else, is the BatchNorm op. Instance norm (torch lowers it to
a training-mode batch norm over [1, N*C, ...]) and group norm are GroupNorm. ``interpolate`` is the
Resize op in graphs that need no gradient (torch_fx_ops_resize.py), else torch's decomposition into
index arithmetic and gathers, which the tables translate; hardswish / hardsigmoid stay whole (the
HARDSWISH / HARDSIGMOID activations, torch_fx_ops.py) and relu6 arrives as a clamp.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.fx as fx

from rlxpy.errors import UnsupportedOpError
from rlxpy.frontends.onnx_ops_cnn import add_channel_bias, pad_axis
from rlxpy.frontends.torch_fx_ops_grad import batch_statistics, max_pool_indices, reads_more_than_first
from rlxpy.frontends.torch_fx_translate import FxTranslator, Host, translator
from rlxpy.ir import DType, Node
from rlxpy.ir.ops.base import ReduceOp

T = FxTranslator
Args = dict[str, Any]
aten = torch.ops.aten


class Derived:
    """A host value computed by ``target(*args)`` from other host values (fx nodes) when the weights
    are uploaded. It quacks like the fx.Node the translator's host machinery reads: ``op``,
    ``target``, ``args``, ``kwargs``, ``name`` and ``meta["val"]`` (a meta tensor: shape, dtype)."""

    op = "call_function"

    def __init__(self, name: str, target: Callable[..., torch.Tensor], args: tuple, shape: Sequence[int]
                 ) -> None:
        self.name = name
        self.target = target
        self.args = args
        self.kwargs: dict[str, Any] = {}
        self.meta = {"val": torch.empty(tuple(shape), dtype=torch.float32, device="meta")}


def derived_param(t: T, name: str, target: Callable[..., torch.Tensor], sources: tuple,
                  shape: Sequence[int]) -> Node:
    """A Param holding ``target(*sources)`` (sources: host fx nodes or plain values), recomputed by
    torch whenever the weights are uploaded."""
    value = Derived(name, target, sources, shape)
    t.host_nodes.append(value)  # type: ignore[arg-type]  (evaluated after its sources, by the upload)
    return t.tensor(Host(value), DType.F32)  # type: ignore[arg-type]


def _ints(value: Any, what: str) -> tuple[int, ...]:
    values = [value] if isinstance(value, int) else list(value or [])
    if not all(isinstance(v, int) for v in values):
        raise UnsupportedOpError(f"{what} {value!r}: rlxpy needs static ints")
    return tuple(int(v) for v in values)


def _only_first_output(t: T, node: fx.Node, what: str) -> None:
    """Ops returning (out, statistics / indices): rlxpy computes the first only."""
    for user in node.users:
        if user.target.__name__ != "getitem" or user.args[1] != 0:
            raise t.unsupported(f"the {what} output of {node.target}")


def _is_host(t: T, value: Any) -> bool:
    """An absent optional input, or a value computed from weights alone."""
    return value is None or isinstance(value, fx.Node) and isinstance(t.env.get(value), Host)


# -- convolution ----------------------------------------------------------------------------------
@translator("convolution")
def tr_convolution(t: T, node: fx.Node, a: Args) -> Node:
    """torch's convolution (conv1d/2d/3d and conv_transpose1d/2d/3d); the bias is a per-channel add."""
    x, w = t.tensor(a["input"], DType.F32), t.tensor(a["weight"], DType.F32)
    bias = t.tensor(a["bias"], DType.F32) if a["bias"] is not None else None
    return _emit_conv(t, node, a, x, w, bias)


def _emit_conv(t: T, node: fx.Node, a: Args, x: Node, w: Node, bias: Node | None) -> Node:
    stride, padding = _ints(a["stride"], "stride"), _ints(a["padding"], "padding")
    dilation, groups = _ints(a["dilation"], "dilation"), int(a["groups"])
    if a["transposed"]:
        extra = _ints(a["output_padding"], "output_padding")
        y = t.g.conv_transpose(x, w, stride, padding, extra, dilation, groups)
    else:
        y = t.g.conv(x, w, stride, padding, dilation, groups)
    return add_channel_bias(t.g, y, bias, node.name)


# -- batch norm, group norm, instance norm --------------------------------------------------------------
def _bn_scale(gamma: torch.Tensor | None, var: torch.Tensor, eps: float) -> torch.Tensor:
    scale = torch.rsqrt(var.double() + eps)
    return scale * gamma.double() if gamma is not None else scale


def fold_conv_weight(w: torch.Tensor, gamma: torch.Tensor | None, var: torch.Tensor, eps: float
                     ) -> torch.Tensor:
    """The conv weight with the batch norm's per-channel scale gamma / sqrt(var + eps) folded in."""
    scale = _bn_scale(gamma, var, eps)
    return (w.double() * scale.reshape((-1,) + (1,) * (w.dim() - 1))).float()


def fold_conv_bias(bias: torch.Tensor | None, gamma: torch.Tensor | None, beta: torch.Tensor | None,
                   mean: torch.Tensor, var: torch.Tensor, eps: float) -> torch.Tensor:
    """(bias - mean) * gamma / sqrt(var + eps) + beta: the bias of the folded conv."""
    shifted = (bias.double() if bias is not None else 0.0) - mean.double()
    out = shifted * _bn_scale(gamma, var, eps)
    return (out + beta.double() if beta is not None else out).float()


def _foldable_conv(t: T, bn: fx.Node, a: Args) -> fx.Node | None:
    """The convolution bn reads, when folding bn into it is exact up to rounding: a forward conv read by
    bn alone, whose weight, bias and the statistics of bn are all host values (weights)."""
    conv = bn.args[0]
    if not isinstance(conv, fx.Node) or conv.target is not aten.convolution.default or len(conv.users) != 1:
        return None
    _, weight, bias, _, _, _, transposed, *_ = conv.args
    stats = [bn.args[i] for i in range(1, 5)]
    if transposed or not all(_is_host(t, v) for v in [weight, bias, *stats]):
        return None
    return conv


@translator("_native_batch_norm_legit_no_training")
def tr_batch_norm(t: T, node: fx.Node, a: Args) -> list[Any]:
    """Inference batch norm: folded into the conv before it (see the module docstring), else BatchNorm."""
    _only_first_output(t, node, "statistics")
    eps = float(a["eps"])
    conv = _foldable_conv(t, node, a)
    if conv is not None:
        _, weight, bias, *_ = conv.args
        gamma, beta, mean, var = (node.args[i] for i in range(1, 5))
        shape = tuple(weight.meta["val"].shape)
        w = derived_param(t, f"{conv.name}_bn_weight", fold_conv_weight, (weight, gamma, var, eps), shape)
        b = derived_param(t, f"{conv.name}_bn_bias", fold_conv_bias, (bias, gamma, beta, mean, var, eps),
                          shape[:1])
        x = t.tensor(t.env[conv.args[0]], DType.F32)
        return [_emit_conv(t, node, t.bind(conv), x, w, b), None, None]
    x = t.tensor(a["input"], DType.F32)
    channels = int(x.shape[1])
    gamma, beta = _affine(t, a["weight"], a["bias"], channels)
    mean, var = t.tensor(a["running_mean"], DType.F32), t.tensor(a["running_var"], DType.F32)
    y = t.g.batch_norm(x, mean, var, gamma, beta, eps=eps, name=node.name)
    return [y, None, None]


def _affine(t: T, weight: Any, bias: Any, channels: int) -> tuple[Node, Node]:
    gamma = t.tensor(weight, DType.F32) if weight is not None \
        else t.constant(np.ones([channels], np.float32), DType.F32)
    beta = t.tensor(bias, DType.F32) if bias is not None \
        else t.constant(np.zeros([channels], np.float32), DType.F32)
    return gamma, beta


@translator("_native_batch_norm_legit")
def tr_batch_norm_batch_stats(t: T, node: fx.Node, a: Args) -> list[Any]:
    """Batch norm with the batch's own statistics, as instance_norm lowers to ([1, N*C, ...]): GroupNorm
    with one group per channel over (batch, positions). With running statistics it would update them
    (training mode): refused."""
    if a.get("running_mean") is not None or a.get("running_var") is not None:
        raise t.unsupported("batch norm in training mode (it updates the running statistics in place, "
                            "which a translated graph cannot): it runs in torch; model.eval() avoids it")
    x = t.tensor(a["input"], DType.F32)
    batch, channels = int(x.shape[0]), int(x.shape[1])
    gamma, beta = _affine(t, a["weight"], a["bias"], channels)
    # a training graph saves the statistics for the backward
    stats = batch_statistics(t, x, float(a["eps"])) if reads_more_than_first(node) else (None, None)
    if batch == 1:
        return [t.g.group_norm(x, channels, gamma, beta, eps=float(a["eps"]), name=node.name), *stats]
    spatial = math.prod(int(d) for d in x.shape[2:])
    moved = t.g.transpose(t.g.reshape(x, [batch, channels, spatial]), [1, 0, 2])
    normed = t.g.group_norm(t.g.reshape(moved, [1, channels, batch * spatial]), channels, gamma, beta,
                            eps=float(a["eps"]))
    back = t.g.transpose(t.g.reshape(normed, [channels, batch, spatial]), [1, 0, 2])
    return [t.g.reshape(back, x.shape, name=node.name), *stats]


@translator("native_group_norm")
def tr_group_norm(t: T, node: fx.Node, a: Args) -> list[Any]:
    _only_first_output(t, node, "statistics")
    x = t.tensor(a["input"], DType.F32)
    gamma, beta = _affine(t, a["weight"], a["bias"], int(x.shape[1]))
    y = t.g.group_norm(x, int(a["group"]), gamma, beta, eps=float(a["eps"]), name=node.name)
    return [y, None, None]


# -- pooling ----------------------------------------------------------------------------------------
@translator("max_pool2d_with_indices", "max_pool3d_with_indices")
def tr_max_pool(t: T, node: fx.Node, a: Args) -> list[Any]:
    """The values, and the indices where the graph reads them (a training graph saves them)."""
    kernel = _ints(a["kernel_size"], "kernel_size")
    stride = _ints(a["stride"], "stride") or kernel
    x = t.tensor(a["self"], DType.F32)
    padding, dilation = _ints(a["padding"], "padding"), _ints(a["dilation"], "dilation")
    y = t.g.pool(x, ReduceOp.MAX, kernel, stride, padding, node.name, dilation=dilation,
                 ceil_mode=bool(a["ceil_mode"]))
    return [y, max_pool_indices(t, x, y) if reads_more_than_first(node) else None]


@translator("avg_pool2d", "avg_pool3d", "avg_pool1d")
def tr_avg_pool(t: T, node: fx.Node, a: Args) -> Node:
    kernel = _ints(a["kernel_size"], "kernel_size")
    stride = _ints(a["stride"], "stride") or kernel
    padding = _ints(a["padding"], "padding")
    return t.g.pool(t.tensor(a["self"], DType.F32), ReduceOp.MEAN, kernel, stride, padding, node.name,
                    ceil_mode=bool(a["ceil_mode"]), count_include_pad=bool(a["count_include_pad"]),
                    divisor=int(a.get("divisor_override") or 0))


@translator("_adaptive_avg_pool2d", "_adaptive_avg_pool3d", "adaptive_avg_pool1d")
def tr_adaptive_avg_pool(t: T, node: fx.Node, a: Args) -> Node:
    size = _ints(a["output_size"], "output_size")
    return t.g.adaptive_pool(t.tensor(a["self"], DType.F32), ReduceOp.MEAN, size, node.name)


@translator("adaptive_max_pool2d", "adaptive_max_pool3d", "adaptive_max_pool1d")
def tr_adaptive_max_pool(t: T, node: fx.Node, a: Args) -> list[Any]:
    """The values, and the indices where the graph reads them (a training graph saves them)."""
    size = _ints(a["output_size"], "output_size")
    x = t.tensor(a["self"], DType.F32)
    y = t.g.adaptive_pool(x, ReduceOp.MAX, size, node.name)
    return [y, max_pool_indices(t, x, y) if reads_more_than_first(node) else None]


# -- padding, repeat ---------------------------------------------------------------------------------
@translator("constant_pad_nd")
def tr_constant_pad(t: T, node: fx.Node, a: Args) -> Node:
    """torch.nn.functional.pad(mode="constant"): pairs from the last dim backwards; negative crops."""
    x = t.tensor(a["self"])
    pads = _ints(a["pad"], "pad")
    value = float(a["value"]) if x.dtype.is_float else int(a["value"])
    for k in range(len(pads) // 2):
        x = pad_axis(t.g, x, x.rank - 1 - k, pads[2 * k], pads[2 * k + 1], value)
    return x


@translator("repeat")
def tr_repeat(t: T, node: fx.Node, a: Args) -> Node:
    """torch's Tensor.repeat: tile x; each dim becomes (repeat, size) expanded, then merged."""
    x = t.tensor(a["self"])
    repeats = _ints(a["repeats"], "repeats")
    shape = [1] * (len(repeats) - x.rank) + [int(d) for d in x.shape]
    spread = [d for size in shape for d in (1, size)]
    tiled = [d for r, size in zip(repeats, shape) for d in (r, size)]
    expanded = t.g.expand(t.g.reshape(x, spread), tiled)
    return t.g.reshape(expanded, [r * size for r, size in zip(repeats, shape)], name=node.name)
