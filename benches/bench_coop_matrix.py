"""Does wgpu's experimental cooperative-matrix feature reach the GPU's matrix units? (issue 18)

wgpu 0.32 (wgpu-native) exposes ``cooperative-matrix`` as a native feature: WGSL ``enable
wgpu_cooperative_matrix;`` with 8x8 f32 tiles (``coop_mat8x8<f32, A|B|C>``, ``coopLoad``,
``coopMultiplyAdd``, ``coopStore``), the only configuration it supports so far. This probe, standalone
(no rlxpy), multiplies square f32 matrices three ways on the same device and reports TFLOP/s and
the error against a float64 numpy product:

* ``simt``: a plain register-tiled WGSL GEMM (each invocation 4x4 outputs, 16x16 invocations);
* ``coop RxC``: one subgroup-sized workgroup per (8R x 8C) output block, R x C accumulator tiles,
  A and B tiles loaded straight from storage;
* torch CUDA in the same process when present (f32 with TF32 off, and with TF32 on).

An error near 1e-3 relative means the units round the inputs (TF32-like); near 1e-6, full f32.

    python benches/bench_coop_matrix.py [--n 4096] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import wgpu

FEATURE = "cooperative-matrix"
HEADER = """@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
@group(0) @binding(3) var<uniform> dims: vec4<u32>;  // n (square), unused x3
"""


def simt_source() -> str:
    """16x16 invocations, 64x64 outputs per workgroup, 4x4 per invocation, K steps of 16 staged."""
    return HEADER + """
