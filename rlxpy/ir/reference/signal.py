"""Reference semantics: FFT, Welch peaks, log-mel and its gradient (numpy, float64/complex128)."""

from __future__ import annotations

import numpy as np

from rlxpy.ir.dtype import DType
from rlxpy.ir.ops.base import FftNorm
from rlxpy.ir.ops.signal import (
    LOG_MEL_MIN_ENERGY,
    LOG_MEL_RANGE,
    Fft,
    LogMel,
    LogMelBackward,
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


def fft_rows(z: np.ndarray, inverse: bool, norm: FftNorm) -> np.ndarray:
    """The DFT of each row with rlxpy's norm convention (see Fft)."""
    n = z.shape[-1]
    # numpy's norm="forward" leaves the inverse unscaled, so both calls below are unscaled
    raw = np.fft.ifft(z, norm="forward") if inverse else np.fft.fft(z)
    if norm is FftNorm.ORTHO:
        return raw / np.sqrt(n)
    if norm is FftNorm.FORWARD and inverse:
        return raw / n
    return raw


@reference(Fft)
def ref_fft(op: Fft, args, node):
    (x,) = args
    if node.dtype is DType.C64:
        return fft_rows(x.astype(np.complex128), op.inverse, op.norm).astype(np.complex64)
    return to_blocks(fft_rows(from_blocks(x), op.inverse, op.norm)).astype(x.dtype)


def welch_psd(spectrum: np.ndarray, n_segments: int) -> np.ndarray:
    """One-sided PSD [batch, n_bins] averaged over segments (no window/fs normalisation)."""
    n_fft = spectrum.shape[-1] // 2
    n_bins = n_fft // 2 + 1
    power = np.abs(from_blocks(spectrum)[:, :n_bins]) ** 2
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


def log_mel_parts(spectrum: np.ndarray, filters: np.ndarray) -> tuple[np.ndarray, ...]:
    """(z, E, L, floor) of LogMel per frame, float64."""
    n_bins = filters.shape[1]
    z = from_blocks(spectrum)[..., :n_bins]
    energy = (z.real**2 + z.imag**2) @ filters.astype(np.float64).T
    with np.errstate(invalid="ignore"):
        logs = np.log10(np.maximum(energy, LOG_MEL_MIN_ENERGY))
    floor = logs.max(axis=-1, keepdims=True) - LOG_MEL_RANGE
    return z, energy, logs, floor


@reference(LogMel)
def ref_log_mel(op: LogMel, args, node):
    _, _, logs, floor = log_mel_parts(*args)
    return ((np.maximum(logs, floor) + 4.0) / 4.0).astype(args[0].dtype)


@reference(LogMelBackward)
def ref_log_mel_backward(op: LogMelBackward, args, node):
    spectrum, filters, dy = args
    z, energy, logs, floor = log_mel_parts(spectrum, filters)
    d_log = np.where(np.abs(np.maximum(logs, floor) - floor) <= 1e-6, 0.0, dy.astype(np.float64) / 4.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        d_energy = np.where(energy > LOG_MEL_MIN_ENERGY, d_log / (energy * np.log(10.0)), 0.0)
    d_power = d_energy @ filters.astype(np.float64)  # [..., n_bins]
    n_fft = spectrum.shape[-1] // 2
    grad = np.zeros(spectrum.shape, dtype=np.float64)
    grad[..., : z.shape[-1]] = 2.0 * z.real * d_power
    grad[..., n_fft: n_fft + z.shape[-1]] = 2.0 * z.imag * d_power
    return grad.astype(spectrum.dtype)
