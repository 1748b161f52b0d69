"""Fft, WelchPeaks, LogMel and LogMelBackward vs torch.fft, scipy.signal.welch and torch autograd."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.fft
import scipy.signal
import torch

from rlxpy.errors import GraphError
from rlxpy.ir import ops
from rlxpy.ir.graph import Graph
from rlxpy.ir.ops.base import FftNorm
from rlxpy.ir.reference import run_reference


def _rand(shape, seed, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def _run(g: Graph, node, **values):
    g.output(node)
    return run_reference(g, values)[node.name]


def _torch_fft(z: torch.Tensor, inverse: bool, norm: FftNorm) -> torch.Tensor:
    """rlxpy's norm names in torch's terms: BACKWARD = unscaled both ways, FORWARD = 1/N on the inverse."""
    n = z.shape[-1]
    if norm is FftNorm.ORTHO:
        return (torch.fft.ifft if inverse else torch.fft.fft)(z, norm="ortho")
    if not inverse:
        return torch.fft.fft(z, norm="backward")
    return torch.fft.ifft(z, norm="backward") * (1 if norm is FftNorm.FORWARD else n)


@pytest.mark.parametrize("norm", list(FftNorm))
@pytest.mark.parametrize("inverse", [False, True])
@pytest.mark.parametrize("shape", [(1,), (3,), (17, 5), (2, 255), (2, 3, 16)])
def test_fft_block_layout_matches_torch(shape, inverse, norm):
    x = _rand(shape[:-1] + (2 * shape[-1],), 1)
    g = Graph()
    y = g.fft(g.input("x", x.shape), inverse, norm)
    got = _run(g, y, x=x)
    n = shape[-1]
    z = torch.complex(torch.from_numpy(x[..., :n]).double(), torch.from_numpy(x[..., n:]).double())
    want = _torch_fft(z, inverse, norm)
    want_blocks = torch.cat([want.real, want.imag], dim=-1).numpy()
    scale = max(1.0, np.abs(want_blocks).max())
    np.testing.assert_allclose(got, want_blocks, rtol=1e-5, atol=1e-5 * scale)
    assert got.dtype == np.float32


@pytest.mark.parametrize("norm", list(FftNorm))
def test_fft_c64_and_f64_round_trips(norm):
    rng = np.random.default_rng(2)
    z = (rng.standard_normal((3, 12)) + 1j * rng.standard_normal((3, 12))).astype(np.complex64)
    g = Graph()
    forward = g.fft(g.input("z", z.shape, "c64"), norm=norm)
    back = g.fft(forward, inverse=True, norm=norm)
    x64 = rng.standard_normal((2, 14))
    f64 = g.fft(g.input("x", x64.shape, "f64"), norm=norm)
    g.output(forward, back, f64)
    out = run_reference(g, {"z": z, "x": x64})
    want = _torch_fft(torch.from_numpy(z), False, norm).numpy()
    np.testing.assert_allclose(out[forward.name], want, rtol=1e-5, atol=1e-5)
    assert out[forward.name].dtype == np.complex64
    round_trip_scale = 12 if norm is FftNorm.BACKWARD else 1  # BACKWARD never scales: ifft(fft(x)) = N x
    np.testing.assert_allclose(out[back.name], z * round_trip_scale, rtol=1e-5, atol=1e-4)
    z64 = torch.complex(torch.from_numpy(x64[:, :7]), torch.from_numpy(x64[:, 7:]))
    want64 = _torch_fft(z64, False, norm)
    np.testing.assert_allclose(out[f64.name], torch.cat([want64.real, want64.imag], -1).numpy(), rtol=1e-12)


def test_fft_propagates_nan_through_its_row_only():
    x = _rand((2, 8), 3)
    x[1, 2] = np.nan
    g = Graph()
    got = _run(g, g.fft(g.input("x", x.shape)), x=x)
    assert np.isnan(got[1]).any() and not np.isnan(got[0]).any()


def test_fft_shape_errors():
    g = Graph()
    with pytest.raises(GraphError, match=r"f \(Fft\): fft: last dim 5 .* is not 2N"):
        g.fft(g.input("x", (3, 5)), name="f")
    with pytest.raises(GraphError, match="fft takes c64, or f32/f64"):
        g.fft(g.input("i", (4,), "i32"))
    with pytest.raises(GraphError, match="static axis -1"):
        g.fft(g.input("s", (2, "N")))


def _welch_case(batch, segments, n_fft, seed):
    """Time signals and the block-layout spectra of their non-overlapping segments."""
    signal = _rand((batch, segments * n_fft), seed).astype(np.float64)
    spectra = np.fft.fft(signal.reshape(batch * segments, n_fft), axis=-1)
    blocks = np.concatenate([spectra.real, spectra.imag], axis=-1).astype(np.float32)
    return signal, blocks


@pytest.mark.parametrize("batch, segments, n_fft, k",
                         [(1, 1, 2, 1), (2, 3, 16, 4), (3, 5, 17, 9), (1, 2, 64, 33)])
def test_welch_peaks_match_scipy_welch(batch, segments, n_fft, k):
    signal, blocks = _welch_case(batch, segments, n_fft, seed=n_fft)
    g = Graph()
    y = g.welch_peaks(g.input("s", blocks.shape), k, segments)
    got = _run(g, y, s=blocks).reshape(batch, k, 2)
    _, psd = scipy.signal.welch(signal, fs=1.0, window="boxcar", nperseg=n_fft, noverlap=0, detrend=False,
                                scaling="spectrum", return_onesided=True, axis=-1)
    psd = psd * n_fft**2  # scipy divides by sum(window)^2; the op does not normalise
    for b in range(batch):
        want_bins = np.argsort(-psd[b], kind="stable")[:k]
        np.testing.assert_array_equal(got[b, :, 0], want_bins)
        np.testing.assert_allclose(got[b, :, 1], psd[b, want_bins], rtol=1e-4)


def test_welch_peaks_break_ties_toward_the_lower_bin():
    spectrum = np.zeros((1, 16), np.float32)
    spectrum[0, [1, 3, 5]] = 2.0  # three equal bins among 5 one-sided bins of n_fft=8
    g = Graph()
    got = _run(g, g.welch_peaks(g.input("s", spectrum.shape), 4, 1), s=spectrum)
    np.testing.assert_array_equal(got[0, 0::2], [1, 3, 0, 2])
    np.testing.assert_allclose(got[0, 1::2], [8.0, 8.0, 0.0, 0.0])


def test_welch_peaks_shape_errors():
    g = Graph()
    x = g.input("x", (6, 32))
    with pytest.raises(GraphError, match=r"w \(WelchPeaks\): rows 6 are not a multiple of n_segments=4"):
        g.welch_peaks(x, 2, 4, name="w")
    with pytest.raises(GraphError, match="k=10 exceeds the 9 one-sided bins"):
        g.welch_peaks(x, 10, 2)
    with pytest.raises(GraphError, match="welch_peaks takes c64 .* or f32"):
        g.welch_peaks(g.input("y", (2, 3, 32)), 1, 1)


def _torch_log_mel(spectrum: torch.Tensor, filters: torch.Tensor) -> torch.Tensor:
    """Whisper's log-mel with a per-frame floor, written on complex magnitudes."""
    n_fft = spectrum.shape[-1] // 2
    n_bins = filters.shape[1]
    z = torch.complex(spectrum[..., :n_fft], spectrum[..., n_fft:])[..., :n_bins]
    mel = torch.abs(z) ** 2 @ filters.T
    logs = torch.clamp(mel, min=1e-10).log10()
    floor = (logs.max(dim=-1, keepdim=True).values - 8.0).detach()
    return (torch.where(logs > floor, logs, floor) + 4.0) / 4.0


