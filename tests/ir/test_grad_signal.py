"""Gradient rules of the signal family (Fft: complex in C64 and in the f32/f64 block layout, rfft
one-sided and full, irfft with every output length; each norm; Stft; ComplexView) vs
torch.autograd of torch.fft / torch.stft in float64 (f32 graph within FFT_TOL: rtol 1e-4, atol 2e-5,
an FFT sums N products per bin).

Finite differences: the block-layout transform runs in f64 through the numpy reference
(grad_helpers.FD_TOL). rfft takes and irfft gives f32 only and view_as_complex takes f32, so those
graphs have no f64 form: their f32 gradients are held to central differences (step 1e-6) of the same
loss written with numpy.fft in float64, within FFT_TOL (Stft's frames: rlxpy's float64 reference's)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from grad_helpers import autodiff_grads, check_grads, finite_difference_check, rand, torch_grads

import rlxpy
from rlxpy.ir import Graph, ops
from rlxpy.ir.ops.base import FftNorm
from rlxpy.ir.passes.autodiff import grad
from rlxpy.ir.reference.signal import stft_frames

FFT_TOL = (1e-4, 2e-5)
#: (rlxpy's norm, forward?) -> torch's norm name
_TORCH_NORM = {(FftNorm.BACKWARD, True): "backward", (FftNorm.BACKWARD, False): "forward",
               (FftNorm.FORWARD, True): "backward", (FftNorm.FORWARD, False): "backward",
               (FftNorm.ORTHO, True): "ortho", (FftNorm.ORTHO, False): "ortho"}
NORMS = list(FftNorm)


def numpy_fd_check(loss64, x: np.ndarray, got: np.ndarray, points: int = 8) -> None:
    """``got`` (d loss / d x from the f32 graph) vs central differences of ``loss64`` in float64."""
    base = x.astype(np.float64)
    rng = np.random.default_rng(7)
    for index in rng.choice(base.size, size=min(points, base.size), replace=False):
        values = []
        for sign in (1.0, -1.0):
            moved = base.copy().reshape(-1)
            moved[index] += sign * 1e-6
            values.append(loss64(moved.reshape(base.shape)))
        estimate = (values[0] - values[1]) / 2e-6
        value = float(got.reshape(-1)[index])
        assert abs(value - estimate) <= FFT_TOL[1] + FFT_TOL[0] * abs(estimate), (index, value, estimate)


@pytest.mark.parametrize("norm", NORMS, ids=lambda n: n.name)
@pytest.mark.parametrize("inverse", [False, True])
@pytest.mark.parametrize("shape", [(1, 2), (3, 6), (2, 34)], ids=str)  # N = 1, 3, 17
def test_block_layout_fft_gradients(shape, inverse, norm):
    n = shape[-1] // 2
    torch_norm = _TORCH_NORM[(norm, not inverse)]

    def reference(x):
        z = torch.complex(x[..., :n], x[..., n:])
        y = (torch.fft.ifft if inverse else torch.fft.fft)(z, norm=torch_norm)
        return torch.cat([y.real, y.imag], -1)

    check_grads(lambda g, x: g.fft(x, inverse, norm), reference, {"x": rand(shape, 0)}, tol=FFT_TOL)


@pytest.mark.parametrize("norm", NORMS, ids=lambda n: n.name)
@pytest.mark.parametrize("inverse", [False, True])
def test_c64_fft_gradients_along_a_leading_axis(inverse, norm):
    torch_norm = _TORCH_NORM[(norm, not inverse)]

    def build(g, x):
        return g.view_as_real(g.fft(g.view_as_complex(x), inverse, norm, axis=0))

    def reference(x):
        y = (torch.fft.ifft if inverse else torch.fft.fft)(torch.view_as_complex(x), dim=0, norm=torch_norm)
        return torch.view_as_real(y)

    check_grads(build, reference, {"x": rand((5, 3, 2), 1)}, tol=FFT_TOL, fd=False)
    # the same transform along axis 0 in float64 numpy: the block-layout test covers the f64 graph
    got, cot = autodiff_grads(build, {"x": rand((5, 3, 2), 1)})
    fn = np.fft.ifft if inverse else np.fft.fft

    def loss64(x):
        y = fn(x[..., 0] + 1j * x[..., 1], axis=0, norm=torch_norm)
        return float((np.stack([y.real, y.imag], -1) * cot).sum())

    numpy_fd_check(loss64, rand((5, 3, 2), 1), got["x"])


# (shape, axis, onesided)
RFFT_CASES = [((1,), -1, True), ((3, 17), -1, True), ((2, 16), -1, True), ((4, 3), 0, True),
              ((17, 2), 0, True), ((2, 7), -1, False), ((6, 2), 0, False)]


@pytest.mark.parametrize("norm", NORMS, ids=lambda n: n.name)
@pytest.mark.parametrize("case", RFFT_CASES, ids=str)
def test_rfft_gradients(case, norm):
    shape, axis, onesided = case
    torch_norm = _TORCH_NORM[(norm, True)]

    def build(g, x):
        return g.view_as_real(g.rfft(x, norm, axis, onesided))

    def reference(x):
        transform = torch.fft.rfft if onesided else torch.fft.fft
        return torch.view_as_real(transform(x, dim=axis, norm=torch_norm))

    x = rand(shape, 2)
    check_grads(build, reference, {"x": x}, tol=FFT_TOL, fd=False)
    got, cot = autodiff_grads(build, {"x": x})
    fn = np.fft.rfft if onesided else np.fft.fft

    def loss64(v):
        y = fn(v, axis=axis, norm=torch_norm)
        return float((np.stack([y.real, y.imag], -1) * cot).sum())

    numpy_fd_check(loss64, x, got["x"])


# (bins M, n (0: 2(M-1)), axis): even and odd n, missing bins (n > 2(M-1)) and ignored ones (n < 2(M-1))
IRFFT_CASES = [(2, 0, -1), (9, 0, -1), (9, 17, -1), (9, 30, -1), (9, 5, -1), (1, 1, -1), (5, 0, 0), (4, 7, 0)]


@pytest.mark.parametrize("norm", NORMS, ids=lambda n: n.name)
@pytest.mark.parametrize("case", IRFFT_CASES, ids=str)
def test_irfft_gradients(case, norm):
    bins, n, axis = case
    shape = (2, bins, 2) if axis == -1 else (bins, 3, 2)
    torch_norm = _TORCH_NORM[(norm, False)]
    length = n or 2 * (bins - 1)

    def build(g, x):
        return g.irfft(g.view_as_complex(x), n, norm, axis)

    def reference(x):
        return torch.fft.irfft(torch.view_as_complex(x), length, dim=axis, norm=torch_norm)

    x = rand(shape, 3)
    check_grads(build, reference, {"x": x}, tol=FFT_TOL, fd=False)
    got, cot = autodiff_grads(build, {"x": x})

    def loss64(v):
        y = np.fft.irfft(v[..., 0] + 1j * v[..., 1], length, axis=axis, norm=torch_norm)
        return float((y * cot).sum())

    numpy_fd_check(loss64, x, got["x"])


# (T, n_fft, hop, center, pad_mode, onesided, norm)
STFT_CASES = [(17, 8, 3, True, "reflect", True, FftNorm.BACKWARD),
              (17, 8, 3, True, "constant", True, FftNorm.ORTHO),
              (16, 5, 2, False, "reflect", True, FftNorm.BACKWARD),
              (33, 16, 4, True, "reflect", False, FftNorm.ORTHO),
              (9, 9, 1, False, "constant", False, FftNorm.BACKWARD),
              (3, 4, 1, True, "constant", True, FftNorm.BACKWARD)]


@pytest.mark.parametrize("case", STFT_CASES, ids=str)
def test_stft_gradients(case):
    length, n_fft, hop, center, pad_mode, onesided, norm = case
    arrays = {"x": rand((2, length), 6), "window": rand((n_fft,), 7, 0.5, 1.0)}

    def build(g, x, w):
        return g.view_as_real(g.stft(x, w, n_fft, hop, center, pad_mode, onesided, norm))

    def reference(x, w):
        y = torch.stft(x, n_fft, hop, window=w, center=center, pad_mode=pad_mode, onesided=onesided,
                       normalized=norm is FftNorm.ORTHO, return_complex=True)
        return torch.view_as_real(y.transpose(-1, -2))

    check_grads(build, reference, arrays, tol=FFT_TOL, fd=False)
    got, cot = autodiff_grads(build, arrays)
    op = ops.Stft(n_fft, hop, center, pad_mode, onesided, norm)

    for name in ("x", "window"):
        def loss64(v, name=name):  # rlxpy's float64 framing, then numpy.fft
            args = {**{k: a.astype(np.float64) for k, a in arrays.items()}, name: v}
            frames = stft_frames(op, args["x"]) * args["window"]
            y = (np.fft.rfft if onesided else np.fft.fft)(frames, axis=-1)
            y = y / np.sqrt(n_fft) if norm is FftNorm.ORTHO else y
            return float((np.stack([y.real, y.imag], -1) * cot).sum())

        numpy_fd_check(loss64, arrays[name], got[name])


def test_spectral_gradients_run_on_the_gpu(device):
    """rfft -> per-bin complex weights -> irfft (a spectral filter) and a C64 FFT along axis 0:
    the differentiated graph compiles with no host step and matches torch.autograd."""
    x, w = rand((3, 17), 4), rand((9, 2), 5)
    g = Graph("spectral_filter")
    xn, wn = g.input("x", x.shape), g.input("w", w.shape)
    spectrum = g.view_as_real(g.rfft(xn, FftNorm.ORTHO))
    filtered = g.irfft(g.view_as_complex(g.mul(spectrum, wn)), 17, FftNorm.FORWARD)
    mixed = g.view_as_real(g.fft(g.view_as_complex(g.reshape(g.concat([filtered, filtered], 1), (3, 17, 2))),
                                 axis=0))
    g.output(g.sum(g.reshape(g.mul(mixed, mixed), (3 * 17 * 2,)), 0, name="loss"))
    result = grad(g, "loss", ["x", "w"])
    exe = rlxpy.compile(result.graph)
    assert not [s.label for s in exe.schedule.steps if s.kind == "host"], "host steps"
    out = exe.run({"x": x, "w": w})

    tx, tw = (torch.from_numpy(a).double().requires_grad_() for a in (x, w))
    spec = torch.view_as_real(torch.fft.rfft(tx, norm="ortho")) * tw
    filt = torch.fft.irfft(torch.view_as_complex(spec), 17, norm="backward")
    pairs = torch.cat([filt, filt], 1).reshape(3, 17, 2)
    mix = torch.view_as_real(torch.fft.fft(torch.view_as_complex(pairs), dim=0))
    (mix * mix).sum().backward()
    for name, want in (("x", tx.grad), ("w", tw.grad)):
        np.testing.assert_allclose(out[result.grads[name]], want.numpy(), rtol=FFT_TOL[0], atol=1e-4,
                                   err_msg=f"d loss / d {name} on the GPU vs torch.autograd")


def test_stft_gradients_run_on_the_gpu(device):
    """d signal and d window of a reflect-padded, orthonormal stft: no host step, torch.autograd's values."""
    x, w = rand((2, 40), 8), rand((16,), 9, 0.5, 1.0)
    g = Graph("stft_grad")
    xn, wn = g.input("x", x.shape), g.input("window", w.shape)
    spec = g.view_as_real(g.stft(xn, wn, 16, 4, norm=FftNorm.ORTHO))
    g.output(g.sum(g.reshape(g.mul(spec, spec), (spec.numel,)), 0, name="loss"))
    result = grad(g, "loss", ["x", "window"])
    exe = rlxpy.compile(result.graph)
    assert not [s.label for s in exe.schedule.steps if s.kind == "host"], "host steps"
    out = exe.run({"x": x, "window": w})
    tx, tw = (torch.from_numpy(a).double().requires_grad_() for a in (x, w))
    y = torch.view_as_real(torch.stft(tx, 16, 4, window=tw, normalized=True, return_complex=True))
    (y * y).sum().backward()
    for name, want in (("x", tx.grad), ("window", tw.grad)):
        np.testing.assert_allclose(out[result.grads[name]], want.numpy(), rtol=FFT_TOL[0], atol=1e-4,
                                   err_msg=f"d loss / d {name} on the GPU vs torch.autograd")


