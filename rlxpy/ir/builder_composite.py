"""Builder methods for composite and control-flow ops (expanded by the unfuse pass)."""

from __future__ import annotations

from collections.abc import Sequence

from rlxpy.errors import GraphError
from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph_core import GraphCore, Node, NodeRef
from rlxpy.ir.ops.attention import LAYER_INPUTS_BIAS, LAYER_INPUTS_NO_BIAS
from rlxpy.ir.ops.base import ActKind


class BuilderComposite(GraphCore):
    """Builder methods of composites and control flow (graph.Graph composes it). Every method returns
    the new Node; shape rules live on the ops."""

    # -- control flow -------------------------------------------------------------------------
    def if_then_else(self, pred: NodeRef, then_branch: GraphCore, else_branch: GraphCore,
                     captures: Sequence[NodeRef] = (), name: str | None = None) -> Node:
        """``then_branch(*captures) if pred else else_branch(*captures)`` (both branches are graphs
        whose Inputs bind positionally to ``captures``)."""
        return self.apply(ops.If(then_branch, else_branch), [pred, *captures], name)

    def while_loop(self, state: Sequence[NodeRef], cond: GraphCore, body: GraphCore,
                   max_iterations: int | None = None, name: str | None = None) -> Node:
        """``while cond(*state): state[:k] = body(*state)``, at most ``max_iterations`` times."""
        return self.apply(ops.While(cond, body, max_iterations), list(state), name)

    # -- linear algebra -----------------------------------------------------------------------
    def dot_general(self, lhs: NodeRef, rhs: NodeRef, lhs_contracting: Sequence[int],
                    rhs_contracting: Sequence[int], lhs_batch: Sequence[int] = (),
                    rhs_batch: Sequence[int] = (), name: str | None = None) -> Node:
        op = ops.DotGeneral(tuple(lhs_contracting), tuple(rhs_contracting), tuple(lhs_batch),
                                  tuple(rhs_batch))
        return self.apply(op, [lhs, rhs], name)

    def lora_matmul(self, x: NodeRef, w: NodeRef, a: NodeRef, b: NodeRef, scale: float = 1.0,
                    name: str | None = None) -> Node:
        return self.apply(ops.LoraMatMul(float(scale)), [x, w, a, b], name)

    def swiglu(self, x: NodeRef, gate_first: bool = True, cast_to: DType | str | None = None,
               name: str | None = None) -> Node:
        to = DType.parse(cast_to) if cast_to is not None else None
        return self.apply(ops.FusedSwiGLU(gate_first, to), [x], name)

    # -- transformer blocks -------------------------------------------------------------------
    def attention_block(self, hidden: NodeRef, qkv_w: NodeRef, out_w: NodeRef, mask: NodeRef,
                        num_heads: int, head_dim: int, qkv_b: NodeRef | None = None,
                        out_b: NodeRef | None = None, cos: NodeRef | None = None, sin: NodeRef | None = None,
                        name: str | None = None) -> Node:
        """FusedAttentionBlock; give both biases or neither, both rope tables or neither."""
        if (qkv_b is None) != (out_b is None) or (cos is None) != (sin is None):
            raise GraphError(f"{name or 'attention_block'} (FusedAttentionBlock): give qkv_b and out_b "
                             "together, and cos and sin together")
        op = ops.FusedAttentionBlock(num_heads, head_dim, qkv_b is not None, cos is not None)
        extra = [t for t in (qkv_b, out_b, cos, sin) if t is not None]
        return self.apply(op, [hidden, qkv_w, out_w, mask, *extra], name)

    def transformer_layer(self, weights: dict[str, NodeRef], num_heads: int, head_dim: int,
                          eps1: float = 1e-12, eps2: float = 1e-12, activation: ActKind | str = ActKind.GELU,
                          name: str | None = None) -> Node:
        """FusedTransformerLayer from ``weights`` keyed by LAYER_INPUTS_BIAS names; the
        layer has biases iff ``weights`` has the four linear biases."""
        has_bias = "qkv_b" in weights
        act = activation if isinstance(activation, ActKind) else ActKind[activation.upper()]
        names = LAYER_INPUTS_BIAS if has_bias else LAYER_INPUTS_NO_BIAS
        missing = [n for n in names if n not in weights]
        unknown = [n for n in weights if n not in names]
        if missing or unknown:
            raise GraphError(f"{name or 'transformer_layer'} (FusedTransformerLayer): missing {missing}, "
                             f"unexpected {unknown} (has_bias={has_bias})")
        inner = self[weights["fc1_w"]].shape[-1]
        if not isinstance(inner, int):
            raise GraphError(f"{name or 'transformer_layer'} (FusedTransformerLayer): fc1_w needs a static "
                             f"intermediate size, got {inner}")
        op = ops.FusedTransformerLayer(num_heads, head_dim, inner, eps1, eps2, act, has_bias)
        return self.apply(op, [weights[n] for n in names], name)
