"""Reference semantics of the optim family vs torch.optim and torch.nn.utils.clip_grad_norm_ over
several steps (float64 torch on the same values; the reference stores f32 between steps)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlxpy.ir import Graph
from rlxpy.ir.reference import run_reference

SHAPE = (17, 5)
STEPS = 4
LRS = [0.1, 0.05, 0.2, 0.01]


def _grads(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(SHAPE).astype(np.float32) for _ in range(STEPS)]


def _run_steps(build, state_names, param0, grads, lrs, scale=None):
    """Run a one-update graph STEPS times, carrying param and state between runs (as Params)."""
    g = Graph("update")
    param, grad, hyper = g.param("p", SHAPE), g.input("g", SHAPE), g.input("hyper", (3,))
    state = [g.param(n, SHAPE) for n in state_names]
    scale_in = g.input("scale", (1,)) if scale is not None else None
    g.output(build(g, param, grad, state, hyper, scale_in))
    values = {"p": param0.copy(), **{n: np.zeros(SHAPE, np.float32) for n in state_names}}
    for t, (gradient, lr) in enumerate(zip(grads, lrs), start=1):
        feeds = {"g": gradient, "hyper": np.array([lr, t, 1.0], np.float32)}
        if scale is not None:
            feeds["scale"] = np.array([scale], np.float32)
        values = _updated(g, feeds, values)
    return values


def _updated(g: Graph, feeds: dict, params: dict) -> dict:
    """The params after one reference run (the interpreter updates its own copies in place)."""
    out = run_reference(g, feeds, params, keep_all=True)
    return {name: out[name] for name in params}


def _torch_steps(make_optimizer, param0, grads, lrs, scale=1.0):
    p = torch.nn.Parameter(torch.from_numpy(param0.astype(np.float64)))
    opt = make_optimizer([p])
    for gradient, lr in zip(grads, lrs):
        for group in opt.param_groups:
            group["lr"] = lr
        p.grad = torch.from_numpy(gradient.astype(np.float64)) * scale
        opt.step()
    return p.detach().numpy(), opt


SGD_CASES = [dict(), dict(weight_decay=0.1), dict(momentum=0.9), dict(momentum=0.9, dampening=0.3),
             dict(momentum=0.8, nesterov=True, weight_decay=0.05)]


@pytest.mark.parametrize("kw", SGD_CASES, ids=str)
def test_sgd_matches_torch(kw):
    param0, grads = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32), _grads(2)
    momentum = kw.get("momentum", 0.0)
    state = ["buf"] if momentum else []

    def build(g, param, grad, st, hyper, scale):
        return g.sgd_step(param, grad, hyper, st[0] if st else None, scale, momentum,
                          kw.get("dampening", 0.0), kw.get("weight_decay", 0.0), kw.get("nesterov", False))

    got = _run_steps(build, state, param0, grads, LRS, scale=0.5)
    want, opt = _torch_steps(lambda ps: torch.optim.SGD(ps, lr=0.1, **kw), param0, grads, LRS, scale=0.5)
    np.testing.assert_allclose(got["p"], want, rtol=1e-5, atol=1e-6)
    if momentum:
        buf = opt.state[opt.param_groups[0]["params"][0]]["momentum_buffer"].numpy()
        np.testing.assert_allclose(got["buf"], buf, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("decoupled, wd", [(False, 0.0), (False, 0.1), (True, 0.1), (True, 0.0)])
def test_adam_and_adamw_match_torch(decoupled, wd):
    param0, grads = np.random.default_rng(3).standard_normal(SHAPE).astype(np.float32), _grads(4)

    def build(g, param, grad, st, hyper, scale):
        return g.adam_step(param, grad, st[0], st[1], hyper, scale, 0.9, 0.95, 1e-8, wd, decoupled)

    got = _run_steps(build, ["m", "v"], param0, grads, LRS)
    kind = torch.optim.AdamW if decoupled else torch.optim.Adam
    want, opt = _torch_steps(lambda ps: kind(ps, lr=0.1, betas=(0.9, 0.95), eps=1e-8, weight_decay=wd),
                             param0, grads, LRS)
    np.testing.assert_allclose(got["p"], want, rtol=1e-5, atol=1e-6)
    state = opt.state[opt.param_groups[0]["params"][0]]
    np.testing.assert_allclose(got["m"], state["exp_avg"].numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(got["v"], state["exp_avg_sq"].numpy(), rtol=1e-5, atol=1e-8)


def test_apply_zero_leaves_param_and_state_alone_and_accumulate_sums():
    g = Graph("accumulate")
    acc, grad, hyper = g.param("acc", SHAPE), g.input("g", SHAPE), g.input("hyper", (3,))
    m, v, p = g.param("m", SHAPE), g.param("v", SHAPE), g.param("p", SHAPE)
    g.output(g.adam_step(p, grad, m, v, hyper), g.accumulate_grad(acc, grad, hyper))
    first, second = _grads(5)[:2]
    params = {"acc": np.zeros(SHAPE, np.float32), "m": np.ones(SHAPE, np.float32),
              "v": np.ones(SHAPE, np.float32), "p": np.full(SHAPE, 3.0, np.float32)}
    params = _updated(g, {"g": first, "hyper": np.array([0.1, 1, 0], np.float32)}, params)
    params = _updated(g, {"g": second, "hyper": np.array([0.1, 1, 0], np.float32)}, params)
    np.testing.assert_allclose(params["acc"], first + second, rtol=1e-6)
    assert (params["p"] == 3.0).all() and (params["m"] == 1.0).all()
    params = _updated(g, {"g": second, "hyper": np.array([0.1, 1, 1], np.float32)}, params)
    assert (params["acc"] == 0.0).all() and (params["p"] != 3.0).all()


@pytest.mark.parametrize("max_norm, scale", [(1.0, 1.0), (100.0, 1.0), (0.5, 0.25), (0.0, 0.5)])
def test_grad_clip_scale_matches_clip_grad_norm(max_norm, scale):
    grads = [np.random.default_rng(6).standard_normal(s).astype(np.float32) for s in [(3,), (17, 5), (1,)]]
    g = Graph("clip")
    out = g.grad_clip_scale([g.input(f"g{i}", x.shape) for i, x in enumerate(grads)], max_norm, scale)
    g.output(out)
    got = run_reference(g, {f"g{i}": x for i, x in enumerate(grads)})[out.name]
    tensors = [torch.nn.Parameter(torch.zeros(x.shape, dtype=torch.float64)) for x in grads]
    for t, x in zip(tensors, grads):
        t.grad = torch.from_numpy(x.astype(np.float64)) * scale
    if max_norm:
        torch.nn.utils.clip_grad_norm_(tensors, max_norm)
    factor = tensors[1].grad.numpy()[0, 0] / grads[1][0, 0]
    np.testing.assert_allclose(got, [factor], rtol=1e-6)