def _log_mel_inputs(frames: int, n_fft: int, mels: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(block-layout spectra [2, frames, 2 n_fft], filters [mels, n_fft//2+1]): bin k's power falls
    like 10^(-2.6k) and each mel covers two bins, so the low mels sit above the floor, the high ones
    below it and the last under the 1e-10 clamp."""
    bins = n_fft // 2 + 1
    rng = np.random.default_rng(seed)
    decay = np.zeros(n_fft)
    decay[:bins] = 10.0 ** (-1.3 * np.arange(bins))
    decay[bins:] = 1.0
    blocks = rng.standard_normal((2, frames, 2 * n_fft)) * np.concatenate([decay, decay])
    filters = np.zeros((mels, bins))
    for m in range(mels):
        filters[m, 2 * m:2 * m + 2] = rng.uniform(0.5, 1.5, 2)[: len(filters[m, 2 * m:2 * m + 2])]
    return blocks.astype(np.float32), filters.astype(np.float32)


def torch_log_mel(re, im, filters, floor_axes):
    """whisper's log_mel_spectrogram after the stft, differentiated whole by torch."""
    logs = torch.clamp((re**2 + im**2) @ filters.T, min=1e-10).log10()
    top = logs.amax(-1, keepdim=True) if floor_axes == 1 else logs.amax((-2, -1), keepdim=True)
    return (torch.maximum(logs, top - 8.0) + 4.0) / 4.0


@pytest.mark.parametrize("floor_axes", [1, 2])
@pytest.mark.parametrize("frames,n_fft,mels", [(1, 4, 2), (3, 16, 5), (17, 9, 3)], ids=str)
def test_log_mel_gradients_block_layout(frames, n_fft, mels, floor_axes):
    blocks, filters = _log_mel_inputs(frames, n_fft, mels, frames + n_fft)
    bins = n_fft // 2 + 1

    def reference(x, f):
        return torch_log_mel(x[..., :bins], x[..., n_fft:n_fft + bins], f, floor_axes)

    def build(g, x, f):
        return g.log_mel(x, f, floor_axes)

    arrays = {"spectrum": blocks, "filters": filters}
    # relative tolerance: the high mels' gradients are 1e13 times the low ones'
    check_grads(build, reference, arrays, tol=(2e-4, 0.0), fd=False)
    # the f64 graph against torch's f64 autograd (tighter than finite differences, which the 1/E of
    # the tiny energies makes inaccurate for the filters), and central differences for the spectrum
    got, cot = autodiff_grads(build, arrays, wide=True)
    want = torch_grads(reference, arrays, ["spectrum", "filters"], cot)
    for name in ("spectrum", "filters"):
        np.testing.assert_allclose(got[name], want[name], rtol=1e-9, atol=0.0, err_msg=name)
    finite_difference_check(build, arrays, ["spectrum"])


@pytest.mark.parametrize("floor_axes", [1, 2])
def test_log_mel_gradients_c64(floor_axes):
    blocks, filters = _log_mel_inputs(5, 8, 3, 2)
    pairs = np.stack([blocks[..., :5], blocks[..., 8:13]], -1)  # [2, 5, bins, 2] re/im pairs

    def build(g, x, f):
        return g.log_mel(g.view_as_complex(x), f, floor_axes)

    def reference(x, f):
        return torch_log_mel(x[..., 0], x[..., 1], f, floor_axes)

    check_grads(build, reference, {"spectrum": pairs, "filters": filters}, tol=(2e-4, 0.0), fd=False)


def test_log_mel_of_stft_gradients_run_on_the_gpu(device):
    """whisper's features (stft, power, mel filters, log10, floor per spectrogram) differentiated on the
    GPU with no host step, against torch.autograd."""
    x, w = rand((1, 64), 10), np.hanning(16).astype(np.float32)
    filters = np.abs(rand((4, 9), 11)).astype(np.float32)
    g = Graph("log_mel_grad")
    xn, wn, fn = g.input("x", x.shape), g.input("window", w.shape), g.input("filters", filters.shape)
    feats = g.log_mel(g.stft(xn, wn, 16, 4), fn, 2)
    cot = rand(feats.shape, 12)
    g.output(g.sum(g.reshape(g.mul(feats, g.constant(cot)), (feats.numel,)), 0, name="loss"))
    result = grad(g, "loss", ["x", "filters"])
    exe = rlxpy.compile(result.graph)
    assert not [s.label for s in exe.schedule.steps if s.kind == "host"], "host steps"
    out = exe.run({"x": x, "window": w, "filters": filters})
    tx, tf = (torch.from_numpy(a).double().requires_grad_() for a in (x, filters))
    spec = torch.stft(tx, 16, 4, window=torch.from_numpy(w).double(), return_complex=True).transpose(-1, -2)
    y = torch_log_mel(spec.real, spec.imag, tf, 2)
    (y * torch.from_numpy(cot).double()).sum().backward()
    for name, want in (("x", tx.grad), ("filters", tf.grad)):
        np.testing.assert_allclose(out[result.grads[name]], want.numpy(), rtol=1e-3, atol=1e-4,
                                   err_msg=f"d loss / d {name} on the GPU vs torch.autograd")


def _mean_power(re, im, segments):
    """|X|^2 of the one-sided bins averaged over each batch entry's segments (rows batch-major)."""
    rows, bins = re.shape
    return (re * re + im * im).reshape(rows // segments, segments, bins).mean(1)


def _welch_torch(segments, k, n_fft):
    """WelchPeaks in torch: the one-sided PSD (bins doubled but DC and an even n_fft's Nyquist bin),
    its top k bins as (bin, power) pairs (torch.topk's choice, constant)."""
    bins = n_fft // 2 + 1
    factor = torch.full((bins,), 2.0, dtype=torch.float64)
    factor[0] = 1.0
    if n_fft % 2 == 0:
        factor[-1] = 1.0

    def peaks(re, im):
        psd = _mean_power(re, im, segments) * factor
        idx = torch.topk(psd.detach(), k, dim=-1).indices
        return torch.stack([idx.double(), psd.gather(1, idx)], -1).reshape(psd.shape[0], 2 * k)

    return peaks


@pytest.mark.parametrize("batch,segments,n_fft,k", [(1, 1, 4, 1), (2, 3, 9, 3), (3, 2, 16, 5), (1, 4, 17, 9)],
                         ids=str)
def test_welch_peaks_gradients(batch, segments, n_fft, k):
    """The powers differentiated through the PSD at the chosen bins (block layout and C64), the bins
    themselves not, vs torch.autograd with torch.topk's choice."""
    blocks = rand((batch * segments, 2 * n_fft), batch + n_fft)
    bins = n_fft // 2 + 1
    peaks = _welch_torch(segments, k, n_fft)
    check_grads(lambda g, x: g.welch_peaks(x, k, segments),
                lambda x: peaks(x[:, :bins], x[:, n_fft:n_fft + bins]), {"spectrum": blocks}, fd=False)
    pairs = np.ascontiguousarray(np.stack([blocks[:, :n_fft], blocks[:, n_fft:]], -1))
    check_grads(lambda g, x: g.welch_peaks(g.view_as_complex(x), k, segments),
                lambda x: peaks(x[:, :bins, 0], x[:, :bins, 1]), {"spectrum": pairs}, fd=False)


def test_welch_peaks_gradients_run_on_the_gpu(device):
    """The differentiated graph compiles with no host step and matches torch.autograd on the GPU."""
    batch, segments, n_fft, k = 3, 2, 16, 4
    blocks = rand((batch * segments, 2 * n_fft), 6)
    cot = rand((batch, 2 * k), 7)
    g = Graph("welch_grad")
    x = g.input("x", blocks.shape)
    y = g.welch_peaks(x, k, segments)
    g.output(g.sum(g.reshape(g.mul(y, g.constant(cot)), (batch * 2 * k,)), 0, name="loss"))
    result = grad(g, "loss", ["x"])
    exe = rlxpy.compile(result.graph)
    assert not [s.label for s in exe.schedule.steps if s.kind == "host"], "host steps"
    got = exe.run({"x": blocks})[result.grads["x"]]
    tx = torch.from_numpy(blocks.astype(np.float64)).requires_grad_()
    peaks = _welch_torch(segments, k, n_fft)(tx[:, :9], tx[:, 16:25])
    (peaks * torch.from_numpy(cot).double()).sum().backward()
    np.testing.assert_allclose(got, tx.grad.numpy(), rtol=1e-5, atol=1e-5, err_msg="welch gradient, GPU")


def test_a_complex_tensor_read_twice_sums_its_gradients_on_the_gpu(device):
    """Fan-out of a C64 tensor: its two complex gradient parts are added as (re, im) pairs (there is no
    complex element-wise add), on the GPU with no host step, as torch.autograd sums them."""
    x = rand((3, 17, 2), 1)
    g = Graph("complex_fan_out")
    xn = g.input("x", x.shape)
    c = g.fft(g.view_as_complex(xn))
    a, b = g.view_as_real(c), g.view_as_real(g.fft(c))
    g.output(g.sum(g.reshape(g.add(g.mul(a, a), b), (3 * 17 * 2,)), 0, name="loss"))
    result = grad(g, "loss", ["x"])
    exe = rlxpy.compile(result.graph)
    assert not [s.label for s in exe.schedule.steps if s.kind == "host"], "host steps"
    got = exe.run({"x": x})[result.grads["x"]]

    tx = torch.from_numpy(x).double().requires_grad_()
    tc = torch.fft.fft(torch.view_as_complex(tx))
    (torch.view_as_real(tc) ** 2 + torch.view_as_real(torch.fft.fft(tc))).sum().backward()
    np.testing.assert_allclose(got, tx.grad.numpy(), rtol=FFT_TOL[0], atol=1e-4,
                               err_msg="d loss / d x through a complex tensor read twice vs torch.autograd")
