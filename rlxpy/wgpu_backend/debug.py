"""Dispatch report, NaN trace and node dumps. Data first (``Report.rows``), text second.

The NaN trace and the dumps explain a run by running it again on a keep-all twin (every tensor
kept alive, nothing shares memory): the twin gets the executable's params (weights and KV caches,
copied on the GPU) and exactly the inputs of the run, GPU feeds included, and computes the same
outputs. A cache row the run wrote is written again with the same values, so the twin sees the
state the run saw.
"""

from __future__ import annotations

import re
import sys
import weakref
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from rlxpy import env
from rlxpy.ir import ops

if TYPE_CHECKING:
    from rlxpy.ir.graph import Graph, Node
    from rlxpy.wgpu_backend.executable import WgpuExecutable

KIND_LETTER = {"gpu": "G", "copy": "C", "host": "H"}


@dataclass
class Report:
    summary: dict[str, Any]
    rows: list[dict[str, Any]] = field(default_factory=list)

    def text(self, level: int = 1) -> str:
        s = self.summary
        kinds = s["steps_by_kind"]
        line = (
            f"rlxpy: {s['steps']} steps ({kinds.get('G', 0)} G, {kinds.get('C', 0)} C, {kinds.get('H', 0)} H)"
            f" | arena {s['arena_mib']:.1f} MiB (plan saves {s['plan_saving'] * 100:.0f}%)"
            f" | {s['windows']} window(s) | staged {s['staged_mib']:.1f} MiB | {s['kernels']} kernels"
            f"{_shadow_text(s)} | compile {s['compile_ms']:.0f} ms on {s['device']}"
        )
        lines = [line]
        if level >= 2:
            timed = any("gpu_ms" in r or "host_ms" in r for r in self.rows)
            header = f"{'#':>5}  k {'kernel':<22} {'node':<30} {'out shape':<18} {'grid':<16} {'window':<16}"
            lines.append(header + (f" {'ms':>9} {'total':>9}" if timed else ""))
            total = 0.0
            for r in self.rows:
                window = f"{r['window_base'] / 2**20:.1f}M+{r['window_size'] / 2**20:.1f}M"
                ms = r.get("gpu_ms", r.get("host_ms"))
                timing = ""
                if ms is not None:
                    total += ms
                    timing = f" {ms:9.4f} {total:9.3f}"
                lines.append(
                    f"{r['index']:>5}  {r['kind']} {r['kernel']:<22.22} {r['node']:<30.30} "
                    f"{r['out_shape']:<18.18} {str(r['grid']):<16} {window:<16}{timing}"
                )
        if level >= 2 and s["host_kernels"]:
            lines.append("host steps: " + ", ".join(f"{k} ×{n}" for k, n in s["host_kernels"].items()))
        return "\n".join(lines)


def _shadow_text(summary: dict[str, Any]) -> str:
    count = summary.get("shadow_params", 0)
    return f" | f16 shadow: {count} params, {summary['shadow_mib']:.1f} MiB" if count else ""


def build_report(exe: WgpuExecutable) -> Report:
    steps = exe.schedule.steps
    kinds = Counter(KIND_LETTER[s.kind] for s in steps)
    plan = exe.schedule.arena.plan
    rows = [
        {
            "index": i,
            "kind": KIND_LETTER[s.kind],
            "kernel": s.kernel,
            "node": s.node,
            "label": s.label,
            "out_shape": s.out_shape,
            "grid": s.grid if s.kind == "gpu" else "-",
            "window_base": s.window[0],
            "window_size": s.window[1],
        }
        for i, s in enumerate(steps)
    ]
    staged = sum(s.copy[2] for s in steps if s.copy is not None)
    summary = {
        "steps": len(steps),
        "steps_by_kind": dict(kinds),
        "arena_mib": exe.arena.size / 2**20,
        "plan_bytes": plan.size,
        "plan_requested_bytes": plan.total_requested,
        "plan_saving": plan.saving,
        "windows": len({s.window for s in steps if s.kind == "gpu"}),
        "staged_mib": staged / 2**20,
        "kernels": len({s.source for s in steps if s.kind == "gpu"}),
        "compile_ms": exe.compile_seconds * 1e3,
        "device": exe.device.name,
        "host_steps": kinds.get("H", 0),
        "shadow_params": len(exe.shadowed),
        "shadow_mib": sum(exe.param_nbytes(name) for name in exe.shadowed) / 2**20,
        "host_kernels": dict(Counter(s.kernel for s in steps if s.kind == "host")),
    }
    return Report(summary, rows)


