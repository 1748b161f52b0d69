"""LogMel and LogMelBackward on the GPU: one workgroup per tile of frames stages |X|^2 in workgroup
memory and runs the mel filterbank product (each filter weight serves the whole tile) and log10
(signal_mel_frames, signal_mel_backward); the floor is taken per frame in the same dispatch, or per
spectrogram by a second kernel over the frames' maxima in arena scratch (signal_mel_floor, several
workgroups per spectrogram, each finishing a part of it). F64 spectra or filters run as host steps (no
f64 in WGSL)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from rlxpy.errors import LimitError, where
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Graph, Node
from rlxpy.wgpu_backend.kernels.contract import accepts
from rlxpy.wgpu_backend.kernels.params import U32, kernel, params
from rlxpy.wgpu_backend.lowering.reduce import steps_per_dispatch
from rlxpy.wgpu_backend.schedule import LowerCtx, Step

#: Lanes per workgroup, bins of power staged per chunk, frames per tile (the 4 components of a vec4),
#: and the most mels LogMelBackward holds (its dE of a tile stays in workgroup memory).
MEL_LANES = 128
CHUNK = 256
FRAMES = 4
MAX_MELS = 512
#: Values of y one workgroup of the per-spectrogram floor finishes (each also reduces the spectrogram's
#: frame maxima, a few loads per lane).
FLOOR_SPAN = 4096
_SPECTRA = (DType.F32, DType.C64)
_SPECTRUM = {name: U32 for name in ("spec", "spec_row", "spec_elem", "spec_im", "bins", "mels", "filters")}
SIGNAL_MEL_FRAMES = kernel("signal_mel_frames", params(
    "SignalMelFramesParams", frames=U32, **_SPECTRUM, y=U32, maxes=U32, floor_mode=U32, write_y=U32),
    dtypes=accepts(_SPECTRA, DType.F32, DType.F32, out=_SPECTRA),
    shared_bytes=lambda s: 16 * (int(s["CHUNK"]) + int(s["WG"])), sizes={"CHUNK": CHUNK})
SIGNAL_MEL_FLOOR = kernel("signal_mel_floor", params(
    "SignalMelFloorParams", spectrograms=U32, frames=U32, mels=U32, maxes=U32, floors=U32, y=U32, apply=U32,
    parts=U32, span=U32),
    dtypes=accepts(_SPECTRA, DType.F32, DType.F32, out=_SPECTRA), shared_bytes=lambda s: 4 * int(s["WG"]))
SIGNAL_MEL_BACKWARD = kernel("signal_mel_backward", params(
    "SignalMelBackwardParams", frames=U32, **_SPECTRUM, dy=U32, grad=U32, grad_bins=U32, floors=U32,
    frames_per=U32, floor_mode=U32),
    dtypes=accepts(_SPECTRA, DType.F32, DType.F32, out=_SPECTRA),
    shared_bytes=lambda s: 16 * (int(s["CHUNK"]) + int(s["WG"]) + int(s["MELS"])),
    sizes={"CHUNK": CHUNK, "MELS": MAX_MELS})


@dataclass(frozen=True)
class Spectra:
    """Where a LogMel spectrum's frames and bins live, in words."""

    frames: int
    bins: int  # one-sided bins the filters read
    row: int  # words per frame
    elem: int  # words between bins
    im: int  # words from a bin's real part to its imaginary part
    stored_bins: int  # bins per frame in the layout (the block layout keeps all n_fft)

    @staticmethod
    def of(spectrum: Node, filters: Node) -> Spectra:
        last = spectrum.shape[-1]
        frames = spectrum.numel // last if last else 0
        bins = filters.shape[1]
        if spectrum.dtype is DType.C64:
            return Spectra(frames, bins, 2 * last, 2, 1, last)
        n_fft = last // 2
        return Spectra(frames, bins, last, 1, n_fft, n_fft)


def on_gpu(node: Node, graph: Graph) -> bool:
    """F32/C64 spectra with f32 filters (and dy) run on the GPU; f64 runs on the host."""
    spectra = all(graph.nodes[i].dtype in _SPECTRA for i in node.inputs)
    return spectra and graph.nodes[node.inputs[1]].dtype is DType.F32


