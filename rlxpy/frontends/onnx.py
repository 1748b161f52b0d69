"""ONNX import: an ONNX model -> an rlxpy Graph for given input shapes, with its Params.

    model = OnnxModel("bert.onnx")                       # needs the optional `onnx` package
    out = model.run({"input_ids": ids, "attention_mask": mask})   # {output name: array}

Each input shape signature is imported and compiled once (dynamic ONNX dims are bound by the
arrays given). With static shapes every ``Shape`` and the arithmetic on it fold at import time
(numpy), so exports full of shape plumbing (transformers' BERT has ~400 such nodes) leave only the
tensor work. Initializers become Params (their ONNX names), small folded values Constants. Four
patterns common in exports are fused before import: ``x*0.5*(1+erf(x/sqrt2))`` -> GELU,
the decomposed LayerNorm (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add) -> LayerNorm,
``MatMul(x, W) + b`` -> one linear, and Conv -> BatchNormalization with initializer weights -> one
conv with the norm folded in (the CNN operators are in onnx_ops_cnn.py). int64 tensors run as int32
(range-checked at the boundary). An operator outside the table is reported with every other one in
one UnsupportedOpError.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rlxpy.errors import GraphError, InputError, ModelError, RlxError, UnsupportedOpError
from rlxpy.frontends import onnx_ops, onnx_ops_cnn, onnx_ops_signal
from rlxpy.frontends.onnx_check import check_model
from rlxpy.frontends.onnx_ops import EMIT, ONNX_DTYPES, Known
from rlxpy.frontends.onnx_ops_fold import fold
from rlxpy.frontends.rewrite import finalize
from rlxpy.ir import DType, Graph, Node, ops

#: Ops handled outside the emitter table: Constant is a Known value, Range only folds.
FOLD_ONLY = {"Constant", "Range"}
CONSTANT_MAX_ELEMENTS = 4096
MAX_SIGNATURES = 4


@dataclass
class OnnxNode:
    """A NodeProto with its attributes decoded (also used for the fused patterns)."""

    op_type: str
    inputs: list[str]
    output: list[str]
    attrs: dict[str, Any]
    name: str = ""
    domain: str = ""


@dataclass
class OnnxImport:
    graph: Graph
    params: dict[str, np.ndarray]
    outputs: dict[str, str | np.ndarray]  # ONNX output -> rlxpy node name, or its folded value
    output_dtypes: dict[str, np.dtype]
    index_bounds: dict[str, int] = field(default_factory=dict)  # input -> rows it indexes


def _require_onnx() -> Any:
    try:
        import onnx
    except ImportError as e:
        raise ModelError("the ONNX frontend needs the `onnx` package: pip install 'rlxpy[onnx]'") from e
    return onnx


def load_model(model: str | Path | bytes | Any) -> Any:
    """The ModelProto of a file, of serialised bytes or as given; external data is not read here
    (OnnxModel reads it once onnx_check has validated where it points)."""
    onnx = _require_onnx()
    if isinstance(model, (str, Path)):
        try:
            return onnx.load(str(model), load_external_data=False)
        except Exception as e:  # noqa: BLE001  (protobuf raises assorted errors)
            raise ModelError(f"{model}: not a readable ONNX model ({_plain(e)})") from None
    if isinstance(model, bytes):
        try:
            return onnx.load_from_string(model)
        except Exception as e:  # noqa: BLE001
            raise ModelError(f"<ONNX bytes>: not a readable ONNX model ({_plain(e)})") from None
    return model


def _plain(error: Exception) -> str:
    """A parser's message without its exception class name."""
    text = str(error) or "no details"
    return text if type(error).__name__ not in text else text.replace(type(error).__name__, "parse error")


def _source(model: Any) -> str:
    return str(model) if isinstance(model, (str, Path)) else "<ONNX bytes>" if isinstance(model, bytes) \
        else "<ONNX model>"


