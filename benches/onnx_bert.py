"""A BertModel (all-MiniLM-L6-v2 layout) written directly as an ONNX graph, in two forms.

``standard``: the form ``torch.onnx.export`` writes — int64 ids and mask, a Gather on the ids,
3-D MatMul + Add linears, LayerNorm as ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add and
GELU as ``x * 0.5 * (1 + Erf(x / sqrt2))``.

``portable``: the same weights and the same math in the ops wonnx 0.5.1 computes correctly:

* ids and mask are float inputs; the ids go through ``Cast(to=INT32)`` before the Gather
  (wonnx's Python binding hands every input to the runtime as f32 values, so an int64 input
  arrives as the bit patterns of floats and the Gather reads wrong rows);
* every linear is a rank-2 MatMul + Add (wonnx has no 3-D x 2-D MatMul);
* the variance in LayerNorm is ``ReduceMean(d * d)`` (wonnx's Pow is WGSL ``pow``, NaN for a
  negative base);
* erf, which wonnx 0.5.1 lacks, is Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7, below f32's
  resolution of ``1 + erf``), its sign taken as ``z / (|z| + 1e-30)`` (wonnx has Sign, rlxpy not).

Both forms end in ``last_hidden_state`` [B, S, H] or in sentence-transformers' pooled embedding
(mean over the kept tokens, then L2 normalisation) [B, H]. Shapes are static: one file per
(batch, sequence) pair. Weights are ``rlxpy.models.bert.bert_params`` names (linears [in, out]).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

FORMS = ("portable", "standard")
OUTPUTS = ("pooled", "hidden")
OPSET = 13

# Abramowitz & Stegun 7.1.26: erf(z) = 1 - t * (a1 + t*(a2 + t*(a3 + t*(a4 + t*a5)))) * exp(-z^2),
# t = 1 / (1 + p*z) for z >= 0
ERF_P = 0.3275911
ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


class _Graph:
    def __init__(self) -> None:
        import onnx

        self.onnx = onnx
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.count = 0
        self.consts: dict[tuple, str] = {}

    def init(self, name: str, value: np.ndarray) -> str:
        self.inits.append(self.onnx.numpy_helper.from_array(np.array(value, order="C"), name))
        return name

    def const(self, value: Any, dtype: Any = np.float32) -> str:
        array = np.asarray(value, dtype)
        key = (array.dtype.str, array.shape, array.tobytes())
        if key not in self.consts:
            self.consts[key] = self.init(f"const_{len(self.consts)}", array)
        return self.consts[key]

    def op(self, op_type: str, *inputs: str, out: str | None = None, **attrs: Any) -> str:
        self.count += 1
        name = out or f"{op_type.lower()}_{self.count}"
        self.nodes.append(self.onnx.helper.make_node(op_type, list(inputs), [name], name=f"n{self.count}",
                                                     **attrs))
        return name


def bert_onnx(cfg: Any, params: dict[str, np.ndarray], batch: int, seq: int, form: str = "portable",
              output: str = "pooled", int64_ids: bool = False) -> Any:
    """The encoder as an onnx ModelProto with static shapes [batch, seq] (shape-inferred).

    ``int64_ids`` (portable form only) feeds int64 ids straight to the Gather, as exporters do:
    the variant that shows wonnx's Python binding reading int64 inputs wrong."""
    if form not in FORMS or output not in OUTPUTS:
        raise ValueError(f"form must be one of {FORMS} and output one of {OUTPUTS}")
    import onnx
    from onnx import TensorProto, helper

    g = _Graph()
    portable = form == "portable"
    hidden, heads, head_dim = cfg.hidden, cfg.heads, cfg.head_dim
    rows = batch * seq
    flat = [rows, hidden] if portable else [batch, seq, hidden]  # the activations' layout

    def p(name: str) -> str:
        return g.init(name, params[name])

    def shape(*dims: int) -> str:
        return g.const(list(dims), np.int64)

    def linear(x: str, prefix: str) -> str:
        return g.op("Add", g.op("MatMul", x, p(f"{prefix}.weight")), p(f"{prefix}.bias"))

    def layer_norm(x: str, prefix: str) -> str:
        mean = g.op("ReduceMean", x, axes=[-1], keepdims=1)
        d = g.op("Sub", x, mean)
        square = g.op("Mul", d, d) if portable else g.op("Pow", d, g.const(2.0))
        var = g.op("ReduceMean", square, axes=[-1], keepdims=1)
        normed = g.op("Div", d, g.op("Sqrt", g.op("Add", var, g.const(cfg.eps))))
        return g.op("Add", g.op("Mul", normed, p(f"{prefix}.weight")), p(f"{prefix}.bias"))

    def erf(z: str) -> str:
        if not portable:
            return g.op("Erf", z)
        a = g.op("Abs", z)
        t = g.op("Reciprocal", g.op("Add", g.op("Mul", a, g.const(ERF_P)), g.const(1.0)))
        poly = g.op("Mul", t, g.const(ERF_A[4]))
        for coef in reversed(ERF_A[:4]):
            poly = g.op("Mul", g.op("Add", poly, g.const(coef)), t)
        tail = g.op("Mul", poly, g.op("Exp", g.op("Neg", g.op("Mul", z, z))))
        sign = g.op("Div", z, g.op("Add", a, g.const(1e-30)))
        return g.op("Mul", sign, g.op("Sub", g.const(1.0), tail))

    def gelu(x: str) -> str:
        if cfg.hidden_act != "gelu":
            raise ValueError(f"only the erf GELU of all-MiniLM is written, not {cfg.hidden_act!r}")
        e = erf(g.op("Div", x, g.const(math.sqrt(2.0))))
        return g.op("Mul", g.op("Mul", x, g.const(0.5)), g.op("Add", g.const(1.0), e))

    def split_heads(x: str, perm: list[int]) -> str:
        return g.op("Transpose", g.op("Reshape", x, shape(batch, seq, heads, head_dim)), perm=perm)

    in_type = TensorProto.FLOAT if portable else TensorProto.INT64
    ids_type = TensorProto.INT64 if int64_ids or not portable else TensorProto.FLOAT
    ids, mask = "input_ids", "attention_mask"
    index = ids if ids_type == TensorProto.INT64 else g.op("Cast", ids, to=TensorProto.INT32)
    words = g.op("Gather", p("embeddings.word_embeddings.weight"), index)  # [B, S, H]
    types = g.init("token_type_row0", params["embeddings.token_type_embeddings.weight"][0])  # type ids 0
    positions = g.init("position_rows", params["embeddings.position_embeddings.weight"][:seq])  # 0..S-1
    x = g.op("Add", g.op("Add", words, types), positions)
    if portable:
        x = g.op("Reshape", x, shape(*flat))
    x = layer_norm(x, "embeddings.LayerNorm")
    maskf = mask if portable else g.op("Cast", mask, to=TensorProto.FLOAT)
    # HF's extended mask: (1 - mask) * finfo(f32).min, added to every head's scores
    bias = g.op("Reshape", g.op("Mul", g.op("Sub", g.const(1.0), maskf), g.const(np.finfo(np.float32).min)),
                shape(batch, 1, 1, seq))
    for layer in range(cfg.layers):
        pre = f"encoder.layer.{layer}"
        q = split_heads(linear(x, f"{pre}.attention.self.query"), [0, 2, 1, 3])
        k = split_heads(linear(x, f"{pre}.attention.self.key"), [0, 2, 3, 1])
        v = split_heads(linear(x, f"{pre}.attention.self.value"), [0, 2, 1, 3])
        scores = g.op("Mul", g.op("MatMul", q, k), g.const(1.0 / math.sqrt(head_dim)))
        probs = g.op("Softmax", g.op("Add", scores, bias), axis=-1)
        ctx = g.op("Transpose", g.op("MatMul", probs, v), perm=[0, 2, 1, 3])
        ctx = g.op("Reshape", ctx, shape(*flat))
        x = layer_norm(g.op("Add", linear(ctx, f"{pre}.attention.output.dense"), x),
                       f"{pre}.attention.output.LayerNorm")
        h = gelu(linear(x, f"{pre}.intermediate.dense"))
        x = layer_norm(g.op("Add", linear(h, f"{pre}.output.dense"), x), f"{pre}.output.LayerNorm")
    x3 = g.op("Reshape", x, shape(batch, seq, hidden)) if portable else x
    if output == "hidden":
        result, dims = g.op("Identity", x3, out="last_hidden_state"), [batch, seq, hidden]
    else:
        # sum over kept tokens / their count, written as a ratio of means (ReduceSum's axes are an
        # input from opset 13 on, which wonnx ignores); then x / ||x||
        kept = g.op("ReduceMean", g.op("Mul", x3, g.op("Reshape", maskf, shape(batch, seq, 1))), axes=[1],
                    keepdims=0)
        pooled = g.op("Div", kept, g.op("ReduceMean", maskf, axes=[1], keepdims=1))
        norm = g.op("Sqrt", g.op("Mul", g.op("ReduceMean", g.op("Mul", pooled, pooled), axes=[1], keepdims=1),
                                 g.const(float(hidden))))
        result, dims = g.op("Div", pooled, norm, out="embeddings"), [batch, hidden]
    graph = helper.make_graph(
        g.nodes, f"bert_{form}_b{batch}_s{seq}",
        [helper.make_tensor_value_info(ids, ids_type, [batch, seq]),
         helper.make_tensor_value_info(mask, in_type, [batch, seq])],
        [helper.make_tensor_value_info(result, TensorProto.FLOAT, dims)], g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="rlxpy-benches")
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def onnx_feeds(model: Any, ids: np.ndarray, mask: np.ndarray) -> dict[str, np.ndarray]:
    """Inputs for ``model`` (a ModelProto) from int64 ids and mask, in the element types it declares."""
    kinds = {value.name: value.type.tensor_type.elem_type for value in model.graph.input}
    types = {1: np.float32, 6: np.int32, 7: np.int64}
    return {"input_ids": ids.astype(types[kinds["input_ids"]]),
            "attention_mask": mask.astype(types[kinds["attention_mask"]])}
