"""rlxpy as a torch.compile backend: ``torch.compile(model, backend=rlxpy_backend)`` or ``backend="rlxpy"``.

dynamo captures the model; aot_autograd lowers each captured graph to aten ops (with the core-aten
decompositions, minus the ops rlxpy runs whole: SDPA, layer/rms norm, GELU, SiLU, softmax), and our
forward compiler translates that into one rlxpy Graph (torch_fx_translate.py; the op table is in
torch_fx_ops.py and torch_fx_ops_nn.py).

At run time, per call: the sizes of the symbolic dims come from the inputs; each new binding (a
shape signature) compiles the graph once (``rlxpy.compile`` of the bound graph) and uploads the
weights; later calls with that signature re-use it. Weights are uploaded again only when a param
tensor changed (another storage, or its version counter moved). Inputs are converted at the
boundary (int64 -> int32 after a range check), outputs come back as torch tensors of the dtypes and
device torch would give.

``on_unsupported="fallback"`` (default) splits a graph rlxpy cannot take whole at the nodes it
cannot take (graph breaks, torch_fx_partition.py): those run in eager torch, the rest in rlxpy
subgraphs, with one warning naming the ops and the share of nodes on rlxpy; a graph with no part
worth running goes to eager torch whole, with one warning that lists the reasons.
``"error"`` raises UnsupportedOpError instead.

Training: for a graph that needs gradients aot_autograd hands over a forward graph (the outputs and
the activations the backward saves) and, at the first ``backward()``, the backward graph its joint
trace derives; each is translated and runs on rlxpy like an inference graph (backward ops such as SDPA's
or the embedding's onto rlxpy's backward ops: torch_fx_ops_grad.py), while torch's autograd and
optimizer see ordinary tensors. torch is imported here and in the modules above only, never by
rlxpy's core.
"""

from __future__ import annotations

import functools
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.fx as fx

import rlxpy
from rlxpy.errors import DeviceLostError, InputError, RlxError, UnsupportedOpError
from rlxpy.frontends import (  # noqa: F401  (they fill TRANSLATORS)
    torch_fx_ops,
    torch_fx_ops_cnn,
    torch_fx_ops_grad,
    torch_fx_ops_nn,
    torch_fx_ops_resize,
    torch_fx_ops_signal,
)
from rlxpy.frontends.torch_fx_stitch import split_graph
from rlxpy.frontends.torch_fx_translate import FxTranslator, Translation, evaluate_host, to_numpy
from rlxpy.ir.passes.dynamic import bind_graph

ON_UNSUPPORTED = ("fallback", "error")
EXECUTORS = ("gpu", "reference")
#: What a CompiledGraph is to aot_autograd: a graph that needs no gradients, or a training pair's half.
ROLES = ("inference", "forward", "backward")
#: Compiled executables kept per graph (each holds an arena with its own copy of the weights).
MAX_SIGNATURES = 4
_WARNED: set[str] = set()
_LIVE: list[weakref.ref] = []  # CompiledGraphs in creation order (weak: dynamo owns them)


class RlxpyFallbackWarning(UserWarning):
    """A captured graph runs in eager torch because rlxpy cannot take it (the message says why)."""


class RlxpyGraphBreakWarning(RlxpyFallbackWarning):
    """Part of a captured graph runs in eager torch (the message names the ops and the share on rlxpy)."""


def _warn_once(message: str, category: type[Warning] = RlxpyFallbackWarning) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, category, stacklevel=3)


@functools.cache
def decompositions() -> dict:
    """torch's core-aten decompositions, minus the ops rlxpy translates whole (faster and exact),
    backward ops included (torch_fx_ops_grad.WHOLE)."""
    from torch._decomp import core_aten_decompositions

    aten = torch.ops.aten
    keep = {aten._scaled_dot_product_flash_attention_for_cpu.default,
            aten.scaled_dot_product_attention.default,
            aten._scaled_dot_product_attention_math.default, aten.silu.default, aten._fused_rms_norm.default,
            aten.rms_norm.default, aten.gelu.default, aten.native_layer_norm.default, aten.layer_norm.default,
            aten._softmax.default, aten.softmax.int, aten._log_softmax.default,
            aten.hardswish.default, aten.hardsigmoid.default}
    keep |= {getattr(aten, name).default for name in torch_fx_ops_grad.WHOLE}
    return {op: fn for op, fn in core_aten_decompositions().items() if op not in keep}