def print_report(exe: WgpuExecutable) -> None:
    level = env.report_level()
    print(build_report(exe).text(level), file=sys.stderr)
    if level >= 3:
        seen = set()
        for s in exe.schedule.steps:
            if s.kind == "gpu" and s.source not in seen:
                seen.add(s.source)
                print(f"--- {s.kernel} ---\n{s.source}", file=sys.stderr)


def _finite_summary(value: np.ndarray) -> tuple[int, int, float]:
    if value.dtype.kind != "f" or value.size == 0:
        return 0, 0, float(np.abs(value).max()) if value.size else 0.0
    bad_nan = int(np.isnan(value).sum())
    bad_inf = int(np.isinf(value).sum())
    finite = value[np.isfinite(value)]
    return bad_nan, bad_inf, float(np.abs(finite).max()) if finite.size else float("nan")


_TWINS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_SAID: set[str] = set()


def say_once(text: str) -> None:
    if text not in _SAID:
        _SAID.add(text)
        print(text, file=sys.stderr)


def twin_of(exe: WgpuExecutable) -> WgpuExecutable:
    """The keep-all twin of ``exe`` (compiled at the first use, kept while ``exe`` lives)."""
    twin = _TWINS.get(exe)
    if twin is None:
        with env.override(RLX_DISPATCH_REPORT=0, RLX_WGPU_SCHEDULE=0):
            twin = exe.keep_all_twin()
        _TWINS[exe] = twin
    return twin


class NodeValues:
    """The twin's node values after re-running one run, read on demand (weights are big)."""

    def __init__(self, exe: WgpuExecutable, inputs: Mapping[str, Any], outputs: Iterable[str] | None) -> None:
        self.twin = twin_of(exe)
        exe.copy_params_to(self.twin)
        outputs = None if outputs is None else list(outputs)
        self.twin.run(inputs, outputs)
        self.graph: Graph = self.twin.graph
        self.nodes: list[Node] = self.twin.needed_nodes(outputs)
        self._cache: dict[int, np.ndarray] = {}

    def __getitem__(self, node_id: int) -> np.ndarray:
        if node_id not in self._cache:
            self._cache[node_id] = self.twin.read_node(self.graph.nodes[node_id])
        return self._cache[node_id]


def node_values(exe: WgpuExecutable, inputs: Mapping[str, Any],
                outputs: Iterable[str] | None = None) -> dict[int, np.ndarray]:
    """Every computed node's value (by node id) after re-running a run on the keep-all twin."""
    values = NodeValues(exe, inputs, outputs)
    return {n.id: values[n.id] for n in values.nodes}


def _is_source(node: Node) -> bool:
    return isinstance(node.op, (ops.Input, ops.Param, ops.Constant))


def _bad(value: np.ndarray) -> bool:
    return value.dtype.kind == "f" and not np.isfinite(value).all()


_LAYER_PART = re.compile(r"(?:l|layer|h|blk|block)?(\d+)")


def layer_of(name: str) -> int | None:
    """The layer index in a node name: the first part, not the last, that is a number or ``l3``
    (``decode.3.attn_norm``, ``transformer_h_0_attn``, ``/h.0/attn/MatMul``, BERT's ``l3.qkv``;
    not ``add_12``, whose number only counts nodes)."""
    parts = [p for p in re.split(r"[._/:]+", name) if p]
    for part in parts[:-1]:
        match = _LAYER_PART.fullmatch(part)
        if match:
            return int(match.group(1))
    return None


