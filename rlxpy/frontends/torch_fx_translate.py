"""aten FX graph (what aot_autograd hands a forward compiler) -> rlxpy Graph with symbolic dims.

Placeholders become Inputs, except the ones dynamo marks static (parameters and buffers): those,
and every node computed from them alone (``t(weight)``, ``expand(buffer)``), are *host values*,
evaluated eagerly with torch when the weights are uploaded and given to the graph as Params (or
Constants, when no placeholder is involved). A SymInt dim ``s0`` becomes ``Sym("s0")``; a compound
one (``s0*s1``, the rows of a flattened ``[B, S, H]``) becomes ``Sym("s0*s1")``, bound at run time
by evaluating the expression. i64 becomes i32 (indices, masks); other dtypes torch has and rlxpy
cannot run exactly (f64, f16, int8, ...) are reported, never approximated.

The op table lives in torch_fx_ops.py; every translator gets the node and its schema-bound
arguments (``{name: value}``, defaults filled) with FX nodes replaced by their values.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.fx as fx

from rlxpy.errors import GraphError, UnsupportedOpError
from rlxpy.frontends.rewrite import finalize
from rlxpy.ir import DType, Graph, Node, Sym, ops
from rlxpy.ir.ops.base import BinaryOp

Dim = int | Sym
Translate = Callable[["FxTranslator", fx.Node, dict[str, Any]], Any]
#: aten packet name ("add", "_softmax", ...) or "getitem" -> translator. Filled by torch_fx_ops.py.
TRANSLATORS: dict[str, Translate] = {}

TORCH_TO_RLX = {torch.float32: DType.F32, torch.int64: DType.I32, torch.int32: DType.I32,
                torch.bool: DType.BOOL, torch.complex64: DType.C64}
#: Ops whose output must never be folded at upload time (random, uninitialised).
NOT_FOLDABLE = ("rand", "dropout", "bernoulli", "empty", "normal", "uniform", "multinomial")
#: Small host values with no placeholder ancestor become Constants; bigger ones become Params.
CONSTANT_MAX_ELEMENTS = 4096


def translator(*names: str) -> Callable[[Translate], Translate]:
    """Register a translator for aten packets ``names`` (``"add"`` covers add.Tensor/add.Scalar)."""

    def register(fn: Translate) -> Translate:
        for name in names:
            if name in TRANSLATORS:
                raise ValueError(f"aten.{name} already translated by {TRANSLATORS[name].__name__}")
            TRANSLATORS[name] = fn
        return fn

    return register


def op_key(target: Any) -> str:
    if target is operator.getitem:
        return "getitem"
    schema = getattr(target, "_schema", None)
    if schema is None:
        return getattr(target, "__name__", str(target))
    return schema.name.split("::", 1)[-1]


def op_label(target: Any) -> str:
    """``aten.add.Tensor`` for messages."""
    schema = getattr(target, "_schema", None)
    if schema is None:
        return getattr(target, "__name__", str(target))
    overload = getattr(target, "_overloadname", "default")
    return schema.name.replace("::", ".") + f".{overload}"


@dataclass(frozen=True)
class Host:
    """A tensor computed from static placeholders and constants only (see the module docstring)."""

    node: fx.Node


@dataclass
class InputSpec:
    index: int  # placeholder position
    name: str  # rlxpy input name
    dtype: torch.dtype
    #: bounds checked at run time: the input feeds a gather/embedding directly (torch raises on those)
    index_bound: Dim | None = None


@dataclass
class ParamSpec:
    name: str
    node: fx.Node  # the host value it holds
    dtype: DType


@dataclass
class OutputSpec:
    kind: str  # "graph" (rlxpy output name), "host", "sym", "const"
    value: Any
    dtype: torch.dtype | None = None
    device: torch.device | None = None


@dataclass
class Translation:
    graph: Graph
    inputs: list[InputSpec]
    params: list[ParamSpec]
    host_nodes: list[fx.Node]  # host values in graph order (placeholders first as they appear)
    static_indices: set[int]
    #: rlxpy symbol name -> sympy expression over the placeholders' symbols
    sym_exprs: dict[str, Any]
    #: sympy symbol -> (placeholder index, axis or None for a SymInt placeholder)
    sym_sources: dict[Any, tuple[int, int | None]]
    outputs: list[OutputSpec]
    constants: dict[fx.Node, torch.Tensor] = field(default_factory=dict)


class FxGraph(Graph):
    """The Graph a translation builds: a node a translator leaves unnamed gets a name no FX node has
    (FX names have no dot), so a later node named after its FX node (``where_1``) never collides."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.unnamed = 0

    def apply(self, op: ops.Op, inputs: Sequence[Any] = (), name: str | None = None) -> Node:
        if name is None:
            self.unnamed += 1
            name = f"rlx.{type(op).__name__.lower()}_{self.unnamed}"
        return super().apply(op, inputs, name)