class OnnxModel:
    """An ONNX model compiled per input shape signature; ``run`` returns numpy arrays by output name."""

    def __init__(self, model: str | Path | bytes | Any, **compile_options: Any) -> None:
        self.source = _source(model)
        with self._naming():
            self._load(model, compile_options)

    @contextmanager
    def _naming(self) -> Iterator[None]:
        """rlxpy errors raised while reading, importing or running the model name its file."""
        try:
            yield
        except RlxError as e:
            if self.source in str(e):
                raise
            raise type(e)(f"{self.source}: {e}") from None

    def _load(self, model: Any, compile_options: dict[str, Any]) -> None:
        onnx = _require_onnx()
        self.proto = load_model(model)
        base_dir = Path(model).parent if isinstance(model, (str, Path)) else None
        self.opset = check_model(self.proto, self.source, base_dir)
        if base_dir is not None and any(t.data_location == 1 for t in self.proto.graph.initializer):
            onnx.external_data_helper.load_external_data_for_model(self.proto, str(base_dir))
        graph = self.proto.graph
        self.constants = {t.name: onnx.numpy_helper.to_array(t) for t in graph.initializer}
        self.nodes = [_decode(n, onnx) for n in graph.node]
        self.input_specs: dict[str, tuple[int, tuple[int | str, ...]]] = {}
        for value in graph.input:
            if value.name in self.constants:
                continue
            tensor = value.type.tensor_type
            dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                         for d in tensor.shape.dim)
            self.input_specs[value.name] = (tensor.elem_type, dims)
        self.output_names = [v.name for v in graph.output]
        self.output_types = {v.name: v.type.tensor_type.elem_type for v in graph.output}
        self.compile_options = compile_options
        self._check_supported()
        self.nodes = fuse_patterns(self.nodes, self.constants, set(self.output_names))
        self._compiled: OrderedDict[tuple, tuple[OnnxImport, Any]] = OrderedDict()
        self.compiles = 0

    def _check_supported(self) -> None:
        problems = []
        def foreign(n: OnnxNode) -> bool:
            return n.domain not in ("", "ai.onnx")
        bad = sorted({f"{n.domain}.{n.op_type}" if foreign(n) else n.op_type for n in self.nodes
                      if foreign(n) or n.op_type not in EMIT and n.op_type not in FOLD_ONLY})
        if bad:
            problems.append("unsupported ONNX operators: " + ", ".join(bad))
        types = [f"{t} (input {name!r})" for name, (t, _) in self.input_specs.items() if t not in ONNX_DTYPES]
        if types:
            problems.append("unsupported input element types: " + ", ".join(types)
                            + " (rlxpy takes float, int64/int32 and bool)")
        if problems:
            raise UnsupportedOpError("; ".join(problems))

    # -- import ---------------------------------------------------------------------------------
    def import_graph(self, shapes: Mapping[str, tuple[int, ...]]) -> OnnxImport:
        """The rlxpy graph for these input shapes (every dim static)."""
        with self._naming():
            return self._import_graph(shapes)

    def _import_graph(self, shapes: Mapping[str, tuple[int, ...]]) -> OnnxImport:
        for name, (_, dims) in self.input_specs.items():
            if name not in shapes:
                raise InputError(f"ONNX input {name!r} needs a shape (declared {list(dims)})")
            given = tuple(int(d) for d in shapes[name])
            clash = any(isinstance(d, int) and d and d != g for d, g in zip(dims, given))
            if len(given) != len(dims) or clash:
                raise InputError(f"ONNX input {name!r}: shape {list(given)} does not match the declared "
                                 f"{list(dims)}")
        importer = _Importer(self, {k: tuple(int(d) for d in v) for k, v in shapes.items()})
        return importer.run()

    def compile_graph(self, graph: Graph) -> Any:
        """The executable for one imported signature (a subclass may share them between models)."""
        import rlxpy

        return rlxpy.compile(graph, **self.compile_options)

    def release(self, exe: Any) -> None:
        """Called for an executable whose signature fell out of the MAX_SIGNATURES cache."""
        exe.destroy()

    def run(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The model's outputs for these inputs (compiled once per shape signature)."""
        with self._naming():
            return self._run(inputs)

    def _run(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        unknown = sorted(set(inputs) - set(self.input_specs))
        if unknown:
            raise InputError(f"unknown ONNX inputs {unknown}; the model takes {sorted(self.input_specs)}")
        arrays = {name: _convert_input(name, inputs.get(name), spec)
                  for name, spec in self.input_specs.items()}
        key = tuple((name, a.shape) for name, a in arrays.items())
        if key not in self._compiled:
            imported = self._import_graph({name: a.shape for name, a in arrays.items()})
            exe = self.compile_graph(imported.graph) if imported.graph.outputs else None
            for name, value in imported.params.items() if exe is not None else ():
                exe.set_param(name, value)
            self._compiled[key] = (imported, exe)
            self.compiles += 1
            while len(self._compiled) > MAX_SIGNATURES:
                _, (_, old) = self._compiled.popitem(last=False)
                if old is not None:
                    self.release(old)
        self._compiled.move_to_end(key)
        imported, exe = self._compiled[key]
        for name, bound in imported.index_bounds.items():
            array = arrays[name]
            if array.size and (array.min() < -bound or array.max() >= bound):
                raise InputError(f"ONNX input {name!r}: indices [{array.min()}, {array.max()}] are out of "
                                 f"range for an axis of {bound}")
        feeds = {name: a for name, a in arrays.items() if _used(imported.graph, name)}
        results = exe.run(feeds) if exe is not None else {}
        out = {}
        for name in self.output_names:
            value = imported.outputs[name]
            array = results[value] if isinstance(value, str) else value
            out[name] = np.asarray(array).astype(imported.output_dtypes[name], copy=False)
        return out


def _used(graph: Graph, name: str) -> bool:
    try:
        graph[name]
    except KeyError:
        return False
    return True


def _convert_input(name: str, value: Any, spec: tuple[int, tuple]) -> np.ndarray:
    elem, dims = spec
    if value is None:
        raise InputError(f"missing ONNX input {name!r} ({list(dims)})")
    array = np.asarray(value)
    want = np.dtype(ONNX_DTYPES[elem][0])
    if array.dtype != want and not (array.dtype.kind in "iu" and want.kind == "i"):
        raise InputError(f"ONNX input {name!r}: dtype {array.dtype}, the model declares {want} "
                         "(rlxpy does not convert floats silently)")
    if want.kind == "i":
        if array.size and (array.min() < -2**31 or array.max() >= 2**31):
            raise InputError(f"ONNX input {name!r}: int64 values beyond the int32 range rlxpy uses")
        array = array.astype(np.int32)
    if len(array.shape) != len(dims):
        raise InputError(f"ONNX input {name!r}: rank {array.ndim}, the model declares {list(dims)}")
    return np.ascontiguousarray(array)


def _decode(node: Any, onnx: Any) -> OnnxNode:
    attrs = {}
    for attribute in node.attribute:
        value = onnx.helper.get_attribute_value(attribute)
        if attribute.type == onnx.AttributeProto.TENSOR:
            value = onnx.numpy_helper.to_array(value)
        elif isinstance(value, bytes):
            value = value.decode()
        attrs[attribute.name] = value
    return OnnxNode(node.op_type, list(node.input), list(node.output), attrs, node.name, node.domain)


class _Importer:
    def __init__(self, model: OnnxModel, shapes: dict[str, tuple[int, ...]]) -> None:
        self.model = model
        self.opset = model.opset
        self.g = Graph("onnx")
        self.values: dict[str, Any] = {name: Known(v) for name, v in model.constants.items()}
        self.params: dict[str, np.ndarray] = {}
        self.materialized: dict[int, Node] = {}
        self.index_bounds: dict[str, int] = {}
        self.param_names = {id(v): name for name, v in self.values.items()}
        for name, (elem, _) in model.input_specs.items():
            self.values[name] = self.g.input(name, shapes[name], ONNX_DTYPES[elem][1])

    def run(self) -> OnnxImport:
        for node in self.model.nodes:
            try:
                results = self.node(node)
            except GraphError as e:
                raise UnsupportedOpError(f"{self.where(node)}: rlxpy cannot take it: {e}") from None
            for name, value in zip(node.output, results):
                if name:
                    self.values[name] = value
        outputs: dict[str, str | np.ndarray] = {}
        dtypes = {}
        for name in self.model.output_names:
            value = self.values[name]
            if isinstance(value, Known):
                outputs[name] = value.value
                dtypes[name] = value.value.dtype
                continue
            self.g.output(value)
            outputs[name] = value.name
            declared = self.model.output_types.get(name)  # int64 outputs come back as int64
            known = declared in ONNX_DTYPES
            dtypes[name] = np.dtype(ONNX_DTYPES[declared][0]) if known else value.dtype.numpy
        graph = finalize(self.g)
        kept = {n.op.name for n in graph.params()}
        params = {k: v for k, v in self.params.items() if k in kept}
        return OnnxImport(graph, params, outputs, dtypes, self.index_bounds)

    def node(self, node: OnnxNode) -> list[Any]:
        if node.op_type == "Constant":
            value = next(iter(node.attrs.values()))
            return [Known(np.asarray(value))]
        ins = [self.values[name] if name else None for name in node.inputs]
        if all(v is None or isinstance(v, Known) for v in ins) and ins:
            folded = fold(node.op_type, ins, node.attrs, self.opset, len(node.output), self.where(node))
            if folded is not None:
                return [Known(np.asarray(v)) for v in folded]
        if node.op_type in FOLD_ONLY:
            raise UnsupportedOpError(f"{self.where(node)}: {node.op_type} on run-time values")
        return EMIT[node.op_type](self, node, ins, node.attrs)

    # -- helpers the emitters use ------------------------------------------------------------------
    def where(self, node: OnnxNode) -> str:
        return f"{node.name or node.output[0]} ({node.op_type})"

    def name(self, node: OnnxNode) -> str | None:
        name = node.output[0]
        return None if _used(self.g, name) else name

    def tensor(self, value: Any, dtype: DType | None = None) -> Node:
        if isinstance(value, Node):
            return self.cast(value, dtype) if dtype is not None else value
        if not isinstance(value, Known):
            raise UnsupportedOpError(f"cannot use {value!r} as a tensor")
        node = self.materialized.get(id(value))
        if node is None:
            node = self._materialize(value)
            self.materialized[id(value)] = node
        return self.cast(node, dtype) if dtype is not None else node

    def _materialize(self, known: Known) -> Node:
        array = np.asarray(known.value)
        if array.dtype.kind == "f":
            kind, array = DType.F32, array.astype(np.float32)
        elif array.dtype == np.bool_:
            kind = DType.BOOL
        elif array.dtype.kind in "iu":
            if array.size and (array.min() < -2**31 or array.max() >= 2**31):
                raise UnsupportedOpError(f"an int64 constant with values beyond int32 "
                                         f"({array.min()}..{array.max()})")
            kind, array = DType.I32, array.astype(np.int32)
        else:
            raise UnsupportedOpError(f"a constant of dtype {array.dtype}")
        name = self.param_names.get(id(known))
        if array.size > CONSTANT_MAX_ELEMENTS:
            name = name or f"folded_{len(self.params)}"
            self.params[name] = np.ascontiguousarray(array)
            return self.g.param(name, array.shape, kind)
        return self.g.constant(array, kind)

    def cast(self, x: Node, dtype: DType) -> Node:
        return x if x.dtype is dtype else self.g.cast(x, dtype)

    def pair(self, a: Any, b: Any) -> tuple[Node, Node]:
        """Two operands of one dtype (ONNX requires it; a known operand takes the other's)."""
        if isinstance(a, Node) and not isinstance(b, Node):
            return a, self.tensor(b, a.dtype)
        if isinstance(b, Node) and not isinstance(a, Node):
            return self.tensor(a, b.dtype), b
        a, b = self.tensor(a), self.tensor(b)
        if a.dtype is not b.dtype:
            wide = DType.F32 if DType.F32 in (a.dtype, b.dtype) else DType.I32
            a, b = self.cast(a, wide), self.cast(b, wide)
        return a, b

    def known(self, node: OnnxNode, value: Any, what: str) -> np.ndarray:
        if not isinstance(value, Known):
            raise UnsupportedOpError(f"{self.where(node)}: {what} must be known at import time, but it is "
                                     "computed from run-time data")
        return value.value

    def shape_of(self, value: Any) -> tuple[int, ...]:
        return tuple(value.value.shape) if isinstance(value, Known) else tuple(value.shape)

    def note_index_bound(self, indices: Node, size: int) -> None:
        """Indices read straight from an input are range-checked at run time (rlxpy's gather clamps)."""
        node = indices
        while isinstance(node.op, (ops.Cast, ops.Reshape)):
            node = self.g[node.inputs[0]]
        if isinstance(node.op, ops.Input):
            name = node.op.name
            self.index_bounds[name] = min(self.index_bounds.get(name, size), size)


# -- pattern fusion ----------------------------------------------------------------------------------
def fuse_patterns(nodes: list[OnnxNode], constants: dict[str, np.ndarray], outputs: set[str]
                  ) -> list[OnnxNode]:
    """Replace GELU, LayerNorm and MatMul+bias subgraphs by single nodes (see the module docstring)."""
    known = dict(constants)
    for n in nodes:
        if n.op_type == "Constant" and n.attrs:
            known[n.output[0]] = np.asarray(next(iter(n.attrs.values())))
    for matcher in (_match_gelu, _match_layer_norm, _match_linear, _match_conv_batch_norm):
        nodes = _apply(nodes, known, outputs, matcher)
    return nodes


def _apply(nodes: list[OnnxNode], known: dict, outputs: set[str], matcher: Any) -> list[OnnxNode]:
    producer = {o: n for n in nodes for o in n.output}
    consumers: dict[str, list[OnnxNode]] = {}
    for n in nodes:
        for i in n.inputs:
            consumers.setdefault(i, []).append(n)
    ctx = _Match(producer, consumers, known, outputs)
    removed: set[int] = set()
    replacement: dict[int, OnnxNode] = {}
    for n in nodes:
        if id(n) in removed:
            continue
        found = matcher(ctx, n)
        if found is None:
            continue
        fused, parts = found
        if any(id(p) in removed for p in parts):
            continue
        removed.update(id(p) for p in parts)
        replacement[id(parts[-1])] = fused  # the fused node takes the last part's place in the order
    return [replacement.get(id(n), n) for n in nodes if id(n) not in removed or id(n) in replacement]


@dataclass
class _Match:
    producer: dict[str, OnnxNode]
    consumers: dict[str, list[OnnxNode]]
    known: dict[str, np.ndarray]
    outputs: set[str]

    def sole(self, value: str, op_type: str) -> OnnxNode | None:
        """The only consumer of ``value`` if it is an ``op_type`` and value is no graph output."""
        users = self.consumers.get(value, [])
        if len(users) == 1 and users[0].op_type == op_type and value not in self.outputs:
            return users[0]
        return None

    def scalar(self, name: str) -> float | None:
        value = self.known.get(name)
        return float(value.reshape(-1)[0]) if value is not None and value.size == 1 else None

    def other(self, node: OnnxNode, value: str) -> str | None:
        """The operand of a binary node that is not ``value``."""
        if len(node.inputs) != 2 or value not in node.inputs:
            return None
        return node.inputs[1] if node.inputs[0] == value else node.inputs[0]


def _near(value: float | None, want: float) -> bool:
    return value is not None and abs(value - want) <= 1e-6 * abs(want)


def _match_gelu(m: _Match, erf: OnnxNode) -> tuple[OnnxNode, list[OnnxNode]] | None:
    """x * 0.5 * (1 + erf(x / sqrt(2))) in the groupings exporters write."""
    if erf.op_type != "Erf":
        return None
    scale = m.producer.get(erf.inputs[0])
    if scale is None or m.sole(scale.output[0], "Erf") is not erf:
        return None
    x = scale.inputs[0]
    if not (scale.op_type == "Div" and _near(m.scalar(scale.inputs[1]), math.sqrt(2.0))
            or scale.op_type == "Mul" and _near(m.scalar(scale.inputs[1]), math.sqrt(0.5))):
        return None
    add = m.sole(erf.output[0], "Add")
    if add is None or not _near(m.scalar(m.other(add, erf.output[0]) or ""), 1.0):
        return None
    first = m.sole(add.output[0], "Mul")
    if first is None:
        return None
    partner = m.other(first, add.output[0])
    parts = [scale, erf, add, first]
    if partner == x or _near(m.scalar(partner or ""), 0.5):  # (x * a) * 0.5  or  (a * 0.5) * x
        second = m.sole(first.output[0], "Mul")
        want = 0.5 if partner == x else None
        if second is None:
            return None
        rest = m.other(second, first.output[0])
        if not (want is not None and _near(m.scalar(rest or ""), want) or want is None and rest == x):
            return None
        parts.append(second)
    else:  # (x * 0.5) * a
        half = m.producer.get(partner or "")
        if half is None or half.op_type != "Mul" or x not in half.inputs \
                or not _near(m.scalar(m.other(half, x) or ""), 0.5):
            return None
    return OnnxNode("Gelu", [x], [parts[-1].output[0]], {}, parts[-1].name), parts


def _match_layer_norm(m: _Match, mean: OnnxNode) -> tuple[OnnxNode, list[OnnxNode]] | None:
    """ReduceMean -> Sub -> Pow 2 -> ReduceMean -> Add eps -> Sqrt -> Div -> Mul gamma -> Add beta."""
    if mean.op_type != "ReduceMean" or not _last_axis(m, mean):
        return None
    x = mean.inputs[0]
    sub = m.sole(mean.output[0], "Sub")
    if sub is None or sub.inputs != [x, mean.output[0]]:
        return None
    users = m.consumers.get(sub.output[0], [])
    power = next((u for u in users if u.op_type == "Pow"), None)
    divide = next((u for u in users if u.op_type == "Div"), None)
    if len(users) != 2 or power is None or divide is None or not _near(m.scalar(power.inputs[1]), 2.0):
        return None
    variance = m.sole(power.output[0], "ReduceMean")
    add_eps = m.sole(variance.output[0], "Add") if variance is not None and _last_axis(m, variance) else None
    root = m.sole(add_eps.output[0], "Sqrt") if add_eps is not None else None
    if root is None or m.sole(root.output[0], "Div") is not divide or divide.inputs[0] != sub.output[0]:
        return None
    eps = m.scalar(m.other(add_eps, variance.output[0]) or "")
    scale = m.sole(divide.output[0], "Mul")
    shift = m.sole(scale.output[0], "Add") if scale is not None else None
    if eps is None or shift is None:
        return None
    gamma, beta = m.other(scale, divide.output[0]), m.other(shift, scale.output[0])
    if any(v not in m.known or m.known[v].ndim != 1 for v in (gamma, beta)):
        return None
    parts = [mean, sub, power, variance, add_eps, root, divide, scale, shift]
    return OnnxNode("rlx.LayerNorm", [x, gamma, beta], [shift.output[0]], {"epsilon": eps, "axis": -1},
                    shift.name), parts


def _last_axis(m: _Match, node: OnnxNode) -> bool:
    axes = node.attrs.get("axes")
    if axes is None and len(node.inputs) > 1:
        axes = m.known.get(node.inputs[1])
        axes = None if axes is None else axes.tolist()
    return axes is not None and list(axes) == [-1] and node.attrs.get("keepdims", 1) == 1


def _match_linear(m: _Match, matmul: OnnxNode) -> tuple[OnnxNode, list[OnnxNode]] | None:
    if matmul.op_type != "MatMul" or matmul.inputs[1] not in m.known or m.known[matmul.inputs[1]].ndim != 2:
        return None
    add = m.sole(matmul.output[0], "Add")
    bias = m.other(add, matmul.output[0]) if add is not None else None
    width = m.known[matmul.inputs[1]].shape[1]
    if bias is None or bias not in m.known or m.known[bias].shape != (width,):
        return None
    fused = OnnxNode("rlx.Linear", [matmul.inputs[0], matmul.inputs[1], bias], [add.output[0]], {}, add.name)
    return fused, [matmul, add]


def _match_conv_batch_norm(m: _Match, conv: OnnxNode) -> tuple[OnnxNode, list[OnnxNode]] | None:
    """Conv -> BatchNormalization (inference) with every weight an initializer: folded at import
    (onnx_ops_cnn's rlx.ConvBatchNorm)."""
    if conv.op_type != "Conv" or any(v not in m.known for v in conv.inputs[1:] if v):
        return None
    bn = m.sole(conv.output[0], "BatchNormalization")
    if bn is None or bn.inputs[0] != conv.output[0] or any(v not in m.known for v in bn.inputs[1:5]) \
            or bn.attrs.get("training_mode", 0) or any(bn.output[1:]):
        return None
    bias = conv.inputs[2] if len(conv.inputs) > 2 else ""
    fused = OnnxNode("rlx.ConvBatchNorm", [conv.inputs[0], conv.inputs[1], bias, *bn.inputs[1:5]],
                     [bn.output[0]], {**conv.attrs, "epsilon": bn.attrs.get("epsilon", 1e-5)}, bn.name)
    return fused, [conv, bn]


__all__ = ["OnnxImport", "OnnxModel", "fuse_patterns", "load_model", "onnx_ops", "onnx_ops_cnn",
           "onnx_ops_signal"]