def rlxpy_backend(gm: fx.GraphModule, example_inputs: Sequence[Any], options: dict | None = None,
                  on_unsupported: str | None = None, executor: str | None = None, **compile_options: Any
                  ) -> Callable:
    """The dynamo backend. ``on_unsupported`` ("fallback" or "error") and ``executor`` ("gpu", or
    "reference" to run the translated graph with rlxpy's numpy reference, for debugging) come as
    keywords or in torch.compile's ``options``; other options go to ``rlxpy.compile``."""
    settings = dict(options or {})
    policy = on_unsupported or settings.pop("on_unsupported", "fallback")
    runner = executor or settings.pop("executor", "gpu")
    if policy not in ON_UNSUPPORTED:
        raise ValueError(f"on_unsupported must be one of {ON_UNSUPPORTED}, got {policy!r}")
    if runner not in EXECUTORS:
        raise ValueError(f"executor must be one of {EXECUTORS}, got {runner!r}")
    settings.update(compile_options)
    settings["executor"] = runner
    static = [i for i, x in enumerate(example_inputs)
              if isinstance(x, torch.nn.Parameter) or getattr(x, "_dynamo_static_input_type", None)]
    from torch._dynamo.backends.common import aot_autograd

    torch_fx_ops_resize.keep_interpolate(gm, example_inputs)  # Resize whole where no gradient is needed

    def compiler(role: str) -> Callable:
        return functools.partial(_compile_graph, role=role, policy=policy, dynamo_static=static,
                                 options=settings)

    return aot_autograd(fw_compiler=compiler("forward"), bw_compiler=compiler("backward"),
                        inference_compiler=compiler("inference"),
                        decompositions=decompositions())(gm, example_inputs)


def make_backend(on_unsupported: str = "fallback", executor: str = "gpu", **compile_options: Any) -> Callable:
    """A backend with its policy bound: ``torch.compile(m, backend=make_backend("error"))``."""
    return functools.partial(rlxpy_backend, on_unsupported=on_unsupported, executor=executor,
                             **compile_options)


def compiled_graphs() -> list[CompiledGraph]:
    """The live CompiledGraphs, oldest first (for inspection: translations, compiles, eager calls)."""
    alive = [graph for graph in (ref() for ref in _LIVE) if graph is not None]
    _LIVE[:] = [weakref.ref(graph) for graph in alive]
    return alive


def _static_indices(dynamo_static: list[int]) -> set[int]:
    """Which forward-graph inputs are weights: aot_autograd's own record when it has one."""
    context = torch._guards.TracingContext.try_get()
    metadata = getattr(context, "fw_metadata", None) if context is not None else None
    indices = getattr(metadata, "static_input_indices", None)
    if indices is not None:
        return set(indices)
    return set(dynamo_static)  # aot_autograd keeps dynamo's input order for inference graphs


def _compile_graph(gm: fx.GraphModule, example_inputs: Sequence[Any], role: str, policy: str,
                   dynamo_static: list[int], options: dict) -> Callable:
    """One of aot_autograd's graphs as a boxed callable (aot_autograd frees the arguments it hands
    over). A backward graph has no weights among its inputs: every input changes per call."""
    from functorch.compile import make_boxed_func  # torch's public home of it; imported with torch's compiler

    static = set() if role == "backward" else _static_indices(dynamo_static)
    try:
        translation = FxTranslator(gm, static, name=f"torch_fx_{role}").translate()
    except UnsupportedOpError as e:
        if policy == "fallback":  # a graph break: the parts rlxpy takes still run on rlxpy
            split = split_graph(gm, static, lambda part, tr: CompiledGraph(part, tr, policy, options, role))
            if split is not None:
                _warn_once(split.message(), RlxpyGraphBreakWarning)
                return make_boxed_func(split)
        return make_boxed_func(_unsupported(e, policy, gm.forward))
    return make_boxed_func(CompiledGraph(gm, translation, policy, options, role))


def _unsupported(error: UnsupportedOpError, policy: str, eager: Callable) -> Callable:
    """What a graph rlxpy cannot take compiles to: torch's own forward (with a warning), or, with
    on_unsupported="error", a function raising the error at the call (dynamo would otherwise wrap an
    error raised while compiling in its BackendCompilerFailed)."""
    if policy == "error":
        def raise_unsupported(*args: Any) -> Any:
            raise error
        return raise_unsupported
    _warn_once(f"rlxpy: running a captured graph in eager torch: {error}")
    return eager


