"""Signal and audio ops: FFT, STFT, Welch peak picking, log-mel and its gradient.

Spectra are C64 (interleaved re, im pairs) or, for F32/F64, in the **2N real-block layout**: a row of
a length-N complex spectrum is stored as ``[re_0 .. re_{N-1}, im_0 .. im_{N-1}]`` (last dim 2N).

**FFT plans.** Fft and Stft take an optional last input, the plan table of their transform length N
(``fft_table_words``; the unfuse pass adds it, built in float64 by ``passes/unfuse_signal.fft_table``),
so that a backend reads twiddles and chirps instead of evaluating sin/cos in f32. The plan transforms
a length whose prime factors are 2, 3, 5 and 7 directly; any other length by Bluestein's chirp-z
through the power of two ``m >= 2N - 1``. The table holds, as (re, im) f32 pairs: the roots of unity
``exp(-2 pi i k / M)``, k < M (M = N, or m for Bluestein), then for Bluestein the chirp
``exp(-pi i k^2 / N)``, k < N, then ``FFT_m(b) / m`` where ``b = conj(chirp)`` wrapped around
(``b[k] = b[m-k] = conj(chirp[k])``, zero between). The table never changes an op's value.

Documented in docs/ops.md#signal (generated from these docstrings by rlxpy/ir/ops_doc.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rlxpy.ir.dtype import DType
from rlxpy.ir.ops.base import FftNorm, Op, TensorType, check_axis, need
from rlxpy.ir.shape import Dim, Sym, format_shape

#: Floor of the mel energy before log10, and the log dynamic range kept per frame.
LOG_MEL_MIN_ENERGY = 1e-10
LOG_MEL_RANGE = 8.0
#: Prime factors an FFT plan transforms directly (others go through Bluestein).
FFT_RADICES = (2, 3, 5, 7)
#: Stft's padding modes when ``center``.
PAD_MODES = ("reflect", "constant")


def block_length(x: TensorType, what: str) -> int:
    """N of a [..., 2N] block-layout spectrum."""
    need(x.rank >= 1 and isinstance(x.shape[-1], int), f"{what} needs a static last dim, got {x}")
    last = x.shape[-1]
    need(last >= 2 and last % 2 == 0, f"{what}: last dim {last} of {x} is not 2N (re block, im block)")
    return last // 2  # type: ignore[operator]


def is_smooth(n: int) -> bool:
    """Are all prime factors of ``n`` (>= 1) in FFT_RADICES?"""
    for p in FFT_RADICES:
        while n % p == 0:
            n //= p
    return n == 1


def bluestein_length(n: int) -> int:
    """The power of two m >= 2n - 1 that Bluestein's convolution of length n runs in."""
    return 1 << max(0, (2 * n - 2).bit_length())


def fft_plan_length(n: int) -> int:
    """The length M whose roots the plan of an n-point DFT uses: n, or Bluestein's m."""
    return n if is_smooth(n) else bluestein_length(n)


def fft_table_words(n: int) -> int:
    """f32 words of the plan table of an n-point DFT (module docstring)."""
    m = fft_plan_length(n)
    return 2 * m if m == n else 2 * (m + n + m)


def _check_table(ins: Sequence[TensorType], first_table: int, n: int, what: str) -> None:
    """The optional plan-table input at position ``first_table``."""
    if len(ins) > first_table:
        table = ins[first_table]
        words = fft_table_words(n)
        need(table.dtype is DType.F32 and tuple(table.shape) == (words,),
             f"{what}: the plan table of length {n} is f32[{words}], got {table}")


