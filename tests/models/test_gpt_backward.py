"""The backward graph of a small GPT (rlxpy/models/gpt.py) on the GPU: every step a kernel (no host
step), the loss and every parameter gradient against torch.autograd of the same model (tests/gpt_torch.py)."""

from __future__ import annotations

import numpy as np
import torch
from gpt_torch import gpt_loss
from helpers import assert_close

import rlxpy
from rlxpy.ir.passes.autodiff import grad
from rlxpy.models.gpt import GptConfig, build_gpt, init_params

CFG = GptConfig(vocab=67, d_model=32, heads=4, layers=2, seq=17, batch=3)


def test_gpt_gradients_on_the_gpu_match_torch_with_no_host_steps(device):
    result = grad(build_gpt(CFG), "loss")
    exe = rlxpy.compile(result.graph)
    host = [s.label for s in exe.schedule.steps if s.kind == "host"]
    assert host == [], f"host steps in the backward graph: {host}"
    params = init_params(CFG, seed=1)
    params = {k: v + np.random.default_rng(2).normal(0, 0.05, v.shape).astype(np.float32)
              for k, v in params.items()}  # off the initialisation: biases and gains not at 0 / 1
    for name, value in params.items():
        exe.set_param(name, value)
    rng = np.random.default_rng(3)
    tokens = rng.integers(0, CFG.vocab, (CFG.batch, CFG.seq)).astype(np.int32)
    targets = rng.integers(0, CFG.vocab, (CFG.batch, CFG.seq)).astype(np.int32)
    got = exe.run({"tokens": tokens, "targets": targets})
    tp = {k: torch.from_numpy(v.astype(np.float64)).requires_grad_() for k, v in params.items()}
    loss = gpt_loss(tp, torch.from_numpy(tokens), torch.from_numpy(targets), CFG.layers, CFG.heads)
    loss.backward()
    assert_close(got["loss"], loss.detach().numpy(), 1e-5, 1e-6, "loss")
    for name, grad_name in result.grads.items():
        want = tp[name].grad.numpy()
        assert_close(got[grad_name], want, 1e-4, 1e-5 * float(np.abs(want).max()), f"d loss / d {name}")
