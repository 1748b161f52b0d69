"""Composite and control-flow ops (op-catalog §1.13, §5.4): expanded by ir/passes/unfuse.py into
primitives, so they never reach a backend. Each has a shape rule here and a direct numpy
reference in reference/composite.py, which is what the unfuse pass is checked against.

If and While hold their branches as sub-graphs (rlxpy.ir.graph.Graph). A sub-graph's Inputs are
bound positionally, in node order, to the op's inputs. Sub-graphs may not declare Params: an
outer Param is passed in as a capture instead, so the op's inputs are its whole data dependency
and ``graph.params()`` of the outer graph stays the complete list of weights to set.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlxpy.ir.dtype import DType
from rlxpy.ir.ops.core import ActKind, Op, TensorType, need
from rlxpy.ir.shape import Sym, broadcast_shapes, format_shape, is_static

if TYPE_CHECKING:
    from rlxpy.ir.graph import Graph


# -- sub-graphs ---------------------------------------------------------------------------------
class SubGraph:
    """How If/While hand a branch to serialize.py: it encodes any attribute value that has
    ``to_json_dict()`` as ``{"$graph": ...}`` and decodes that back into a Graph."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph

    def to_json_dict(self) -> dict[str, Any]:
        from rlxpy.ir.serialize import to_dict

        return to_dict(self.graph)

    def __repr__(self) -> str:
        outs = ", ".join(str(self.graph.nodes[o].type) for o in self.graph.outputs)
        return f"<graph {self.graph.name!r}: {len(self.graph.nodes)} nodes -> ({outs})>"


def _unwrap(value: Any) -> Any:
    return value.graph if isinstance(value, SubGraph) else value


class _SubGraphFields:
    """Mixed into If and While (not an Op itself, so it is not registered as one): sub-graph
    fields unwrap a SubGraph on construction, and attrs() wraps them for JSON."""

    _graph_fields: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for field in self._graph_fields:
            object.__setattr__(self, field, _unwrap(getattr(self, field)))

    def attrs(self) -> dict[str, Any]:
        values = super().attrs()  # type: ignore[misc]
        for field in self._graph_fields:
            values[field] = SubGraph(values[field])
        return values

    def subgraphs(self) -> dict[str, Graph]:
        return {field: getattr(self, field) for field in self._graph_fields}


def check_subgraph(graph: Any, what: str, bound: Sequence[TensorType],
                   outputs: int | None) -> list[TensorType]:
    """Check a branch against the types bound to its Inputs; return its output types.

    ``outputs`` is the required output count, or None for "at least one"."""
    from rlxpy.ir.graph import Graph

    need(isinstance(graph, Graph), f"{what} must be a Graph, got {type(graph).__name__}")
    params = [n.name for n in graph.params()]
    need(not params, f"{what} declares Params {params}: pass the outer Param as a capture input instead")
    inputs = graph.inputs()
    names = [n.op.name for n in inputs]
    need(len(set(names)) == len(names), f"{what} has duplicate Input names {names}")
    need(len(inputs) == len(bound), f"{what} has {len(inputs)} Inputs, but {len(bound)} values are bound to "
         "them (positionally, in node order)")
    for node, have in zip(inputs, bound):
        need(node.type == have,
             f"{what} Input {node.name!r} is {node.type}, but the value bound to it is {have}")
    count = len(graph.outputs)
    if outputs is None:
        need(count >= 1, f"{what} has no outputs: mark one with graph.output(node)")
    else:
        need(count == outputs, f"{what} has {count} outputs, needs exactly {outputs}")
    return [graph.nodes[o].type for o in graph.outputs]