@dataclass(frozen=True)
class Fft(Op):
    """1-D DFT along ``axis``: ``X[k] = sum_t x[t] e^{-+2 pi i tk/N}`` (- forward, + inverse) for every
    line of the other axes.

    * complex (``real=False``): C64 in and out, or F32/F64 rows in the 2N block layout (``axis`` must
      then be the last); N is the axis length.
    * rfft (``real=True``, forward): F32 with the axis N -> C64 with the axis N//2+1 (the one-sided
      bins of the real signal's DFT), or N with ``onesided=False`` (all bins: torch.fft.fft of a real
      tensor).
    * irfft (``real=True, inverse=True``): C64 with the axis M -> F32 with the axis ``n`` (0 means
      2(M-1)), N = n: the input is the one-sided half of a Hermitian spectrum of length n; bins past
      n//2 are ignored, missing bins are 0, and the imaginary parts of bin 0 and (even n) bin n/2 are
      ignored, as numpy.fft.irfft does.

    ``norm`` scales the result: BACKWARD = no scaling either way (so ifft(fft(x)) = N x, unlike
    numpy's default); FORWARD = the inverse scaled by 1/N (numpy's norm="backward", names swapped);
    ORTHO = 1/sqrt(N) both ways (numpy's "ortho"). Otherwise torch.fft.fft / ifft / rfft / irfft.
    ``n`` is only for irfft, ``onesided=False`` only for rfft. An optional second input is the plan
    table of N (module docstring)."""

    inverse: bool = False
    norm: FftNorm = FftNorm.BACKWARD
    axis: int = -1
    real: bool = False
    n: int = 0
    onesided: bool = True
    arity = (1, 2)

    def length(self, x: TensorType) -> int:
        """N, the transform length, for input ``x`` (after ``infer`` accepted it)."""
        if x.dtype is not DType.C64 and not self.real:
            return block_length(x, "fft")
        size = x.shape[check_axis(self.axis, x.rank)]
        if self.real and self.inverse:
            return self.n or 2 * (size - 1)  # type: ignore[operator]
        return size  # type: ignore[return-value]

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        x = ins[0]
        need(x.rank >= 1, f"fft needs at least one axis, got {x}")
        axis = check_axis(self.axis, x.rank)
        size = x.shape[axis]
        need(isinstance(size, int), f"fft needs a static axis {self.axis}, got {x}")
        need(self.n == 0 or (self.real and self.inverse), f"n={self.n} is only for irfft (real, inverse)")
        need(self.onesided or (self.real and not self.inverse),
             "onesided=False is only for rfft (real, forward)")
        shape = list(x.shape)
        if not self.real:
            need(x.dtype in (DType.F32, DType.F64, DType.C64),
                 f"fft takes c64, or f32/f64 in the block layout, got {x}")
            if x.dtype is DType.C64:
                need(size != 0, f"fft needs a non-empty axis {self.axis}, got {x}")
            else:
                need(axis == x.rank - 1, f"fft of the f32/f64 block layout runs on the last axis, got "
                                         f"axis {self.axis} of {x}")
                block_length(x, "fft")
            out = TensorType(x.shape, x.dtype)
        elif not self.inverse:
            need(x.dtype is DType.F32, f"rfft takes a real f32 signal, got {x}")
            need(size != 0, f"rfft needs a non-empty axis {self.axis}, got {x}")
            shape[axis] = size // 2 + 1 if self.onesided else size  # type: ignore[operator]
            out = TensorType(tuple(shape), DType.C64)
        else:
            need(x.dtype is DType.C64, f"irfft takes a c64 one-sided spectrum, got {x}")
            need(self.n >= 0, f"irfft needs n >= 0, got n={self.n}")
            n = self.n or 2 * (size - 1)  # type: ignore[operator]
            need(n >= 1 and size >= 1, f"irfft of {x} has no output length (n={self.n}): pass n >= 1")
            shape[axis] = n
            out = TensorType(tuple(shape), DType.F32)
        _check_table(ins, 1, self.length(x), "fft")
        return out


