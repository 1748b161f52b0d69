"""Training through torch.compile(backend="rlxpy"): aot_autograd's forward and backward graphs run on
rlxpy, torch's autograd and optimizers around them. Oracle: the same model in eager torch (same
initialisation, same batches); the backend's compiled-graph record shows what ran where."""

from __future__ import annotations

import copy
import gc
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from gpt_torch import gpt_loss

from rlxpy.frontends import torch_fx
from rlxpy.frontends.torch_fx import RlxpyFallbackWarning, compiled_graphs, make_backend
from rlxpy.ir import ops
from rlxpy.models.gpt import GptConfig, init_params, sample_batch, stdlib_corpus

CFG = GptConfig(vocab=256, d_model=32, heads=4, layers=2, seq=16, batch=4)
STEPS, LR, WEIGHT_DECAY = 20, 3e-3, 0.1
ODD_SHAPES = [(1,), (3,), (17, 5), (255, 33)]


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    gc.collect()  # compiled_graphs() then lists this test's graphs only
    torch_fx._WARNED.clear()
    yield
    torch._dynamo.reset()


class Gpt(torch.nn.Module):
    """tests/gpt_torch.py's GPT with its params as a module's (dynamo sees them as weights)."""

    def __init__(self, params: dict[str, np.ndarray]) -> None:
        super().__init__()
        self.names = list(params)
        self.weights = torch.nn.ParameterList(torch.nn.Parameter(torch.tensor(v)) for v in params.values())

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return gpt_loss(dict(zip(self.names, self.weights)), tokens, targets, CFG.layers, CFG.heads)


def _train(model: torch.nn.Module, call, batches: list[dict]) -> list[float]:
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    losses = []
    for batch in batches:
        opt.zero_grad()
        loss = call(torch.tensor(batch["tokens"]), torch.tensor(batch["targets"]))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_gpt_trains_through_torch_compile_like_eager_torch(device):
    corpus = stdlib_corpus(1 << 20)
    rng = np.random.default_rng(0)
    batches = [sample_batch(corpus, CFG, rng) for _ in range(STEPS)]
    params = init_params(CFG, seed=0)
    eager, compiled = Gpt(params), Gpt(params)
    want = _train(eager, eager, batches)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RlxpyFallbackWarning)  # no graph may fall back to torch
        got = _train(compiled, torch.compile(compiled, backend=make_backend("error")), batches)
    relative = np.abs(np.array(got) - np.array(want)) / np.abs(np.array(want))
    assert relative.max() < 1e-3, list(zip(got, want))
    assert got[-1] < got[0] - 1  # it learns
    for name, w, g in zip(eager.names, eager.weights, compiled.weights):
        torch.testing.assert_close(g, w, rtol=1e-3, atol=1e-4, msg=name)
    graphs = {graph.role: graph for graph in compiled_graphs()}
    assert sorted(graphs) == ["backward", "forward"] and len(compiled_graphs()) == 2
    for graph in graphs.values():  # one compile each, every step on rlxpy
        assert (graph.compiles, graph.calls, graph.eager_calls) == (1, STEPS, 0), graph.role
    forward = [type(n.op) for n in graphs["forward"].graph.nodes]
    backward = [type(n.op) for n in graphs["backward"].graph.nodes]
    assert forward.count(ops.Attention) == CFG.layers
    assert backward.count(ops.AttentionBackward) == CFG.layers  # SDPA's backward onto rlxpy's kernel
    assert backward.count(ops.GatherBackward) == 1  # the token embedding's
    assert ops.MatMul in backward and ops.Attention not in backward