# -- control flow -------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class If(_SubGraphFields, Op):
    """``then_branch(*captures) if pred else else_branch(*captures)``; inputs ``[pred, *captures]``.

    Each branch has exactly one output, and both outputs share one type. ``pred`` is truthy where
    it is != 0 (NaN counts as true, like Where); a one-element pred (any rank) picks a branch, a
    larger one selects element-wise (it must broadcast to the output's shape). Unfused into both branches
    inlined + ``Where(pred, then, else)``: both always run. Like ``torch.cond`` / ``lax.cond``
    with a scalar pred."""

    then_branch: Graph
    else_branch: Graph
    arity = (1, None)
    composite = True
    _graph_fields = ("then_branch", "else_branch")

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        pred, captures = ins[0], list(ins[1:])
        (then_out,) = check_subgraph(self.then_branch, "then_branch", captures, 1)
        (else_out,) = check_subgraph(self.else_branch, "else_branch", captures, 1)
        need(then_out == else_out, f"branch outputs differ: then {then_out}, else {else_out}")
        try:
            joint = broadcast_shapes(pred.shape, then_out.shape)
        except ValueError:
            joint = None
        single = is_static(pred.shape) and math.prod(pred.shape) == 1  # type: ignore[arg-type]
        need(single or joint == tuple(then_out.shape),
             f"pred {pred} must hold one element or broadcast to the branch output "
             f"{format_shape(then_out.shape)}")
        return then_out


@dataclass(frozen=True, eq=False)
class While(_SubGraphFields, Op):
    """``while cond(*state): state[:k] = body(*state)``, at most ``max_iterations`` times; returns
    ``state[0]``. Inputs are the initial state; the body's k outputs replace the first k of them
    each iteration (same types) and the rest stay fixed (captures, e.g. weights).

    ``cond`` has one output of one element, truthy where != 0 (NaN is true). ``max_iterations``
    is required: the unfuse pass unrolls the loop that many times with an "active" flag, so the
    cost is always max_iterations bodies, and the state is frozen once cond turns false (the
    result equals ``torch._higher_order_ops.while_loop`` / ``lax.while_loop`` when the loop ends
    within the bound, and the state after max_iterations steps otherwise)."""

    cond: Graph
    body: Graph
    max_iterations: int | None = None
    arity = (1, None)
    composite = True
    _graph_fields = ("cond", "body")

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        need(self.max_iterations is not None,
             "max_iterations is required: the unfuse pass unrolls the loop that many times")
        need(isinstance(self.max_iterations, int) and self.max_iterations >= 0,  # type: ignore[operator]
             f"max_iterations must be an int >= 0, got {self.max_iterations!r}")
        state = list(ins)
        (pred,) = check_subgraph(self.cond, "cond", state, 1)
        need(is_static(pred.shape) and math.prod(pred.shape) == 1,  # type: ignore[arg-type]
             f"cond's output must hold one element, got {pred}")
        outs = check_subgraph(self.body, "body", state, None)
        need(len(outs) <= len(state),
             f"body has {len(outs)} outputs but the loop state has {len(state)} values")
        for i, (new, old) in enumerate(zip(outs, state)):
            need(new == old, f"body output {i} is {new}, but the state value it replaces is {old}")
        return state[0]


# -- linear algebra -----------------------------------------------------------------------------
def _check_dims(dims: Sequence[int], rank: int, what: str) -> None:
    need(len(set(dims)) == len(dims) and all(0 <= d < rank for d in dims),
         f"{what} {tuple(dims)} must be distinct axes in [0, {rank})")