class CompiledGraph:
    """The callable handed back to aot_autograd: one translated graph, compiled per shape signature.
    ``role`` says which graph it is (ROLES); ``calls`` counts the calls rlxpy ran, ``eager_calls`` those
    torch ran."""

    def __init__(self, gm: fx.GraphModule, translation: Translation, policy: str, options: dict,
                 role: str = "inference") -> None:
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {role!r}")
        self.gm = gm
        self.translation = translation
        self.role = role
        self.policy = policy
        self.options = dict(options)
        self.executor = self.options.pop("executor", "gpu")
        _LIVE.append(weakref.ref(self))
        self.executables: OrderedDict[tuple, Any] = OrderedDict()
        self.compiles = 0
        self.calls = 0
        self.eager_calls = 0
        self._weights: dict[str, np.ndarray] | None = None
        self._host: dict[fx.Node, torch.Tensor] = {}
        self._weights_key: tuple | None = None
        self._uploaded: dict[tuple, tuple | None] = {}
        self._broken: str | None = None

    @property
    def graph(self) -> rlxpy.Graph:
        return self.translation.graph

    def __call__(self, *args: Any) -> list[Any]:
        if self._broken is not None:
            return self._eager(args)
        try:
            symbols, binding = self.binding(args)
            inputs = self.convert_inputs(args, binding)
        except UnsupportedOpError as e:  # this call's values only (an int64 beyond int32): torch runs it
            if self.policy == "error":
                raise
            _warn_once(f"rlxpy: running a call in eager torch: {e}")
            return self._eager(args)
        try:
            self._refresh_weights(args)
            outputs: dict[str, np.ndarray] = {}
            if self.graph.outputs:
                outputs = self._run(binding, inputs)
        except RlxError as e:  # the graph cannot compile or run here: torch runs it from now on
            if self.policy == "error":
                raise
            self._broken = str(e)
            _warn_once(f"rlxpy: running a captured graph in eager torch from now on: {e}")
            return self._eager(args)
        self.calls += 1
        return [self._output(spec, outputs, symbols) for spec in self.translation.outputs]

    def _run(self, binding: dict[str, int], inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            return self.executable(binding).run(inputs)
        except DeviceLostError:  # the next compile gets a new device: compile again, once
            self.executables.clear()
            self._uploaded.clear()
            return self.executable(binding).run(inputs)

    def _eager(self, args: Sequence[Any]) -> list[Any]:
        self.eager_calls += 1
        return list(self.gm(*args))

    # -- one call ------------------------------------------------------------------------------
    def binding(self, args: Sequence[Any]) -> tuple[dict, dict[str, int]]:
        """(sympy symbol -> size, rlxpy symbol name -> size) for this call's inputs."""
        import sympy

        symbols = {}
        for symbol, (index, axis) in self.translation.sym_sources.items():
            value = args[index] if axis is None else args[index].shape[axis]
            symbols[symbol] = sympy.Integer(int(value))
        binding = {}
        for name, expr in self.translation.sym_exprs.items():
            result = expr.xreplace(symbols)
            if not result.is_number:
                raise UnsupportedOpError(f"dynamic dim {name}: cannot evaluate {result} from the inputs")
            binding[name] = int(result)
        return symbols, binding

    def convert_inputs(self, args: Sequence[Any], binding: dict[str, int]) -> dict[str, np.ndarray]:
        inputs = {}
        graph = self.graph
        for spec in self.translation.inputs:
            value = args[spec.index]
            if not isinstance(value, torch.Tensor):
                raise InputError(f"input {spec.name}: expected a tensor, got {type(value).__name__}")
            node = graph[spec.name]
            dtype = node.dtype
            array = to_numpy(value, dtype, f"input {spec.name}")
            want = tuple(binding.get(d.name, d) if not isinstance(d, int) else d for d in node.shape)
            if tuple(array.shape) != want:
                raise InputError(f"input {spec.name}: shape {list(array.shape)} does not match the traced "
                                 f"shape {list(want)}")
            if spec.index_bound is not None and array.size:
                bound = spec.index_bound
                bound = bound if isinstance(bound, int) else binding[bound.name]
                low, high = int(array.min()), int(array.max())
                if low < 0 or high >= bound:
                    raise IndexError(f"input {spec.name}: index out of range: values [{low}, {high}] index a "
                                     f"dim of {bound} (torch raises IndexError here)")
            inputs[spec.name] = array
        return inputs

    def executable(self, binding: dict[str, int]) -> Any:
        key = tuple(sorted(binding.items()))
        if key in self.executables:
            self.executables.move_to_end(key)
            exe = self.executables[key]
        else:
            graph = bind_graph(self.graph, binding) if binding else self.graph
            exe = _ReferenceRunner(graph) if self.executor == "reference" \
                else rlxpy.compile(graph, **self.options)
            self.compiles += 1
            self.executables[key] = exe
            while len(self.executables) > MAX_SIGNATURES:
                dropped, old = self.executables.popitem(last=False)
                self._uploaded.pop(dropped, None)
                if hasattr(old, "destroy"):
                    old.destroy()
        if self._uploaded.get(key) != self._weights_key:
            for name, value in (self._weights or {}).items():
                exe.set_param(name, value)
            self._uploaded[key] = self._weights_key
        return exe

    # -- weights -----------------------------------------------------------------------------------
    def _refresh_weights(self, args: Sequence[Any]) -> None:
        """Evaluate the host values (weights and what is computed from them) when a weight changed."""
        indices = sorted({i for i in self.translation.static_indices if i < len(args)})
        key = tuple((i, id(args[i]), args[i].data_ptr(), _version(args[i]), tuple(args[i].shape))
                    for i in indices if isinstance(args[i], torch.Tensor))
        if key == self._weights_key and self._weights is not None:
            return
        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        values: dict[fx.Node, torch.Tensor] = dict(self.translation.constants)
        for node in self.translation.host_nodes:
            if node not in values:
                values[node] = args[placeholders.index(node)] if node.op == "placeholder" \
                    else evaluate_host(node, values)
        self._host = values
        self._weights = {spec.name: to_numpy(values[spec.node], spec.dtype, spec.name)
                         for spec in self.translation.params}
        self._weights_key = key

    # -- outputs -----------------------------------------------------------------------------------
    def _output(self, spec: Any, outputs: dict[str, np.ndarray], symbols: dict) -> Any:
        if spec.kind == "const":
            return spec.value
        if spec.kind == "sym":
            return int(spec.value.xreplace(symbols))
        if spec.kind == "host":
            return self._host[spec.value].clone()
        result = torch.from_numpy(outputs[spec.value])
        if spec.dtype is not None and result.dtype != spec.dtype:
            result = result.to(spec.dtype)
        if spec.device is not None and spec.device.type != "cpu" and spec.device.type != "meta":
            result = result.to(spec.device)
        return result


def _version(tensor: torch.Tensor) -> int | bytes:
    """The in-place update counter. Inference tensors have none, so theirs is a fingerprint of up to
    256 evenly spaced elements (an in-place update inside inference_mode that leaves all of them
    unchanged would go unnoticed: keep weights as normal tensors to rule that out)."""
    if not tensor.is_inference():
        return tensor._version
    flat = tensor.detach().reshape(-1)
    step = max(1, flat.numel() // 256)
    return flat[::step][:256].cpu().numpy().tobytes()


class _ReferenceRunner:
    """The executable interface over rlxpy's numpy reference interpreter (executor="reference")."""

    def __init__(self, graph: rlxpy.Graph) -> None:
        self.graph = graph
        self.params: dict[str, np.ndarray] = {}

    def set_param(self, name: str, value: np.ndarray) -> None:
        self.params[name] = value

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from rlxpy.ir.reference import run_reference

        return run_reference(self.graph, inputs, self.params)

    def destroy(self) -> None:
        self.params.clear()


def _register() -> None:
    """Make ``torch.compile(model, backend="rlxpy")`` work once this module is imported."""
    from torch._dynamo import list_backends, register_backend

    if "rlxpy" not in list_backends(exclude_tags=()):
        register_backend(rlxpy_backend, name="rlxpy")


_register()

__all__ = ["CompiledGraph", "RlxpyFallbackWarning", "RlxpyGraphBreakWarning", "compiled_graphs",
           "decompositions", "make_backend", "rlxpy_backend"]
