"""Trainer: a model graph compiled once with its gradients and optimizer updates, run step by step.

``step(batch)`` uploads a batch (or a list of ``accumulate`` micro-batches), runs forward, backward
and the in-place updates on the GPU, and returns the loss; only the loss is read back. The learning
rate, the update count and whether to update are the ``train/hyper`` input, so a schedule changes
nothing compiled. ``eval(batch)`` runs the forward alone. Parameters and optimizer state live in the
arena: ``params()`` / ``set_params`` read and write them, ``save`` / ``load`` checkpoint them (and
the step count) as safetensors.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import rlxpy
from rlxpy.errors import InputError
from rlxpy.ir.graph import Graph
from rlxpy.train.checkpoint import load_safetensors, save_safetensors
from rlxpy.train.graph import HYPER, TrainingGraph, training_graph
from rlxpy.train.optim import Optimizer

Batch = Mapping[str, np.ndarray]
Schedule = Callable[[int], float]


class Trainer:
    """Train ``graph``'s float Params (or ``params``) to lower ``loss`` with ``optimizer``.

    ``clip_norm`` > 0 clips the global gradient norm (torch's clip_grad_norm_); ``accumulate`` > 1
    averages the gradients of that many micro-batches per update; ``lr`` overrides the optimizer's
    learning rate with a number or a schedule ``lr(t)`` of the 1-based update count."""

    def __init__(self, graph: Graph, optimizer: Optimizer, loss: str = "loss",
                 params: Sequence[str] | None = None, clip_norm: float = 0.0, accumulate: int = 1,
                 lr: float | Schedule | None = None, **compile_options: Any) -> None:
        self.optimizer = optimizer
        self.accumulate = accumulate
        self.lr = optimizer.lr if lr is None else lr
        self.spec: TrainingGraph = training_graph(graph, loss, optimizer, params, clip_norm, accumulate)
        # params stay f32 in the arena: the updates write them in place, so no f16 shadow of a weight
        self.exe = rlxpy.compile(self.spec.graph, **{"f16_weights": (), **compile_options})
        self.steps = 0
        self.zero_state()

    # -- parameters ------------------------------------------------------------------------------
    @property
    def loss_name(self) -> str:
        return self.spec.loss

    def param_names(self) -> tuple[str, ...]:
        return self.spec.params

    def set_params(self, values: Mapping[str, np.ndarray]) -> None:
        for name, value in values.items():
            self.exe.set_param(name, value)

    def get_param(self, name: str) -> np.ndarray:
        return self.exe.read_node(name)

    def params(self) -> dict[str, np.ndarray]:
        return {name: self.get_param(name) for name in self.spec.params}

    def state_names(self) -> list[str]:
        """The optimizer state and accumulation params (all zeros before the first step)."""
        state = [n for names in self.spec.state.values() for n in names]
        return state + list(self.spec.accumulators.values())

    def zero_state(self) -> None:
        for name in self.state_names():
            self.exe.set_param(name, np.zeros(self.spec.graph[name].shape, np.float32))
        self.steps = 0

    # -- running ---------------------------------------------------------------------------------
    def learning_rate(self, t: int) -> float:
        return float(self.lr(t) if callable(self.lr) else self.lr)

    def step(self, batch: Batch | Sequence[Batch]) -> float:
        """One update from ``batch`` (``accumulate`` micro-batches as a list); the mean loss."""
        batches = [batch] if isinstance(batch, Mapping) else list(batch)
        if len(batches) != self.accumulate:
            raise InputError(f"Trainer.step: {len(batches)} micro-batches given, the trainer accumulates "
                             f"{self.accumulate} per update")
        t = self.steps + 1
        lr = self.learning_rate(t)
        losses = []
        for k, micro in enumerate(batches):
            hyper = np.array([lr, t, float(k == len(batches) - 1)], np.float32)
            out = self.exe.run({**micro, HYPER: hyper})
            losses.append(float(out[self.spec.loss]))
        self.steps = t
        return float(np.mean(losses))

    def eval(self, batch: Batch) -> float:
        """The loss on ``batch`` with the current parameters (the forward only, nothing updated)."""
        return float(self.exe.run(batch, outputs=[self.spec.loss])[self.spec.loss])

    # -- checkpoints -----------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        """Every param of the graph (trained or frozen), the optimizer state and the step count as a
        safetensors file."""
        tensors = {node.name: self.get_param(node.name) for node in self.spec.graph.params()}
        save_safetensors(path, tensors, {"steps": str(self.steps), "format": "rlxpy.train"})

    def load(self, path: str | Path) -> None:
        """Restore what ``save`` wrote (a file of parameters only leaves the optimizer state zero)."""
        tensors, metadata = load_safetensors(path)
        unknown = sorted(set(tensors) - {node.name for node in self.spec.graph.params()})
        if unknown:
            raise InputError(f"{path}: tensors {unknown[:5]} are not parameters or state of this trainer")
        self.zero_state()
        self.set_params(tensors)
        self.steps = int(metadata.get("steps", 0))
