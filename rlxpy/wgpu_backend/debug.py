"""Dispatch report, NaN trace and node dumps. Data first (``Report.rows``), text second."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from rlxpy import env
from rlxpy.ir import ops

if TYPE_CHECKING:
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
        "shadow_mib": sum(exe._params[name].nbytes for name in exe.shadowed) / 2**20,
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


def node_values(exe: WgpuExecutable, inputs: Mapping[str, Any]) -> dict[int, np.ndarray]:
    """Every node's value after one run of a keep-all twin (nothing shares memory)."""
    from rlxpy.wgpu_backend.executable import WgpuExecutable

    if exe._debug_twin is None:
        exe._debug_twin = WgpuExecutable(exe.source_graph, exe.device, True, f16_weights=exe.shadowed)
    twin = exe._debug_twin
    for name in exe._params_set:
        node = exe._params[name]
        twin.set_param_bytes(name, exe.arena.read(exe.schedule.node_offset(node.id), node.nbytes))
    twin.run(inputs)
    return {n.id: twin._read_node(n) for n in twin.graph.nodes}


def first_nan_node(exe: WgpuExecutable, inputs: Mapping[str, Any]) -> dict[str, Any] | None:
    """The first node (in schedule order) whose output holds NaN/Inf while its inputs do not."""
    values = node_values(exe, inputs)
    graph = exe._debug_twin.graph  # type: ignore[union-attr]
    for node in graph.nodes:
        nan, inf, _ = _finite_summary(values[node.id])
        if nan or inf:
            inputs_ok = all(sum(_finite_summary(values[i])[:2]) == 0 for i in node.inputs)
            flat = values[node.id].ravel()
            index = int(np.flatnonzero(~np.isfinite(flat))[0])
            return {
                "node": node.name,
                "op": type(node.op).__name__,
                "shape": list(node.shape),
                "nan": nan,
                "inf": inf,
                "first_index": index,
                "inputs_finite": inputs_ok,
                "inputs": [graph.nodes[i].name for i in node.inputs],
            }
    return None


def after_run_debug(exe: WgpuExecutable, inputs: Mapping[str, Any]) -> None:
    if exe._keep_all:
        return
    if env.PROFILE and not getattr(exe, "_profiling", False):
        from rlxpy.wgpu_backend.profile import profile

        exe._profiling = True
        try:
            print(profile(exe, inputs).text(2), file=sys.stderr)
        finally:
            exe._profiling = False
    if env.NAN_TRACE:
        values = node_values(exe, inputs)
        graph = exe._debug_twin.graph  # type: ignore[union-attr]
        shown = 0
        for node in graph.nodes:
            nan, inf, _ = _finite_summary(values[node.id])
            if nan or inf:
                print(
                    f"rlxpy NaN trace: {node.name} ({type(node.op).__name__}) {list(node.shape)}: "
                    f"{nan} NaN, {inf} Inf; inputs {[graph.nodes[i].name for i in node.inputs]}",
                    file=sys.stderr,
                )
                shown += 1
                if shown >= int(env.NAN_TRACE) * 5:
                    break
        if not shown:
            print("rlxpy NaN trace: every node finite", file=sys.stderr)
    if env.DUMP_NODES:
        values = node_values(exe, inputs)
        graph = exe._debug_twin.graph  # type: ignore[union-attr]
        for node in graph.nodes[: int(env.DUMP_NODES_LIMIT)]:
            if isinstance(node.op, ops.Constant):
                continue
            nan, inf, biggest = _finite_summary(values[node.id])
            extra = f" first={values[node.id].ravel()[:8].tolist()}" if env.DUMP_FLAT else ""
            print(
                f"rlxpy dump: {node.name:<32} {type(node.op).__name__:<16} max|x|={biggest:.6g} "
                f"nan={nan} inf={inf}{extra}",
                file=sys.stderr,
            )
