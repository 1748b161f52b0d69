"""Graphs with symbolic dims: compile per binding, lazily at the first run .

Parameters set before the first compile are kept and replayed into each new executable, so a
new binding (a recompile) keeps the weights. The same binding reuses the compiled executable.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from rlxpy.errors import InputError
from rlxpy.ir.graph import Graph
from rlxpy.ir.passes.dynamic import bind_graph, check_binding, infer_binding
from rlxpy.wgpu_backend.executable import WgpuExecutable


class DeferredExecutable:
    def __init__(self, graph: Graph, bindings: Mapping[str, int] | None = None, **options: Any) -> None:
        graph.verify()
        self.graph = graph
        self.options = options
        self._params: dict[str, tuple[str, Any]] = {}
        self._compiled: dict[tuple[tuple[str, int], ...], Any] = {}
        self.current: Any = None
        self.binding: dict[str, int] | None = None
        self.compiles = 0
        self._param_names = {n.op.name for n in graph.params()}
        if bindings:
            check_binding(graph, bindings)
            self._activate(dict(bindings))

    def _activate(self, binding: dict[str, int]) -> Any:
        key = tuple(sorted(binding.items()))
        if key not in self._compiled:
            exe = WgpuExecutable(bind_graph(self.graph, binding), **self.options)
            self.compiles += 1
            for name, (kind, value) in self._params.items():
                (exe.set_param if kind == "array" else exe.set_param_bytes)(name, value)
            self._compiled = {key: exe}  # keep one: each holds a whole arena
        self.current = self._compiled[key]
        self.binding = binding
        return self.current

    def _check_param(self, name: str) -> None:
        if name not in self._param_names:
            raise InputError(f"no param named {name!r}; params: {sorted(self._param_names)[:20]}")

    def set_param(self, name: str, value: Any) -> None:
        self._check_param(name)
        if self.current is not None:
            self.current.set_param(name, value)
        self._params[name] = ("array", np.array(value, copy=True))

    def set_param_bytes(self, name: str, data: bytes) -> None:
        self._check_param(name)
        if self.current is not None:
            self.current.set_param_bytes(name, data)
        self._params[name] = ("bytes", bytes(data))

    def run(self, inputs: Mapping[str, Any] | None = None, outputs: Iterable[str] | None = None,
            feeds: Mapping[str, Any] | None = None) -> dict[str, np.ndarray]:
        return self.submit(inputs, outputs, feeds)()

    def submit(self, inputs: Mapping[str, Any] | None = None, outputs: Iterable[str] | None = None,
               feeds: Mapping[str, Any] | None = None) -> Callable[[], dict[str, np.ndarray]]:
        """``run`` without waiting (see WgpuExecutable.submit), compiling for this binding first."""
        return self._for(inputs or {}).submit(inputs or {}, outputs, feeds)

    def _for(self, inputs: Mapping[str, Any]) -> Any:
        """The executable of the binding that ``inputs`` imply (compiled if new)."""
        binding = infer_binding(self.graph, inputs)
        if self.binding is not None:
            binding = {**{k: v for k, v in self.binding.items() if k not in binding}, **binding}
        return self._activate(binding) if binding != self.binding or self.current is None else self.current

    def profile(self, inputs: Mapping[str, Any] | None = None, outputs: Iterable[str] | None = None,
                feeds: Mapping[str, Any] | None = None) -> Any:
        """``run`` with every step timed (see WgpuExecutable.profile), compiling for this binding first."""
        return self._for(inputs or {}).profile(inputs or {}, outputs, feeds)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or self.__dict__.get("current") is None:
            raise AttributeError(f"{name}: the graph is not compiled yet (it compiles at the first run)")
        return getattr(self.current, name)