@dataclass(frozen=True)
class Stft(Op):
    """Short-time DFT of real signals: signal F32 [..., T], window F32 [n_fft] -> C64
    [..., frames, bins] with ``Y[f, k] = sum_t w[t] x[f*hop + t - pad] e^{-2 pi i tk/n_fft}``.

    ``pad = n_fft//2`` when ``center``, else 0; samples before 0 or past T-1 are mirrored
    (``pad_mode="reflect"``: x[-i] = x[i], x[T-1+i] = x[T-1-i], needs pad < T) or 0 ("constant").
    ``frames = 1 + (T + 2 pad - n_fft) // hop``; ``bins = n_fft//2 + 1`` when ``onesided``, else
    n_fft. ``norm``: ORTHO scales by 1/sqrt(n_fft) (torch's normalized=True), otherwise no scaling.
    Equals torch.stft(x, n_fft, hop, window=w, center=center, pad_mode=pad_mode, onesided=onesided,
    return_complex=True) with its last two axes swapped. An optional third input is the plan table
    of n_fft (module docstring)."""

    n_fft: int
    hop: int
    center: bool = True
    pad_mode: str = "reflect"
    onesided: bool = True
    norm: FftNorm = FftNorm.BACKWARD
    arity = (2, 3)

    def padding(self) -> int:
        return self.n_fft // 2 if self.center else 0

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        x, window = ins[0], ins[1]
        need(self.n_fft >= 1 and self.hop >= 1,
             f"stft needs n_fft >= 1 and hop >= 1, got n_fft={self.n_fft}, hop={self.hop}")
        need(self.pad_mode in PAD_MODES, f"stft pad_mode {self.pad_mode!r} is not one of {PAD_MODES}")
        need(x.dtype is DType.F32 and x.rank >= 1 and isinstance(x.shape[-1], int),
             f"stft takes a real f32 signal [..., T] with a static T, got {x}")
        need(window.dtype is DType.F32 and tuple(window.shape) == (self.n_fft,),
             f"stft window must be f32[{self.n_fft}], got {window}")
        length, pad = x.shape[-1], self.padding()
        if self.pad_mode == "reflect" and pad:
            need(pad < length, f"stft reflect padding {pad} needs a signal longer than that, got {x}")
        need(length + 2 * pad >= self.n_fft,  # type: ignore[operator]
             f"stft signal {x} (padded by {pad} each side) is shorter than n_fft={self.n_fft}")
        frames = 1 + (length + 2 * pad - self.n_fft) // self.hop  # type: ignore[operator]
        bins = self.n_fft // 2 + 1 if self.onesided else self.n_fft
        _check_table(ins, 2, self.n_fft, "stft")
        return TensorType(tuple(x.shape[:-1]) + (frames, bins), DType.C64)


@dataclass(frozen=True)
class ComplexView(Op):
    """The same bytes seen as the other type: C64 [...] -> F32 [..., 2] (re, im pairs:
    torch.view_as_real, ONNX's complex layout), or with ``to_complex`` F32 [..., 2] -> C64 [...]
    (torch.view_as_complex)."""

    to_complex: bool = False

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        (x,) = ins
        if self.to_complex:
            need(x.dtype is DType.F32 and x.rank >= 1 and x.shape[-1] == 2,
                 f"view_as_complex takes f32 [..., 2] (re, im pairs), got {x}")
            return TensorType(tuple(x.shape[:-1]), DType.C64)
        need(x.dtype is DType.C64, f"view_as_real takes c64, got {x}")
        return TensorType(tuple(x.shape) + (2,), DType.F32)


def spectrum_length(x: TensorType, what: str) -> int:
    """N of a full spectrum row: the last dim of a C64 row, half that of a block-layout row."""
    if x.dtype is DType.C64:
        need(x.rank >= 1 and isinstance(x.shape[-1], int) and x.shape[-1] != 0,
             f"{what} needs a static, non-empty last dim, got {x}")
        return x.shape[-1]  # type: ignore[return-value]
    return block_length(x, what)


@dataclass(frozen=True)
class WelchPeaks(Op):
    """Top-``k`` bins of a Welch PSD; spectrum [batch*n_segments, N] (C64 full spectra) or
    [batch*n_segments, 2N] (f32 block layout), N = n_fft, rows batch-major (row = b*n_segments + s)
    -> f32 [batch, 2k] interleaved (bin index, power).

    ``psd[b] = mean_s |X_s[b]|^2`` over ``n_bins = n_fft//2 + 1`` one-sided bins, doubled except
    for DC and (even n_fft) Nyquist: scipy.signal.welch(boxcar, scaling="spectrum",
    detrend=False) times n_fft^2, i.e. no window or sampling-rate normalisation. Bins sorted by
    power descending, ties -> lower bin, NaN counts as the largest (like TopK). For odd n_fft the
    original did not double the last bin; this follows scipy."""

    k: int
    n_segments: int

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        (x,) = ins
        need(x.rank == 2 and x.dtype in (DType.F32, DType.C64),
             f"welch_peaks takes c64 [batch*n_segments, n_fft] or f32 [batch*n_segments, 2*n_fft], got {x}")
        n_fft = spectrum_length(x, "welch_peaks")
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


