"""torch.compile(backend="rlxpy") on CNN building blocks, each against eager torch: convolutions (1/2/3-D,
transposed, grouped, dilated), pools (max, average, adaptive; ceil_mode, count_include_pad), batch
norm (folded into the conv before it, or the BatchNorm op), group and instance norm, interpolate,
padding, hardswish / hardsigmoid / relu6 / silu, channel shuffle; an aten op rlxpy cannot take is a
warning naming it."""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import nn

from rlxpy.frontends.torch_fx import RlxpyFallbackWarning, compiled_graphs, make_backend
from rlxpy.ir import ops


def _run(module: nn.Module, *inputs: torch.Tensor, tol: float = 1e-5):
    """The module under torch.compile (errors raised, not fallen back) vs eager; returns the graph."""
    torch._dynamo.reset()
    module = module.eval()
    with torch.no_grad():
        want = module(*inputs)
        got = torch.compile(module, backend=make_backend("error"))(*inputs)
    scale = max(1.0, want.abs().max().item())
    torch.testing.assert_close(got, want, rtol=tol, atol=tol * scale, equal_nan=True)
    return compiled_graphs()[-1]


def _op_types(compiled) -> list[type]:
    return [type(n.op) for n in compiled.graph.nodes]


def _host_steps(compiled) -> int:
    return sum(exe.report().summary["host_steps"] for exe in compiled.executables.values())


class Convs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv1d(3, 4, 5, stride=2, padding=2, dilation=1)
        self.t1 = nn.ConvTranspose1d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2)
        self.c2 = nn.Conv2d(3, 6, 3, stride=(2, 1), padding=1, dilation=(1, 2), groups=3)
        self.t2 = nn.ConvTranspose2d(6, 4, (3, 2), stride=2, padding=(1, 0))
        self.c3 = nn.Conv3d(2, 3, 2, padding=(1, 0, 1), bias=False)

    def forward(self, x1, x2, x3):
        a = F.silu(self.t1(F.relu6(self.c1(x1))))
        b = F.hardswish(self.t2(self.c2(x2)))
        c = F.hardsigmoid(self.c3(x3))
        return torch.cat([a.flatten(1), b.flatten(1), c.flatten(1)], 1)


def test_convolutions_1d_2d_3d_transposed_and_grouped(device):
    x1, x2, x3 = torch.randn(2, 3, 11), torch.randn(2, 3, 9, 8), torch.randn(2, 2, 4, 5, 3)
    compiled = _run(Convs(), x1, x2, x3, tol=1e-4)
    kinds = _op_types(compiled)
    assert kinds.count(ops.Conv) == 3 and kinds.count(ops.ConvTranspose) == 2


class Pools(nn.Module):
    def forward(self, x, v):
        parts = [F.max_pool2d(x, 3, 2, 1), F.max_pool2d(x, 2, ceil_mode=True), F.avg_pool2d(x, 3, 2, 1),
                 F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
                 F.avg_pool2d(x, 2, divisor_override=3), F.adaptive_avg_pool2d(x, (3, 4)),
                 F.adaptive_max_pool2d(x, 2), F.adaptive_avg_pool2d(x, 1), F.max_pool1d(v, 3, 2),
                 F.avg_pool1d(v, 4), F.adaptive_max_pool1d(v, 5), F.max_pool3d(x.unsqueeze(2), (1, 2, 2))]
        return torch.cat([p.flatten(1) for p in parts], 1)


def test_pools_with_nan_windows(device):
    x, v = torch.randn(2, 3, 9, 11), torch.randn(2, 4, 13)
    x[0, 1, 4, 5] = float("nan")
    compiled = _run(Pools(), x, v)
    assert ops.Pool in _op_types(compiled) and ops.AdaptivePool in _op_types(compiled)


class ConvBn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.after = nn.BatchNorm2d(8)  # after a relu: nothing to fold into
        self.bn1d = nn.BatchNorm1d(8, affine=False)
        for bn in (self.bn, self.after, self.bn1d):
            bn.running_mean.uniform_(-1, 1)
            bn.running_var.uniform_(0.5, 2)
        for bn in (self.bn, self.after):
            bn.weight.data.uniform_(0.5, 2)
            bn.bias.data.uniform_(-1, 1)

    def forward(self, x):
        y = self.after(F.relu(self.bn(self.conv(x))))
        return self.bn1d(y.mean((2, 3)))


def test_batch_norm_folds_into_the_conv_and_recomputes_after_a_weight_update(device):
    torch.manual_seed(0)
    model, x = ConvBn(), torch.randn(2, 3, 7, 9)
    compiled = _run(model, x, tol=1e-4)
    assert _op_types(compiled).count(ops.BatchNorm) == 2  # the folded one is gone
    names = {spec.name for spec in compiled.translation.params}
    assert "param_convolution_bn_weight" in names and "param_convolution_bn_bias" in names
    with torch.no_grad():  # the folded weights follow the module's
        model.bn.running_var.mul_(3.0)
        model.conv.weight.mul_(-1.0)
        want = model(x)
        got = torch.compile(model, backend=make_backend("error"))(x)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


