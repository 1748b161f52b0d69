"""A tiny Mamba-1 language model (embedding, per layer: RMSNorm, in_proj, the depthwise causal conv,
SiLU, x_proj, softplus dt, SelectiveScan with the D skip, SiLU gate, out_proj, residual; final norm,
lm_head, mean cross-entropy) trained with AdamW by rlxpy's Trainer and by torch.optim.AdamW from the
same initialisation on the same batches. The torch model is written out independently below (the
scan as a plain loop). Per-step losses must agree within 1e-3 relative; every step runs on the GPU."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

import rlxpy
from rlxpy.train import AdamW, Trainer


@dataclass(frozen=True)
class TinyMamba:
    vocab: int = 61
    d_model: int = 16
    inner: int = 33
    states: int = 8
    dt_rank: int = 3
    conv: int = 4
    layers: int = 2
    batch: int = 2
    seq: int = 17
    eps: float = 1e-5


CFG = TinyMamba()
STEPS, LR, WEIGHT_DECAY = 6, 3e-3, 0.1


def param_shapes(cfg: TinyMamba) -> dict[str, tuple[int, ...]]:
    shapes = {"embed": (cfg.vocab, cfg.d_model), "norm_f": (cfg.d_model,),
              "lm_head": (cfg.d_model, cfg.vocab)}
    for layer in range(cfg.layers):
        p = f"l{layer}."
        shapes |= {p + "norm": (cfg.d_model,), p + "in_proj": (cfg.d_model, 2 * cfg.inner),
                   p + "conv_w": (cfg.conv, cfg.inner), p + "conv_b": (cfg.inner,),
                   p + "x_proj": (cfg.inner, cfg.dt_rank + 2 * cfg.states),
                   p + "dt_proj": (cfg.dt_rank, cfg.inner),
                   p + "dt_b": (cfg.inner,), p + "A_log": (cfg.inner, cfg.states), p + "D": (cfg.inner,),
                   p + "out_proj": (cfg.inner, cfg.d_model)}
    return shapes


def init_params(cfg: TinyMamba, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in param_shapes(cfg).items():
        if name.endswith("norm") or name == "norm_f" or name.endswith(".D"):
            value = np.ones(shape)
        elif name.endswith("A_log"):
            value = np.log(np.tile(np.arange(1, cfg.states + 1), (cfg.inner, 1)))  # Mamba's S4D-real init
        elif name.endswith("dt_b"):
            value = np.log(np.expm1(rng.uniform(0.001, 0.1, shape)))  # softplus^-1 of dt in [1e-3, 0.1]
        else:
            value = rng.standard_normal(shape) * (0.5 / np.sqrt(shape[0]))
        out[name] = value.astype(np.float32)
    return out


def build_tiny_mamba(cfg: TinyMamba) -> rlxpy.Graph:
    g = rlxpy.Graph("tiny_mamba")
    tokens = g.input("tokens", (cfg.batch, cfg.seq), "i32")
    targets = g.input("targets", (cfg.batch, cfg.seq), "i32")
    w = {name: g.param(name, shape) for name, shape in param_shapes(cfg).items()}
    x = g.gather(w["embed"], tokens)
    pad = g.constant(np.zeros((cfg.batch, cfg.conv - 1, cfg.inner), np.float32))
    i, n, r = cfg.inner, cfg.states, cfg.dt_rank
    for layer in range(cfg.layers):
        p = f"l{layer}."
        proj = g.matmul(g.rms_norm(x, w[p + "norm"], eps=cfg.eps), w[p + "in_proj"])
        xs, gate = g.narrow(proj, 2, 0, i), g.narrow(proj, 2, i, i)
        window = g.concat([pad, xs], 1)  # causal: conv - 1 zero steps before the first
        conv = w[p + "conv_b"]
        for j in range(cfg.conv):
            conv = g.add(conv, g.mul(g.narrow(window, 1, j, cfg.seq), g.narrow(w[p + "conv_w"], 0, j, 1)))
        u = g.silu(conv)
        ssm = g.matmul(u, w[p + "x_proj"])
        dt_in, bm, cm = g.narrow(ssm, 2, 0, r), g.narrow(ssm, 2, r, n), g.narrow(ssm, 2, r + n, n)
        dt = g.activation(g.add(g.exp(g.add(g.matmul(dt_in, w[p + "dt_proj"]), w[p + "dt_b"])), 1.0), "log")
        a = g.mul(g.exp(w[p + "A_log"]), -1.0)
        y = g.selective_scan(u, dt, a, bm, cm)
        y = g.mul(g.add(y, g.mul(u, w[p + "D"])), g.silu(gate))
        x = g.add(x, g.matmul(y, w[p + "out_proj"]))
    logits = g.matmul(g.rms_norm(x, w["norm_f"], eps=cfg.eps), w["lm_head"])
    g.output(g.cross_entropy(logits, targets, "mean", name="loss"))
    return g


def torch_loss(w: dict[str, torch.Tensor], tokens: torch.Tensor, targets: torch.Tensor, cfg: TinyMamba):
    x = w["embed"][tokens.long()]
    i, n, r = cfg.inner, cfg.states, cfg.dt_rank
    for layer in range(cfg.layers):
        p = f"l{layer}."
        xs, gate = (F.rms_norm(x, (cfg.d_model,), w[p + "norm"], cfg.eps) @ w[p + "in_proj"]).split(i, -1)
        # depthwise causal conv1d, torch's own kernel: weight [i, 1, conv], taps in time order
        conv = F.conv1d(xs.transpose(1, 2), w[p + "conv_w"].T.unsqueeze(1), w[p + "conv_b"],
                        padding=cfg.conv - 1, groups=i)[..., :cfg.seq].transpose(1, 2)
        u = F.silu(conv)
        dt_in, bm, cm = (u @ w[p + "x_proj"]).split([r, n, n], -1)
        dt = F.softplus(dt_in @ w[p + "dt_proj"] + w[p + "dt_b"])
        a = -torch.exp(w[p + "A_log"])
        h = torch.zeros(cfg.batch, i, n)
        ys = []
        for t in range(cfg.seq):
            h = torch.exp(dt[:, t, :, None] * a) * h + (dt[:, t] * u[:, t])[..., None] * bm[:, t, None, :]
            ys.append((h * cm[:, t, None, :]).sum(-1))
        y = (torch.stack(ys, 1) + u * w[p + "D"]) * F.silu(gate)
        x = x + y @ w[p + "out_proj"]
    logits = F.rms_norm(x, (cfg.d_model,), w["norm_f"], cfg.eps) @ w["lm_head"]
    return F.cross_entropy(logits.reshape(-1, cfg.vocab), targets.reshape(-1).long())


def torch_train(params0: dict[str, np.ndarray], batches: list[dict], cfg: TinyMamba) -> list[float]:
    w = {k: torch.nn.Parameter(torch.tensor(v)) for k, v in params0.items()}
    opt = torch.optim.AdamW(list(w.values()), lr=LR, weight_decay=WEIGHT_DECAY)
    losses = []
    for batch in batches:
        opt.zero_grad()
        loss = torch_loss(w, torch.tensor(batch["tokens"]), torch.tensor(batch["targets"]), cfg)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def batches(cfg: TinyMamba, count: int, seed: int = 1) -> list[dict[str, np.ndarray]]:
    """A learnable stream: each sequence counts up from a random start (mod vocab)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        starts = rng.integers(0, cfg.vocab, (cfg.batch, 1))
        seq = (starts + np.arange(cfg.seq + 1)) % cfg.vocab
        out.append({"tokens": seq[:, :-1].astype(np.int32), "targets": seq[:, 1:].astype(np.int32)})
    return out


def test_tiny_mamba_training_follows_torch(device):
    params = init_params(CFG)
    data = batches(CFG, STEPS)
    trainer = Trainer(build_tiny_mamba(CFG), AdamW(lr=LR, weight_decay=WEIGHT_DECAY))
    assert not [s.label for s in trainer.exe.schedule.steps if s.kind == "host"]
    assert any(s.kernel == "backward_scan_selective" for s in trainer.exe.schedule.steps)
    trainer.set_params(params)
    got = np.array([trainer.step(b) for b in data])
    want = np.array(torch_train(params, data, CFG))
    relative = np.abs(got - want) / np.abs(want)
    assert relative[0] < 1e-4, (got[0], want[0])
    assert relative.max() < 1e-3, list(zip(got, want))
    assert got[-1] < got[0]  # it learns
