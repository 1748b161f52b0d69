"""rlxpy.train.Trainer on the GPU against the same training loop in torch (float64 on the same f32
values): per-step losses and final parameters, with AdamW + clipping, SGD momentum, Adam, gradient
accumulation, a learning-rate schedule; eval, parameter get/set, safetensors checkpoints."""

from __future__ import annotations

import numpy as np
import pytest
import safetensors.numpy
import torch
import torch.nn.functional as F

import rlxpy
from rlxpy.errors import InputError
from rlxpy.train import SGD, Adam, AdamW, Trainer, load_safetensors, save_safetensors

BATCH, D_IN, HIDDEN, CLASSES = 13, 7, 17, 5


def mlp() -> rlxpy.Graph:
    g = rlxpy.Graph("mlp")
    x, y = g.input("x", (BATCH, D_IN)), g.input("y", (BATCH,), "i32")
    h = g.linear(x, g.param("w1", (D_IN, HIDDEN)), g.param("b1", (HIDDEN,)), activation="gelu")
    h = g.layer_norm(h, g.param("ln", (HIDDEN,)))
    g.output(g.cross_entropy(g.matmul(h, g.param("w2", (HIDDEN, CLASSES))), y, name="loss"))
    return g


def init() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"w1": (rng.standard_normal((D_IN, HIDDEN)) * 0.5).astype(np.float32),
            "b1": (rng.standard_normal(HIDDEN) * 0.1).astype(np.float32),
            "ln": np.ones(HIDDEN, np.float32),
            "w2": (rng.standard_normal((HIDDEN, CLASSES)) * 0.5).astype(np.float32)}


def batches(count: int, seed: int = 1) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((BATCH, D_IN)).astype(np.float32),
             "y": rng.integers(0, CLASSES, BATCH).astype(np.int32)} for _ in range(count)]


def torch_loss(p, batch):
    h = F.gelu(torch.from_numpy(batch["x"]).double() @ p["w1"] + p["b1"])
    h = F.layer_norm(h, (HIDDEN,), p["ln"])
    return F.cross_entropy(h @ p["w2"], torch.from_numpy(batch["y"]).long())


def torch_train(make, steps, clip=0.0, accumulate=1, lr_schedule=None):
    p = {k: torch.nn.Parameter(torch.from_numpy(v.astype(np.float64))) for k, v in init().items()}
    opt = make(list(p.values()))
    losses = []
    for t, group in enumerate(steps, start=1):
        if lr_schedule is not None:
            opt.param_groups[0]["lr"] = lr_schedule(t)
        opt.zero_grad()
        total = 0.0
        for micro in group:
            loss = torch_loss(p, micro) / accumulate
            loss.backward()
            total += loss.item()
        if clip:
            torch.nn.utils.clip_grad_norm_(list(p.values()), clip)
        opt.step()
        losses.append(total)
    return losses, {k: v.detach().numpy() for k, v in p.items()}


CASES = {  # (ours, torch's, clip_norm, micro-batches per update)
    "adamw_clip": (AdamW(lr=0.05, weight_decay=0.1),
                   lambda ps: torch.optim.AdamW(ps, lr=0.05, weight_decay=0.1), 0.5, 1),
    "adam_accumulate": (Adam(lr=0.03, betas=(0.8, 0.99)),
                        lambda ps: torch.optim.Adam(ps, lr=0.03, betas=(0.8, 0.99)), 0.0, 3),
    "sgd_momentum_clip_accumulate": (
        SGD(lr=0.2, momentum=0.9, nesterov=True),
        lambda ps: torch.optim.SGD(ps, lr=0.2, momentum=0.9, nesterov=True), 1.0, 2),
}
#: f32 training vs float64 torch: Adam's normalised steps let f32 rounding of small gradients through
LOSS_TOL, PARAM_TOL = (1e-4, 1e-6), (1e-3, 1e-4)