var<workgroup> ta: array<f32, 1024>;  // [64 rows][16 k]
var<workgroup> tb: array<f32, 1024>;  // [16 k][64 cols]
@compute @workgroup_size(16, 16, 1)
fn main(@builtin(local_invocation_id) l: vec3<u32>, @builtin(workgroup_id) w: vec3<u32>) {
    let n = dims.x;
    let lane = l.y * 16u + l.x;
    var s: array<array<f32, 4>, 4>;
    for (var k0 = 0u; k0 < n; k0 += 16u) {
        for (var i = 0u; i < 4u; i++) {
            let e = lane + 256u * i;
            ta[e] = a[(w.y * 64u + e / 16u) * n + k0 + e % 16u];
            tb[e] = b[(k0 + e / 64u) * n + w.x * 64u + e % 64u];
        }
        workgroupBarrier();
        for (var kk = 0u; kk < 16u; kk++) {
            for (var i = 0u; i < 4u; i++) {
                let x = ta[(l.y * 4u + i) * 16u + kk];
                for (var j = 0u; j < 4u; j++) {
                    s[i][j] += x * tb[kk * 64u + l.x * 4u + j];
                }
            }
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i++) {
        for (var j = 0u; j < 4u; j++) {
            c[(w.y * 64u + l.y * 4u + i) * n + w.x * 64u + l.x * 4u + j] = s[i][j];
        }
    }
}
"""


def coop_source(rows: int, cols: int, lanes: int) -> str:
    """One workgroup (one subgroup) per (8 rows x 8 cols) block of 8x8 tiles, accumulators in registers."""
    acc = [(i, j) for i in range(rows) for j in range(cols)]
    lines = ["enable wgpu_cooperative_matrix;", HEADER, f"@compute @workgroup_size({lanes})",
             "fn main(@builtin(workgroup_id) w: vec3<u32>) {", "    let n = dims.x;",
             f"    let r0 = w.y * {8 * rows}u;", f"    let c0 = w.x * {8 * cols}u;"]
    lines += [f"    var s{i}{j} = coopLoad<coop_mat8x8<f32, C>>(&c[(r0 + {8 * i}u) * n + c0 + {8 * j}u], n);"
              for i, j in acc]
    lines.append("    for (var k = 0u; k < n; k += 8u) {")
    lines += [f"        let a{i} = coopLoad<coop_mat8x8<f32, A>>(&a[(r0 + {8 * i}u) * n + k], n);"
              for i in range(rows)]
    lines += [f"        let b{j} = coopLoad<coop_mat8x8<f32, B>>(&b[k * n + c0 + {8 * j}u], n);"
              for j in range(cols)]
    lines += [f"        s{i}{j} = coopMultiplyAdd(a{i}, b{j}, s{i}{j});" for i, j in acc]
    lines.append("    }")
    lines += [f"    coopStore(s{i}{j}, &c[(r0 + {8 * i}u) * n + c0 + {8 * j}u], n);" for i, j in acc]
    lines.append("}")
    return "\n".join(lines)


class Probe:
    def __init__(self, n: int) -> None:
        self.adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
        self.listed = FEATURE in self.adapter.features
        self.refusal = ""
        self.device = None
        if self.listed:  # wgpu-native refuses experimental features unless the device opts in
            try:
                self.device = self.adapter.request_device_sync(required_features=[FEATURE])
            except RuntimeError as error:
                self.refusal = str(error).strip().splitlines()[-1]
        self.has_coop = self.device is not None
        self.device = self.device or self.adapter.request_device_sync()
        self.n = n
        rng = np.random.default_rng(0)
        self.a = rng.standard_normal((n, n), dtype=np.float32)
        self.b = rng.standard_normal((n, n), dtype=np.float32)
        self.want = self.a.astype(np.float64) @ self.b.astype(np.float64)
        usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
        self.buf_a = self.device.create_buffer_with_data(data=self.a, usage=usage)
        self.buf_b = self.device.create_buffer_with_data(data=self.b, usage=usage)
        self.buf_c = self.device.create_buffer(size=4 * n * n, usage=usage)
        dims = np.array([n, 0, 0, 0], np.uint32)
        self.dims = self.device.create_buffer_with_data(data=dims, usage=wgpu.BufferUsage.UNIFORM)
        self.flag = self.device.create_buffer(size=16, usage=usage)

    def run(self, source: str, grid: tuple[int, int], repeat: int = 10) -> dict:
        module = self.device.create_shader_module(code=source)
        pipeline = self.device.create_compute_pipeline(layout="auto", compute={"module": module,
                                                                               "entry_point": "main"})
        group = self.device.create_bind_group(layout=pipeline.get_bind_group_layout(0), entries=[
            {"binding": i, "resource": {"buffer": buf}}
            for i, buf in enumerate((self.buf_a, self.buf_b, self.buf_c, self.dims))])

        def submit(times: int) -> None:
            encoder = self.device.create_command_encoder()
            for _ in range(times):
                encoder.clear_buffer(self.buf_c)
                pass_ = encoder.begin_compute_pass()
                pass_.set_pipeline(pipeline)
                pass_.set_bind_group(0, group)
                pass_.dispatch_workgroups(grid[0], grid[1], 1)
                pass_.end()
            self.device.queue.submit([encoder.finish()])
            self.device.queue.read_buffer(self.flag)  # waits for the work before it

        submit(1)
        got = np.frombuffer(self.device.queue.read_buffer(self.buf_c), np.float32).reshape(self.n, self.n)
        error = float(np.abs(got - self.want).max() / np.abs(self.want).max())
        submit(1)
        started = time.perf_counter()
        submit(repeat)
        seconds = (time.perf_counter() - started) / repeat
        return {"ms": seconds * 1e3, "tflops": 2 * self.n ** 3 / seconds / 1e12, "rel_error": error}


def torch_side(n: int) -> dict:
    try:
        import torch
    except ImportError:
        return {}
    if not torch.cuda.is_available():
        return {}
    out = {}
    x = torch.randn(n, n, device="cuda")
    y = torch.randn(n, n, device="cuda")
    for tf32 in (False, True):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        x @ y
        torch.cuda.synchronize()
        started = time.perf_counter()
        for _ in range(10):
            x @ y
        torch.cuda.synchronize()
        seconds = (time.perf_counter() - started) / 10
        name = "torch_tf32" if tf32 else "torch_f32"
        out[name] = {"ms": seconds * 1e3, "tflops": 2 * n ** 3 / seconds / 1e12}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4096, help="square size (a multiple of 64)")
    parser.add_argument("--json", help="write the results here as JSON")
    args = parser.parse_args()
    probe = Probe(args.n)
    info = probe.adapter.info
    results: dict = {"adapter": info["device"], "backend": info["backend_type"],
                     "coop_listed": probe.listed, "coop_enabled": probe.has_coop,
                     "coop_refusal": probe.refusal,
                     "subgroup_sizes": [info.get("subgroup_min_size"), info.get("subgroup_max_size")]}
    results["simt"] = probe.run(simt_source(), (args.n // 64, args.n // 64))
    if probe.has_coop:
        for rows, cols in ((1, 1), (2, 2), (4, 4), (4, 8)):
            try:
                grid = (args.n // (8 * cols), args.n // (8 * rows))
                results[f"coop {rows}x{cols}"] = probe.run(coop_source(rows, cols, 32), grid)
            except Exception as error:  # noqa: BLE001 - a probe: report what the driver or naga refused
                results[f"coop {rows}x{cols}"] = {"error": f"{type(error).__name__}: {error}"[:600]}
    results.update(torch_side(args.n))
    text = json.dumps(results, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
