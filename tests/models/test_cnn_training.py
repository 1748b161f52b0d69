"""A tiny CNN (conv - batch norm with batch statistics - relu - max pool - conv - avg pool - linear,
mean cross-entropy) trained with AdamW by rlxpy's Trainer and by torch.optim.AdamW (torch's own
conv2d, batch_norm(training=True), max_pool2d, avg_pool2d) from the same initialisation on the same
batches. Per-step losses must agree within 1e-4 relative; every step of the training graph runs on
the GPU (no host step)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

import rlxpy
from rlxpy.train import AdamW, Trainer

BATCH, CHANNELS, SIZE, CLASSES = 3, 3, 11, 5
C1, C2 = 6, 4
STEPS, LR, WEIGHT_DECAY, EPS = 4, 1e-2, 0.05, 1e-5
SHAPES = {"conv1": (C1, CHANNELS, 3, 3), "b1": (C1,), "gamma": (C1,), "beta": (C1,),
          "conv2": (C2, C1 // 2, 3, 3), "b2": (C2,), "fc": (C2 * 2 * 2, CLASSES), "fc_b": (CLASSES,)}


def init_params(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in SHAPES.items():
        if name == "gamma":
            value = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name == "beta" or len(shape) == 1:
            value = 0.1 * rng.standard_normal(shape)
        else:
            value = rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]) if len(shape) == 4 else shape[0])
        out[name] = value.astype(np.float32)
    return out


def build_cnn() -> rlxpy.Graph:
    g = rlxpy.Graph("tiny_cnn")
    images = g.input("images", (BATCH, CHANNELS, SIZE, SIZE))
    labels = g.input("labels", (BATCH,), "i32")
    w = {name: g.param(name, shape) for name, shape in SHAPES.items()}
    x = g.conv(images, w["conv1"], stride=1, padding=1, bias=w["b1"])  # [B, 6, 11, 11]
    # batch norm with batch statistics: a GroupNorm over [1, C, B*H*W]
    per_channel = g.reshape(g.transpose(x, (1, 0, 2, 3)), (1, C1, BATCH * SIZE * SIZE))
    normed = g.group_norm(per_channel, C1, w["gamma"], w["beta"], eps=EPS)
    x = g.transpose(g.reshape(normed, (C1, BATCH, SIZE, SIZE)), (1, 0, 2, 3))
    x = g.max_pool(g.relu(x), 3, 2, 1)  # [B, 6, 6, 6]
    x = g.conv(x, w["conv2"], stride=2, padding=1, groups=2, bias=w["b2"])  # [B, 4, 3, 3]
    x = g.avg_pool(x, 2, 1, ceil_mode=False)  # [B, 4, 2, 2]
    logits = g.add(g.matmul(g.reshape(x, (BATCH, C2 * 4)), w["fc"]), w["fc_b"])
    g.output(g.cross_entropy(logits, labels, "mean", name="loss"))
    return g


def torch_loss(w: dict[str, torch.Tensor], images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    x = F.conv2d(images, w["conv1"], w["b1"], 1, 1)
    x = F.batch_norm(x, None, None, w["gamma"], w["beta"], training=True, eps=EPS)
    x = F.max_pool2d(F.relu(x), 3, 2, 1)
    x = F.conv2d(x, w["conv2"], w["b2"], 2, 1, groups=2)
    x = F.avg_pool2d(x, 2, 1)
    logits = x.reshape(BATCH, -1) @ w["fc"] + w["fc_b"]
    return F.cross_entropy(logits, labels.long())


def torch_train(params0: dict[str, np.ndarray], batches: list[dict]) -> list[float]:
    w = {k: torch.nn.Parameter(torch.tensor(v)) for k, v in params0.items()}
    opt = torch.optim.AdamW(list(w.values()), lr=LR, weight_decay=WEIGHT_DECAY)
    losses = []
    for batch in batches:
        opt.zero_grad()
        loss = torch_loss(w, torch.tensor(batch["images"]), torch.tensor(batch["labels"]))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def batches(count: int, seed: int = 1) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"images": rng.standard_normal((BATCH, CHANNELS, SIZE, SIZE)).astype(np.float32),
             "labels": rng.integers(0, CLASSES, BATCH).astype(np.int32)} for _ in range(count)]


def test_tiny_cnn_training_follows_torch(device):
    params = init_params()
    data = batches(STEPS)
    trainer = Trainer(build_cnn(), AdamW(lr=LR, weight_decay=WEIGHT_DECAY))
    steps = trainer.exe.schedule.steps
    assert not [s.label for s in steps if s.kind == "host"], "host steps in the training step"
    assert any(s.kernel == "backward_pool" for s in steps)
    trainer.set_params(params)
    got = np.array([trainer.step(b) for b in data])
    want = np.array(torch_train(params, data))
    relative = np.abs(got - want) / np.abs(want)
    assert relative.max() < 1e-4, list(zip(got, want))
    assert got[-1] < got[0]  # it learns
