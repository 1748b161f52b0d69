"""Signal family on the GPU vs independent oracles: numpy.fft / scipy.fft for Fft (every length class:
one workgroup per line, four-step passes, mixed radix 3/5/7, Bluestein in one workgroup or in
passes), torch.stft for Stft, torch autograd for LogMel's gradient, transformers' WhisperFeatureExtractor
for a log-mel front end, scipy.signal.welch / find_peaks for WelchPeaks. Every graph here runs with no
host step.

f32 tolerance of a transform of length n (plan length M: n, or Bluestein's power of two): the largest
error is at most ``FFT_EPS * log2(M)`` times the largest output magnitude (round-off of a radix-r FFT
grows like log2(M) ulps; measured <= 0.4 eps log2(M), checked at 2 eps log2(M)).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.fft
import scipy.signal
import torch
from helpers import assert_close

import rlxpy
from rlxpy import env
from rlxpy.errors import GraphError
from rlxpy.ir.ops.signal import fft_plan_length
from rlxpy.ir.reference import run_reference
from rlxpy.wgpu_backend.lowering import signal_fft
from rlxpy.wgpu_backend.lowering.signal_fft_code import shape_for, stage_radices
from rlxpy.wgpu_backend.schedule import DeviceFacts

EPS32 = float(np.finfo(np.float32).eps)
FFT_EPS = 2 * EPS32
LENGTHS = [1, 2, 3, 5, 7, 16, 17, 97, 128, 400, 1000, 1024, 4096, 65536]


def fft_tol(n: int) -> float:
    """Largest error allowed, relative to the largest output magnitude (module docstring)."""
    return FFT_EPS * max(1.0, math.log2(fft_plan_length(n)))


def complex_rand(shape, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)


def run(build, feeds: dict, params: dict | None = None):
    """Compile ``build(g) -> node`` (one output), run it on the GPU; (result, executable)."""
    g = rlxpy.Graph("signal")
    node = build(g)
    g.output(node)
    exe = rlxpy.compile(g)
    for name, value in (params or {}).items():
        exe.set_param(name, value)
    return exe.run(feeds)[node.name], exe


def no_host_steps(exe) -> None:
    kinds = [(s.kind, s.kernel) for s in exe.schedule.steps]
    assert all(kind == "gpu" for kind, _ in kinds), f"host or copy steps: {kinds}"
    assert exe.report().summary["host_kernels"] == {}


def assert_spectrum(got: np.ndarray, want: np.ndarray, n: int) -> None:
    scale = max(1e-30, float(np.abs(want).max()))
    err = float(np.abs(got.astype(np.complex128) - want).max()) / scale
    assert err <= fft_tol(n), f"length {n}: error {err:.3g} of the largest magnitude > {fft_tol(n):.3g}"


# -- Fft: lengths, batches, directions, norms ------------------------------------------------------
@pytest.mark.parametrize("n", LENGTHS)
def test_fft_matches_numpy_for_every_length_class(device, n):
    batch = 3 if n <= 4096 else 1
    z = complex_rand((batch, n), n)
    got, exe = run(lambda g: g.fft(g.input("z", z.shape, "c64")), {"z": z})
    assert got.dtype == np.complex64
    assert_spectrum(got, np.fft.fft(z.astype(np.complex128)), n)
    no_host_steps(exe)


def test_fft_of_a_million_points_in_four_step_passes(device):
    n = 1 << 20
    z = complex_rand((1, n), 20)
    got, exe = run(lambda g: g.fft(g.input("z", z.shape, "c64")), {"z": z})
    assert_spectrum(got, scipy.fft.fft(z.astype(np.complex128)), n)
    assert [s.kernel for s in exe.schedule.steps] == ["signal_fft_lines"] * 2  # columns, then rows


def test_fft_variants_shaped_for_a_smaller_workgroup_budget(device, monkeypatch):
    """The variants' shapes under a workgroup budget below the default (signal_fft.SHAPE_*, which every
    other test runs): fewer lines per workgroup, exchanges in rounds (97's 256 points and 2^14's
    128-point passes: 2 lines, memory for 1), lines longer than the budget alone in a workgroup; the row
    passes loaded as they store, 16 lines side by side (signal_fft.ROW_FAST_IN 16; the default, 1,
    regroups them between their load and store: every other test). 2^14 in four-step passes, as on a
    device without the memory or invocations for one workgroup per line (signal_fft.ROUNDS_LINES off)."""
    monkeypatch.setattr(signal_fft, "ROUNDS_LINES", False)
    monkeypatch.setattr(signal_fft, "SHAPE_POINTS", 256)
    monkeypatch.setattr(signal_fft, "SHAPE_INVOCATIONS", 128)
    monkeypatch.setattr(signal_fft, "ROW_FAST_IN", 16)
    for n in (97, 1000, 4096, 1 << 14):
        z = complex_rand((5, n), n)
        got, exe = run(lambda g, z=z: g.fft(g.input("z", z.shape, "c64"), inverse=True), {"z": z})
        assert_spectrum(got, np.fft.ifft(z.astype(np.complex128), norm="forward"), n)
        no_host_steps(exe)


@pytest.mark.parametrize("n, batch, inverse", [(1 << 14, 1, False), (1 << 14, 3, True), (1 << 13, 5, False),
                                                (4099, 3, True)])
def test_lines_longer_than_workgroup_memory_in_one_pass(device, n, batch, inverse):
    """2^13 and 2^14 points (and 4099's Bluestein m = 16384: forward, kernel spectrum, inverse) exceed the
    workgroup memory (32 KiB: 4096 points on lavapipe and llvmpipe, 48 KiB on an H100) but not 16 points
    per invocation: one dispatch, one line per workgroup, its exchanges in rounds of 4096 points (the
    largest power of two the memory holds)."""
    z = complex_rand((batch, n), n + batch)
    got, exe = run(lambda g: g.fft(g.input("z", z.shape, "c64"), inverse=inverse, norm="ortho"), {"z": z})
    want = (np.fft.ifft if inverse else np.fft.fft)(z.astype(np.complex128), norm="ortho")
    assert_spectrum(got, want, n)
    assert [s.kernel for s in exe.schedule.steps] == ["signal_fft_lines"]
    for memory in (32768, 49152):
        facts = DeviceFacts(max_workgroup_storage=memory, max_invocations=1024)
        assert signal_fft.rounds_shape_for(fft_plan_length(n), facts).shared_points == 4096


def test_lines_in_rounds_that_split_butterflies_and_reads(device, monkeypatch):
    """Rounds that are not whole blocks of a stage's outputs (radix 8, a 1024-point line in rounds of 768
    and 256 points: each output checks its round) nor of the invocations' reads (512 invocations: each
    read that may cross a round's end checks its round), with idle invocations in the radix-8 stages."""
    monkeypatch.setattr(signal_fft, "capacity", lambda facts: 768)
    for name, value in (("ROUNDS_CHUNK", 768), ("ROUNDS_POINTS", 2), ("ROUNDS_RADIX", 8),
                        ("ROUNDS_INVOCATIONS", 512)):
        monkeypatch.setattr(signal_fft, name, value)
    z = complex_rand((3, 1024), 10)
    got, exe = run(lambda g: g.fft(g.input("z", z.shape, "c64")), {"z": z})
    assert_spectrum(got, np.fft.fft(z.astype(np.complex128)), 1024)
    source = exe.schedule.steps[0].source
    assert len(exe.schedule.steps) == 1 and "if (t + 512u - 768u < 256u) {" in source