class FxTranslator:
    def __init__(self, gm: fx.GraphModule, static_indices: set[int], name: str = "torch_fx") -> None:
        self.gm = gm
        self.g = FxGraph(name)
        self.static = static_indices
        self.env: dict[fx.Node, Any] = {}
        self.inputs: list[InputSpec] = []
        self.params: list[ParamSpec] = []
        self.param_nodes: dict[fx.Node, Node] = {}
        self.host_nodes: list[fx.Node] = []
        self.constants: dict[fx.Node, torch.Tensor] = {}
        self.sym_exprs: dict[str, Any] = {}
        self.sym_sources: dict[Any, tuple[int, int | None]] = {}
        self._cache: dict[tuple, Node] = {}
        self.current: fx.Node | None = None

    # -- entry --------------------------------------------------------------------------------
    def translate(self) -> Translation:
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        with unset_fake_temporarily():  # aot_autograd calls the compiler under its fake mode
            return self._translate()

    def _translate(self) -> Translation:
        self.check_supported()
        outputs: list[OutputSpec] = []
        for index, node in enumerate(n for n in self.gm.graph.nodes if n.op == "placeholder"):
            self.placeholder(index, node)
        for node in self.gm.graph.nodes:
            self.current = node
            if node.op == "call_function":
                self.env[node] = self.call(node)
            elif node.op == "get_attr":  # a tensor literal of the traced code: a constant
                value = self.gm
                for part in str(node.target).split("."):
                    value = getattr(value, part)
                self.constants[node] = value
                self.host_nodes.append(node)
                self.env[node] = Host(node)
            elif node.op == "output":
                outputs = [self.output_spec(v) for v in _flatten(node.args[0])]
            elif node.op != "placeholder":
                raise UnsupportedOpError(f"{node.name}: FX node kind {node.op!r} is not supported")
        self.check_bindable()
        graph = finalize(self.g)
        kept = {n.op.name for n in graph.params()}
        params = [p for p in self.params if p.name in kept]
        return Translation(graph, self.inputs, params, self.host_nodes, self.static, self.sym_exprs,
                           self.sym_sources, outputs, self.constants)

    def check_supported(self) -> None:
        """Raise one UnsupportedOpError naming every op and dtype rlxpy cannot take."""
        missing, dtypes = set(), set()
        for node in self.gm.graph.nodes:
            if node.op == "call_function" and op_key(node.target) not in TRANSLATORS \
                    and not _is_scalar_meta(node) and not _is_assert(node):
                missing.add(op_label(node.target))
            for value in _flatten(node.meta.get("val")):
                if isinstance(value, torch.Tensor) and value.dtype not in TORCH_TO_RLX:
                    dtypes.add(str(value.dtype).removeprefix("torch."))
        problems = []
        if missing:
            problems.append("unsupported aten ops: " + ", ".join(sorted(missing)))
        if dtypes:
            problems.append("unsupported dtypes: " + ", ".join(sorted(dtypes))
                            + " (rlxpy takes float32, int64/int32 as i32, and bool)")
        if problems:
            raise UnsupportedOpError("; ".join(problems))

    def check_bindable(self) -> None:
        known = set(self.sym_sources)
        for name, expr in self.sym_exprs.items():
            free = expr.free_symbols - known
            if free:
                raise UnsupportedOpError(
                    f"dynamic dim {name} depends on {sorted(map(str, free))}, which no input shape or size "
                    "gives (a data-dependent size): rlxpy cannot bind it")

    # -- placeholders, outputs ----------------------------------------------------------------
    def placeholder(self, index: int, node: fx.Node) -> None:
        val = node.meta.get("val")
        if isinstance(val, torch.SymInt) or isinstance(val, int):
            dim = self.dim(val)
            expr = val.node.expr if isinstance(val, torch.SymInt) else None
            if expr is not None and expr.is_Symbol:
                self.sym_sources.setdefault(expr, (index, None))
            self.env[node] = dim
            return
        if not isinstance(val, torch.Tensor):
            raise UnsupportedOpError(f"{node.name}: a placeholder of type {type(val).__name__} is not "
                                     "supported")
        for axis, size in enumerate(val.shape):
            if isinstance(size, torch.SymInt) and size.node.expr.is_Symbol:
                self.sym_sources.setdefault(size.node.expr, (index, axis))
        if index in self.static:
            self.host_nodes.append(node)
            self.env[node] = Host(node)
            return
        name = f"in{index}_{node.name}"
        self.env[node] = self.g.input(name, self.shape(val), self.rlx_dtype(val.dtype))
        self.inputs.append(InputSpec(index, name, val.dtype))

    def output_spec(self, value: Any) -> OutputSpec:
        if isinstance(value, fx.Node):
            meta = value.meta.get("val")
            out = self.env[value]
            dtype = meta.dtype if isinstance(meta, torch.Tensor) else None
            device = meta.device if isinstance(meta, torch.Tensor) else None
            if isinstance(out, Host):
                return OutputSpec("host", out.node, dtype, device)
            if isinstance(out, Node):
                self.g.output(out)
                return OutputSpec("graph", out.name, dtype, device)
            if isinstance(out, Sym):
                return OutputSpec("sym", self.sym_exprs[out.name])
            return OutputSpec("const", out)
        return OutputSpec("const", value)

    # -- calls ----------------------------------------------------------------------------------
    def call(self, node: fx.Node) -> Any:
        val = node.meta.get("val")
        if _is_assert(node):
            return None
        if _is_scalar_meta(node):  # SymInt arithmetic, sym_size: the value is its meta
            return self.scalar(val, node)
        if self.foldable(node):
            self.host_nodes.append(node)
            if all(a in self.constants for a in node.all_input_nodes):
                self.constants[node] = evaluate_host(node, self.constants)
            return Host(node)
        fn = TRANSLATORS[op_key(node.target)]
        args = self.bind(node)
        try:
            return fn(self, node, args)
        except GraphError as e:
            raise UnsupportedOpError(f"{node.name} ({op_label(node.target)}): rlxpy cannot take it: {e}"
                                     ) from None

    def bind(self, node: fx.Node) -> dict[str, Any]:
        """Schema-bound arguments with defaults, FX nodes replaced by their values."""
        mapped_args = fx.node.map_arg(node.args, lambda n: self.env[n])
        mapped_kwargs = fx.node.map_arg(node.kwargs, lambda n: self.env[n])
        schema = getattr(node.target, "_schema", None)
        if schema is None:
            return {"args": mapped_args, **mapped_kwargs}
        bound: dict[str, Any] = {}
        positional = list(mapped_args)
        for argument in schema.arguments:
            if not argument.kwarg_only and positional:
                bound[argument.name] = positional.pop(0)
            elif argument.name in mapped_kwargs:
                bound[argument.name] = mapped_kwargs[argument.name]
            elif argument.has_default_value():
                bound[argument.name] = argument.default_value
            else:
                bound[argument.name] = None
        return bound

    def foldable(self, node: fx.Node) -> bool:
        """Host value: every tensor input is one, no symbolic size is involved, output is a static tensor."""
        val = node.meta.get("val")
        key = op_key(node.target)
        if not isinstance(val, torch.Tensor) or any(word in key for word in NOT_FOLDABLE):
            return False
        if any(isinstance(s, torch.SymInt) for s in val.shape):
            return False
        for arg in node.all_input_nodes:
            if not isinstance(self.env.get(arg), Host):
                return False
        arguments = _flatten(list(node.args) + list(node.kwargs.values()))
        scalars = [v for v in arguments if not isinstance(v, fx.Node)]
        return not any(isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)) for v in scalars)

    # -- values -----------------------------------------------------------------------------------
    def scalar(self, val: Any, node: fx.Node | None = None) -> Any:
        if isinstance(val, torch.SymInt) or isinstance(val, int) and not isinstance(val, bool):
            return self.dim(val)
        if isinstance(val, (torch.SymFloat, torch.SymBool)):
            expr = val.node.expr
            if expr.is_number:
                return bool(expr) if isinstance(val, torch.SymBool) else float(expr)
            where = node.name if node is not None else "a value"
            raise UnsupportedOpError(f"{where}: symbolic {type(val).__name__} {expr} is not supported")
        return val

    def dim(self, size: Any) -> Dim:
        if isinstance(size, torch.SymInt):
            expr = size.node.expr
            if expr.is_number:
                return int(expr)
            name = str(expr).replace(" ", "")
            self.sym_exprs.setdefault(name, expr)
            return Sym(name)
        if isinstance(size, Sym):
            return size
        return int(size)

    def shape(self, value: Any) -> tuple[Dim, ...]:
        """The rlxpy shape of a FakeTensor / meta value, or of an FX node's meta."""
        if isinstance(value, fx.Node):
            value = value.meta["val"]
        return tuple(self.dim(s) for s in value.shape)

    def out_shape(self, node: fx.Node) -> tuple[Dim, ...]:
        return self.shape(node.meta["val"])

    def out_dtype(self, node: fx.Node) -> DType:
        return self.rlx_dtype(node.meta["val"].dtype)

    @staticmethod
    def rlx_dtype(dtype: torch.dtype) -> DType:
        if dtype not in TORCH_TO_RLX:
            raise UnsupportedOpError(f"dtype {dtype} is not supported (float32, int64/int32, bool)")
        return TORCH_TO_RLX[dtype]

    def tensor(self, value: Any, dtype: DType | None = None) -> Node:
        """A graph node for ``value``: a node, a host value (materialised once), a number or a dim."""
        if isinstance(value, Host):
            node = self.materialize(value.node)
        elif isinstance(value, Node):
            node = value
        elif isinstance(value, Sym):
            node = self.dim_value(value)
        elif isinstance(value, (bool, int, float)):
            kind = dtype or (DType.BOOL if isinstance(value, bool) else DType.I32 if isinstance(value, int)
                             else DType.F32)
            return self.constant(value, kind)
        else:
            raise UnsupportedOpError(f"{self.where()}: cannot use {type(value).__name__} {value!r} as a "
                                     "tensor")
        return self.cast(node, dtype) if dtype is not None else node

    def materialize(self, host: fx.Node) -> Node:
        if host in self.param_nodes:
            return self.param_nodes[host]
        meta = host.meta["val"]
        dtype = self.rlx_dtype(meta.dtype)
        value = self.constants.get(host)
        if value is not None and value.numel() <= CONSTANT_MAX_ELEMENTS:
            node = self.g.constant(to_numpy(value, dtype, host.name), dtype, name=f"const_{host.name}")
        else:
            name = f"param_{host.name}"
            node = self.g.param(name, self.shape(meta), dtype)
            self.params.append(ParamSpec(name, host, dtype))
        self.param_nodes[host] = node
        return node

    def constant(self, value: float | int | bool | np.ndarray, dtype: DType) -> Node:
        array = np.asarray(value)
        key = ("const", dtype, array.shape, array.tobytes())
        if key not in self._cache:
            self._cache[key] = self.g.constant(array.astype(dtype.numpy), dtype)
        return self._cache[key]

    def cast(self, x: Node, dtype: DType) -> Node:
        return x if x.dtype is dtype else self.g.cast(x, dtype)

    def dim_value(self, size: Dim, dtype: DType = DType.I32) -> Node:
        """A 0-d tensor holding a (symbolic) dim: the sum of ``size`` ones, exact below 2**24."""
        if isinstance(size, int):
            return self.constant(size, dtype)
        key = ("dim", size.name, dtype)
        if key not in self._cache:
            ones = self.g.expand(self.constant(np.ones([1], np.float32), DType.F32), [size])
            self._cache[key] = self.cast(self.g.sum(ones, 0), dtype)
        return self._cache[key]

    def iota(self, size: Dim, dtype: DType = DType.I32) -> Node:
        """[0, 1, ..., size-1] (torch.arange); a symbolic size uses an exclusive prefix sum of ones."""
        key = ("iota", str(size), dtype)
        if key not in self._cache:
            if isinstance(size, int):
                node = self.g.constant(np.arange(size).astype(dtype.numpy), dtype)
            else:
                ones = self.g.expand(self.constant(np.ones([1], np.float32), DType.F32), [size])
                node = self.cast(self.g.cumsum(ones, 0, exclusive=True), dtype)
            self._cache[key] = node
        return self._cache[key]

    def where(self) -> str:
        node = self.current
        return f"{node.name} ({op_label(node.target)})" if node is not None and node.op == "call_function" \
            else (node.name if node is not None else "?")

    def unsupported(self, reason: str) -> UnsupportedOpError:
        return UnsupportedOpError(f"{self.where()}: {reason}")

    # -- graph-side facts -------------------------------------------------------------------------
    def nonnegative(self, x: Node) -> bool:
        """True when x's values are provably >= 0 (iotas, shape arithmetic), so index wrapping is moot."""
        op = x.op
        if isinstance(op, ops.Constant):
            return bool(np.all(np.frombuffer(op.data, dtype=op.dtype.storage_numpy) >= 0)) \
                if op.dtype is not DType.BOOL else True
        if isinstance(op, (ops.Reshape, ops.Expand, ops.Narrow, ops.Transpose, ops.Cast, ops.Copy, ops.Gather,
                           ops.Cumsum, ops.Reduce)):
            return self.nonnegative(self.g[x.inputs[0]])
        if isinstance(op, ops.Binary) and op.op in (BinaryOp.ADD, BinaryOp.MUL, BinaryOp.MAX):
            return all(self.nonnegative(self.g[i]) for i in x.inputs)
        return False

    def input_spec(self, x: Node) -> InputSpec | None:
        """The InputSpec of x when x is an Input, possibly through casts and reshapes."""
        while isinstance(x.op, (ops.Cast, ops.Reshape)):
            x = self.g[x.inputs[0]]
        if isinstance(x.op, ops.Input):
            return next((s for s in self.inputs if s.name == x.op.name), None)
        return None


