"""GPU optimizer updates (in place, in the arena) against torch.optim over several steps, with the
learning rate changing between runs of one compiled graph; GradClipScale against clip_grad_norm_."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import assert_close, rand

import rlxpy

SHAPE = (255, 33)
LRS = [0.1, 0.05, 0.2, 0.01]


def _compile(build, state_names):
    g = rlxpy.Graph("update")
    param, grad = g.param("p", SHAPE), g.input("g", SHAPE)
    hyper, scale = g.input("hyper", (3,)), g.input("s", (1,))
    state = [g.param(n, SHAPE) for n in state_names]
    g.output(build(g, param, grad, state, hyper, scale))
    exe = rlxpy.compile(g)
    assert [s.kernel for s in exe.schedule.steps] == ["optim_update"]
    return exe


def _run(exe, state_names, param0, grads, scale):
    exe.set_param("p", param0)
    for name in state_names:
        exe.set_param(name, np.zeros(SHAPE, np.float32))
    for t, (gradient, lr) in enumerate(zip(grads, LRS), start=1):
        hyper = np.array([lr, t, 1.0], np.float32)
        exe.run({"g": gradient, "hyper": hyper, "s": np.array([scale], np.float32)})
    return {name: exe.read_node(name) for name in ["p", *state_names]}


def _torch(make, param0, grads, scale):
    p = torch.nn.Parameter(torch.from_numpy(param0.astype(np.float64)))
    opt = make([p])
    for gradient, lr in zip(grads, LRS):
        opt.param_groups[0]["lr"] = lr
        p.grad = torch.from_numpy(gradient.astype(np.float64)) * scale
        opt.step()
    return p.detach().numpy(), opt.state[p]


@pytest.mark.parametrize("kw", [dict(), dict(momentum=0.9, dampening=0.2, weight_decay=0.01),
                                dict(momentum=0.8, nesterov=True)], ids=str)
def test_sgd_on_the_gpu_matches_torch(device, kw):
    momentum = kw.get("momentum", 0.0)
    names = ["buf"] if momentum else []
    exe = _compile(lambda g, p, gr, st, h, s: g.sgd_step(
        p, gr, h, st[0] if st else None, s, momentum, kw.get("dampening", 0.0), kw.get("weight_decay", 0.0),
        kw.get("nesterov", False)), names)
    param0, grads = rand(SHAPE, 1), [rand(SHAPE, 10 + t) for t in range(len(LRS))]
    got = _run(exe, names, param0, grads, 0.5)
    want, state = _torch(lambda ps: torch.optim.SGD(ps, lr=0.1, **kw), param0, grads, 0.5)
    assert_close(got["p"], want, 1e-5, 1e-6, "param")
    if momentum:
        assert_close(got["buf"], state["momentum_buffer"].numpy(), 1e-5, 1e-6, "momentum buffer")


@pytest.mark.parametrize("decoupled, wd", [(False, 0.0), (False, 0.1), (True, 0.1)])
def test_adam_and_adamw_on_the_gpu_match_torch(device, decoupled, wd):
    names = ["m", "v"]
    exe = _compile(lambda g, p, gr, st, h, s: g.adam_step(p, gr, st[0], st[1], h, s, 0.9, 0.95, 1e-8, wd,
                                                           decoupled), names)
    param0, grads = rand(SHAPE, 2), [rand(SHAPE, 20 + t) for t in range(len(LRS))]
    got = _run(exe, names, param0, grads, 0.7)
    kind = torch.optim.AdamW if decoupled else torch.optim.Adam
    want, state = _torch(lambda ps: kind(ps, lr=0.1, betas=(0.9, 0.95), eps=1e-8, weight_decay=wd), param0,
                         grads, 0.7)
    # f32 state and the bias corrections' f32 pow: relative 1e-5 of the update, far below the param
    assert_close(got["p"], want, 1e-5, 1e-5, "param")
    assert_close(got["m"], state["exp_avg"].numpy(), 1e-5, 1e-6, "m")
    assert_close(got["v"], state["exp_avg_sq"].numpy(), 1e-5, 1e-7, "v")


GROUP_SHAPES = [(1,), (3,), (17, 5), (255,), (2, 257), (33,), (7, 3), (300,), (1,), (255, 3), (5,)]


@pytest.mark.parametrize("decoupled, wd", [(False, 0.1), (True, 0.1)])
def test_adam_step_group_matches_torch_per_parameter(device, decoupled, wd):
    """11 parameters of odd shapes in one AdamStepGroup: two dispatches (8 + 3 slots), each parameter
    against torch's Adam / AdamW over steps with a changing lr; a run with apply = 0 changes nothing."""
    g = rlxpy.Graph("update_group")
    hyper, scale = g.input("hyper", (3,)), g.input("s", (1,))
    quads = [[g.param(f"p{i}", shape), g.input(f"g{i}", shape), g.param(f"m{i}", shape),
              g.param(f"v{i}", shape)] for i, shape in enumerate(GROUP_SHAPES)]
    g.output(g.adam_step_group(quads, hyper, scale, 0.9, 0.95, 1e-8, wd, decoupled))
    exe = rlxpy.compile(g)
    assert [s.kernel for s in exe.schedule.steps] == ["optim_adam_group"] * 2
    params0 = [rand(shape, 40 + i) for i, shape in enumerate(GROUP_SHAPES)]
    grads = [[rand(shape, 60 + 20 * t + i) for i, shape in enumerate(GROUP_SHAPES)] for t in range(len(LRS))]
    for i, p0 in enumerate(params0):
        exe.set_param(f"p{i}", p0)
        for name in "mv":
            exe.set_param(f"{name}{i}", np.zeros_like(p0))
    feeds = {"s": np.array([0.7], np.float32)}
    for t, lr in enumerate(LRS, start=1):
        step = {**feeds, "hyper": np.array([lr, t, 1.0], np.float32)}
        exe.run(step | {f"g{i}": grad for i, grad in enumerate(grads[t - 1])})
    gated = {**feeds, "hyper": np.array([0.5, len(LRS) + 1, 0.0], np.float32)}
    exe.run(gated | {f"g{i}": grad for i, grad in enumerate(grads[0])})  # apply = 0: no change
    kind = torch.optim.AdamW if decoupled else torch.optim.Adam
    for i, p0 in enumerate(params0):
        want, state = _torch(lambda ps: kind(ps, lr=0.1, betas=(0.9, 0.95), eps=1e-8, weight_decay=wd), p0,
                             [grads[t][i] for t in range(len(LRS))], 0.7)
        assert_close(exe.read_node(f"p{i}"), want, 1e-5, 1e-5, f"param {i} {GROUP_SHAPES[i]}")
        assert_close(exe.read_node(f"m{i}"), state["exp_avg"].numpy(), 1e-5, 1e-6, f"m {i}")
        assert_close(exe.read_node(f"v{i}"), state["exp_avg_sq"].numpy(), 1e-5, 1e-7, f"v {i}")