def nan_nodes(values: NodeValues) -> list[dict[str, Any]]:
    """Every computed node whose output holds NaN/Inf, in schedule order; sources (params,
    inputs) are not listed themselves but named as the bad inputs of the node that reads them."""
    found = []
    for node in values.nodes:
        if _is_source(node) or not _bad(values[node.id]):
            continue
        nan, inf, _ = _finite_summary(values[node.id])
        flat = values[node.id].ravel()
        first = int(np.flatnonzero(~np.isfinite(flat))[0])
        bad_inputs = [values.graph.nodes[i] for i in node.inputs if _bad(values[i])]
        found.append({
            "node": node.name,
            "op": type(node.op).__name__,
            "layer": layer_of(node.name),
            "shape": list(node.shape),
            "nan": nan,
            "inf": inf,
            "first_index": first,
            "index": tuple(int(i) for i in np.unravel_index(first, values[node.id].shape)),
            "inputs_finite": not bad_inputs,
            "inputs": [values.graph.nodes[i].name for i in node.inputs],
            "bad_inputs": [f"{n.name} ({_kind(n)})" for n in bad_inputs],
        })
    return found


def _kind(node: Node) -> str:
    return type(node.op).__name__.lower() if _is_source(node) else type(node.op).__name__


def describe(found: dict[str, Any]) -> str:
    """``node (Op) [shape], layer L: n NaN, m Inf at [index]; reads NaN from x (param)``."""
    layer = "" if found["layer"] is None else f", layer {found['layer']}"
    reads = f"; reads NaN/Inf from {', '.join(found['bad_inputs'])}" if found["bad_inputs"] else \
        "; its inputs are finite"
    return (f"{found['node']} ({found['op']}) {found['shape']}{layer}: {found['nan']} NaN, {found['inf']} Inf"
            f" (first at {list(found['index'])}){reads}")


def first_nan_node(exe: WgpuExecutable, inputs: Mapping[str, Any],
                   outputs: Iterable[str] | None = None) -> dict[str, Any] | None:
    """The first computed node (in schedule order) whose output holds NaN/Inf, or None."""
    found = nan_nodes(NodeValues(exe, inputs, outputs))
    return found[0] if found else None


def explain_values(exe: WgpuExecutable, inputs: Mapping[str, Any],
                   outputs: Iterable[str] | None) -> dict[str, Any] | None:
    """RLX_WGPU_NAN_TRACE / RLX_WGPU_DUMP_NODES after a run (as ``exe.flags`` has them); returns the
    first NaN node (NaN trace)."""
    flags = exe.flags
    values = NodeValues(exe, inputs, outputs)
    first = None
    if flags.nan_trace:
        found = nan_nodes(values)
        first = found[0] if found else None
        for k, f in enumerate(found[: int(flags.nan_trace) * 5]):
            print(f"rlxpy NaN trace: {describe(f)}{' <- the first bad node' if k == 0 else ''}",
                  file=sys.stderr)
        if not found:
            print(f"rlxpy NaN trace: every node finite ({len(values.nodes)} nodes)", file=sys.stderr)
    if flags.dump_nodes:
        # computed nodes only: params would repeat the weights (raw GGUF bytes for quantised ones)
        shown = [n for n in values.nodes if not isinstance(n.op, (ops.Constant, ops.Param))]
        shown = shown[: int(flags.dump_nodes_limit)]
        for node in shown:
            nan, inf, biggest = _finite_summary(values[node.id])
            extra = f" first={values[node.id].ravel()[:8].tolist()}" if flags.dump_flat else ""
            print(
                f"rlxpy dump: {node.name:<32} {type(node.op).__name__:<16} max|x|={biggest:.6g} "
                f"nan={nan} inf={inf}{extra}",
                file=sys.stderr,
            )
    return first
