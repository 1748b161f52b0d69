"""Named custom ops and the Gaussian-splatting ops (shape rules only).

Documented in docs/ops.md#custom (generated from these docstrings by rlxpy/ir/ops_doc.py).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from rlxpy.ir.dtype import DType
from rlxpy.ir.ops.base import Op, TensorType, need
from rlxpy.ir.shape import Sym

GROUP_LIMITED_GATE = "llada2.group_limited_gate"
UMAP_KNN = "umap.knn"
CUSTOM_NAMES = (GROUP_LIMITED_GATE, UMAP_KNN)


@dataclass(frozen=True)
class GateParams:
    """The 20-byte attribute blob of llada2.group_limited_gate (defaults when the blob is empty)."""

    n_group: int = 8
    topk_group: int = 4
    top_k: int = 8
    routed_scaling: float = 2.5
    num_experts: int = 256

    def pack(self) -> bytes:
        return struct.pack("<IIIfI", self.n_group, self.topk_group, self.top_k, self.routed_scaling,
                           self.num_experts)

    @staticmethod
    def unpack(blob: bytes) -> GateParams:
        """Empty blob -> defaults; otherwise exactly 20 bytes ``u32 u32 u32 f32 u32`` (LE).
        A partial blob is refused rather than padded with defaults."""
        if not blob:
            return GateParams()
        need(len(blob) == 20, f"{GROUP_LIMITED_GATE} attrs must be 0 or 20 bytes "
             f"(n_group, topk_group, top_k u32, routed_scaling f32, num_experts u32), got {len(blob)}")
        n_group, topk_group, top_k, scaling, experts = struct.unpack("<IIIfI", blob)
        return GateParams(n_group, topk_group, top_k, scaling, experts)


def knn_k(blob: bytes) -> int:
    """k of umap.knn: the first 4 bytes of the blob, u32 LE."""
    need(len(blob) >= 4, f"{UMAP_KNN} attrs must start with k as a u32 (4 bytes), got {len(blob)} bytes")
    return struct.unpack("<I", blob[:4])[0]


@dataclass(frozen=True)
class Custom(Op):
    """A named op outside the core set; only ``llada2.group_limited_gate`` and ``umap.knn`` exist.

    The attribute blob is ``attr_bytes`` (not ``attrs``, which would shadow Op.attrs()).
    Output f32, shape from the name:
    * group_limited_gate(sig [rows, E], route [rows, E]) -> [rows, 2*top_k]: DeepSeek-V3 style
      group-limited routing: top_k expert indices, then their weights.
    * umap.knn(pairwise [n, n]) -> [n, 2k]: k nearest neighbour indices, then their distances
      (ascending, ties -> lower column, the diagonal excluded; only finite distances qualify,
      unfilled slots hold index n and distance +inf)."""

    name: str
    attr_bytes: bytes = b""
    arity = (1, 2)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        need(self.name in CUSTOM_NAMES,
             f"unknown custom op {self.name!r}; only {', '.join(CUSTOM_NAMES)} exist")
        if self.name == GROUP_LIMITED_GATE:
            return _gate_infer(GateParams.unpack(self.attr_bytes), ins)
        need(len(ins) == 1, f"{UMAP_KNN} takes 1 input (pairwise [n, n]), got {len(ins)}")
        (pairwise,) = ins
        k = knn_k(self.attr_bytes)
        need(pairwise.rank == 2 and pairwise.shape[0] == pairwise.shape[1] and pairwise.dtype.is_float,
             f"{UMAP_KNN} takes float pairwise distances [n, n], got {pairwise}")
        n = pairwise.shape[0]
        need(k >= 1 and (isinstance(n, Sym) or k < n), f"{UMAP_KNN} needs 1 <= k < n, got k={k}, n={n}")
        return TensorType((n, 2 * k), DType.F32)


def _gate_infer(p: GateParams, ins: Sequence[TensorType]) -> TensorType:
    need(len(ins) == 2, f"{GROUP_LIMITED_GATE} takes 2 inputs (sig, route), got {len(ins)}")
    sig, route = ins
    need(sig.rank == 2 and sig.shape == route.shape and sig.dtype.is_float and route.dtype.is_float,
         f"sig and route must be float [rows, E] of one shape, got {sig} and {route}")
    experts = sig.shape[1]
    need(experts == p.num_experts, f"E={experts} differs from num_experts={p.num_experts}")
    need(p.n_group >= 1 and experts % p.n_group == 0, f"n_group={p.n_group} must divide E={experts}")
    need(1 <= p.topk_group <= p.n_group, f"topk_group={p.topk_group} must be in 1..n_group={p.n_group}")
    kept = p.topk_group * (experts // p.n_group)
    need(1 <= p.top_k <= kept, f"top_k={p.top_k} must be in 1..{kept} (experts in the kept groups)")
    return TensorType((sig.shape[0], 2 * p.top_k), DType.F32)


# -- Gaussian splatting (shape rules only: no rasteriser yet) -----------------------------------
SPLAT_META_SIZE = 23
SPLAT_INPUTS = ("positions [3N]", "log_scales [3N]", "rotations [4N]", "opacities [N]", "colors [3N]",
                "sh_coeffs [N*M]", "meta [23]")


def _splat_scene(ins: Sequence[TensorType]) -> int:
    """Check the 7 scene inputs; return the element count of the packed gradient vector."""
    need(all(t.rank == 1 and t.dtype is DType.F32 for t in ins[:7]),
         "splat inputs must be flat f32: " + ", ".join(SPLAT_INPUTS))
    sizes = [t.shape[0] for t in ins[:7]]
    need(all(isinstance(s, int) for s in sizes), "splat inputs must be static")
    n = sizes[3]
    need(sizes[:5] == [3 * n, 3 * n, 4 * n, n, 3 * n] and sizes[6] == SPLAT_META_SIZE,  # type: ignore[operator]
         f"splat inputs must be {', '.join(SPLAT_INPUTS)}; got sizes {sizes}")
    return sum(sizes[:6])  # type: ignore[arg-type]


@dataclass(frozen=True)
class GaussianSplatRender(Op):
    """Render N Gaussians to RGBA [height*width*4]; inputs positions, log_scales, rotations
    (xyzw), logit opacities, linear colors, SH coeffs, 23-float camera/render meta."""

    width: int
    height: int
    tile_size: int = 16
    radius_scale: float = 3.0
    alpha_cutoff: float = 1.0 / 255.0
    max_splat_steps: int = 0
    transmittance_threshold: float = 1e-4
    max_list_entries: int = 0
    arity = (7, 7)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        _splat_scene(ins)
        need(self.width >= 1 and self.height >= 1, f"image {self.width}x{self.height} must be non-empty")
        return TensorType((self.height * self.width * 4,), DType.F32)


@dataclass(frozen=True)
class GaussianSplatRenderBackward(Op):
    """Gradient of GaussianSplatRender; inputs the 7 scene inputs and d_loss_rgba [H*W*4]; out the
    gradients of the first 6 inputs packed in input order."""

    width: int
    height: int
    tile_size: int = 16
    radius_scale: float = 3.0
    alpha_cutoff: float = 1.0 / 255.0
    max_splat_steps: int = 0
    transmittance_threshold: float = 1e-4
    max_list_entries: int = 0
    loss_grad_clip: float = 0.0
    sh_band: int = 0
    max_anisotropy: float = 0.0
    arity = (8, 8)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        total = _splat_scene(ins)
        pixels = self.height * self.width * 4
        need(ins[7].shape == (pixels,), f"d_loss_rgba must be [{pixels}], got {ins[7]}")
        return TensorType((total,), DType.F32)


@dataclass(frozen=True)
class GaussianSplatPrepare(Op):
    """Project the 7 scene inputs to a packed per-splat buffer of ``prep_size`` floats (its layout
    is declared, not yet fixed), consumed by GaussianSplatRasterize."""

    width: int
    height: int
    prep_size: int
    tile_size: int = 16
    radius_scale: float = 3.0
    alpha_cutoff: float = 1.0 / 255.0
    max_list_entries: int = 0
    arity = (7, 7)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        _splat_scene(ins)
        need(self.prep_size >= 1, f"prep_size {self.prep_size} must be >= 1")
        return TensorType((self.prep_size,), DType.F32)


@dataclass(frozen=True)
class GaussianSplatRasterize(Op):
    """Rasterise a prepared buffer: inputs prep [P], meta [23] -> RGBA [height*width*4]."""

    width: int
    height: int
    tile_size: int = 16
    alpha_cutoff: float = 1.0 / 255.0
    max_splat_steps: int = 0
    transmittance_threshold: float = 1e-4
    max_list_entries: int = 0
    arity = (2, 2)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        prep, meta = ins
        need(prep.rank == 1 and meta.shape == (SPLAT_META_SIZE,),
             f"rasterize takes prep [P] and meta [{SPLAT_META_SIZE}], got {prep} and {meta}")
        return TensorType((self.height * self.width * 4,), DType.F32)
