"""rlxpy as a torch.compile backend, checked against eager torch (the oracle) on a real encoder
(transformers' BertModel for all-MiniLM-L6-v2), on an op sweep, on odd shapes and edge values, and
on what it must refuse (unsupported ops, dtypes, shapes) without ever returning a wrong result."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import rlxpy
from rlxpy.frontends import torch_fx
from rlxpy.frontends.embed import default_model_dir
from rlxpy.frontends.torch_fx import RlxpyFallbackWarning, compiled_graphs, make_backend, rlxpy_backend
from rlxpy.ir import ops

ODD_SHAPES = [(1,), (3,), (17, 5), (255, 33), (2, 3, 257)]


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    torch_fx._WARNED.clear()
    yield
    torch._dynamo.reset()


def _compare(fn, inputs, executor="gpu", tol=1e-5, rtol=None):
    compiled = torch.compile(fn, backend=make_backend("error", executor=executor))
    with torch.no_grad():
        want, got = fn(*inputs), compiled(*inputs)
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    assert len(want) == len(got)
    for i, (w, g) in enumerate(zip(want, got)):
        what = f"{fn.__name__}[{i}]"
        assert (g.dtype, g.shape) == (w.dtype, w.shape), f"{what}: {g.dtype}{list(g.shape)} != " \
                                                         f"{w.dtype}{list(w.shape)}"
        torch.testing.assert_close(g, w, rtol=rtol or tol, atol=tol, equal_nan=True, msg=what)


# -- a real encoder ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bert():
    from transformers import BertModel

    return BertModel.from_pretrained(str(default_model_dir())).eval()


def _padded_batch(batch: int, seq: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, seq + 1, (batch,), generator=gen)
    lengths[0] = seq
    mask = (torch.arange(seq)[None, :] < lengths[:, None]).long()
    ids = torch.randint(1000, 20000, (batch, seq), generator=gen) * mask
    ids[:, 0] = 101
    return ids, mask


def test_bert_matches_eager_for_batches_1_and_8_with_padding(device, bert):
    compiled = torch.compile(bert, backend=rlxpy_backend)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("error", RlxpyFallbackWarning)  # no graph may fall back to torch
        for batch, seq in [(1, 6), (8, 7)]:
            ids, mask = _padded_batch(batch, seq, seed=batch)
            want, got = bert(input_ids=ids, attention_mask=mask), compiled(input_ids=ids, attention_mask=mask)
            for name in ("last_hidden_state", "pooler_output"):
                torch.testing.assert_close(getattr(got, name), getattr(want, name), rtol=1e-4, atol=1e-4,
                                           msg=f"batch {batch}: {name}")
        graph = compiled_graphs()[-1]  # batch 8 recompiled dynamo's graph with symbolic batch and length
        assert graph.compiles == 1 and graph.eager_calls == 0
        assert graph.graph.symbols(), "the batch-8 graph should have symbolic dims"
        kinds = [type(n.op) for n in graph.graph.nodes]
        assert kinds.count(ops.Attention) == 6  # SDPA stays one op per layer
        gelu = [n for n in graph.graph.nodes if isinstance(n.op, ops.FusedMatMulBiasAct) and n.op.activation]
        assert len(gelu) == 6 and all(n.op.activation is ops.ActKind.GELU for n in gelu)
        ids, mask = _padded_batch(8, 7, seed=3)  # same signature: no new compile
        compiled(input_ids=ids, attention_mask=mask)
        assert graph.compiles == 1
        ids, mask = _padded_batch(8, 5, seed=4)  # a new length: a new binding of the same graph
        want, got = bert(input_ids=ids, attention_mask=mask), compiled(input_ids=ids, attention_mask=mask)
        torch.testing.assert_close(got.last_hidden_state, want.last_hidden_state, rtol=1e-4, atol=1e-4)
        assert graph.compiles == 2 and compiled_graphs()[-1] is graph


# -- op sweep (reference executor: fast and GPU-free; gpu: the kernels) -----------------------------------
def f_elementwise(x, y):
    return (torch.relu(x) + torch.sigmoid(y) * torch.tanh(x) - torch.exp(-x.abs()) / (1 + y * y),
            torch.rsqrt(x.abs() + 1), torch.erf(x), F.gelu(x), F.gelu(x, approximate="tanh"), F.silu(x),
            torch.where(x > y, x, y * 2), x.masked_fill(x < 0, -1.5), x.clamp(-0.5, 0.7),
            F.leaky_relu(x, 0.1),
            x.pow(2) + y.pow(3), torch.maximum(x, y), torch.minimum(x, 0.3 * y), x.reciprocal(),
            (x > 0) & (y < 0), ~(x > 0), (x > 0) | (y > 1))


def f_reductions(x, y):
    return (x.sum(-1), x.mean(0, keepdim=True), x.amax(1), x.amin(), x.var(-1), x.std(0), x.softmax(-1),
            F.log_softmax(x, 0), torch.logsumexp(x, -1), (x > 0).sum(-1), (x > 0).any(-1), x.prod(-1),
            y.sum((0,)))


def f_shapes(x, y):
    z = torch.cat([x, y], 0)
    a, b = z.split([2, 4], 0)
    return (z.view(2, 3, 17).permute(2, 0, 1).contiguous(), x.t() @ y, x[:, 2:9], x[1], x[:, -1], a * 2,
            b.unsqueeze(0), x.unsqueeze(-1).expand(3, 17, 4), torch.stack([x, y], 1), x.flatten(),
            x.reshape(17, 3).transpose(0, 1))


def f_indexing(x, idx):
    table = torch.arange(20 * 5, dtype=torch.float32).view(20, 5)
    columns = idx.abs().clamp(max=16)[:1, :2].expand(3, 2)
    return (x.index_select(1, idx[0]), x[:, idx[1]], torch.gather(x, 1, columns),
            F.embedding(idx.abs() % 20, table), x[torch.tensor([0, 2])], torch.arange(5) * 2 + 1,
            torch.full((2, 3), 7))


def f_norms(x):
    w, b = torch.linspace(0.5, 1.5, 17), torch.linspace(-1, 1, 17)
    return (F.layer_norm(x, (17,), w, b, 1e-5), F.layer_norm(x, (17,)), F.rms_norm(x, (17,), w, 1e-6),
            F.linear(x, torch.ones(4, 17) * 0.1, torch.arange(4.0)))


def f_ints(a, b):
    return a // b, torch.div(a, b, rounding_mode="trunc"), a + 1, a * b - 3, a % 5, a.abs(), -a, a.max(b), \
        torch.fmod(a, b), a % b


def f_attention(q, k, v, m):
    return (F.scaled_dot_product_attention(q, k, v), F.scaled_dot_product_attention(q, k, v, attn_mask=m),
            F.scaled_dot_product_attention(q, k, v, is_causal=True),
            F.scaled_dot_product_attention(q, k, v, attn_mask=m[0, 0] > 0),
            F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           scale=0.3).transpose(1, 2))


def _sweep_inputs(name):
    gen = torch.Generator().manual_seed(7)
    x, y = torch.randn(3, 17, generator=gen), torch.randn(3, 17, generator=gen)
    if name == "ints":
        return torch.tensor([7, -7, 3, -9, 0]), torch.tensor([2, 2, -2, 4, 5])
    if name == "indexing":
        return x, torch.tensor([[0, 2, 1], [16, 3, -1]])
    if name == "norms":
        return (x,)
    if name == "attention":
        qkv = tuple(torch.randn(2, 3, 5, 8, generator=gen) for _ in range(3))
        return qkv + (torch.randn(2, 1, 5, 5, generator=gen),)
    return x, y


SWEEP = {"elementwise": f_elementwise, "reductions": f_reductions, "shapes": f_shapes, "indexing": f_indexing,
         "norms": f_norms, "ints": f_ints, "attention": f_attention}


@pytest.mark.parametrize("executor", ["reference", "gpu"])
@pytest.mark.parametrize("name", list(SWEEP))
def test_op_sweep_matches_eager(device, name, executor):
    _compare(SWEEP[name], _sweep_inputs(name), executor=executor)


def f_odd(x):
    return F.gelu(x) * torch.sigmoid(x) + 1, x.softmax(-1), x.sum(-1), F.layer_norm(x, x.shape[-1:]), \
        x.amax(-1, keepdim=True)


@pytest.mark.parametrize("shape", ODD_SHAPES)
def test_odd_shapes_match_eager(device, shape):
    _compare(f_odd, (torch.randn(shape, generator=torch.Generator().manual_seed(len(shape))) * 3,))


def f_edges(x, y):
    return (torch.relu(x), torch.sigmoid(x), torch.tanh(x), torch.exp(x), torch.maximum(x, y),
            torch.minimum(x, y), x.clamp(-1, 1), torch.where(x > y, x, y), F.gelu(x), torch.erf(x),
            x.softmax(-1), x.amax(), x.sum(), x * y, x / y, torch.isnan(x),
            x.masked_fill(torch.isnan(x), 0.0), x.abs(), torch.sqrt(x.abs()), x.pow(2))


def test_nan_and_inf_propagate_like_eager(device):
    nan, inf = float("nan"), float("inf")
    x = torch.tensor([nan, inf, -inf, 0.0, -0.0, 1e30, -1e-30, 3.5, -2.0, 88.0, -100.0])
    y = torch.tensor([1.0, nan, 2.0, inf, -1.0, 0.0, 5.0, nan, -3.0, 1.0, 2.0])
    _compare(f_edges, (x, y), tol=1e-6, rtol=2e-6)  # helpers.TOL["transcendental"]: exp(88) is 1.7e-6 off


def test_softmax_with_minus_inf_mask_rows_matches_eager(device):
    def masked(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 2, 70, 8, generator=gen) for _ in range(3))
    mask = torch.zeros(2, 1, 1, 70)
    mask[0, ..., :60] = -torch.inf  # leading keys masked: a whole first key block is -inf
    _compare(masked, (q, k, v, mask), tol=1e-5)


def test_weights_changed_in_place_are_uploaded_again(device):
    layer = torch.nn.Linear(17, 5)
    compiled = torch.compile(layer, backend=make_backend("error"))
    x = torch.randn(3, 17)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), layer(x), rtol=1e-5, atol=1e-5)
        layer.weight.mul_(-2.0)
        torch.testing.assert_close(compiled(x), layer(x), rtol=1e-5, atol=1e-5)


def test_backend_is_registered_by_name(device):
    compiled = torch.compile(lambda x: torch.tanh(x) * 2, backend="rlxpy")
    x = torch.randn(4, 3)
    torch.testing.assert_close(compiled(x), torch.tanh(x) * 2)


# -- what rlxpy refuses: a clean fallback, or a clear error --------------------------------------------
def f_sort(x):
    return torch.sort(x, -1).values * 2 + 1


def test_unsupported_op_falls_back_to_eager_with_one_warning():
    compiled = torch.compile(f_sort, backend=rlxpy_backend)
    x = torch.randn(3, 5)
    with pytest.warns(RlxpyFallbackWarning, match=r"unsupported aten ops: aten\.sort\.default"):
        got = compiled(x)
    torch.testing.assert_close(got, f_sort(x))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RlxpyFallbackWarning)  # warned once only
        torch.testing.assert_close(compiled(x + 1), f_sort(x + 1))


def test_unsupported_op_raises_when_asked():
    compiled = torch.compile(f_sort, backend=make_backend("error"))
    with pytest.raises(rlxpy.UnsupportedOpError, match=r"unsupported aten ops: .*aten\.sort\.default"):
        compiled(torch.randn(3, 5))


def test_float64_is_refused_not_approximated():
    def double(x):
        return x * 3 + 1
    x = torch.randn(4, dtype=torch.float64)
    with pytest.raises(rlxpy.UnsupportedOpError, match="unsupported dtypes: float64"):
        torch.compile(double, backend=make_backend("error"))(x)
    torch._dynamo.reset()
    with pytest.warns(RlxpyFallbackWarning, match="float64"):
        got = torch.compile(double, backend=rlxpy_backend)(x)
    assert got.dtype == torch.float64 and torch.equal(got, double(x))


def test_dynamic_dim_rlxpy_cannot_bind_is_a_clear_error():
    def widen(x):
        return torch.cat([x, x * 2], dim=1)
    x = torch.randn(3, 6)
    torch._dynamo.mark_dynamic(x, 1)
    with pytest.raises(rlxpy.UnsupportedOpError, match=r"aten\.cat.*concat axis must be static"):
        torch.compile(widen, backend=make_backend("error"))(x)


def test_int64_values_beyond_int32_run_in_eager(device):
    def shift(x):
        return x + 1
    big = torch.tensor([1, 2**40, -3])
    with pytest.raises(rlxpy.UnsupportedOpError, match="do not fit the int32"):
        torch.compile(shift, backend=make_backend("error"))(big)
    torch._dynamo.reset()
    compiled = torch.compile(shift, backend=rlxpy_backend)
    with pytest.warns(RlxpyFallbackWarning, match="int32"):
        assert torch.equal(compiled(big), big + 1)
    small = torch.tensor([4, 5, -6])
    assert torch.equal(compiled(small), small + 1)  # small values still run on rlxpy
    assert compiled_graphs()[-1].eager_calls == 1


def test_embedding_index_out_of_range_raises_index_error_like_torch(device):
    table = torch.nn.Embedding(10, 4)
    compiled = torch.compile(table, backend=make_backend("error"))
    with torch.no_grad():
        torch.testing.assert_close(compiled(torch.tensor([[1, 9]])), table(torch.tensor([[1, 9]])))
        with pytest.raises(IndexError):
            table(torch.tensor([[1, 10]]))
        with pytest.raises(IndexError, match="index out of range"):
            compiled(torch.tensor([[1, 10]]))


def test_bad_options_are_rejected():
    with pytest.raises(ValueError, match="on_unsupported"):
        rlxpy_backend(None, [], on_unsupported="maybe")
    with pytest.raises(ValueError, match="executor"):
        rlxpy_backend(None, [], executor="tpu")


def test_gpt2_gets_the_transformer_patterns_and_matches_eager(device):
    """GPT-2 (pre-norm, one fused c_attn projection split into q, k, v) through torch.compile: the
    attention reads q/k/v in place from c_attn's output and the residual adds feed their LayerNorms
    as tees; the result matches eager torch and, bit for bit, the same graph without patterns."""
    from transformers import GPT2Config, GPT2Model

    from rlxpy import env

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=101, n_positions=64, n_embd=48, n_layer=2, n_head=4, bos_token_id=0,
                     eos_token_id=0, attn_implementation="sdpa")
    model = GPT2Model(cfg).eval()
    ids = torch.randint(0, 101, (2, 9))
    results = {}
    for flags in ({}, {"RLX_WGPU_NO_PATTERNS": 1}):
        torch._dynamo.reset()
        with env.override(**flags), torch.no_grad():
            results[bool(flags)] = torch.compile(model, backend=make_backend("error"))(ids).last_hidden_state
        kinds = {type(n.op) for exe in compiled_graphs()[-1].executables.values()
                 for n in exe.schedule.graph.nodes}
        assert ({ops.PackedAttention, ops.ResidualNormTee} <= kinds) != bool(flags)
    with torch.no_grad():
        want = model(ids).last_hidden_state
    torch.testing.assert_close(results[False], want, rtol=1e-4, atol=1e-4)
    assert torch.equal(results[False], results[True])
