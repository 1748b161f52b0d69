"""CNN training through torch.compile(backend="rlxpy"): aot_autograd's backward graphs hold
convolution_backward, the (adaptive) max and avg pool backwards (kept whole and translated onto
rlxpy's conv gradient rules and PoolBackward) and a decomposed batch-norm backward that reads the
forward's saved statistics; the forward saves max pooling's indices. Oracle: eager
torch on the same module (same initialisation, same batches); every step of both graphs on rlxpy."""

from __future__ import annotations

import copy
import gc
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from rlxpy.frontends import torch_fx
from rlxpy.frontends.torch_fx import RlxpyFallbackWarning, compiled_graphs, make_backend
from rlxpy.ir import ops

STEPS, LR, WEIGHT_DECAY = 4, 1e-2, 0.05


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    gc.collect()  # compiled_graphs() then lists this test's graphs only
    torch_fx._WARNED.clear()
    yield
    torch._dynamo.reset()


class TinyCnn(torch.nn.Module):
    """conv - batch norm (batch statistics) - relu - max pool - grouped strided conv - avg pool - linear."""

    def __init__(self) -> None:
        super().__init__()
        # no bias before the batch norm: its true gradient is 0, and Adam would amplify the rounding noise
        self.conv1 = torch.nn.Conv2d(3, 6, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(6, track_running_stats=False)
        self.conv2 = torch.nn.Conv2d(6, 4, 3, stride=2, padding=1, groups=2)
        self.fc = torch.nn.Linear(16, 5)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn(self.conv1(x))), 3, 2, 1)
        x = F.avg_pool2d(self.conv2(x), 2, 1)
        return F.cross_entropy(self.fc(x.flatten(1)), labels)


def _train(model: torch.nn.Module, call, batches) -> list[float]:
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    losses = []
    for images, labels in batches:
        opt.zero_grad()
        loss = call(images, labels)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _no_host_steps() -> None:
    for graph in compiled_graphs():
        for exe in graph.executables.values():
            host = [s.label for s in exe.schedule.steps if s.kind == "host"]
            assert not host, (graph.role, host)


def test_tiny_cnn_trains_through_torch_compile_like_eager_torch(device):
    torch.manual_seed(0)
    eager = TinyCnn()
    compiled = copy.deepcopy(eager)
    gen = torch.Generator().manual_seed(1)
    batches = [(torch.randn(3, 3, 11, 11, generator=gen), torch.randint(0, 5, (3,), generator=gen))
               for _ in range(STEPS)]
    want = _train(eager, eager, batches)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RlxpyFallbackWarning)  # no graph may fall back to torch
        got = _train(compiled, torch.compile(compiled, backend=make_backend("error")), batches)
    relative = np.abs(np.array(got) - np.array(want)) / np.abs(np.array(want))
    assert relative.max() < 1e-4, list(zip(got, want))
    for (name, w), g in zip(eager.named_parameters(), compiled.parameters()):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5, msg=name)
    graphs = {graph.role: graph for graph in compiled_graphs()}
    assert sorted(graphs) == ["backward", "forward"] and len(compiled_graphs()) == 2
    for graph in graphs.values():  # one compile each, every step on rlxpy
        assert (graph.compiles, graph.calls, graph.eager_calls) == (1, STEPS, 0), graph.role
    _no_host_steps()
    backward = [type(n.op) for n in graphs["backward"].graph.nodes]
    assert backward.count(ops.PoolBackward) == 2  # max and avg pooling's
    assert ops.ConvTranspose in backward  # conv2's input gradient


