"""Training on the GPU: optimizer configurations (SGD, Adam, AdamW), the training graph (gradients,
clipping, accumulation and in-place updates added to a model graph) and the Trainer that runs it,
with safetensors checkpoints."""

from rlxpy.train.checkpoint import load_safetensors, save_safetensors
from rlxpy.train.graph import TrainingGraph, training_graph
from rlxpy.train.optim import SGD, Adam, AdamW, Optimizer
from rlxpy.train.trainer import Trainer

__all__ = ["SGD", "Adam", "AdamW", "Optimizer", "Trainer", "TrainingGraph", "load_safetensors",
           "save_safetensors", "training_graph"]