def mel_scratch(node: Node, graph: Graph) -> int:
    """Bytes for the frame maxima and spectrogram floors of a per-spectrogram floor."""
    if node.op.floor_axes == 1:  # type: ignore[attr-defined]
        return 0
    spectrum = graph.nodes[node.inputs[0]]
    frames = spectrum.numel // spectrum.shape[-1]
    return 4 * (frames + frames // max(1, spectrum.shape[-2]))


def _fields(spectra: Spectra, ctx: LowerCtx, spectrum: Node, filters: Node) -> dict[str, int]:
    return {"spec": ctx.offset(spectrum), "spec_row": spectra.row, "spec_elem": spectra.elem,
            "spec_im": spectra.im, "bins": spectra.bins, "mels": filters.shape[0],
            "filters": ctx.offset(filters)}


def _scratch(node: Node, ctx: LowerCtx, words: int) -> int:
    base, size = ctx.scratch
    if 4 * words > size or base < ctx.window_base:
        raise LimitError(f"{where(node)}: needs {4 * words} B of arena scratch, {size} B are free in its "
                         "binding")
    return (base - ctx.window_base) // 4


def _check_loops(node: Node, spectra: Spectra, mels: int, frames: int, backward: bool) -> None:
    """One invocation's loop iterations within lavapipe's budget (reduce.LOOP_BUDGET)."""
    groups = math.ceil(mels / MEL_LANES)
    chunks = math.ceil(spectra.bins / CHUNK)
    per_tile = groups * chunks * (frames * CHUNK // MEL_LANES + min(CHUNK, spectra.bins))
    if backward:
        per_tile += math.ceil(spectra.stored_bins / MEL_LANES) * (mels + frames)
    steps_per_dispatch(node, per_tile, 64, type(node.op).__name__)


def log_mel_steps(node: Node, ctx: LowerCtx) -> list[Step]:
    """LogMel: one dispatch (per-frame floor) or two (per-spectrogram floor)."""
    spectrum, filters = ctx.inputs(node)
    spectra = Spectra.of(spectrum, filters)
    mels = filters.shape[0]
    if spectra.frames == 0:
        return []
    _check_loops(node, spectra, mels, FRAMES, False)
    subs = {"WG": MEL_LANES, "CHUNK": CHUNK}
    fields = _fields(spectra, ctx, spectrum, filters)
    grid = ctx.grid_rows(math.ceil(spectra.frames / FRAMES))
    if node.op.floor_axes == 1:  # type: ignore[attr-defined]
        return [ctx.dispatch(SIGNAL_MEL_FRAMES, node, grid, subs, scalable=False, frames=spectra.frames,
                             y=ctx.offset(node), maxes=0, floor_mode=1, write_y=1, **fields)]
    maxes = _scratch(node, ctx, spectra.frames)
    per = spectrum.shape[-2]
    spectrograms = spectra.frames // per
    parts = max(1, math.ceil(per * mels / FLOOR_SPAN))
    return [ctx.dispatch(SIGNAL_MEL_FRAMES, node, grid, subs, scalable=False, frames=spectra.frames,
                         y=ctx.offset(node), maxes=maxes, floor_mode=2, write_y=1, **fields),
            ctx.dispatch(SIGNAL_MEL_FLOOR, node, ctx.grid_rows(spectrograms * parts), {"WG": MEL_LANES},
                         scalable=False, spectrograms=spectrograms, frames=per, mels=mels, maxes=maxes,
                         floors=0, y=ctx.offset(node), apply=1, parts=parts, span=FLOOR_SPAN)]


def log_mel_backward_steps(node: Node, ctx: LowerCtx) -> list[Step]:
    """LogMelBackward: one dispatch, after the floor's two (per spectrogram)."""
    spectrum, filters, dy = ctx.inputs(node)
    spectra = Spectra.of(spectrum, filters)
    mels = filters.shape[0]
    if spectra.frames == 0:
        return []
    if mels > MAX_MELS:
        raise LimitError(f"{where(node)}: {mels} mels, the backward kernel holds at most {MAX_MELS} "
                         f"(filters {filters.type})")
    _check_loops(node, spectra, mels, FRAMES, True)
    fields = _fields(spectra, ctx, spectrum, filters)
    grid = ctx.grid_rows(math.ceil(spectra.frames / FRAMES))
    steps, floors, per = [], 0, 1
    if node.op.floor_axes == 2:  # type: ignore[attr-defined]
        per = spectrum.shape[-2]
        spectrograms = spectra.frames // per
        maxes = _scratch(node, ctx, spectra.frames + spectrograms)
        floors = maxes + spectra.frames
        steps = [ctx.dispatch(SIGNAL_MEL_FRAMES, node, ctx.grid_rows(math.ceil(spectra.frames / FRAMES)),
                              {"WG": MEL_LANES, "CHUNK": CHUNK}, scalable=False,
                              frames=spectra.frames, y=0, maxes=maxes, floor_mode=2, write_y=0, **fields),
                 ctx.dispatch(SIGNAL_MEL_FLOOR, node, ctx.grid_rows(spectrograms), {"WG": MEL_LANES},
                              scalable=False, spectrograms=spectrograms, frames=per, mels=mels, maxes=maxes,
                              floors=floors, y=0, apply=0, parts=1, span=0)]
    subs = {"WG": MEL_LANES, "CHUNK": CHUNK, "MELS": MAX_MELS}
    return steps + [ctx.dispatch(SIGNAL_MEL_BACKWARD, node, grid, subs, scalable=False, frames=spectra.frames,
                                 dy=ctx.offset(dy), grad=ctx.offset(node), grad_bins=spectra.stored_bins,
                                 floors=floors, frames_per=per, floor_mode=node.op.floor_axes,  # type: ignore
                                 **fields)]