def test_adam_step_group_refuses_a_wrong_input_count():
    g = rlxpy.Graph("bad_group")
    p, hyper = g.param("p", (3,)), g.input("hyper", (3,))
    with pytest.raises(rlxpy.GraphError, match="2 parameters"):
        g.apply(rlxpy.ir.ops.AdamStepGroup(count=2), [p, p, p, p, hyper])


def test_accumulation_gates_the_update(device):
    g = rlxpy.Graph("accumulate")
    acc, grad, hyper = g.param("acc", SHAPE), g.input("g", SHAPE), g.input("hyper", (3,))
    p = g.param("p", SHAPE)
    total = g.add(acc, grad)
    g.output(g.sgd_step(p, total, hyper), g.accumulate_grad(acc, grad, hyper))
    exe = rlxpy.compile(g)
    exe.set_param("acc", np.zeros(SHAPE, np.float32))
    exe.set_param("p", np.ones(SHAPE, np.float32))
    grads = [rand(SHAPE, 30 + k) for k in range(3)]
    for k, gradient in enumerate(grads):
        exe.run({"g": gradient, "hyper": np.array([0.5, 1, float(k == 2)], np.float32)})
        if k < 2:
            assert (exe.read_node("p") == 1.0).all()
    assert_close(exe.read_node("p"), 1.0 - 0.5 * (grads[0] + grads[1] + grads[2]), 1e-6, 1e-6, "param")
    assert (exe.read_node("acc") == 0.0).all()


@pytest.mark.parametrize("max_norm, scale", [(1.0, 1.0), (1e4, 1.0), (0.5, 0.25), (0.0, 0.5)])
def test_grad_clip_scale_on_the_gpu(device, max_norm, scale):
    # 11 gradients: two partial-sum dispatches of up to 8, then the factor
    shapes = [(3,), (255, 33), (1,), (70000,), (17,), (5, 7), (2,), (4097,), (1, 1), (33,), (9000,)]
    grads = [rand(s, 40 + k) for k, s in enumerate(shapes)]
    g = rlxpy.Graph("clip")
    out = g.grad_clip_scale([g.input(f"g{k}", s) for k, s in enumerate(shapes)], max_norm, scale)
    g.output(out)
    exe = rlxpy.compile(g)
    assert [s.kernel for s in exe.schedule.steps] == ["optim_norm"] * (3 if max_norm else 1)
    got = exe.run({f"g{k}": x for k, x in enumerate(grads)})[out.name]
    norm = scale * np.sqrt(sum((x.astype(np.float64) ** 2).sum() for x in grads))
    want = scale * min(1.0, max_norm / (norm + 1e-6)) if max_norm else scale
    assert_close(got, np.array([want]), 1e-5, 0.0, "clip factor")