@pytest.mark.parametrize("length", [1, 2, 3, 16, 27, 96, 400, 480, 1000, 1024, 2048, 2187, 4096])
def test_variant_shapes_cover_their_lines(length):
    """Stage radices multiply to the length (each <= 16); a workgroup's lines are whole rounds of the lines
    its workgroup memory holds, within the budget unless one line needs more; the lines side by side
    divide them, in the last stage too (regrouped only where an exchange precedes it); lines side by side
    XOR their slots only where each slot is whole blocks of 16 points (no device)."""
    for max_radix in (4, 8, 16):
        radices = stage_radices(length, max_radix)
        assert math.prod(radices) == length and all(r <= 16 for r in radices)
    for points, invocations, fast in ((2048, 256, 1), (6144, 1024, 16), (256, 64, 4)):
        shape = shape_for(length, points, invocations, 16, fast, fast_out=32 // fast)
        assert shape.lines % shape.group == 0 and shape.lines % shape.fast == 0
        assert shape.lines % shape.store_fast == 0 and (len(shape.radices) > 1 or shape.store_fast == fast)
        assert shape.invocations <= max(invocations, shape.threads)
        assert shape.group * length <= max(points, length) and shape.shared_points % 16 == 0
        side_by_side = max(shape.fast, shape.store_fast) > 1
        assert not shape.line_xor or (side_by_side and shape.group > 1 and length % 16 == 0)


def test_long_line_passes_take_more_invocations():
    """Four-step passes over lines of at least PASS_WIDE_FROM points get PASS_INVOCATIONS invocations, within
    the device's limit; shorter lines keep the variants' budget (no device)."""
    big, small = DeviceFacts(max_workgroup_storage=32768, max_invocations=1024), DeviceFacts()
    wide = signal_fft.PASS_INVOCATIONS
    assert signal_fft._pass_budget(big, signal_fft.PASS_WIDE_FROM)[1] == min(1024, wide or 256)
    assert signal_fft._pass_budget(small, signal_fft.PASS_WIDE_FROM)[1] == 256
    assert signal_fft._pass_budget(big, signal_fft.PASS_WIDE_FROM // 2)[1] == 256


@pytest.mark.parametrize("n", [1, 5, 16, 17, 97])
@pytest.mark.parametrize("batch", [1, 64])
def test_fft_batches(device, n, batch):
    z = complex_rand((batch, n), batch + n)
    got, exe = run(lambda g: g.fft(g.input("z", z.shape, "c64"), inverse=True), {"z": z})
    assert_spectrum(got, np.fft.ifft(z.astype(np.complex128), norm="forward"), n)  # BACKWARD: unscaled
    no_host_steps(exe)


@pytest.mark.parametrize("norm", ["backward", "forward", "ortho"])
@pytest.mark.parametrize("n", [7, 97, 1024, 4099])
def test_inverse_of_forward_round_trips(device, n, norm):
    z = complex_rand((2, n), 7)
    g = rlxpy.Graph("round_trip")
    spectrum = g.fft(g.input("z", z.shape, "c64"), norm=norm)
    back = g.fft(spectrum, inverse=True, norm=norm)
    g.output(spectrum, back)
    exe = rlxpy.compile(g)
    out = exe.run({"z": z})
    torch_norm = {"backward": "backward", "forward": "backward", "ortho": "ortho"}[norm]
    want = torch.fft.fft(torch.from_numpy(z).to(torch.complex128), norm=torch_norm).numpy()
    assert_spectrum(out[spectrum.name], want, n)
    scale = n if norm == "backward" else 1  # BACKWARD never scales: ifft(fft(z)) = n z
    assert_spectrum(out[back.name], z.astype(np.complex128) * scale, n)
    no_host_steps(exe)


# the loaders; c2c covers the lengths. 8209: Bluestein m = 32768 in four-step passes (the one-pass lines
# of 4099's m = 16384 run the same loaders, and their shaders compile for seconds on lavapipe)
@pytest.mark.parametrize("n", [1, 2, 7, 17, 400, 4096, 8209])
def test_rfft_and_irfft_match_numpy(device, n):
    rng = np.random.default_rng(n)
    x = rng.standard_normal((3, n)).astype(np.float32)
    got, exe = run(lambda g: g.rfft(g.input("x", x.shape), norm="ortho"), {"x": x})
    assert got.shape == (3, n // 2 + 1) and got.dtype == np.complex64
    assert_spectrum(got, np.fft.rfft(x.astype(np.float64), norm="ortho"), n)
    no_host_steps(exe)
    half = complex_rand((3, n // 2 + 1), n + 1)
    got, exe = run(lambda g: g.irfft(g.input("h", half.shape, "c64"), n=n, norm="forward"), {"h": half})
    assert got.dtype == np.float32
    assert_spectrum(got, np.fft.irfft(half.astype(np.complex128), n=n), n)
    no_host_steps(exe)


@pytest.mark.parametrize("n", [7, 16, 97, 8209])
def test_full_spectrum_of_a_real_signal_and_complex_views(device, n):
    x = np.random.default_rng(n).standard_normal((2, n)).astype(np.float32)
    g = rlxpy.Graph("views")
    spectrum = g.rfft(g.input("x", x.shape), onesided=False)
    pairs = g.view_as_real(spectrum)
    again = g.view_as_complex(pairs)
    g.output(pairs, again)
    exe = rlxpy.compile(g)
    out = exe.run({"x": x})
    want = scipy.fft.fft(x.astype(np.float64))
    assert out[pairs.name].shape == (2, n, 2) and out[pairs.name].dtype == np.float32
    assert_spectrum(out[pairs.name][..., 0] + 1j * out[pairs.name][..., 1].astype(np.float64), want, n)
    np.testing.assert_array_equal(out[again.name], out[pairs.name][..., 0] + 1j * out[pairs.name][..., 1])
    no_host_steps(exe)


def test_irfft_trims_or_zero_pads_the_bins_and_ignores_dc_and_nyquist_imaginary_parts(device):
    half = complex_rand((2, 9), 3)
    half[:, 0] += 5j  # ignored, as is bin n/2's imaginary part for even n
    for n in (8, 11, 30):  # uses 5, 6 and all 9 bins (the rest are 0)
        got, _ = run(lambda g, n=n: g.irfft(g.input("h", half.shape, "c64"), n=n), {"h": half})
        want = np.fft.irfft(half.astype(np.complex128), n=n, norm="forward")
        assert_spectrum(got, want, n)


def test_fft_along_any_axis_and_in_the_block_layout(device):
    z = complex_rand((3, 5, 7), 4)
    for axis in (0, 1, -1):
        got, exe = run(lambda g, axis=axis: g.fft(g.input("z", z.shape, "c64"), axis=axis), {"z": z})
        assert_spectrum(got, np.fft.fft(z.astype(np.complex128), axis=axis), z.shape[axis])
        no_host_steps(exe)
    x = np.random.default_rng(5).standard_normal((4, 6, 3)).astype(np.float32)
    got, _ = run(lambda g: g.rfft(g.input("x", x.shape), axis=1), {"x": x})
    assert_spectrum(got, np.fft.rfft(x.astype(np.float64), axis=1), 6)
    got, _ = run(lambda g: g.irfft(g.input("h", z.shape, "c64"), n=9, axis=1, norm="ortho"), {"h": z})
    assert_spectrum(got, np.fft.irfft(z.astype(np.complex128), n=9, axis=1, norm="ortho"), 9)
    blocks = np.random.default_rng(6).standard_normal((5, 2 * 12)).astype(np.float32)
    got, exe = run(lambda g: g.fft(g.input("b", blocks.shape)), {"b": blocks})
    spectrum = np.fft.fft(blocks[:, :12] + 1j * blocks[:, 12:].astype(np.float64))
    assert_spectrum(got[:, :12] + 1j * got[:, 12:], spectrum, 12)
    no_host_steps(exe)


def test_multi_pass_transforms_under_a_binding_cap_run_in_chunks_of_lines(device, monkeypatch):
    """A 2 MiB binding: the scratch of a window holds a few lines of a four-step or Bluestein transform at
    a time, so the lines run in chunks (several dispatches per pass); results equal the uncapped ones.
    4099's m = 16384 in four-step passes (not one workgroup per line: signal_fft.ROUNDS_LINES off)."""
    monkeypatch.setattr(signal_fft, "ROUNDS_LINES", False)
    rng = np.random.default_rng(15)
    x = rng.standard_normal((32, 4096)).astype(np.float32)
    z = complex_rand((9, 4099), 16)

    def build() -> tuple:
        g = rlxpy.Graph("capped")
        spectra = g.rfft(g.input("x", x.shape)), g.fft(g.input("z", z.shape, "c64"), inverse=True)
        g.output(*spectra)
        return rlxpy.compile(g), spectra

    with env.override(RLX_WGPU_MAX_BINDING=2 << 20):
        capped, (real, prime) = build()
    free, _ = build()
    assert capped.schedule.window_size <= 2 << 20 < capped.schedule.arena.size
    assert len([s for s in capped.schedule.steps if s.kind == "gpu"]) > len(free.schedule.steps)
    got, want = capped.run({"x": x, "z": z}), free.run({"x": x, "z": z})
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=f"{name}: capped vs uncapped")
    assert_spectrum(got[real.name], np.fft.rfft(x.astype(np.float64)), 4096)
    assert_spectrum(got[prime.name], np.fft.ifft(z.astype(np.complex128), norm="forward"), 4099)
    assert all(s.kind in ("gpu", "copy") for s in capped.schedule.steps)  # staging copies, no host step


@pytest.mark.parametrize("n", [16, 97, 4096, 4099])
def test_fft_propagates_nan_through_its_line_only(device, n):
    z = complex_rand((3, n), 8)
    z[1, n // 3] = np.nan
    got, _ = run(lambda g: g.fft(g.input("z", z.shape, "c64")), {"z": z})
    assert np.isnan(got[1]).all() and not np.isnan(got[[0, 2]]).any()


# -- Stft ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("center, pad_mode, onesided, n_fft, hop",
                         [(True, "reflect", True, 64, 16), (True, "constant", True, 50, 20),
                          (False, "reflect", False, 17, 5), (True, "reflect", True, 5000, 1000)])
def test_stft_matches_torch(device, center, pad_mode, onesided, n_fft, hop):
    rng = np.random.default_rng(n_fft)
    signal = rng.standard_normal((2, 6000)).astype(np.float32)
    window = np.hanning(n_fft).astype(np.float32)
    got, exe = run(lambda g: g.stft(g.input("x", signal.shape), g.input("w", window.shape), n_fft, hop,
                                    center, pad_mode, onesided), {"x": signal, "w": window})
    want = torch.stft(torch.from_numpy(signal).double(), n_fft, hop, center=center, pad_mode=pad_mode,
                      window=torch.from_numpy(window).double(), onesided=onesided, return_complex=True)
    assert_spectrum(got, want.transpose(-1, -2).numpy(), n_fft)
    no_host_steps(exe)


# -- LogMel, LogMelBackward ----------------------------------------------------------------------------
def _torch_log_mel(spectrum: torch.Tensor, filters: torch.Tensor, floor_axes: int) -> torch.Tensor:
    """Whisper's log-mel on complex one-sided spectra, its floor per frame or per spectrogram."""
    mel = spectrum.abs() ** 2 @ filters.T
    logs = torch.clamp(mel, min=1e-10).log10()
    top = logs.amax(dim=-1 if floor_axes == 1 else (-2, -1), keepdim=True)
    floor = (top - 8.0).detach()
    return (torch.maximum(logs, floor) + 4.0) / 4.0


@pytest.mark.parametrize("floor_axes", [1, 2])
@pytest.mark.parametrize("shape, n_mels", [((1, 1, 3), 1), ((2, 7, 9), 5), ((3, 11, 201), 80)])
def test_log_mel_and_its_gradient_match_torch(device, shape, n_mels, floor_axes):
    spectrum = complex_rand(shape, 9)
    spectrum.reshape(-1, shape[-1])[0] *= 1e-6  # a quiet frame: floored by the loud ones (per spectrogram)
    filters = np.abs(np.random.default_rng(10).standard_normal((n_mels, shape[-1]))).astype(np.float32)
    filters[0] = 0.0  # energy 0: clamped to 1e-10, no gradient
    dy = np.random.default_rng(11).standard_normal(shape[:-1] + (n_mels,)).astype(np.float32)
    got, exe = run(lambda g: g.log_mel(g.input("s", shape, "c64"), g.param("f", filters.shape),
                                       floor_axes=floor_axes), {"s": spectrum}, {"f": filters})
    no_host_steps(exe)
    s = torch.from_numpy(spectrum).to(torch.complex128).requires_grad_(True)
    want = _torch_log_mel(s, torch.from_numpy(filters).double(), floor_axes)
    assert_close(got, want.detach().numpy(), 1e-5, 1e-5, "log_mel")
    grad, exe = run(lambda g: g.log_mel_backward(g.input("s", shape, "c64"), g.param("f", filters.shape),
                                                 g.input("dy", dy.shape), floor_axes=floor_axes),
                    {"s": spectrum, "dy": dy}, {"f": filters})
    no_host_steps(exe)
    want.backward(torch.from_numpy(dy).double())
    scale = float(np.abs(s.grad.numpy()).max())
    assert_close(grad, s.grad.numpy(), 1e-4, 1e-5 * scale, "log_mel_backward")


def test_log_mel_of_block_layout_spectra_and_nan(device):
    spectrum = np.random.default_rng(12).standard_normal((4, 2 * 16)).astype(np.float32)
    spectrum[2, 3] = np.nan
    filters = np.abs(np.random.default_rng(13).standard_normal((6, 9))).astype(np.float32)
    got, exe = run(lambda g: g.log_mel(g.input("s", spectrum.shape), g.param("f", filters.shape)),
                   {"s": spectrum}, {"f": filters})
    no_host_steps(exe)
    z = torch.complex(*(torch.from_numpy(half).double() for half in (spectrum[:, :16], spectrum[:, 16:])))
    want = _torch_log_mel(z[:, :9], torch.from_numpy(filters).double(), 1).numpy()
    assert np.isnan(got[2]).all() and not np.isnan(got[[0, 1, 3]]).any()  # NaN floors its whole frame
    assert_close(got, want, 1e-5, 1e-5, "log_mel block layout")


def speech_like(seconds: float, seed: int = 0, rate: int = 16000) -> np.ndarray:
    """Two chirps (one gated on and off like syllables) plus noise, at 16 kHz."""
    t = np.arange(int(rate * seconds)) / rate
    low = 0.3 * np.sin(2 * np.pi * (200 * t + 40 * t**2))
    high = 0.2 * np.sin(2 * np.pi * (3000 * t - 30 * t**2)) * (np.sin(2 * np.pi * 1.5 * t) > 0)
    noise = 0.01 * np.random.default_rng(seed).standard_normal(t.size)
    return (low + high + noise).astype(np.float32)


def whisper_log_mel(g: rlxpy.Graph, samples: int, n_mels: int = 80) -> rlxpy.Graph:
    """WhisperFeatureExtractor's log-mel as a graph: Stft (centred, reflect, periodic Hann window),
    the last frame dropped, LogMel floored over the spectrogram, transposed to [n_mels, frames]."""
    spectrum = g.stft(g.input("audio", [samples]), g.param("window", [400]), 400, 160)
    frames = g.narrow(spectrum, 0, 0, samples // 160)
    return g.transpose(g.log_mel(frames, g.param("filters", [n_mels, 201]), floor_axes=2), [1, 0])


def test_log_mel_of_speech_matches_whisper_feature_extractor(device):
    """5 s of speech-like audio (30 s take 2-4 s on lavapipe: benches/bench_fft.py runs those)."""
    from transformers import WhisperFeatureExtractor

    extractor = WhisperFeatureExtractor()  # 80 mels, n_fft 400, hop 160, 16 kHz
    audio = speech_like(5.0)
    want = extractor._np_extract_fbank_features(audio[None], "cpu")[0]  # numpy path: the oracle
    periodic_hann = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(400) / 400)
    got, exe = run(lambda g: whisper_log_mel(g, audio.size), {"audio": audio},
                   {"window": periodic_hann.astype(np.float32),
                    "filters": extractor.mel_filters.T.astype(np.float32)})
    assert got.shape == want.shape == (80, 500)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)
    no_host_steps(exe)


# -- WelchPeaks ----------------------------------------------------------------------------------------
def test_welch_psd_and_peaks_match_scipy(device):
    """Three tones on bin centres plus noise: the PSD of Hann-windowed segments vs scipy.signal.welch, the
    top-3 bins vs the 3 highest of scipy.signal.find_peaks on scipy's PSD."""
    rate, nperseg, segments, batch = 1000, 128, 6, 2
    t = np.arange(nperseg * segments) / rate
    rng = np.random.default_rng(14)
    tones = [{15: 1.0, 40: 0.8, 55: 0.6}, {5: 0.5, 30: 0.9, 60: 0.7}]  # bin: amplitude, per batch row
    signal = np.stack([sum(a * np.sin(2 * np.pi * f * rate / nperseg * t) for f, a in row.items())
                       for row in tones])
    signal = (signal + 0.01 * rng.standard_normal(signal.shape)).astype(np.float32)
    window = scipy.signal.get_window("hann", nperseg).astype(np.float32)
    bins = nperseg // 2 + 1

    def build(g: rlxpy.Graph, k: int):
        spectra = g.stft(g.input("x", signal.shape), g.param("w", window.shape), nperseg, nperseg,
                         center=False, onesided=False)  # [batch, segments, nperseg]
        return g.welch_peaks(g.reshape(spectra, [batch * segments, nperseg]), k, segments)

    peaks, exe = run(lambda g: build(g, 3), {"x": signal}, {"w": window})
    no_host_steps(exe)
    everything, _ = run(lambda g: build(g, bins), {"x": signal}, {"w": window})
    _, psd = scipy.signal.welch(signal.astype(np.float64), rate, window="hann", nperseg=nperseg,
                                noverlap=0, detrend=False, scaling="spectrum", axis=-1)
    psd *= float(window.astype(np.float64).sum()) ** 2  # scipy divides by sum(w)^2; the op does not
    for b in range(batch):
        order = everything[b].reshape(bins, 2)
        got_psd = np.empty(bins)
        got_psd[order[:, 0].astype(int)] = order[:, 1]
        assert_close(got_psd, psd[b], 1e-5, 1e-6 * psd[b].max(), "Welch PSD")
        found, props = scipy.signal.find_peaks(psd[b], height=0)
        highest = found[np.argsort(-props["peak_heights"], kind="stable")[:3]]
        np.testing.assert_array_equal(peaks[b, 0::2].astype(int), highest)
        np.testing.assert_array_equal(highest, sorted(tones[b], key=lambda f: -tones[b][f]))


def test_welch_peaks_rank_nan_first_and_ties_to_the_lower_bin(device):
    spectrum = np.zeros((1, 8), np.complex64)
    spectrum[0, [1, 3]] = 2.0
    spectrum[0, 2] = np.nan
    g = rlxpy.Graph("ties")
    peaks = g.welch_peaks(g.input("s", spectrum.shape, "c64"), 5, 1)
    g.output(peaks)
    got = rlxpy.compile(g).run({"s": spectrum})[peaks.name]
    np.testing.assert_array_equal(got[0, 0::2], [2, 1, 3, 0, 4])
    np.testing.assert_allclose(got[0, 1::2], [np.nan, 8.0, 8.0, 0.0, 0.0])
    assert_close(got, run_reference(g, {"s": spectrum})[peaks.name], 0, 0, "WelchPeaks vs its reference")


# -- errors --------------------------------------------------------------------------------------------
def test_bad_input_is_refused_naming_the_node_and_shapes():
    g = rlxpy.Graph("bad")
    real = g.input("x", (2, 8))
    with pytest.raises(GraphError, match=r"back \(Fft\): irfft takes a c64 one-sided spectrum, got "
                                         r"f32\[2, 8\] \[inputs: f32\[2, 8\]\]"):
        g.irfft(real, name="back")
    with pytest.raises(GraphError, match=r"empty \(Fft\): fft needs a non-empty axis -1, got c64\[3, 0\]"):
        g.fft(g.input("z0", (3, 0), "c64"), name="empty")
    with pytest.raises(GraphError, match=r"short \(Fft\): irfft of c64\[2, 1\] has no output length \(n=0\): "
                                         r"pass n >= 1 \[inputs: c64\[2, 1\]\]"):
        g.irfft(g.input("dc", (2, 1), "c64"), name="short")
    with pytest.raises(GraphError, match=r"far \(Fft\): axis 2 out of range for rank 2 "
                                         r"\[inputs: f32\[2, 8\]\]"):
        g.rfft(real, axis=2, name="far")
    with pytest.raises(GraphError, match=r"spec \(Stft\): stft reflect padding 32 needs a signal longer than "
                                         r"that, got f32\[2, 8\]"):
        g.stft(real, g.input("w", (64,)), 64, 16, name="spec")
    with pytest.raises(GraphError, match=r"mel \(LogMel\): filters must be \[n_mels >= 1, the c64 "
                                         r"spectrum's last dim = 5\] for spectrum c64\[4, 5\], "
                                         r"got f32\[3, 6\]"):
        g.log_mel(g.input("s", (4, 5), "c64"), g.input("f", (3, 6)), name="mel")
