"""Builder methods for the secondary op families (conv, sequence, signal, custom, backward,
element-wise regions, splatting), composed into Graph next to builder.Builder; one line each where
possible, the shape rules live on the ops (rlxpy/ir/ops/<family>.py)."""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence

from rlxpy.errors import GraphError
from rlxpy.ir import ops
from rlxpy.ir.graph_core import GraphCore, Node, NodeRef
from rlxpy.ir.ops.backward import AttentionWrt
from rlxpy.ir.ops.base import ActKind, BinaryOp, FftNorm, MaskKind, ReduceOp, enum_value
from rlxpy.ir.ops.custom import GROUP_LIMITED_GATE, UMAP_KNN, GateParams
from rlxpy.ir.ops.region import ChainStep, RegionPrologue
from rlxpy.ir.shape import as_shape

Window = int | Sequence[int]


def _window(value: Window | None) -> tuple[int, ...]:
    """An int applies to every spatial dim; None means the op's default."""
    if value is None:
        return ()
    return (int(value),) if isinstance(value, int) else tuple(int(v) for v in value)


def _activation(value: ActKind | str | None) -> ActKind | None:
    return None if value is None else enum_value(ActKind, value)  # type: ignore[return-value]


def _enum(kind: type, value: object) -> object:
    return enum_value(kind, value)  # type: ignore[arg-type]


