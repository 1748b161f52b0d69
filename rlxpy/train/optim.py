"""Optimizer configurations: what state each keeps per parameter and the update node it adds to a
training graph (the optim family's SgdStep / AdamStep, run on the GPU in place)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from rlxpy.ir.graph import Graph, Node


@dataclass(frozen=True)
class SGD:
    """torch.optim.SGD: ``lr``, ``momentum``, ``dampening``, ``weight_decay``, ``nesterov``."""

    lr: float = 1e-2
    momentum: float = 0.0
    dampening: float = 0.0
    weight_decay: float = 0.0
    nesterov: bool = False

    @property
    def state(self) -> tuple[str, ...]:
        return ("momentum",) if self.momentum else ()

    def update(self, g: Graph, param: Node, grad: Node, state: Sequence[Node], hyper: Node,
               scale: Node | None, name: str) -> Node:
        return g.sgd_step(param, grad, hyper, state[0] if state else None, scale, self.momentum,
                          self.dampening, self.weight_decay, self.nesterov, name=name)


@dataclass(frozen=True)
class Adam:
    """torch.optim.Adam: ``lr``, ``betas``, ``eps``, ``weight_decay`` (added to the gradient)."""

    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    decoupled: ClassVar[bool] = False
    state: ClassVar[tuple[str, ...]] = ("exp_avg", "exp_avg_sq")

    def update(self, g: Graph, param: Node, grad: Node, state: Sequence[Node], hyper: Node,
               scale: Node | None, name: str) -> Node:
        return g.adam_step(param, grad, state[0], state[1], hyper, scale, self.betas[0], self.betas[1],
                           self.eps, self.weight_decay, self.decoupled, name=name)

    def update_group(self, g: Graph, quads: Sequence[Sequence[Node]], hyper: Node, scale: Node | None,
                     name: str) -> Node:
        """One node updating every (param, grad, exp_avg, exp_avg_sq) of ``quads``."""
        return g.adam_step_group(quads, hyper, scale, self.betas[0], self.betas[1], self.eps,
                                 self.weight_decay, self.decoupled, name=name)


@dataclass(frozen=True)
class AdamW(Adam):
    """torch.optim.AdamW: Adam with decoupled weight decay (``param *= 1 - lr * weight_decay``)."""

    weight_decay: float = 1e-2
    decoupled: ClassVar[bool] = True


Optimizer = SGD | Adam