@dataclass(frozen=True)
class DotGeneral(Op):
    """XLA's dot_general: contract ``lhs_contracting`` with ``rhs_contracting`` pairwise, with
    ``lhs_batch``/``rhs_batch`` as shared batch axes. Output = batch dims (lhs order), then lhs
    free dims, then rhs free dims, each in their original order; like ``numpy.einsum`` /
    ``torch.tensordot`` (with batch axes) and ``jax.lax.dot_general``. Axes must be non-negative."""

    lhs_contracting: tuple[int, ...]
    rhs_contracting: tuple[int, ...]
    lhs_batch: tuple[int, ...] = ()
    rhs_batch: tuple[int, ...] = ()
    arity = (2, 2)
    composite = True

    def __post_init__(self) -> None:  # JSON and callers may hand lists: keep the op hashable
        for field in ("lhs_contracting", "rhs_contracting", "lhs_batch", "rhs_batch"):
            object.__setattr__(self, field, tuple(int(d) for d in getattr(self, field)))

    def free_dims(self, lhs_rank: int, rhs_rank: int) -> tuple[list[int], list[int]]:
        lhs_used = set(self.lhs_contracting) | set(self.lhs_batch)
        rhs_used = set(self.rhs_contracting) | set(self.rhs_batch)
        lhs_free = [d for d in range(lhs_rank) if d not in lhs_used]
        return lhs_free, [d for d in range(rhs_rank) if d not in rhs_used]

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        lhs, rhs = ins
        need(lhs.dtype == rhs.dtype, f"lhs {lhs} and rhs {rhs} dtypes differ")
        need(len(self.lhs_contracting) == len(self.rhs_contracting),
             f"lhs_contracting {self.lhs_contracting} and rhs_contracting {self.rhs_contracting} "
             "differ in length")
        need(len(self.lhs_batch) == len(self.rhs_batch),
             f"lhs_batch {self.lhs_batch} and rhs_batch {self.rhs_batch} differ in length")
        _check_dims(self.lhs_contracting + self.lhs_batch, lhs.rank, "lhs contracting + batch axes")
        _check_dims(self.rhs_contracting + self.rhs_batch, rhs.rank, "rhs contracting + batch axes")
        for kind, lhs_dims, rhs_dims in (("contracting", self.lhs_contracting, self.rhs_contracting),
                                         ("batch", self.lhs_batch, self.rhs_batch)):
            for a, b in zip(lhs_dims, rhs_dims):
                need(lhs.shape[a] == rhs.shape[b], f"{kind} sizes differ: lhs axis {a} is {lhs.shape[a]}, "
                     f"rhs axis {b} is {rhs.shape[b]} ({lhs} x {rhs})")
        lhs_free, rhs_free = self.free_dims(lhs.rank, rhs.rank)
        shape = ([lhs.shape[d] for d in self.lhs_batch] + [lhs.shape[d] for d in lhs_free]
                 + [rhs.shape[d] for d in rhs_free])
        return TensorType(tuple(shape), lhs.dtype)


@dataclass(frozen=True)
class LoraMatMul(Op):
    """``x @ w + scale * ((x @ a) @ b)``; inputs x [..., M, K], w [K, N], a [K, R], b [R, N]
    (peft's LoRA Linear with scale = lora_alpha / r, without dropout)."""

    scale: float = 1.0
    arity = (4, 4)
    composite = True

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        x, w, a, b = ins
        need(x.rank >= 2 and w.rank == a.rank == b.rank == 2,
             f"lora wants x [..., M, K], w [K, N], a [K, R], b [R, N]; got {x}, {w}, {a}, {b}")
        k, n, r = x.shape[-1], w.shape[1], a.shape[1]
        need(w.shape[0] == k and a.shape[0] == k and b.shape == (r, n),
             f"lora shapes disagree: x {x}, w {w}, a {a}, b {b} (want w [K, N], a [K, R], b [R, N])")
        need(len({x.dtype, w.dtype, a.dtype, b.dtype}) == 1 and x.dtype.is_float,
             f"lora inputs must share one float dtype: {x}, {w}, {a}, {b}")
        return TensorType(tuple(x.shape[:-1]) + (n,), x.dtype)


