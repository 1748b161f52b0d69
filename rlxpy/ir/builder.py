"""Builder methods for the core op families: one line each, the shape rules live on the ops."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph_core import GraphCore, Node, NodeRef
from rlxpy.ir.ops.base import (
    ActKind,
    BinaryOp,
    CmpOp,
    MaskKind,
    ReduceOp,
    ResizeCoord,
    ResizeMode,
    enum_value,
)
from rlxpy.ir.shape import as_shape


class Builder(GraphCore):
    """Builder methods of the core families (graph.Graph composes it). Every method returns the new Node."""

    def _scalar(self, value: NodeRef | float | int, like: NodeRef) -> NodeRef:
        """Wrap a Python number as a constant of ``like``'s dtype."""
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return self.constant(value, dtype=self[like].dtype)
        return value  # type: ignore[return-value]

    # -- views and casts ----------------------------------------------------------------------
    def reshape(self, x: NodeRef, shape: Iterable, name: str | None = None) -> Node:
        return self.apply(ops.Reshape(as_shape_allow_minus(shape)), [x], name)

    def cast(self, x: NodeRef, to: DType | str, name: str | None = None) -> Node:
        return self.apply(ops.Cast(DType.parse(to)), [x], name)

    def copy(self, x: NodeRef, name: str | None = None) -> Node:
        return self.apply(ops.Copy(), [x], name)

    # -- element-wise -----------------------------------------------------------------------
    def activation(self, x: NodeRef, fn: ActKind | str, name: str | None = None) -> Node:
        kind = enum_value(ActKind, fn)
        return self.apply(ops.Activation(kind), [x], name)

    def relu(self, x: NodeRef, name: str | None = None) -> Node:
        return self.activation(x, ActKind.RELU, name)

    def gelu(self, x: NodeRef, approximate: bool = False, name: str | None = None) -> Node:
        return self.activation(x, ActKind.GELU_APPROX if approximate else ActKind.GELU, name)

    def silu(self, x: NodeRef, name: str | None = None) -> Node:
        return self.activation(x, ActKind.SILU, name)

    def sigmoid(self, x: NodeRef, name: str | None = None) -> Node:
        return self.activation(x, ActKind.SIGMOID, name)

    def tanh(self, x: NodeRef, name: str | None = None) -> Node:
        return self.activation(x, ActKind.TANH, name)

    def exp(self, x: NodeRef, name: str | None = None) -> Node:
        return self.activation(x, ActKind.EXP, name)

    def binary(self, a: NodeRef, b: NodeRef | float, op: BinaryOp | str, name: str | None = None) -> Node:
        kind = enum_value(BinaryOp, op)
        return self.apply(ops.Binary(kind), [a, self._scalar(b, a)], name)

    def add(self, a: NodeRef, b: NodeRef | float, name: str | None = None) -> Node:
        return self.binary(a, b, BinaryOp.ADD, name)

    def sub(self, a: NodeRef, b: NodeRef | float, name: str | None = None) -> Node:
        return self.binary(a, b, BinaryOp.SUB, name)

    def mul(self, a: NodeRef, b: NodeRef | float, name: str | None = None) -> Node:
        return self.binary(a, b, BinaryOp.MUL, name)

    def div(self, a: NodeRef, b: NodeRef | float, name: str | None = None) -> Node:
        return self.binary(a, b, BinaryOp.DIV, name)

    def maximum(self, a: NodeRef, b: NodeRef | float, name: str | None = None) -> Node:
        return self.binary(a, b, BinaryOp.MAX, name)

    def minimum(self, a: NodeRef, b: NodeRef | float, name: str | None = None) -> Node:
        return self.binary(a, b, BinaryOp.MIN, name)

    def pow(self, a: NodeRef, b: NodeRef | float, name: str | None = None) -> Node:
        return self.binary(a, b, BinaryOp.POW, name)

    def compare(self, a: NodeRef, b: NodeRef | float, op: CmpOp | str, name: str | None = None) -> Node:
        kind = enum_value(CmpOp, op)
        return self.apply(ops.Compare(kind), [a, self._scalar(b, a)], name)

    def where(self, cond: NodeRef, on_true: NodeRef, on_false: NodeRef, name: str | None = None) -> Node:
        return self.apply(ops.Where(), [cond, on_true, on_false], name)

    # -- linear algebra -----------------------------------------------------------------------
    def matmul(self, a: NodeRef, b: NodeRef, name: str | None = None) -> Node:
        return self.apply(ops.MatMul(), [a, b], name)

    def linear(
        self,
        x: NodeRef,
        w: NodeRef,
        bias: NodeRef,
        activation: ActKind | str | None = None,
        name: str | None = None,
    ) -> Node:
        """``act(x @ w + bias)`` as one FusedMatMulBiasAct."""
        act = enum_value(ActKind, activation) if activation is not None else None
        return self.apply(ops.FusedMatMulBiasAct(act), [x, w, bias], name)

    def grouped_matmul(self, x: NodeRef, w: NodeRef, expert_idx: NodeRef, name: str | None = None) -> Node:
        return self.apply(ops.GroupedMatMul(), [x, w, expert_idx], name)

    def dequant_matmul_gguf(
        self, x: NodeRef, w: NodeRef, qtype: str, n: int, k: int, name: str | None = None
    ) -> Node:
        return self.apply(ops.DequantMatMulGguf(qtype, n, k), [x, w], name)

    def dequant_grouped_matmul(
        self, x: NodeRef, w: NodeRef, expert_idx: NodeRef, qtype: str, n: int, k: int, name: str | None = None
    ) -> Node:
        return self.apply(ops.DequantGroupedMatMul(qtype, n, k), [x, w, expert_idx], name)

    def gather_gguf(self, table: NodeRef, idx: NodeRef, qtype: str, k: int, name: str | None = None) -> Node:
        return self.apply(ops.GatherGguf(qtype, k), [table, idx], name)

    def dequant_matmul(
        self,
        x: NodeRef,
        w_q: NodeRef,
        scale: NodeRef | None,
        zp: NodeRef | None,
        scheme: str,
        k: int,
        n: int,
        block_size: int = 32,
        name: str | None = None,
    ) -> Node:
        extra = [t for t in (scale, zp) if t is not None]
        return self.apply(ops.DequantMatMul(scheme, k, n, block_size), [x, w_q, *extra], name)

    # -- normalisation ------------------------------------------------------------------------
    def layer_norm(
        self,
        x: NodeRef,
        gamma: NodeRef,
        beta: NodeRef | None = None,
        eps: float = 1e-5,
        name: str | None = None,
    ) -> Node:
        return self.apply(ops.LayerNorm(eps), [x, gamma] + ([beta] if beta is not None else []), name)

    def rms_norm(
        self,
        x: NodeRef,
        gamma: NodeRef,
        beta: NodeRef | None = None,
        eps: float = 1e-6,
        name: str | None = None,
    ) -> Node:
        return self.apply(ops.RmsNorm(eps), [x, gamma] + ([beta] if beta is not None else []), name)

    def residual_layer_norm(
        self,
        x: NodeRef,
        residual: NodeRef,
        gamma: NodeRef,
        beta: NodeRef,
        bias: NodeRef | None = None,
        eps: float = 1e-5,
        name: str | None = None,
    ) -> Node:
        middle = [bias] if bias is not None else []
        return self.apply(
            ops.FusedResidualLN(bias is not None, eps), [x, residual, *middle, gamma, beta], name
        )

    def residual_rms_norm(
        self,
        x: NodeRef,
        residual: NodeRef,
        gamma: NodeRef,
        beta: NodeRef,
        bias: NodeRef | None = None,
        eps: float = 1e-6,
        name: str | None = None,
    ) -> Node:
        middle = [bias] if bias is not None else []
        return self.apply(
            ops.FusedResidualRmsNorm(bias is not None, eps), [x, residual, *middle, gamma, beta], name
        )

    def group_norm(self, x: NodeRef, groups: int, gamma: NodeRef, beta: NodeRef | None = None,
                   eps: float = 1e-5, name: str | None = None) -> Node:
        """torch.nn.functional.group_norm(x, groups, gamma, beta, eps); groups = C is instance norm."""
        return self.apply(ops.GroupNorm(groups, eps), [x, gamma] + ([beta] if beta is not None else []), name)

    def batch_norm(self, x: NodeRef, mean: NodeRef, var: NodeRef, gamma: NodeRef, beta: NodeRef,
                   eps: float = 1e-5, name: str | None = None) -> Node:
        """torch.nn.functional.batch_norm(x, mean, var, gamma, beta, training=False, eps=eps)."""
        return self.apply(ops.BatchNorm(eps), [x, mean, var, gamma, beta], name)

    # -- reductions, scans, selection ---------------------------------------------------------
    def reduce(
        self,
        x: NodeRef,
        op: ReduceOp | str,
        axes: int | Sequence[int],
        keep_dim: bool = False,
        name: str | None = None,
    ) -> Node:
        kind = enum_value(ReduceOp, op)
        axes_t = (axes,) if isinstance(axes, int) else tuple(axes)
        return self.apply(ops.Reduce(kind, axes_t, keep_dim), [x], name)

    def sum(
        self, x: NodeRef, axes: int | Sequence[int], keep_dim: bool = False, name: str | None = None
    ) -> Node:
        return self.reduce(x, ReduceOp.SUM, axes, keep_dim, name)

    def mean(
        self, x: NodeRef, axes: int | Sequence[int], keep_dim: bool = False, name: str | None = None
    ) -> Node:
        return self.reduce(x, ReduceOp.MEAN, axes, keep_dim, name)

    def softmax(self, x: NodeRef, axis: int = -1, name: str | None = None) -> Node:
        return self.apply(ops.Softmax(axis), [x], name)

    def cumsum(self, x: NodeRef, axis: int = -1, exclusive: bool = False, name: str | None = None) -> Node:
        return self.apply(ops.Cumsum(axis, exclusive), [x], name)

    def topk(self, x: NodeRef, k: int, name: str | None = None) -> Node:
        return self.apply(ops.TopK(k), [x], name)

    def argmax(self, x: NodeRef, name: str | None = None) -> Node:
        return self.apply(ops.Argmax(), [x], name)

    def sample(
        self,
        logits: NodeRef,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
        seed_input: NodeRef | None = None,
        name: str | None = None,
    ) -> Node:
        ins = [logits] + ([seed_input] if seed_input is not None else [])
        return self.apply(ops.Sample(temperature, top_k, top_p, seed), ins, name)

    def sample_per_row(self, logits: NodeRef, settings: NodeRef, seeds: NodeRef,
                       name: str | None = None) -> Node:
        """One token per row of logits [R, V], row r sampled with settings[r] = (temperature, top_k,
        top_p) and seed seeds[r] (ops.Sample with per_row)."""
        return self.apply(ops.Sample(per_row=True), [logits, settings, seeds], name)

    # -- data movement ------------------------------------------------------------------------
    def transpose(self, x: NodeRef, perm: Sequence[int], name: str | None = None) -> Node:
        return self.apply(ops.Transpose(tuple(perm)), [x], name)

    def narrow(self, x: NodeRef, axis: int, start: int, length: int, name: str | None = None) -> Node:
        return self.apply(ops.Narrow(axis, start, length), [x], name)

    def concat(self, xs: Sequence[NodeRef], axis: int, name: str | None = None) -> Node:
        return self.apply(ops.Concat(axis), list(xs), name)

    def expand(self, x: NodeRef, shape: Iterable, name: str | None = None) -> Node:
        return self.apply(ops.Expand(as_shape(shape)), [x], name)

    def gather(self, table: NodeRef, indices: NodeRef, axis: int = 0, name: str | None = None) -> Node:
        return self.apply(ops.Gather(axis), [table, indices], name)

    def scatter_add(self, updates: NodeRef, indices: NodeRef, out_dim: int, name: str | None = None) -> Node:
        return self.apply(ops.ScatterAdd(out_dim), [updates, indices], name)

    def resize(self, x: NodeRef, sizes: Sequence[int], mode: ResizeMode | str = ResizeMode.NEAREST_FLOOR,
               coord: ResizeCoord | str = ResizeCoord.ASYMMETRIC, steps: Sequence[float] = (),
               name: str | None = None) -> Node:
        """Resample the trailing len(sizes) dims of x to ``sizes`` (ops.Resize)."""
        op = ops.Resize(tuple(int(d) for d in sizes), enum_value(ResizeMode, mode),  # type: ignore[arg-type]
                        enum_value(ResizeCoord, coord), tuple(float(v) for v in steps))  # type: ignore[arg-type]
        return self.apply(op, [x], name)

    # -- attention ----------------------------------------------------------------------------
    def attention(
        self,
        q: NodeRef,
        k: NodeRef,
        v: NodeRef,
        num_heads: int,
        head_dim: int,
        num_kv_heads: int = 0,
        mask_kind: MaskKind | str = MaskKind.NONE,
        mask: NodeRef | None = None,
        score_scale: float | None = None,
        softcap: float | None = None,
        window: int = 0,
        kv_len: NodeRef | None = None,
        name: str | None = None,
    ) -> Node:
        """``kv_len``: a pos i32[1] tensor; keys [0, pos + S_q) are attended (KV-cache decoding)."""
        kind = enum_value(MaskKind, mask_kind)
        op = ops.Attention(
            num_heads, head_dim, num_kv_heads, kind, score_scale, softcap, window, kv_len is not None
        )
        extra = ([mask] if mask is not None else []) + ([kv_len] if kv_len is not None else [])
        return self.apply(op, [q, k, v, *extra], name)

    def cache_write(self, cache: NodeRef, rows: NodeRef, pos: NodeRef, name: str | None = None) -> Node:
        return self.apply(ops.CacheWrite(), [cache, rows, pos], name)

    def rope_kv_append(
        self,
        qkv: NodeRef,
        k_cache: NodeRef,
        v_cache: NodeRef,
        cos: NodeRef,
        sin: NodeRef,
        pos: NodeRef,
        head_dim: int,
        q_width: int,
        kv_width: int,
        n_rot: int = 0,
        interleaved: bool = False,
        name: str | None = None,
    ) -> Node:
        op = ops.RopeKvAppend(head_dim, q_width, kv_width, n_rot, interleaved)
        return self.apply(op, [qkv, k_cache, v_cache, cos, sin, pos], name)

    def rope(
        self,
        x: NodeRef,
        cos: NodeRef,
        sin: NodeRef,
        head_dim: int,
        n_rot: int = 0,
        interleaved: bool = False,
        position_offset: int = 0,
        position: NodeRef | None = None,
        name: str | None = None,
    ) -> Node:
        op = ops.Rope(head_dim, n_rot, interleaved, position_offset)
        return self.apply(op, [x, cos, sin] + ([position] if position is not None else []), name)


def as_shape_allow_minus(shape: Iterable) -> tuple:
    """Like as_shape, but keeps -1 (reshape's inferred dim)."""
    return tuple(-1 if d == -1 else as_shape([d])[0] for d in shape)