class BuilderExtra(GraphCore):
    """Builder methods of the secondary families (graph.Graph composes it). Every method returns the
    new Node."""

    def _shape_of(self, x: NodeRef, what: str) -> tuple:
        """The shape of a node the builder needs to look at before the op's shape rule runs."""
        try:
            return tuple(self[x].shape)
        except (KeyError, IndexError, TypeError):
            raise GraphError(f"{what}: {x!r} is not a node of this graph") from None

    # -- convolution, pooling -------------------------------------------------------------------
    def conv(self, x: NodeRef, w: NodeRef, stride: Window = 1, padding: Window = 0, dilation: Window = 1,
             groups: int = 1, name: str | None = None, *, bias: NodeRef | None = None,
             activation: ActKind | str | None = None, padding_end: Window | None = None) -> Node:
        """act(torch.nn.functional.conv{1,2,3}d(x, w, bias, stride, padding, dilation, groups));
        ``padding_end`` pads after each dim (default: ``padding``, symmetric)."""
        kernel = self._shape_of(w, "conv weight")[2:]
        op = ops.Conv(kernel, _window(stride), _window(padding), _window(dilation), groups,
                      _window(padding_end), _activation(activation))
        return self.apply(op, [x, w] + ([bias] if bias is not None else []), name)

    def conv_transpose(self, x: NodeRef, w: NodeRef, stride: Window = 1, padding: Window = 0,
                       output_padding: Window = 0, dilation: Window = 1, groups: int = 1,
                       name: str | None = None, *, bias: NodeRef | None = None,
                       activation: ActKind | str | None = None, padding_end: Window | None = None) -> Node:
        """act(torch.nn.functional.conv_transpose{1,2,3}d(x, w, bias, stride, padding, output_padding,
        groups, dilation)); w is [C_in, C_out/groups, *kernel]."""
        kernel = self._shape_of(w, "conv_transpose weight")[2:]
        op = ops.ConvTranspose(kernel, _window(stride), _window(padding), _window(output_padding),
                               _window(dilation), groups, _window(padding_end), _activation(activation))
        return self.apply(op, [x, w] + ([bias] if bias is not None else []), name)

    def pool(self, x: NodeRef, kind: ReduceOp | str, kernel_size: Window, stride: Window = 1,
             padding: Window = 0, name: str | None = None, *, dilation: Window = 1,
             padding_end: Window | None = None, ceil_mode: bool = False, count_include_pad: bool = True,
             divisor: int = 0) -> Node:
        kind = _enum(ReduceOp, kind)  # type: ignore[assignment]
        op = ops.Pool(kind, _window(kernel_size), _window(stride), _window(padding),  # type: ignore[arg-type]
                      _window(dilation), _window(padding_end), ceil_mode, count_include_pad, divisor)
        return self.apply(op, [x], name)

    def max_pool(self, x: NodeRef, kernel_size: Window, stride: Window | None = None, padding: Window = 0,
                 name: str | None = None, *, dilation: Window = 1, ceil_mode: bool = False) -> Node:
        """torch's max_pool{1,2,3}d: stride defaults to the kernel size here, as in torch."""
        stride = kernel_size if stride is None else stride
        return self.pool(x, ReduceOp.MAX, kernel_size, stride, padding, name, dilation=dilation,
                         ceil_mode=ceil_mode)

    def avg_pool(self, x: NodeRef, kernel_size: Window, stride: Window | None = None, padding: Window = 0,
                 name: str | None = None, *, ceil_mode: bool = False, count_include_pad: bool = True,
                 divisor_override: int | None = None) -> Node:
        """torch's avg_pool{1,2,3}d; stride defaults to the kernel size."""
        stride = kernel_size if stride is None else stride
        return self.pool(x, ReduceOp.MEAN, kernel_size, stride, padding, name, ceil_mode=ceil_mode,
                         count_include_pad=count_include_pad, divisor=divisor_override or 0)

    def adaptive_pool(self, x: NodeRef, kind: ReduceOp | str, output_size: Window,
                      name: str | None = None) -> Node:
        kind = _enum(ReduceOp, kind)  # type: ignore[assignment]
        return self.apply(ops.AdaptivePool(kind, _window(output_size)), [x], name)  # type: ignore[arg-type]

    def adaptive_avg_pool(self, x: NodeRef, output_size: Window, name: str | None = None) -> Node:
        """torch's adaptive_avg_pool{1,2,3}d."""
        return self.adaptive_pool(x, ReduceOp.MEAN, output_size, name)

    def adaptive_max_pool(self, x: NodeRef, output_size: Window, name: str | None = None) -> Node:
        """torch's adaptive_max_pool{1,2,3}d (values only)."""
        return self.adaptive_pool(x, ReduceOp.MAX, output_size, name)

    def global_avg_pool(self, x: NodeRef, name: str | None = None) -> Node:
        """Mean over every spatial dim, keeping them as 1s (ONNX GlobalAveragePool)."""
        return self.adaptive_pool(x, ReduceOp.MEAN, 1, name)

    def global_max_pool(self, x: NodeRef, name: str | None = None) -> Node:
        """Max over every spatial dim, keeping them as 1s (ONNX GlobalMaxPool)."""
        return self.adaptive_pool(x, ReduceOp.MAX, 1, name)

    def im2col(self, x: NodeRef, kernel_size: Window, stride: Window = 1, padding: Window = 0,
               dilation: Window = 1, name: str | None = None) -> Node:
        op = ops.Im2Col(_window(kernel_size), _window(stride), _window(padding), _window(dilation))
        return self.apply(op, [x], name)

    # -- sequence models --------------------------------------------------------------------------
    def selective_scan(self, x: NodeRef, delta: NodeRef, a: NodeRef, b: NodeRef, c: NodeRef,
                       state: NodeRef | None = None, name: str | None = None) -> Node:
        state_size = (self._shape_of(a, "selective_scan A") or (0,))[-1]
        ins = [x, delta, a, b, c] + ([state] if state is not None else [])
        return self.apply(ops.SelectiveScan(state_size, state is not None), ins, name)

    def gated_delta_net(self, q: NodeRef, k: NodeRef, v: NodeRef, g: NodeRef, beta: NodeRef,
                        state: NodeRef | None = None, name: str | None = None) -> Node:
        state_size = (self._shape_of(q, "gated_delta_net q") or (0,))[-1]
        ins = [q, k, v, g, beta] + ([state] if state is not None else [])
        return self.apply(ops.GatedDeltaNet(state_size, state is not None), ins, name)

    # -- signal / audio ---------------------------------------------------------------------------
    def fft(self, x: NodeRef, inverse: bool = False, norm: FftNorm | str = FftNorm.BACKWARD, axis: int = -1,
            name: str | None = None) -> Node:
        """Complex DFT along ``axis`` (c64, or the f32/f64 block layout on the last axis)."""
        return self.apply(ops.Fft(inverse, _enum(FftNorm, norm), axis), [x], name)  # type: ignore[arg-type]

    def rfft(self, x: NodeRef, norm: FftNorm | str = FftNorm.BACKWARD, axis: int = -1, onesided: bool = True,
             name: str | None = None) -> Node:
        """f32 signal -> its c64 one-sided (or full) spectrum along ``axis`` (torch.fft.rfft / fft)."""
        op = ops.Fft(False, _enum(FftNorm, norm), axis, real=True, onesided=onesided)  # type: ignore[arg-type]
        return self.apply(op, [x], name)

    def irfft(self, x: NodeRef, n: int = 0, norm: FftNorm | str = FftNorm.BACKWARD, axis: int = -1,
              name: str | None = None) -> Node:
        """c64 one-sided spectrum -> f32 signal of length ``n`` (0: 2(M-1)) along ``axis`` (torch's irfft)."""
        return self.apply(ops.Fft(True, _enum(FftNorm, norm), axis, real=True, n=n), [x], name)  # type: ignore

    def stft(self, x: NodeRef, window: NodeRef, n_fft: int, hop: int, center: bool = True,
             pad_mode: str = "reflect", onesided: bool = True, norm: FftNorm | str = FftNorm.BACKWARD,
             name: str | None = None) -> Node:
        """f32 [..., T] -> c64 [..., frames, bins] (torch.stft with its last two axes swapped)."""
        op = ops.Stft(n_fft, hop, center, pad_mode, onesided, _enum(FftNorm, norm))  # type: ignore[arg-type]
        return self.apply(op, [x, window], name)

    def view_as_real(self, x: NodeRef, name: str | None = None) -> Node:
        """c64 [...] -> f32 [..., 2] (re, im), the same bytes."""
        return self.apply(ops.ComplexView(False), [x], name)

    def view_as_complex(self, x: NodeRef, name: str | None = None) -> Node:
        """f32 [..., 2] (re, im) -> c64 [...], the same bytes."""
        return self.apply(ops.ComplexView(True), [x], name)

    def welch_peaks(self, spectrum: NodeRef, k: int, n_segments: int, name: str | None = None) -> Node:
        return self.apply(ops.WelchPeaks(k, n_segments), [spectrum], name)

    def log_mel(self, spectrum: NodeRef, filters: NodeRef, floor_axes: int = 1,
                name: str | None = None) -> Node:
        return self.apply(ops.LogMel(floor_axes), [spectrum, filters], name)

    def log_mel_backward(self, spectrum: NodeRef, filters: NodeRef, dy: NodeRef, floor_axes: int = 1,
                         name: str | None = None) -> Node:
        return self.apply(ops.LogMelBackward(floor_axes), [spectrum, filters, dy], name)

    # -- custom ops -------------------------------------------------------------------------------
    def custom(self, op_name: str, inputs: Sequence[NodeRef], attr_bytes: bytes = b"",
               name: str | None = None) -> Node:
        return self.apply(ops.Custom(op_name, bytes(attr_bytes)), list(inputs), name)

    def group_limited_gate(self, sig: NodeRef, route: NodeRef, n_group: int = 8, topk_group: int = 4,
                           top_k: int = 8, routed_scaling: float = 2.5, name: str | None = None) -> Node:
        """llada2.group_limited_gate; num_experts is taken from sig's last dim."""
        experts = (self._shape_of(sig, "group_limited_gate sig") or (0,))[-1]
        blob = GateParams(n_group, topk_group, top_k, routed_scaling, experts).pack()
        return self.custom(GROUP_LIMITED_GATE, [sig, route], blob, name)

    def umap_knn(self, pairwise: NodeRef, k: int, name: str | None = None) -> Node:
        return self.custom(UMAP_KNN, [pairwise], struct.pack("<I", k), name)

    # -- losses ------------------------------------------------------------------------------------
    def log_softmax(self, x: NodeRef, axis: int = -1, name: str | None = None) -> Node:
        return self.apply(ops.LogSoftmax(axis), [x], name)

    def cross_entropy(self, logits: NodeRef, targets: NodeRef, reduction: str = "mean",
                      name: str | None = None) -> Node:
        """torch.nn.functional.cross_entropy over the last axis of ``logits``: ``reduction`` "none"
        (per row), "sum", or "mean" over the targets in [0, C) (out-of-range targets are ignored)."""
        if reduction not in ("none", "sum", "mean"):
            raise GraphError(f"{name or 'cross_entropy'} (CrossEntropy): reduction must be none, sum or "
                             f"mean, got {reduction!r}")
        rows = self.apply(ops.CrossEntropy(), [logits, targets], name if reduction == "none" else None)
        if reduction == "none":
            return rows
        axes = tuple(range(rows.rank)) or (0,)
        flat = rows if rows.rank else self.apply(ops.Reshape((1,)), [rows])
        total = self.apply(ops.Reduce(ReduceOp.SUM, axes), [flat], name if reduction == "sum" else None)
        if reduction == "sum":
            return total
        count = self.apply(ops.TargetCount(self[logits].shape[-1], rows.dtype), [targets])
        return self.apply(ops.Binary(BinaryOp.DIV), [total, count], name)

    # -- backward ops -----------------------------------------------------------------------------
    def rms_norm_backward_input(self, x: NodeRef, gamma: NodeRef, dy: NodeRef, beta: NodeRef | None = None,
                                eps: float = 1e-6, name: str | None = None) -> Node:
        return self.apply(ops.RmsNormBackwardInput(eps), _norm_args(x, gamma, beta, dy), name)

    def rms_norm_backward_gamma(self, x: NodeRef, gamma: NodeRef, dy: NodeRef, beta: NodeRef | None = None,
                                eps: float = 1e-6, name: str | None = None) -> Node:
        return self.apply(ops.RmsNormBackwardGamma(eps), _norm_args(x, gamma, beta, dy), name)

    def rms_norm_backward_beta(self, x: NodeRef, gamma: NodeRef, dy: NodeRef, beta: NodeRef | None = None,
                               eps: float = 1e-6, name: str | None = None) -> Node:
        return self.apply(ops.RmsNormBackwardBeta(eps), _norm_args(x, gamma, beta, dy), name)

    def layer_norm_backward_input(self, x: NodeRef, gamma: NodeRef, dy: NodeRef, eps: float = 1e-5,
                                  name: str | None = None) -> Node:
        return self.apply(ops.LayerNormBackwardInput(eps), [x, gamma, dy], name)

    def layer_norm_backward_gamma(self, x: NodeRef, dy: NodeRef, eps: float = 1e-5,
                                  name: str | None = None) -> Node:
        return self.apply(ops.LayerNormBackwardGamma(eps), [x, dy], name)

    def rope_backward(self, dy: NodeRef, cos: NodeRef, sin: NodeRef, head_dim: int, n_rot: int = 0,
                      interleaved: bool = False, position_offset: int = 0, position: NodeRef | None = None,
                      name: str | None = None) -> Node:
        op = ops.RopeBackward(head_dim, n_rot, interleaved, position_offset)
        return self.apply(op, [dy, cos, sin] + ([position] if position is not None else []), name)

    def cumsum_backward(self, dy: NodeRef, axis: int = -1, exclusive: bool = False,
                        name: str | None = None) -> Node:
        return self.apply(ops.CumsumBackward(axis, exclusive), [dy], name)

    def gather_backward(self, dy: NodeRef, indices: NodeRef, axis_dim: int, axis: int = 0,
                        name: str | None = None) -> Node:
        return self.apply(ops.GatherBackward(axis_dim, axis), [dy, indices], name)

    def attention_backward(self, q: NodeRef, k: NodeRef, v: NodeRef, dy: NodeRef,
                           wrt: AttentionWrt | str, num_heads: int, head_dim: int,
                           num_kv_heads: int = 0,
                           mask_kind: MaskKind | str = MaskKind.NONE, mask: NodeRef | None = None,
                           score_scale: float | None = None, softcap: float | None = None, window: int = 0,
                           name: str | None = None, output: NodeRef | None = None) -> Node:
        """Gradient of ``attention(q, k, v, ...)`` wrt "query", "key" or "value" (or "all", "packed"),
        given dy; ``output``: the forward's output, from which the kernels take rowsum(dy * o)."""
        op = ops.AttentionBackward(num_heads, head_dim, _enum(AttentionWrt, wrt), num_kv_heads,  # type: ignore[arg-type]
                                     _enum(MaskKind, mask_kind), score_scale, softcap, window,  # type: ignore[arg-type]
                                     given_output=output is not None)
        extra = ([output] if output is not None else []) + ([mask] if mask is not None else [])
        return self.apply(op, [q, k, v, dy] + extra, name)

    def activation_backward(self, t: NodeRef, dy: NodeRef, fn: ActKind | str, of_output: bool = False,
                            name: str | None = None) -> Node:
        return self.apply(ops.ActivationBackward(_enum(ActKind, fn), of_output), [t, dy], name)  # type: ignore[arg-type]

    def cross_entropy_backward(self, logits: NodeRef, targets: NodeRef, dy: NodeRef,
                               name: str | None = None) -> Node:
        return self.apply(ops.CrossEntropyBackward(), [logits, targets, dy], name)

    # -- optimizer updates (in place) ---------------------------------------------------------------
    def sgd_step(self, param: NodeRef, grad: NodeRef, hyper: NodeRef, momentum_buffer: NodeRef | None = None,
                 scale: NodeRef | None = None, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False, name: str | None = None) -> Node:
        """torch.optim.SGD's update of ``param`` in place; a momentum buffer is needed iff momentum != 0."""
        state = [momentum_buffer] if momentum_buffer is not None else []
        op = ops.SgdStep(momentum, dampening, weight_decay, nesterov)
        return self.apply(op, [param, grad, *state, hyper] + ([scale] if scale is not None else []), name)

    def adam_step(self, param: NodeRef, grad: NodeRef, m: NodeRef, v: NodeRef, hyper: NodeRef,
                  scale: NodeRef | None = None, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8,
                  weight_decay: float = 0.0, decoupled: bool = False, name: str | None = None) -> Node:
        """torch.optim.Adam (AdamW with ``decoupled``) updating param, m and v in place."""
        op = ops.AdamStep(beta1, beta2, eps, weight_decay, decoupled)
        return self.apply(op, [param, grad, m, v, hyper] + ([scale] if scale is not None else []), name)

    def adam_step_group(self, quads: Sequence[Sequence[NodeRef]], hyper: NodeRef,
                        scale: NodeRef | None = None, beta1: float = 0.9, beta2: float = 0.999,
                        eps: float = 1e-8, weight_decay: float = 0.0, decoupled: bool = False,
                        name: str | None = None) -> Node:
        """adam_step over several (param, grad, m, v) at once (one dispatch per 8 on the GPU)."""
        op = ops.AdamStepGroup(beta1, beta2, eps, weight_decay, decoupled, len(quads))
        tensors = [t for quad in quads for t in quad]
        return self.apply(op, tensors + [hyper] + ([scale] if scale is not None else []), name)

    def accumulate_grad(self, acc: NodeRef, grad: NodeRef, hyper: NodeRef, name: str | None = None) -> Node:
        return self.apply(ops.AccumulateGrad(), [acc, grad, hyper], name)

    def grad_clip_scale(self, grads: Sequence[NodeRef], max_norm: float = 0.0, scale: float = 1.0,
                        name: str | None = None) -> Node:
        return self.apply(ops.GradClipScale(float(max_norm), float(scale)), list(grads), name)

    # -- fused element-wise regions ---------------------------------------------------------------
    def elementwise_region(self, inputs: Sequence[NodeRef], chain: Sequence[ChainStep],
                           shape: Iterable | None = None, scalar_input_mask: int = 0,
                           input_modulus: Sequence[int] = (),
                           prologue: RegionPrologue | str = RegionPrologue.NONE,
                           prologue_input: int = 0, name: str | None = None) -> Node:
        """A fused chain; ``shape`` defaults to the first input's shape."""
        out = as_shape(shape) if shape is not None else self._shape_of(inputs[0], "region input 0")
        op = ops.ElementwiseRegion(tuple(chain), out, scalar_input_mask, tuple(input_modulus),
                                     _enum(RegionPrologue, prologue), prologue_input)  # type: ignore[arg-type]
        return self.apply(op, list(inputs), name)

    def batch_elementwise_region(self, slices: Sequence[NodeRef], chain: Sequence[ChainStep],
                                 shape: Iterable | None = None, scalar_input_mask: int = 0,
                                 input_modulus: Sequence[int] = (),
                                 prologue: RegionPrologue | str = RegionPrologue.NONE,
                                 prologue_input: int = 0, name: str | None = None) -> Node:
        """The chain on each slice; ``shape`` defaults to the slices concatenated along axis 0."""
        if shape is None:
            first = self._shape_of(slices[0], "region slice 0")
            shape = (first[0] * len(slices),) + first[1:] if first else (len(slices),)
        kind = _enum(RegionPrologue, prologue)
        op = ops.BatchElementwiseRegion(tuple(chain), as_shape(shape), scalar_input_mask,
                                          tuple(input_modulus), kind, prologue_input)  # type: ignore[arg-type]
        return self.apply(op, list(slices), name)

    # -- Gaussian splatting -----------------------------------------------------------------------
    def gaussian_splat_render(self, scene: Sequence[NodeRef], width: int, height: int,
                              name: str | None = None, **attrs: float) -> Node:
        """scene = positions, log_scales, rotations, opacities, colors, sh_coeffs, meta."""
        return self.apply(ops.GaussianSplatRender(width, height, **attrs), list(scene), name)  # type: ignore[arg-type]

    def gaussian_splat_render_backward(self, scene: Sequence[NodeRef], d_loss_rgba: NodeRef, width: int,
                                       height: int, name: str | None = None, **attrs: float) -> Node:
        op = ops.GaussianSplatRenderBackward(width, height, **attrs)  # type: ignore[arg-type]
        return self.apply(op, [*scene, d_loss_rgba], name)

    def gaussian_splat_prepare(self, scene: Sequence[NodeRef], width: int, height: int, prep_size: int,
                               name: str | None = None, **attrs: float) -> Node:
        op = ops.GaussianSplatPrepare(width, height, prep_size, **attrs)  # type: ignore[arg-type]
        return self.apply(op, list(scene), name)

    def gaussian_splat_rasterize(self, prep: NodeRef, meta: NodeRef, width: int, height: int,
                                 name: str | None = None, **attrs: float) -> Node:
        return self.apply(ops.GaussianSplatRasterize(width, height, **attrs), [prep, meta], name)  # type: ignore[arg-type]


def _norm_args(x: NodeRef, gamma: NodeRef, beta: NodeRef | None, dy: NodeRef) -> list[NodeRef]:
    return [x, gamma] + ([beta] if beta is not None else []) + [dy]
