"""Reference semantics: FFT, STFT, Welch peaks, log-mel and its gradient (numpy, float64/complex128).
The plan-table inputs of Fft and Stft never change a value: they are not read here."""

from __future__ import annotations

import numpy as np

from rlxpy.ir.dtype import DType
from rlxpy.ir.ops.base import FftNorm
from rlxpy.ir.ops.signal import (
    LOG_MEL_MIN_ENERGY,
    LOG_MEL_RANGE,
    ComplexView,
    Fft,
    LogMel,
    LogMelBackward,
    Stft,
    WelchPeaks,
)
from rlxpy.ir.reference.core import reference


def from_blocks(x: np.ndarray) -> np.ndarray:
    """[..., 2N] real-block layout -> complex128 [..., N]."""
    n = x.shape[-1] // 2
    return x[..., :n].astype(np.float64) + 1j * x[..., n:].astype(np.float64)


def to_blocks(z: np.ndarray) -> np.ndarray:
    """complex [..., N] -> float64 [..., 2N] real-block layout."""
    return np.concatenate([z.real, z.imag], axis=-1)


def scaled(raw: np.ndarray, n: int, inverse: bool, norm: FftNorm) -> np.ndarray:
    """An unscaled transform of length ``n`` with rlxpy's norm convention (see Fft)."""
    if norm is FftNorm.ORTHO:
        return raw / np.sqrt(n)
    if norm is FftNorm.FORWARD and inverse:
        return raw / n
    return raw


def fft_rows(z: np.ndarray, inverse: bool, norm: FftNorm, axis: int = -1) -> np.ndarray:
    """The DFT of each line along ``axis`` with rlxpy's norm convention (see Fft)."""
    n = z.shape[axis]
    # numpy's norm="forward" leaves the inverse unscaled, so both calls below are unscaled
    raw = np.fft.ifft(z, axis=axis, norm="forward") if inverse else np.fft.fft(z, axis=axis)
    return scaled(raw, n, inverse, norm)


@reference(Fft)
def ref_fft(op: Fft, args, node):
    x = args[0]
    if op.real and not op.inverse:
        transform = np.fft.rfft if op.onesided else np.fft.fft
        raw = transform(x.astype(np.float64), axis=op.axis)
        return scaled(raw, x.shape[op.axis], False, op.norm).astype(np.complex64)
    if op.real:
        n = node.shape[op.axis]
        raw = np.fft.irfft(x.astype(np.complex128), n=n, axis=op.axis, norm="forward")  # unscaled
        return scaled(raw, n, True, op.norm).astype(np.float32)
    if node.dtype is DType.C64:
        return fft_rows(x.astype(np.complex128), op.inverse, op.norm, op.axis).astype(np.complex64)
    return to_blocks(fft_rows(from_blocks(x), op.inverse, op.norm)).astype(x.dtype)


def stft_frames(op: Stft, x: np.ndarray) -> np.ndarray:
    """[..., frames, n_fft] float64 frames of the (padded) signals, before the window."""
    pad = op.padding()
    x = x.astype(np.float64)
    if pad:
        x = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(pad, pad)], mode=op.pad_mode)  # type: ignore[call-overload]
    frames = 1 + (x.shape[-1] - op.n_fft) // op.hop
    starts = np.arange(frames) * op.hop
    return x[..., starts[:, None] + np.arange(op.n_fft)]


@reference(Stft)
def ref_stft(op: Stft, args, node):
    signal, window = args[0], args[1]
    frames = stft_frames(op, signal) * window.astype(np.float64)
    raw = np.fft.rfft(frames, axis=-1) if op.onesided else np.fft.fft(frames, axis=-1)
    return scaled(raw, op.n_fft, False, op.norm).astype(np.complex64)


@reference(ComplexView)
def ref_complex_view(op: ComplexView, args, node):
    (x,) = args
    if op.to_complex:
        return (x[..., 0].astype(np.float64) + 1j * x[..., 1].astype(np.float64)).astype(np.complex64)
    return np.stack([x.real, x.imag], axis=-1).astype(np.float32)


def spectrum_rows(spectrum: np.ndarray) -> np.ndarray:
    """complex128 rows of a C64 spectrum or of one in the block layout."""
    if np.iscomplexobj(spectrum):
        return spectrum.astype(np.complex128)
    return from_blocks(spectrum)


def welch_psd(spectrum: np.ndarray, n_segments: int) -> np.ndarray:
    """One-sided PSD [batch, n_bins] averaged over segments (no window/fs normalisation)."""
    z = spectrum_rows(spectrum)
    n_fft = z.shape[-1]
    n_bins = n_fft // 2 + 1
    power = np.abs(z[:, :n_bins]) ** 2
    psd = power.reshape(-1, n_segments, n_bins).mean(axis=1)
    last_doubled = n_bins - 1 if n_fft % 2 == 0 else n_bins  # Nyquist exists only for even n_fft
    psd[:, 1:last_doubled] *= 2.0
    return psd


@reference(WelchPeaks)
def ref_welch_peaks(op: WelchPeaks, args, node):
    psd = welch_psd(args[0], op.n_segments)
    key = np.where(np.isnan(psd), -np.inf, -psd)  # stable: ties keep the lower bin; NaN first
    bins = np.argsort(key, axis=-1, kind="stable")[:, : op.k]
    out = np.empty((psd.shape[0], op.k, 2))
    out[:, :, 0] = bins
    out[:, :, 1] = np.take_along_axis(psd, bins, axis=-1)
    return out.reshape(node.shape).astype(np.float32)


def log_mel_parts(spectrum: np.ndarray, filters: np.ndarray, floor_axes: int = 1) -> tuple[np.ndarray, ...]:
    """(z, E, L, floor) of LogMel, float64; the floor per frame or per spectrogram."""
    n_bins = filters.shape[1]
    z = spectrum_rows(spectrum)[..., :n_bins]
    energy = (z.real**2 + z.imag**2) @ filters.astype(np.float64).T
    with np.errstate(invalid="ignore"):
        logs = np.log10(np.maximum(energy, LOG_MEL_MIN_ENERGY))
    axes = (-1,) if floor_axes == 1 else (-2, -1)
    floor = logs.max(axis=axes, keepdims=True) - LOG_MEL_RANGE
    return z, energy, logs, floor


@reference(LogMel)
def ref_log_mel(op: LogMel, args, node):
    _, _, logs, floor = log_mel_parts(*args, floor_axes=op.floor_axes)
    return ((np.maximum(logs, floor) + 4.0) / 4.0).astype(node.dtype.numpy)


@reference(LogMelBackward)
def ref_log_mel_backward(op: LogMelBackward, args, node):
    spectrum, filters, dy = args
    z, energy, logs, floor = log_mel_parts(spectrum, filters, op.floor_axes)
    d_log = np.where(np.abs(np.maximum(logs, floor) - floor) <= 1e-6, 0.0, dy.astype(np.float64) / 4.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        d_energy = np.where(energy > LOG_MEL_MIN_ENERGY, d_log / (energy * np.log(10.0)), 0.0)
    d_power = d_energy @ filters.astype(np.float64)  # [..., n_bins]
    if np.iscomplexobj(spectrum):
        return (2.0 * z * d_power).astype(np.complex64)
    n_fft = spectrum.shape[-1] // 2
    grad = np.zeros(spectrum.shape, dtype=np.float64)
    grad[..., : z.shape[-1]] = 2.0 * z.real * d_power
    grad[..., n_fft: n_fft + z.shape[-1]] = 2.0 * z.imag * d_power
    return grad.astype(spectrum.dtype)
