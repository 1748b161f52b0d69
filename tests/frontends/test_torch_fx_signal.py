"""torch.compile(backend="rlxpy") on torch.fft and torch.stft, against float64 torch: fft/ifft/fft2 on
complex tensors, fft of a real tensor, rfft/irfft (with n), the norms rlxpy has, torch.stft and a power
spectrogram (|stft|^2); every graph runs on the GPU with no host step. A forward transform scaled by
1/n (norm="forward") is refused by name."""

from __future__ import annotations

import pytest
import torch

from rlxpy.errors import UnsupportedOpError
from rlxpy.frontends.torch_fx import compiled_graphs, make_backend
from rlxpy.ir import ops


def _run(fn, *inputs: torch.Tensor, tol: float = 2e-6):
    """fn under torch.compile (errors raised, never fallen back) vs fn on float64 / complex128 inputs."""
    torch._dynamo.reset()
    got = torch.compile(fn, backend=make_backend("error"))(*inputs)
    wide = [x.to(torch.complex128 if x.is_complex() else torch.float64) for x in inputs]
    want = fn(*wide)
    assert got.dtype == (torch.complex64 if want.is_complex() else torch.float32)
    scale = want.abs().max().item()
    assert (got.to(want.dtype) - want).abs().max().item() <= tol * scale
    compiled = compiled_graphs()[-1]
    for exe in compiled.executables.values():
        assert exe.report().summary["host_steps"] == 0
    return compiled


def _ffts(compiled) -> list:
    return [n.op for n in compiled.graph.nodes if isinstance(n.op, ops.Fft)]


def test_complex_transforms(device):
    z = torch.randn(3, 16, 10, dtype=torch.complex64)
    assert len(_ffts(_run(lambda z: torch.fft.fft(z), z))) == 1
    (op,) = _ffts(_run(lambda z: torch.fft.ifft(z, dim=1, norm="ortho"), z))
    assert op.inverse and op.axis == 1 and op.norm is ops.FftNorm.ORTHO
    assert len(_ffts(_run(lambda z: torch.fft.fft2(z), z))) == 2
    _run(lambda z: torch.fft.ifftn(z, dim=(0, 2)), z)


def test_real_transforms(device):
    x = torch.randn(4, 37)
    (op,) = _ffts(_run(lambda x: torch.fft.fft(x), x))
    assert op.real and not op.onesided
    _run(lambda x: torch.fft.rfft(x), x)
    _run(lambda x: torch.fft.rfft(x, n=64, norm="ortho"), x)
    half = torch.randn(4, 19, dtype=torch.complex64)
    _run(lambda h: torch.fft.irfft(h), half)
    _run(lambda h: torch.fft.irfft(h, n=30), half)
    _run(lambda h: torch.fft.irfftn(h, dim=(0, 1)), half)


def test_stft_and_a_power_spectrogram(device):
    signal, window = torch.randn(2, 4000), torch.hann_window(400)
    compiled = _run(lambda s, w: torch.stft(s, 400, 160, window=w, return_complex=True), signal, window)
    assert len(_ffts(compiled)) == 1
    _run(lambda s, w: torch.stft(s, 400, 160, window=w, return_complex=True).abs() ** 2, signal, window)
    _run(lambda s, w: torch.stft(s, 64, 32, window=w, center=False, return_complex=True).abs(), signal,
         torch.hann_window(64))


def test_a_forward_transform_scaled_by_one_over_n_is_refused():
    torch._dynamo.reset()
    compiled = torch.compile(lambda z: torch.fft.fft(z, norm="forward"), backend=make_backend("error"))
    with pytest.raises(UnsupportedOpError, match="norm='forward' on a forward transform"):
        compiled(torch.randn(2, 8, dtype=torch.complex64))