def _log_mel_case(frames_shape, n_fft, n_mels, seed):
    spectrum = _rand(frames_shape + (2 * n_fft,), seed)
    filters = np.abs(_rand((n_mels, n_fft // 2 + 1), seed + 1)).astype(np.float32)
    filters[0] = 0.0  # an all-zero filter: energy 0 -> clamped to 1e-10 -> floored (no gradient)
    if frames_shape:
        spectrum.reshape(-1, 2 * n_fft)[0] *= 1e-3  # a quiet frame
    return spectrum, filters


@pytest.mark.parametrize("frames_shape, n_fft, n_mels", [((1,), 2, 1), ((3,), 16, 5), ((2, 17), 25, 8)])
def test_log_mel_matches_torch(frames_shape, n_fft, n_mels):
    spectrum, filters = _log_mel_case(frames_shape, n_fft, n_mels, seed=4)
    g = Graph()
    y = g.log_mel(g.input("s", spectrum.shape), g.param("f", filters.shape))
    g.output(y)
    got = run_reference(g, {"s": spectrum}, {"f": filters})[y.name]
    want = _torch_log_mel(torch.from_numpy(spectrum).double(), torch.from_numpy(filters).double()).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_log_mel_floor_is_per_frame():
    spectrum = np.zeros((2, 8), np.float32)
    spectrum[0, 0] = 1e4  # loud frame
    spectrum[1, 0] = 1e-2  # quiet frame: its own floor, not the loud frame's
    filters = np.eye(3, dtype=np.float32)
    g = Graph()
    y = g.log_mel(g.input("s", spectrum.shape), g.input("f", filters.shape))
    got = _run(g, y, s=spectrum, f=filters)
    # loud frame: log10 8, floor 0 lifts the silent mels (log10 1e-10 = -10) to 0
    np.testing.assert_allclose(got[0], [(8 + 4) / 4, (0 + 4) / 4, (0 + 4) / 4], atol=1e-6)
    # quiet frame: log10 -4, its floor -12 leaves them at -10 (a global floor would give 0)
    np.testing.assert_allclose(got[1], [(-4 + 4) / 4, (-10 + 4) / 4, (-10 + 4) / 4], atol=1e-6)


@pytest.mark.parametrize("frames_shape, n_fft, n_mels", [((1,), 2, 1), ((3,), 16, 5), ((2, 17), 25, 8)])
def test_log_mel_backward_matches_torch_autograd(frames_shape, n_fft, n_mels):
    spectrum, filters = _log_mel_case(frames_shape, n_fft, n_mels, seed=6)
    dy = _rand(frames_shape + (n_mels,), 7)
    g = Graph()
    y = g.log_mel_backward(g.input("s", spectrum.shape), g.param("f", filters.shape), g.input("dy", dy.shape))
    g.output(y)
    got = run_reference(g, {"s": spectrum, "dy": dy}, {"f": filters})[y.name]
    s = torch.from_numpy(spectrum).double().requires_grad_(True)
    _torch_log_mel(s, torch.from_numpy(filters).double()).backward(torch.from_numpy(dy).double())
    np.testing.assert_allclose(got, s.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_log_mel_shape_errors():
    g = Graph()
    s = g.input("s", (4, 32))
    with pytest.raises(GraphError, match=r"lm \(LogMel\): filters must be \[n_mels >= 1, n_fft//2\+1 = 9\]"):
        g.log_mel(s, g.param("f", (5, 16)), name="lm")
    with pytest.raises(GraphError, match=r"got f32\[0, 9\]"):
        g.log_mel(s, g.param("f0", (0, 9)))
    f = g.param("f2", (5, 9))
    with pytest.raises(GraphError, match=r"dy must be float \[4, 5\]"):
        g.log_mel_backward(s, f, g.input("dy", (4, 6)))


# -- rfft / irfft / axes, Stft, ComplexView, c64 spectra, the plan table ---------------------------------
@pytest.mark.parametrize("norm", list(FftNorm))
@pytest.mark.parametrize("n, axis", [(1, -1), (8, -1), (9, 0), (6, 1)])
def test_rfft_irfft_and_full_real_spectra_match_torch(n, axis, norm):
    shape = [3, 4, 5]
    shape[axis] = n
    x = _rand(tuple(shape), 20)
    torch_norm = {FftNorm.BACKWARD: "backward", FftNorm.FORWARD: "backward", FftNorm.ORTHO: "ortho"}[norm]
    g = Graph()
    half = g.rfft(g.input("x", x.shape), norm, axis)
    full = g.rfft(g.input("x2", x.shape), norm, axis, onesided=False)
    back = g.irfft(half, n, norm, axis)
    g.output(half, full, back)
    out = run_reference(g, {"x": x, "x2": x})
    t = torch.from_numpy(x).double()
    want_half = torch.fft.rfft(t, dim=axis, norm=torch_norm).numpy()
    np.testing.assert_allclose(out[half.name], want_half, atol=1e-5)
    np.testing.assert_allclose(out[full.name], torch.fft.fft(t, dim=axis, norm=torch_norm).numpy(), atol=1e-5)
    scale = {FftNorm.BACKWARD: n, FftNorm.FORWARD: 1, FftNorm.ORTHO: 1}[norm]  # BACKWARD never scales
    np.testing.assert_allclose(out[back.name], x * scale, rtol=1e-5, atol=1e-4)
    assert out[half.name].dtype == np.complex64 and out[back.name].dtype == np.float32


def test_irfft_output_length_and_c64_along_an_axis():
    z = (np.random.default_rng(21).standard_normal((5, 4)) + 1j).astype(np.complex64)
    g = Graph()
    short = g.irfft(g.input("z", z.shape, "c64"), 4, axis=0)
    long = g.irfft(g.input("w", z.shape, "c64"), 11, axis=0)
    column = g.fft(g.input("c", z.shape, "c64"), inverse=True, axis=0, norm="forward")
    g.output(short, long, column)
    out = run_reference(g, {"z": z, "w": z, "c": z})
    zt = torch.from_numpy(z).to(torch.complex128)
    np.testing.assert_allclose(out[short.name], torch.fft.irfft(zt, 4, dim=0).numpy() * 4, atol=1e-5)
    np.testing.assert_allclose(out[long.name], torch.fft.irfft(zt, 11, dim=0).numpy() * 11, atol=1e-5)
    np.testing.assert_allclose(out[column.name], torch.fft.ifft(zt, dim=0).numpy(), atol=1e-6)


@pytest.mark.parametrize("center, pad_mode, onesided, norm", [(True, "reflect", True, "backward"),
                                                              (True, "constant", False, "ortho"),
                                                              (False, "reflect", True, "backward")])
def test_stft_matches_torch(center, pad_mode, onesided, norm):
    x, window = _rand((2, 3, 50), 22), np.hanning(12).astype(np.float32)
    g = Graph()
    y = g.stft(g.input("x", x.shape), g.input("w", window.shape), 12, 5, center, pad_mode, onesided, norm)
    got = _run(g, y, x=x, w=window)
    want = torch.stft(torch.from_numpy(x).double().reshape(6, 50), 12, 5,
                      window=torch.from_numpy(window).double(), center=center, pad_mode=pad_mode,
                      onesided=onesided, normalized=norm == "ortho", return_complex=True)
    want = want.transpose(-1, -2).reshape(got.shape).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_complex_view_round_trips_the_same_values():
    z = (np.random.default_rng(23).standard_normal((3, 4)) * (1 + 2j)).astype(np.complex64)
    g = Graph()
    pairs = g.view_as_real(g.input("z", z.shape, "c64"))
    again = g.view_as_complex(pairs)
    g.output(pairs, again)
    out = run_reference(g, {"z": z})
    np.testing.assert_array_equal(out[pairs.name], torch.view_as_real(torch.from_numpy(z)).numpy())
    np.testing.assert_array_equal(out[again.name], z)


@pytest.mark.parametrize("floor_axes", [1, 2])
def test_log_mel_of_c64_spectra_matches_torch(floor_axes):
    rng = np.random.default_rng(24)
    spectrum = (rng.standard_normal((2, 6, 9)) + 1j * rng.standard_normal((2, 6, 9))).astype(np.complex64)
    spectrum[0, 2] *= 1e-5  # quiet: floored by the spectrogram's loud frames when floor_axes=2
    filters = np.abs(rng.standard_normal((4, 9))).astype(np.float32)
    dy = _rand((2, 6, 4), 25)
    g = Graph()
    s, f = g.input("s", spectrum.shape, "c64"), g.param("f", filters.shape)
    y, dx = g.log_mel(s, f, floor_axes), g.log_mel_backward(s, f, g.input("dy", dy.shape), floor_axes)
    g.output(y, dx)
    out = run_reference(g, {"s": spectrum, "dy": dy}, {"f": filters})
    z = torch.from_numpy(spectrum).to(torch.complex128).requires_grad_(True)
    logs = torch.clamp(z.abs() ** 2 @ torch.from_numpy(filters).double().T, min=1e-10).log10()
    floor = (logs.amax(dim=-1 if floor_axes == 1 else (-2, -1), keepdim=True) - 8.0).detach()
    want = (torch.maximum(logs, floor) + 4.0) / 4.0
    np.testing.assert_allclose(out[y.name], want.detach().numpy(), rtol=1e-5, atol=1e-5)
    want.backward(torch.from_numpy(dy).double())
    np.testing.assert_allclose(out[dx.name], z.grad.numpy(), rtol=1e-4, atol=1e-6)
    assert out[y.name].dtype == np.float32 and out[dx.name].dtype == np.complex64


def test_welch_peaks_of_c64_spectra_match_scipy():
    signal, blocks = _welch_case(2, 3, 10, seed=26)
    spectra = blocks[:, :10] + 1j * blocks[:, 10:]
    g = Graph()
    got = _run(g, g.welch_peaks(g.input("s", spectra.shape, "c64"), 6, 3), s=spectra.astype(np.complex64))
    _, psd = scipy.signal.welch(signal, window="boxcar", nperseg=10, noverlap=0, detrend=False,
                                scaling="spectrum")
    for b in range(2):
        bins = np.argsort(-psd[b] * 100, kind="stable")[:6]
        np.testing.assert_array_equal(got[b, 0::2], bins)
        np.testing.assert_allclose(got[b, 1::2], psd[b, bins] * 100, rtol=1e-4)


@pytest.mark.parametrize("n", [1, 12, 17, 97])
def test_the_unfuse_pass_attaches_each_transforms_plan_table(n):
    from rlxpy.ir.passes import unfuse
    from rlxpy.ir.passes.unfuse_signal import fft_table

    g = Graph()
    spectrum = g.fft(g.input("z", (2, n), "c64"))
    g.output(g.fft(spectrum, inverse=True))
    flat = unfuse(g)
    tables = [node for node in flat.nodes if isinstance(node.op, ops.Constant)]
    assert len(tables) == 1  # shared by both transforms
    assert all(len(node.inputs) == 2 and node.inputs[1] == tables[0].id for node in flat.nodes
               if isinstance(node.op, ops.Fft))
    table = fft_table(n).view(np.complex64).astype(np.complex128)
    m = ops.signal.fft_plan_length(n)
    k = np.arange(m)
    roots = np.cos(2 * np.pi * k / m) - 1j * np.sin(2 * np.pi * k / m)
    np.testing.assert_allclose(table[:m], roots, atol=1e-7)
    if m != n:  # Bluestein: chirp, then FFT(conj chirp wrapped) / m
        j = np.arange(n)
        chirp = np.exp(-1j * np.pi * j.astype(np.float64) ** 2 / n)
        np.testing.assert_allclose(table[m:m + n], chirp, atol=1e-6)
        b = np.zeros(m, np.complex128)
        b[:n], b[m - n + 1:] = np.conj(chirp), np.conj(chirp[1:][::-1])
        np.testing.assert_allclose(table[m + n:], scipy.fft.fft(b) / m, atol=1e-7)
    g2 = Graph()
    with pytest.raises(GraphError, match=r"fft: the plan table of length 12 is f32\[24\], got f32\[10\]"):
        g2.apply(ops.Fft(), [g2.input("z", (2, 12), "c64"), g2.input("t", (10,))])