def _grads(fn, inputs: list[torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    leaves = [x.detach().clone().requires_grad_(x.is_floating_point()) for x in inputs]
    out = fn(*leaves)
    out.backward()
    return out.detach(), [x.grad for x in leaves if x.requires_grad]


def _check_grads(fn, inputs: list[torch.Tensor], tol: float = 1e-5) -> None:
    """fn's value and input gradients through the rlxpy backend equal eager torch's (the backward graph
    ran on rlxpy: the record shows it)."""
    want, want_grads = _grads(fn, inputs)
    got, got_grads = _grads(torch.compile(fn, backend=make_backend("error")), inputs)
    torch.testing.assert_close(got, want, rtol=tol, atol=tol, equal_nan=True)
    for i, (g, w) in enumerate(zip(got_grads, want_grads)):
        torch.testing.assert_close(g, w, rtol=tol, atol=tol, equal_nan=True, msg=f"d input {i}")
    roles = {graph.role: graph.calls for graph in compiled_graphs()}
    assert roles == {"forward": 1, "backward": 1}, roles


ACTIVATIONS = {"relu": torch.relu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
               "silu": F.silu, "sigmoid": torch.sigmoid, "tanh": torch.tanh}


@pytest.mark.parametrize("name", ACTIVATIONS)
@pytest.mark.parametrize("shape", ODD_SHAPES[1:3])
def test_activation_backwards_match_torch(device, name, shape):
    act = ACTIVATIONS[name]

    def fn(x, w):
        return (act(x) * w).sum()

    gen = torch.Generator().manual_seed(len(shape))
    x, w = torch.randn(shape, generator=gen) * 3, torch.randn(shape, generator=gen)
    x.view(-1)[0] = 0.0  # the kink of relu: torch's gradient there is 0
    _check_grads(fn, [x, w])


@pytest.mark.parametrize("mask", ["causal", "bool", "float", "none"])
def test_attention_backward_matches_torch(device, mask):
    gen = torch.Generator().manual_seed(1)
    q, k, v, w = (torch.randn(2, 3, 17, 8, generator=gen) for _ in range(4))
    keep = torch.rand(17, 17, generator=gen) > 0.3
    keep[:, 0] = True
    masks = {"bool": keep, "float": torch.where(keep, 0.0, -2.0), "causal": None, "none": None}

    def fn(q, k, v, w):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=masks[mask], is_causal=mask == "causal")
        return (out * w).sum()

    _check_grads(fn, [q, k, v, w], tol=2e-5)


@pytest.mark.parametrize("shape", ODD_SHAPES)
def test_indexing_backwards_match_torch(device, shape):
    """embedding (padding row), advanced indexing (index_put), slicing (slice_scatter) and a
    cross-entropy with ignored targets (the one-hot scatter of nll_loss's backward)."""
    rows = shape[0]
    cols = shape[-1] if len(shape) > 1 else 4
    gen = torch.Generator().manual_seed(rows)
    table, x = torch.randn(rows, cols, generator=gen), torch.randn(rows, cols, generator=gen)
    idx = torch.randint(0, rows, (3, 5), generator=gen)
    targets = torch.randint(0, cols, (rows,), generator=gen)
    targets[0] = -100  # ignored (with one row, every target is: the mean is NaN, as torch's)

    def fn(table, x, idx, targets):
        emb = F.embedding(idx, table, padding_idx=0)
        picked = x[idx[0]]
        part = x[rows // 2:]
        loss = F.cross_entropy(x * 2, targets)
        return (emb * emb).sum() + (picked * 3).sum() + (part * part).mean() + loss

    _check_grads(fn, [table, x, idx, targets])


def test_an_mlp_trains_with_sgd_momentum_like_eager(device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 17), torch.nn.LayerNorm(17), torch.nn.ReLU(),
                                torch.nn.Linear(17, 3))
    twin = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(1)
    data = [(torch.randn(9, 5, generator=gen), torch.randint(0, 3, (9,), generator=gen)) for _ in range(5)]
    losses = {}
    compiled = torch.compile(twin, backend=make_backend("error"))
    for key, net, call in (("eager", model, model), ("rlxpy", twin, compiled)):
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        losses[key] = []
        for x, y in data:
            opt.zero_grad()
            loss = F.cross_entropy(call(x), y)
            loss.backward()
            opt.step()
            losses[key].append(loss.item())
    np.testing.assert_allclose(losses["rlxpy"], losses["eager"], rtol=1e-4)
    record = sorted((g.role, g.compiles, g.calls, g.eager_calls) for g in compiled_graphs())
    assert record == [("backward", 1, 5, 0), ("forward", 1, 5, 0)], record


def test_a_backward_op_rlxpy_lacks_breaks_the_backward_graph_only(device):
    """gather's backward is a scatter_add, which rlxpy does not take: that node runs in eager torch and
    the rest of the backward graph on rlxpy (one warning says so); the gradients are eager torch's."""
    def fn(x, w, idx):
        h = torch.relu(x @ w)
        return (torch.gather(h, 1, idx) * 2).sum() + (h * h).mean()

    gen = torch.Generator().manual_seed(2)
    x, w = torch.randn(5, 7, generator=gen), torch.randn(7, 6, generator=gen)
    idx = torch.randint(0, 6, (5, 3), generator=gen)
    want = _grads(lambda a, b: fn(a, b, idx), [x, w])
    with pytest.warns(RlxpyFallbackWarning, match=r"graph break: unsupported aten ops: aten\.scatter_add"):
        got = _grads(torch.compile(lambda a, b: fn(a, b, idx), backend=make_backend()), [x, w])
    torch.testing.assert_close(got[0], want[0])
    for mine, theirs in zip(got[1], want[1]):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-5)
    record = sorted((g.role, g.calls, g.eager_calls) for g in compiled_graphs())
    assert record == [("backward", 1, 0), ("backward", 1, 0), ("forward", 1, 0)], record
