"""The training graph: the model's forward, its gradients (ir/passes/autodiff.py), the optional global-norm
clipping factor and gradient accumulation, and one in-place update per parameter. Names it adds: the
input ``train/hyper`` (f32[3]: lr, update count t, apply), the params ``train/<state>/<param>``
(optimizer state, e.g. ``train/exp_avg/wte``) and ``train/acc/<param>`` (accumulated gradients, with
``accumulate`` > 1), and the nodes ``train/scale`` and ``train/update/<param>`` (Adam: one node per group
of parameters, named after its first). Its only output is the loss: a run of every output runs the
updates (they come after every node that reads the parameters), a run of the loss alone is the forward.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rlxpy.errors import GraphError, where
from rlxpy.ir import ops
from rlxpy.ir.graph import Graph, Node
from rlxpy.ir.passes.autodiff import grad
from rlxpy.train.optim import Adam, Optimizer

HYPER = "train/hyper"


@dataclass(frozen=True)
class TrainingGraph:
    graph: Graph
    loss: str
    params: tuple[str, ...]
    #: param -> its optimizer state params, in the optimizer's order
    state: dict[str, tuple[str, ...]]
    #: param -> its accumulation buffer (empty without accumulation)
    accumulators: dict[str, str]


#: Adam's updates go up to GROUP_PARAMS parameters (in graph order) into one AdamStepGroup node, one GPU
#: dispatch, while their tensors (param, grad and the two states) total at most GROUP_BYTES: the many
#: small updates (biases, norm gains) cost a dispatch each otherwise, and a cap keeps a group's tensors
#: within a device's bind window.
GROUP_PARAMS = 8
GROUP_BYTES = 32 << 20


def update_groups(g: Graph, names: Sequence[str]) -> list[list[str]]:
    """``names`` cut into runs of at most GROUP_PARAMS whose four tensors total at most GROUP_BYTES."""
    groups: list[list[str]] = []
    size = 0
    for name in names:
        nbytes = 4 * g[name].numel * g[name].dtype.itemsize
        if not groups or len(groups[-1]) == GROUP_PARAMS or size + nbytes > GROUP_BYTES:
            groups.append([])
            size = 0
        groups[-1].append(name)
        size += nbytes
    return groups


def training_graph(source: Graph, loss: str, optimizer: Optimizer, params: Sequence[str] | None = None,
                   clip_norm: float = 0.0, accumulate: int = 1) -> TrainingGraph:
    """``source`` (a graph computing ``loss``) extended with gradients and updates of ``params``
    (default: every float Param; one the loss does not depend on is left as it is, as torch's
    optimizers skip a parameter without a gradient)."""
    if accumulate < 1:
        raise GraphError(f"accumulate must be >= 1 micro-batches, got {accumulate}")
    result = grad(source, loss, params)
    g = result.graph
    # like torch, a parameter without a gradient (the loss does not depend on it) is not updated
    names = tuple(name for name in result.grads if name not in result.unreached)
    for name in names:
        if not isinstance(g[name].op, ops.Param):
            raise GraphError(f"{where(g[name])}: only Params are trained")
    hyper = g.input(HYPER, (3,))
    grads = {name: g[result.grads[name]] for name in names}
    accumulators, totals = {}, dict(grads)
    if accumulate > 1:
        for name in names:
            acc = g.param(f"train/acc/{name}", g[name].shape)
            accumulators[name] = acc.name
            totals[name] = g.add(acc, grads[name], name=f"train/total/{name}")
    scale: Node | None = None
    if clip_norm or accumulate > 1:
        scale = g.grad_clip_scale(list(totals.values()), clip_norm, 1.0 / accumulate, name="train/scale")
    state = {}
    for name in names:
        nodes = [g.param(f"train/{kind}/{name}", g[name].shape) for kind in optimizer.state]
        state[name] = tuple(n.name for n in nodes)
    grouped = isinstance(optimizer, Adam)
    for group in update_groups(g, names) if grouped else [[name] for name in names]:
        first = group[0]
        if len(group) == 1:
            optimizer.update(g, g[first], totals[first], [g[s] for s in state[first]], hyper, scale,
                             f"train/update/{first}")
        else:
            quads = [[g[n], totals[n], *(g[s] for s in state[n])] for n in group]
            optimizer.update_group(g, quads, hyper, scale, f"train/update/{first}")  # type: ignore[union-attr]
    for name, acc in accumulators.items():  # after every reader of the buffers
        g.accumulate_grad(g[acc], grads[name], hyper, name=f"train/accumulate/{name}")
    g.outputs[:] = [g[result.loss].id]
    return TrainingGraph(g, result.loss, names, state, accumulators)