@pytest.mark.parametrize("case", sorted(CASES))
def test_trainer_follows_torch_step_by_step(device, case):
    optimizer, make, clip, accumulate = CASES[case]
    trainer = Trainer(mlp(), optimizer, clip_norm=clip, accumulate=accumulate)
    assert not [s for s in trainer.exe.schedule.steps if s.kind == "host"]
    trainer.set_params(init())
    data = batches(5 * accumulate)
    groups = [data[k:k + accumulate] for k in range(0, len(data), accumulate)]
    got = [trainer.step(group if accumulate > 1 else group[0]) for group in groups]
    want, params = torch_train(make, groups, clip, accumulate)
    np.testing.assert_allclose(got, want, *LOSS_TOL)
    for name, value in trainer.params().items():
        np.testing.assert_allclose(value, params[name], *PARAM_TOL, err_msg=name)


def test_learning_rate_schedule_eval_and_checkpoints(device, tmp_path):
    schedule = lambda t: 0.05 / t  # noqa: E731
    trainer = Trainer(mlp(), AdamW(weight_decay=0.0), lr=schedule)
    trainer.set_params(init())
    data = batches(6)
    before = trainer.eval(data[0])
    assert trainer.eval(data[0]) == before  # eval updates nothing
    got = [trainer.step(b) for b in data[:3]]
    want, _ = torch_train(lambda ps: torch.optim.AdamW(ps, lr=0.05, weight_decay=0.0),
                          [[b] for b in data[:3]], lr_schedule=schedule)
    np.testing.assert_allclose(got, want, *LOSS_TOL)
    assert got[0] == pytest.approx(before, rel=1e-6)
    path = tmp_path / "ckpt.safetensors"
    trainer.save(path)
    tensors = safetensors.numpy.load_file(str(path))  # the reference reader agrees with the file
    assert set(tensors) == {*trainer.param_names(), *trainer.state_names()}
    np.testing.assert_array_equal(tensors["w1"], trainer.get_param("w1"))
    later = [trainer.step(b) for b in data[3:]]
    again = Trainer(mlp(), AdamW(weight_decay=0.0), lr=schedule)
    again.load(path)
    assert again.steps == 3
    np.testing.assert_allclose([again.step(b) for b in data[3:]], later, rtol=1e-6)
    with pytest.raises(InputError, match="micro-batches"):
        trainer.step([data[0], data[1]])


def test_safetensors_files_round_trip_through_the_reference_package(tmp_path):
    tensors = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([1, -2], np.int64),
               "c": np.zeros((0, 4), np.float16)}
    save_safetensors(tmp_path / "x.safetensors", tensors, {"steps": "7"})
    theirs = safetensors.numpy.load_file(str(tmp_path / "x.safetensors"))
    for name, value in tensors.items():
        np.testing.assert_array_equal(theirs[name], value)
    safetensors.numpy.save_file(tensors, str(tmp_path / "y.safetensors"), metadata={"k": "v"})
    ours, metadata = load_safetensors(tmp_path / "y.safetensors")
    assert metadata == {"k": "v"}
    for name, value in tensors.items():
        np.testing.assert_array_equal(ours[name], value)
        assert ours[name].dtype == value.dtype


def test_a_param_the_loss_does_not_use_is_left_alone(device, tmp_path):
    g = mlp()
    g.param("extra", (3,))
    trainer = Trainer(g, AdamW(lr=0.1, weight_decay=0.5))
    assert "extra" not in trainer.param_names() and not any("extra" in n for n in trainer.state_names())
    trainer.set_params(init() | {"extra": np.ones(3, np.float32)})
    trainer.step(batches(1)[0])
    np.testing.assert_array_equal(trainer.get_param("extra"), np.ones(3, np.float32))  # torch skips it too
    path = tmp_path / "frozen.safetensors"
    trainer.save(path)  # frozen params are checkpointed too
    assert "extra" in load_safetensors(path)[0]