class Norms(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gn, self.inorm = nn.GroupNorm(3, 6), nn.InstanceNorm2d(6, affine=True)
        self.plain = nn.InstanceNorm1d(6)
        with torch.no_grad():
            for p in (self.gn.weight, self.gn.bias, self.inorm.weight, self.inorm.bias):
                p.uniform_(-1, 1)

    def forward(self, x):
        return self.inorm(self.gn(x)).flatten(2) + self.plain(x.flatten(2))


def test_group_and_instance_norm_with_a_nan_group(device):
    x = torch.randn(2, 6, 5, 7) * 3 + 1
    x[1, 4, 0, 0] = float("nan")
    compiled = _run(Norms(), x, tol=1e-4)
    assert _op_types(compiled).count(ops.GroupNorm) == 3


class Resampling(nn.Module):
    def forward(self, x):
        parts = [F.interpolate(x, scale_factor=2, mode="nearest"),
                 F.interpolate(x, size=(7, 13), mode="nearest-exact"),
                 F.interpolate(x, size=(11, 5), mode="bilinear", align_corners=False),
                 F.interpolate(x, scale_factor=1.5, mode="bilinear", align_corners=True),
                 F.pad(x, (1, 2, 0, 3), value=0.5), F.pad(x, (2, 1, 1, 0), mode="reflect"),
                 F.pad(x, (1, 1, 2, 2), mode="replicate")]
        shuffled = x.view(2, 2, 2, 6, 8).transpose(1, 2).reshape(2, 4, 6, 8)  # channel shuffle
        return torch.cat([p.flatten(1) for p in parts] + [shuffled.flatten(1)], 1)


def test_interpolate_pad_and_channel_shuffle_run_without_host_steps(device):
    compiled = _run(Resampling(), torch.randn(2, 4, 6, 8))
    assert _host_steps(compiled) == 0


class Interpolations(nn.Module):
    """nearest / nearest-exact / (bi/tri)linear, align_corners both ways, sizes and scales (integer,
    fractional, per dim, recomputed), odd sizes, 1-D to 3-D."""

    def forward(self, x1, x2, x3):
        parts = [F.interpolate(x2, scale_factor=2, mode="nearest"),
                 F.interpolate(x2, size=(9, 4), mode="nearest"),
                 F.interpolate(x2, scale_factor=1.7, mode="nearest-exact"),
                 F.interpolate(x2, scale_factor=1.7, mode="bilinear"),
                 F.interpolate(x2, size=(17, 3), mode="bilinear", align_corners=True),
                 F.interpolate(x2, scale_factor=(1.5, 0.6), mode="bilinear", align_corners=True),
                 F.interpolate(x2, scale_factor=2.5, mode="bilinear", recompute_scale_factor=True),
                 F.interpolate(x2, size=(1, 1), mode="bilinear"),
                 F.interpolate(x1, scale_factor=1.3, mode="linear"),
                 F.interpolate(x1, size=31, mode="nearest"),
                 F.interpolate(x3, scale_factor=2, mode="trilinear"),
                 F.interpolate(x3, size=(4, 5, 6), mode="trilinear", align_corners=True)]
        return torch.cat([p.flatten(1) for p in parts], 1)


def test_interpolate_stays_one_resize_op(device):
    x1, x2, x3 = torch.randn(3, 2, 17), torch.randn(3, 2, 5, 7), torch.randn(3, 2, 3, 4, 5)
    compiled = _run(Interpolations(), x1, x2, x3)
    kinds = _op_types(compiled)
    assert kinds.count(ops.Resize) == 12 and ops.Gather not in kinds
    assert _host_steps(compiled) == 0


def test_interpolate_in_a_training_graph_keeps_torchs_decomposition(device):
    """With a gradient to compute the call is not rewritten: aot_autograd decomposes it (and derives
    its backward, whose two-index index_put runs in eager torch); values and gradients match eager."""
    torch._dynamo.reset()
    x = torch.randn(2, 3, 5, 7, requires_grad=True)
    fn = lambda t: F.interpolate(t, scale_factor=1.5, mode="bilinear").square().sum()  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RlxpyFallbackWarning)
        got = torch.compile(fn, backend=make_backend("fallback"))(x)
        (grad,) = torch.autograd.grad(got, x)
    want = fn(x)
    (want_grad,) = torch.autograd.grad(want, x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grad, want_grad, rtol=1e-5, atol=1e-5)
    forward = [g for g in compiled_graphs() if g.role == "forward"][-1]
    assert ops.Resize not in _op_types(forward) and ops.Gather in _op_types(forward)


def test_an_aten_op_rlxpy_cannot_take_falls_back_with_a_warning_naming_it(device):
    class Unsupported(nn.Module):
        def forward(self, x):
            return F.max_pool2d(x, 2, return_indices=True)[1].float() + torch.special.i0(x)[:, :, ::2, ::2]

    torch._dynamo.reset()
    x = torch.randn(1, 2, 4, 4)
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        out = torch.compile(Unsupported(), backend="rlxpy")(x)
    messages = [str(w.message) for w in caught if issubclass(w.category, RlxpyFallbackWarning)]
    assert any("aten.i0.default" in m for m in messages), messages
    torch.testing.assert_close(out, Unsupported()(x))


def test_adaptive_max_pooling_indices_match_torch(device):
    """(Windowed max pooling's: tests/frontends/test_torch_fx_training_cnn.py.)"""
    torch._dynamo.reset()
    x = torch.randperm(2 * 3 * 7 * 5, generator=torch.Generator().manual_seed(6)).reshape(2, 3, 7, 5).float()
    with torch.no_grad():
        got = torch.compile(lambda x: F.adaptive_max_pool2d(x, (3, 4), return_indices=True),
                            backend=make_backend("error"))(x)
    want = F.adaptive_max_pool2d(x, (3, 4), return_indices=True)
    torch.testing.assert_close(got[0], want[0])
    assert torch.equal(got[1], want[1])