def _grads(fn, inputs: list[torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    leaves = [x.detach().clone().requires_grad_(x.is_floating_point()) for x in inputs]
    out = fn(*leaves)
    out.backward()
    return out.detach(), [x.grad for x in leaves]


def _check_grads(fn, inputs: list[torch.Tensor], tol: float = 1e-5) -> None:
    """fn's value and input gradients through the rlxpy backend equal eager torch's; no host step."""
    want, want_grads = _grads(fn, inputs)
    got, got_grads = _grads(torch.compile(fn, backend=make_backend("error")), inputs)
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)
    for i, (g, w) in enumerate(zip(got_grads, want_grads)):
        torch.testing.assert_close(g, w, rtol=tol, atol=tol, msg=f"d input {i}")
    roles = {graph.role: graph.calls for graph in compiled_graphs()}
    assert roles == {"forward": 1, "backward": 1}, roles
    _no_host_steps()


# (input shape, weight shape, stride, padding, dilation, groups, transposed, output_padding)
CONVS = [((2, 3, 17), (5, 3, 3), 2, 1, 2, 1, False, 0),
         ((1, 4, 9, 7), (6, 2, 3, 2), (2, 1), (1, 0), 1, 2, False, 0),
         ((2, 5, 6, 5), (5, 1, 3, 3), 1, 1, 1, 5, False, 0),
         ((1, 2, 4, 3, 3), (4, 2, 2, 3, 1), 1, 0, 1, 1, False, 0),
         ((2, 3, 5, 4), (3, 2, 3, 3), 2, 1, 1, 1, True, 1),
         ((1, 4, 7), (4, 3, 3), 2, 0, 2, 2, True, 1)]


@pytest.mark.parametrize("case", CONVS, ids=str)
def test_convolution_backward_matches_torch(device, case):
    shape, wshape, stride, padding, dilation, groups, transposed, extra = case
    spatial = len(shape) - 2
    gen = torch.Generator().manual_seed(2)
    x, w = torch.randn(shape, generator=gen), torch.randn(wshape, generator=gen)
    bias = torch.randn(wshape[1] * groups if transposed else wshape[0], generator=gen)

    def conv(x, w, b):
        if transposed:
            return getattr(F, f"conv_transpose{spatial}d")(x, w, b, stride, padding, extra, groups, dilation)
        return getattr(F, f"conv{spatial}d")(x, w, b, stride, padding, dilation, groups)

    cot = torch.randn(conv(x, w, bias).shape, generator=gen)
    _check_grads(lambda x, w, b, cot: (conv(x, w, b) * cot).sum(), [x, w, bias, cot], tol=2e-5)


# (shape, kind, kernel, stride, padding, ceil_mode, count_include_pad)
POOLS = [((2, 3, 9, 7), "max", 3, 2, 1, False, True), ((1, 5, 17, 3), "max", (3, 2), (2, 1), 0, True, True),
         ((2, 3, 9, 7), "avg", 3, 2, 1, True, False), ((1, 2, 5, 4, 3), "avg", 2, 2, 1, True, True),
         ((1, 2, 5, 4, 3), "max", 2, 2, 1, False, True), ((2, 3, 17), "max", 3, 2, 1, True, True)]


@pytest.mark.parametrize("case", POOLS, ids=str)
def test_pool_backwards_match_torch(device, case):
    shape, kind, kernel, stride, padding, ceil_mode, include = case
    spatial = len(shape) - 2
    values = torch.randperm(int(np.prod(shape)), generator=torch.Generator().manual_seed(3))
    x = (values.reshape(shape).float() / values.numel()) - 0.5  # distinct values: one max per window

    def pool(x):
        if kind == "max":
            return getattr(F, f"max_pool{spatial}d")(x, kernel, stride, padding, ceil_mode=ceil_mode)
        return getattr(F, f"avg_pool{spatial}d")(x, kernel, stride, padding, ceil_mode, include)

    cot = torch.randn(pool(x).shape, generator=torch.Generator().manual_seed(5))
    _check_grads(lambda x, cot: (pool(x) * cot).sum(), [x, cot])


@pytest.mark.parametrize("shape", [(2, 3, 17), (2, 3, 9, 8), (1, 2, 5, 4, 7)], ids=str)
def test_max_pool_indices_match_torch(device, shape):
    """The indices output computed for a training graph equals torch's (return_indices=True)."""
    values = torch.randperm(int(np.prod(shape)), generator=torch.Generator().manual_seed(4))
    x = values.reshape(shape).float()
    pool = getattr(F, f"max_pool{len(shape) - 2}d")

    def fn(x):
        return pool(x, 3, 2, 1, dilation=1, ceil_mode=True, return_indices=True)

    want = fn(x)
    got = torch.compile(fn, backend=make_backend("error"))(x)
    torch.testing.assert_close(got[0], want[0])
    assert torch.equal(got[1], want[1])


@pytest.mark.parametrize("case", [((2, 3, 7, 5), (3, 2), "max"), ((1, 2, 5, 4, 3), (2, 3, 2), "max"),
                                  ((2, 3, 7, 5), (3, 2), "avg"), ((2, 3, 17), 5, "avg")], ids=str)
def test_adaptive_pool_backwards_match_torch(device, case):
    shape, size, kind = case
    values = torch.randperm(int(np.prod(shape)), generator=torch.Generator().manual_seed(7))
    x = (values.reshape(shape).float() / values.numel()) - 0.5
    pool = getattr(F, f"adaptive_{kind}_pool{len(shape) - 2}d")
    cot = torch.randn(pool(x, size).shape, generator=torch.Generator().manual_seed(8))
    _check_grads(lambda x, cot: (pool(x, size) * cot).sum(), [x, cot])