@dataclass(frozen=True)
class FusedSwiGLU(Op):
    """Split x [..., 2N] into halves; ``up * silu(gate)`` -> [..., N], then Cast to ``cast_to``.

    ``gate_first=True``: gate = first half, up = second (ggml_swiglu, Phi-3's gate_up_proj);
    ``gate_first=False``: up = first half, gate = second. The original ignored the flag and always
    took the first half as "up"; rlxpy honours it (pass gate_first=False for the old result)."""

    gate_first: bool = True
    cast_to: DType | None = None
    composite = True

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        (x,) = ins
        need(x.rank >= 1 and x.dtype.is_float, f"swiglu needs a float tensor of rank >= 1, got {x}")
        last = x.shape[-1]
        need(isinstance(last, int) and last % 2 == 0, f"swiglu's last dim must be static and even, got {x}")
        return TensorType(tuple(x.shape[:-1]) + (last // 2,), self.cast_to or x.dtype)  # type: ignore[operator]


# -- transformer blocks -------------------------------------------------------------------------
def _check_mask(mask: TensorType, batch: Any, heads: int, seq: Any) -> None:
    allowed = [(batch, seq), (batch, seq, seq), (batch, heads, seq, seq)]
    need(tuple(mask.shape) in allowed,
         f"mask {mask} must be [B, S], [B, S, S] or [B, H, S, S] = "
         + " or ".join(format_shape(s) for s in allowed))


def _check_attention_weights(ins: Sequence[TensorType], heads: int, head_dim: int) -> tuple[Any, Any, Any]:
    """hidden [B, S, E], qkv_w [E, 3·H·D], out_w [H·D, E]; returns (B, S, E)."""
    hidden, qkv_w, out_w = ins
    need(heads >= 1 and head_dim >= 1, f"num_heads {heads} and head_dim {head_dim} must be >= 1")
    need(hidden.rank == 3 and hidden.dtype.is_float, f"hidden must be a float [B, S, E], got {hidden}")
    batch, seq, embed = hidden.shape
    width = heads * head_dim
    need(qkv_w.shape == (embed, 3 * width), f"qkv_w must be [{embed}, {3 * width}], got {qkv_w}")
    need(out_w.shape == (width, embed), f"out_w must be [{width}, {embed}], got {out_w}")
    return batch, seq, embed


def _check_vector(t: TensorType, size: Any, what: str) -> None:
    need(t.shape == (size,), f"{what} must be [{size}], got {t}")


@dataclass(frozen=True)
class FusedAttentionBlock(Op):
    """Multi-head self-attention block with a binary keep-mask (entries < 0.5 masked, as
    Attention CUSTOM). Inputs: ``hidden [B,S,E], qkv_w [E,3·H·D], out_w [H·D,E], mask``, then
    ``qkv_b [3·H·D], out_b [E]`` if has_bias, then ``cos, sin [P, D/2]`` if has_rope (P >= S).

    q|k|v = hidden @ qkv_w (+ qkv_b), split on the last axis; with RoPE q and k rotate per head
    (rotate-half / NeoX, positions 0..S-1, all D dims); per head ``softmax(q kᵀ / sqrt(D)) v``;
    heads concatenated @ out_w (+ out_b). Matches transformers' BertSelfAttention + BertSelfOutput
    dense (no LayerNorm) with a keep-mask, and GPT-NeoX attention with rotary_pct = 1."""

    num_heads: int
    head_dim: int
    has_bias: bool = False
    has_rope: bool = False
    arity = (4, 8)
    composite = True

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        want = 4 + 2 * self.has_bias + 2 * self.has_rope
        need(len(ins) == want, f"takes {want} inputs (has_bias={self.has_bias}, has_rope={self.has_rope}): "
             "hidden, qkv_w, out_w, mask" + (", qkv_b, out_b" if self.has_bias else "")
             + (", cos, sin" if self.has_rope else ""))
        hidden, qkv_w, out_w, mask = ins[:4]
        batch, seq, embed = _check_attention_weights([hidden, qkv_w, out_w], self.num_heads, self.head_dim)
        _check_mask(mask, batch, self.num_heads, seq)
        rest = list(ins[4:])
        if self.has_bias:
            _check_vector(rest.pop(0), 3 * self.num_heads * self.head_dim, "qkv_b")
            _check_vector(rest.pop(0), embed, "out_b")
        if self.has_rope:
            cos, sin = rest
            need(self.head_dim % 2 == 0, f"rope needs an even head_dim, got {self.head_dim}")
            need(cos.shape == sin.shape and cos.rank == 2 and cos.shape[1] == self.head_dim // 2,
                 f"cos/sin must be [max_pos, {self.head_dim // 2}], got {cos} and {sin}")
            positions = cos.shape[0]
            need(isinstance(positions, Sym) or isinstance(seq, Sym) or positions >= seq,
                 f"cos/sin have {positions} positions, the sequence has {seq}")
        return hidden


# Input order of FusedTransformerLayer. Without bias the four linear biases are dropped and the
# LayerNorm betas stay (BERT's LayerNorms are affine whatever its linears do): 10 inputs, as the
# IR declares. The original's expansion assumed 8 (no betas) and disagreed with its own IR.
LAYER_INPUTS_BIAS = ("hidden", "qkv_w", "qkv_b", "out_w", "out_b", "ln1_g", "ln1_b", "fc1_w", "fc1_b",
                     "fc2_w", "fc2_b", "ln2_g", "ln2_b", "mask")
LAYER_INPUTS_NO_BIAS = tuple(n for n in LAYER_INPUTS_BIAS if n not in ("qkv_b", "out_b", "fc1_b", "fc2_b"))


@dataclass(frozen=True)
class FusedTransformerLayer(Op):
    """BERT post-norm encoder layer (transformers' BertLayer, eval mode):
    ``h1 = LayerNorm(hidden + Attn(hidden), eps1)``; ``out = LayerNorm(h1 + act(h1 @ fc1_w + fc1_b)
    @ fc2_w + fc2_b, eps2)``, where Attn is FusedAttentionBlock without RoPE (keep-mask < 0.5).
    Inputs: LAYER_INPUTS_BIAS (14) if has_bias, else LAYER_INPUTS_NO_BIAS (10: the linear biases
    dropped, the LayerNorm betas kept). ``activation`` defaults to exact-erf GELU (BERT's "gelu")."""

    num_heads: int
    head_dim: int
    intermediate_size: int
    eps1: float = 1e-12
    eps2: float = 1e-12
    activation: ActKind = ActKind.GELU
    has_bias: bool = True
    arity = (10, 14)
    composite = True

    def input_names(self) -> tuple[str, ...]:
        return LAYER_INPUTS_BIAS if self.has_bias else LAYER_INPUTS_NO_BIAS

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        names = self.input_names()
        need(len(ins) == len(names),
             f"takes {len(names)} inputs (has_bias={self.has_bias}): {', '.join(names)}")
        t = dict(zip(names, ins))
        batch, seq, embed = _check_attention_weights([t["hidden"], t["qkv_w"], t["out_w"]], self.num_heads,
                                                     self.head_dim)
        _check_mask(t["mask"], batch, self.num_heads, seq)
        inner = self.intermediate_size
        need(t["fc1_w"].shape == (embed, inner), f"fc1_w must be [{embed}, {inner}], got {t['fc1_w']}")
        need(t["fc2_w"].shape == (inner, embed), f"fc2_w must be [{inner}, {embed}], got {t['fc2_w']}")
        sizes = {"qkv_b": 3 * self.num_heads * self.head_dim, "out_b": embed, "fc1_b": inner, "fc2_b": embed,
                 "ln1_g": embed, "ln1_b": embed, "ln2_g": embed, "ln2_b": embed}
        for name, size in sizes.items():
            if name in t:
                _check_vector(t[name], size, name)
        return t["hidden"]


COMPOSITE_OPS: tuple[type[Op], ...] = (If, While, DotGeneral, LoraMatMul, FusedSwiGLU, FusedAttentionBlock,
                                       FusedTransformerLayer)


def subgraphs_of(op: Op) -> dict[str, Graph]:
    """The sub-graphs an op holds (empty for ops without control flow)."""
    return op.subgraphs() if isinstance(op, _SubGraphFields) else {}


__all__ = ["COMPOSITE_OPS", "DotGeneral", "FusedAttentionBlock", "FusedSwiGLU", "FusedTransformerLayer", "If",
           "LoraMatMul", "SubGraph", "While", "check_subgraph", "subgraphs_of"]
