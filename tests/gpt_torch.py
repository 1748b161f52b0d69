"""The GPT of rlxpy/models/gpt.py written independently in torch (the oracle of the training tests and
benches/bench_train.py): the same parameters by name, the same computation, torch's own kernels."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def gpt_loss(params: dict[str, torch.Tensor], tokens: torch.Tensor, targets: torch.Tensor, layers: int,
             heads: int, eps: float = 1e-5) -> torch.Tensor:
    """Mean next-token cross-entropy of the GPT with ``params`` (tensors keyed like gpt.param_shapes)."""
    batch, seq = tokens.shape
    d = params["wte"].shape[1]
    x = params["wte"][tokens.long()] + params["wpe"][:seq]
    for i in range(layers):
        p = f"h{i}"
        h = F.layer_norm(x, (d,), params[f"{p}.ln1.g"], params[f"{p}.ln1.b"], eps)
        q, k, v = (h @ params[f"{p}.attn.qkv.w"] + params[f"{p}.attn.qkv.b"]).split(d, dim=-1)
        q, k, v = (t.reshape(batch, seq, heads, d // heads).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1 / math.sqrt(d // heads))
        a = a.transpose(1, 2).reshape(batch, seq, d)
        x = x + a @ params[f"{p}.attn.proj.w"] + params[f"{p}.attn.proj.b"]
        h = F.layer_norm(x, (d,), params[f"{p}.ln2.g"], params[f"{p}.ln2.b"], eps)
        h = F.gelu(h @ params[f"{p}.mlp.fc.w"] + params[f"{p}.mlp.fc.b"], approximate="tanh")
        x = x + h @ params[f"{p}.mlp.proj.w"] + params[f"{p}.mlp.proj.b"]
    x = F.layer_norm(x, (d,), params["ln_f.g"], params["ln_f.b"], eps)
    logits = x @ params["wte"].T
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1).long())


def torch_train(params0: dict, batches: list[dict], layers: int, heads: int, lr: float, weight_decay: float,
                clip: float, device: str = "cpu", dtype: torch.dtype = torch.float32) -> list[float]:
    """Per-step losses of torch.optim.AdamW (+ clip_grad_norm_) training the GPT from ``params0`` on
    ``batches`` (numpy arrays as gpt.sample_batch makes them)."""
    params = {k: torch.nn.Parameter(torch.tensor(v, dtype=dtype, device=device)) for k, v in params0.items()}
    opt = torch.optim.AdamW(list(params.values()), lr=lr, weight_decay=weight_decay)
    losses = []
    for batch in batches:
        opt.zero_grad()
        tokens, targets = (torch.tensor(batch[k], device=device) for k in ("tokens", "targets"))
        loss = gpt_loss(params, tokens, targets, layers, heads)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(list(params.values()), clip)
        opt.step()
        losses.append(loss.item())
    return losses
