"""The acceptance run, kept short for CI: a 2-layer byte-level GPT trained with AdamW + global-norm
clipping on bytes of Python's stdlib sources, from the same initialisation and batches as torch
(tests/gpt_torch.py, f32 on the CPU). The per-step loss must stay within 1e-4 relative of torch at
step 1 and 1e-3 over every step (benches/bench_train.py runs the d=128 model for 50 steps)."""

from __future__ import annotations

import numpy as np
from gpt_torch import torch_train

from rlxpy.models.gpt import GptConfig, build_gpt, init_params, sample_batch, stdlib_corpus
from rlxpy.train import AdamW, Trainer

CFG = GptConfig(vocab=256, d_model=32, heads=4, layers=2, seq=16, batch=4)
STEPS, LR, WEIGHT_DECAY, CLIP = 6, 3e-3, 0.1, 1.0


def test_gpt_training_follows_torch(device):
    corpus = stdlib_corpus(1 << 20)
    rng = np.random.default_rng(0)
    batches = [sample_batch(corpus, CFG, rng) for _ in range(STEPS)]
    params = init_params(CFG, seed=0)
    trainer = Trainer(build_gpt(CFG), AdamW(lr=LR, weight_decay=WEIGHT_DECAY), clip_norm=CLIP)
    assert not [s for s in trainer.exe.schedule.steps if s.kind == "host"]
    trainer.set_params(params)
    got = np.array([trainer.step(b) for b in batches])
    want = np.array(torch_train(params, batches, CFG.layers, CFG.heads, LR, WEIGHT_DECAY, CLIP))
    relative = np.abs(got - want) / np.abs(want)
    assert relative[0] < 1e-4, (got[0], want[0])
    assert relative.max() < 1e-3, list(zip(got, want))
    assert got[-1] < got[0]  # it learns