def evaluate_host(node: fx.Node, values: dict[fx.Node, torch.Tensor]) -> torch.Tensor:
    """Run one host node eagerly in torch, its inputs taken from ``values``."""
    args = fx.node.map_arg(node.args, lambda n: values[n])
    kwargs = fx.node.map_arg(node.kwargs, lambda n: values[n])
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with torch.no_grad(), unset_fake_temporarily():  # the compiler runs under aot_autograd's fake mode
        return node.target(*args, **kwargs)


def to_numpy(value: torch.Tensor, dtype: DType, what: str) -> np.ndarray:
    """A host tensor as the numpy array rlxpy stores for ``dtype``; i64 must fit i32."""
    array = value.detach().to("cpu").contiguous()
    if array.dtype == torch.int64 and array.numel():
        low, high = int(array.min()), int(array.max())
        if low < -2**31 or high >= 2**31:
            raise UnsupportedOpError(f"{what}: int64 values [{low}, {high}] do not fit the int32 rlxpy uses")
    if array.dtype == torch.bool:
        return array.numpy()
    return array.numpy().astype(dtype.numpy, copy=False)


def _flatten(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _flatten(v)]
    if isinstance(value, dict):
        return [x for v in value.values() for x in _flatten(v)]
    return [value]


def _is_scalar_meta(node: fx.Node) -> bool:
    val = node.meta.get("val")
    return isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool)) \
        and not isinstance(val, torch.Tensor)


def _is_assert(node: fx.Node) -> bool:
    key = op_key(node.target)
    return key.startswith("_assert") or key.startswith("sym_constrain_range") or key == "_print"


def normalize_dims(dims: Sequence[int] | int | None, rank: int) -> list[int]:
    if dims is None:
        return list(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    return sorted({d % rank if rank else 0 for d in dims}) if len(dims) else list(range(rank))
