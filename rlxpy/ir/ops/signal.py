"""Signal and audio ops: FFT, Welch peak picking, log-mel and its gradient.

Real spectra use the **2N real-block layout**: a row of a length-N complex spectrum is stored as
``[re_0 .. re_{N-1}, im_0 .. im_{N-1}]`` (last dim 2N).

Documented in docs/ops.md#signal (generated from these docstrings by rlxpy/ir/ops_doc.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rlxpy.ir.dtype import DType
from rlxpy.ir.ops.base import FftNorm, Op, TensorType, need
from rlxpy.ir.shape import Dim, Sym, format_shape

#: Floor of the mel energy before log10, and the log dynamic range kept per frame.
LOG_MEL_MIN_ENERGY = 1e-10
LOG_MEL_RANGE = 8.0


def block_length(x: TensorType, what: str) -> int:
    """N of a [..., 2N] block-layout spectrum."""
    need(x.rank >= 1 and isinstance(x.shape[-1], int), f"{what} needs a static last dim, got {x}")
    last = x.shape[-1]
    need(last >= 2 and last % 2 == 0, f"{what}: last dim {last} of {x} is not 2N (re block, im block)")
    return last // 2  # type: ignore[operator]


@dataclass(frozen=True)
class Fft(Op):
    """1-D DFT along the last axis of independent rows: ``X[k] = sum_n x[n] e^{-+2 pi i nk/N}``.

    F32/F64 rows are in the 2N block layout, C64 rows are complex (last dim N).
    ``norm`` scales the result: BACKWARD = no scaling either way (so ifft(fft(x)) = N x, unlike
    numpy's default); FORWARD = the inverse scaled by 1/N (numpy's norm="backward", names swapped);
    ORTHO = 1/sqrt(N) both ways (numpy's "ortho"). Otherwise torch.fft.fft / ifft."""

    inverse: bool = False
    norm: FftNorm = FftNorm.BACKWARD

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        (x,) = ins
        need(x.dtype in (DType.F32, DType.F64, DType.C64),
             f"fft takes f32/f64 (block layout) or c64, got {x}")
        if x.dtype is DType.C64:
            need(x.rank >= 1 and x.shape[-1] != 0, f"fft needs a non-empty last axis, got {x}")
        else:
            block_length(x, "fft")
        return x


@dataclass(frozen=True)
class WelchPeaks(Op):
    """Top-``k`` bins of a Welch PSD; spectrum [batch*n_segments, 2*n_fft] (f32 block layout,
    rows batch-major: row = b*n_segments + s) -> [batch, 2k] interleaved (bin index, power).

    ``psd[b] = mean_s |X_s[b]|^2`` over ``n_bins = n_fft//2 + 1`` one-sided bins, doubled except
    for DC and (even n_fft) Nyquist: scipy.signal.welch(boxcar, scaling="spectrum",
    detrend=False) times n_fft^2, i.e. no window or sampling-rate normalisation. Bins sorted by
    power descending, ties -> lower bin, NaN counts as the largest (like TopK). For odd n_fft the
    original did not double the last bin; this follows scipy."""

    k: int
    n_segments: int

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        (x,) = ins
        need(x.rank == 2 and x.dtype is DType.F32,
             f"welch_peaks takes f32 [batch*n_segments, 2*n_fft], got {x}")
        n_fft = block_length(x, "welch_peaks")
        bins = n_fft // 2 + 1
        need(self.k >= 1 and self.n_segments >= 1,
             f"k={self.k} and n_segments={self.n_segments} must be >= 1")
        need(self.k <= bins, f"k={self.k} exceeds the {bins} one-sided bins of n_fft={n_fft}")
        rows = x.shape[0]
        if isinstance(rows, Sym):
            need(self.n_segments == 1, f"symbolic rows {rows} need n_segments=1, got {self.n_segments}")
            batch: Dim = rows
        else:
            need(rows % self.n_segments == 0,
                 f"rows {rows} are not a multiple of n_segments={self.n_segments}")
            batch = rows // self.n_segments
        return TensorType((batch, 2 * self.k), DType.F32)


def _log_mel_check(spectrum: TensorType, filters: TensorType) -> int:
    need(spectrum.dtype.is_float and filters.dtype.is_float,
         f"log_mel needs float spectrum and filters, got {spectrum} and {filters}")
    n_fft = block_length(spectrum, "log_mel")
    n_bins = n_fft // 2 + 1
    need(filters.rank == 2 and filters.shape[1] == n_bins and filters.shape[0] != 0,
         f"filters must be [n_mels >= 1, n_fft//2+1 = {n_bins}] for spectrum {spectrum}, got {filters}")
    return n_bins


@dataclass(frozen=True)
class LogMel(Op):
    """Whisper-style log-mel of block-layout spectra: spectrum [..., 2*n_fft], filters
    [n_mels, n_fft//2+1] -> [..., n_mels].

    ``P_k = re_k^2 + im_k^2``; ``E = filters @ P``; ``L = log10(max(E, 1e-10))``;
    ``y = (max(L, max_m L - 8) + 4) / 4``. The floor is taken **per frame**, not over the whole
    spectrogram as whisper's log_mel_spectrogram does."""

    arity = (2, 2)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        spectrum, filters = ins
        _log_mel_check(spectrum, filters)
        return TensorType(tuple(spectrum.shape[:-1]) + (filters.shape[0],), spectrum.dtype)


@dataclass(frozen=True)
class LogMelBackward(Op):
    """Gradient of LogMel wrt the spectrum; inputs spectrum, filters, dy [..., n_mels].

    The per-frame floor is a constant: ``dL_m = dy_m/4`` where ``L_m`` is above the floor by more
    than 1e-6 (else 0); mels with ``E_m <= 1e-10`` get 0 (the clamp); ``dE = dL / (E ln 10)``;
    ``d re_k = 2 re_k sum_m dE_m F[m,k]`` (same for im) for k < n_bins, other bins 0. Equals
    torch autograd through LogMel with the floor detached."""

    arity = (3, 3)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        spectrum, filters, dy = ins
        _log_mel_check(spectrum, filters)
        want = tuple(spectrum.shape[:-1]) + (filters.shape[0],)
        need(dy.shape == want, f"dy must be {format_shape(want)}, got {dy}")
        return spectrum
