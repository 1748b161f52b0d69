"""Secondary op families: conv/pool, sequence models, signal/audio, custom ops, backward ops and
fused element-wise regions (op-catalog §1.2, §1.8-§1.12, §1.14). Each family lives in its own
``extra_<family>.py``; importing this module registers all of them in OP_TYPES."""

from __future__ import annotations

from rlxpy.ir.ops.extra_backward import (
    AttentionBackward,
    AttentionWrt,
    CumsumBackward,
    GatherBackward,
    LayerNormBackwardGamma,
    LayerNormBackwardInput,
    RmsNormBackwardBeta,
    RmsNormBackwardGamma,
    RmsNormBackwardInput,
    RopeBackward,
)
from rlxpy.ir.ops.extra_conv import Conv, Im2Col, Pool
from rlxpy.ir.ops.extra_custom import (
    CUSTOM_NAMES,
    GROUP_LIMITED_GATE,
    UMAP_KNN,
    Custom,
    GateParams,
    GaussianSplatPrepare,
    GaussianSplatRasterize,
    GaussianSplatRender,
    GaussianSplatRenderBackward,
)
from rlxpy.ir.ops.extra_region import (
    BatchElementwiseRegion,
    ChainKind,
    ChainOperand,
    ChainStep,
    ElementwiseRegion,
    RegionPrologue,
    chain_input,
    chain_step,
    encode_chain,
)
from rlxpy.ir.ops.extra_sequence import GatedDeltaNet, SelectiveScan
from rlxpy.ir.ops.extra_signal import Fft, LogMel, LogMelBackward, WelchPeaks

__all__ = [
    "CUSTOM_NAMES", "GROUP_LIMITED_GATE", "UMAP_KNN", "AttentionBackward", "AttentionWrt",
    "BatchElementwiseRegion", "ChainKind", "ChainOperand", "ChainStep", "Conv", "CumsumBackward", "Custom",
    "ElementwiseRegion", "Fft", "GatedDeltaNet", "GateParams", "GatherBackward", "GaussianSplatPrepare",
    "GaussianSplatRasterize", "GaussianSplatRender", "GaussianSplatRenderBackward", "Im2Col",
    "LayerNormBackwardGamma", "LayerNormBackwardInput", "LogMel", "LogMelBackward", "Pool", "RegionPrologue",
    "RmsNormBackwardBeta", "RmsNormBackwardGamma", "RmsNormBackwardInput", "RopeBackward", "SelectiveScan",
    "WelchPeaks", "chain_input", "chain_step", "encode_chain",
]