def log_mel_bins(spectrum: TensorType, filters: TensorType, floor_axes: int, what: str) -> int:
    """n_bins of a LogMel spectrum (C64 one-sided [..., n_bins] or block layout [..., 2*n_fft])."""
    need(floor_axes in (1, 2),
         f"{what}: floor_axes is 1 (per frame) or 2 (per spectrogram), got {floor_axes}")
    need((spectrum.dtype.is_float or spectrum.dtype is DType.C64) and filters.dtype.is_float,
         f"{what} needs a float or c64 spectrum and float filters, got {spectrum} and {filters}")
    if spectrum.dtype is DType.C64:
        need(spectrum.rank >= 1 and isinstance(spectrum.shape[-1], int) and spectrum.shape[-1] != 0,
             f"{what} needs a static, non-empty last dim, got {spectrum}")
        n_bins, source = spectrum.shape[-1], "the c64 spectrum's last dim"
        need(filters.dtype is DType.F32, f"{what} of a c64 spectrum takes f32 filters, got {filters}")
    else:
        n_bins, source = block_length(spectrum, what) // 2 + 1, "n_fft//2+1"
    need(filters.rank == 2 and filters.shape[1] == n_bins and filters.shape[0] != 0,
         f"filters must be [n_mels >= 1, {source} = {n_bins}] for spectrum {spectrum}, got {filters}")
    need(spectrum.rank >= floor_axes, f"{what}: floor_axes={floor_axes} needs a [frames, ...] spectrum, "
                                      f"got {spectrum}")
    return n_bins  # type: ignore[return-value]


@dataclass(frozen=True)
class LogMel(Op):
    """Whisper-style log-mel of spectra: spectrum C64 [..., n_bins] (one-sided, as rfft/Stft give)
    or f32/f64 [..., 2*n_fft] (block layout, n_bins = n_fft//2+1), filters [n_mels, n_bins] ->
    [..., n_mels] (f32 for C64).

    ``P_k = re_k^2 + im_k^2``; ``E = filters @ P``; ``L = log10(max(E, 1e-10))``;
    ``y = (max(L, floor) + 4) / 4`` with ``floor = max L - 8`` taken per frame (``floor_axes=1``:
    over the mels) or per spectrogram (``floor_axes=2``: over the last two axes [frames, mels], as
    whisper's log_mel_spectrogram and WhisperFeatureExtractor do). NaN propagates (a NaN in a frame
    makes the maximum, hence every value it floors, NaN)."""

    floor_axes: int = 1
    arity = (2, 2)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        spectrum, filters = ins
        log_mel_bins(spectrum, filters, self.floor_axes, "log_mel")
        dtype = DType.F32 if spectrum.dtype is DType.C64 else spectrum.dtype
        return TensorType(tuple(spectrum.shape[:-1]) + (filters.shape[0],), dtype)


@dataclass(frozen=True)
class LogMelBackward(Op):
    """Gradient of LogMel (same ``floor_axes``) wrt the spectrum; inputs spectrum, filters, dy
    [..., n_mels] -> the spectrum's type.

    The floor is a constant: ``dL_m = dy_m/4`` where ``L_m`` is above the floor by more
    than 1e-6 (else 0); mels with ``E_m <= 1e-10`` get 0 (the clamp); ``dE = dL / (E ln 10)``;
    ``d re_k = 2 re_k sum_m dE_m F[m,k]`` (same for im) for k < n_bins, other bins 0 (a C64
    gradient is ``d re + i d im``, torch's convention). Equals torch autograd through LogMel with
    the floor detached."""

    floor_axes: int = 1
    arity = (3, 3)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        spectrum, filters, dy = ins
        log_mel_bins(spectrum, filters, self.floor_axes, "log_mel_backward")
        want = tuple(spectrum.shape[:-1]) + (filters.shape[0],)
        need(dy.shape == want and dy.dtype.is_float, f"dy must be float {format_shape(want)}, got {dy}")
        return spectrum
