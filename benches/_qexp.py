"""scratch: GEMV variants on the device (deleted after use)."""
import sys
sys.path.insert(0, "benches")
import numpy as np
import rlxpy
from rlxpy.ir.dtype import DType
from rlxpy.wgpu_backend.lowering import quant_gguf as Q
from bench_quant import gpu_pass_seconds, quantised

def run(qtype, n, k, copies, lanes, min_groups, team_rows):
    Q.MAX_LANES, Q.MIN_GROUPS, Q.MAX_TEAM_ROWS = lanes, min_groups, team_rows
    raw = quantised(qtype, n, k, 1)
    g = rlxpy.Graph("v")
    x = g.input("x", (1, k))
    g.output(*[g.dequant_matmul_gguf(x, g.param(f"w{i}", raw.shape, DType.U8), qtype, n, k, name=f"y{i}") for i in range(copies)])
    exe = rlxpy.compile(g)
    for i in range(copies):
        exe.set_param_bytes(f"w{i}", raw.tobytes())
    xv = np.random.default_rng(0).standard_normal((1, k)).astype(np.float32)
    got = exe.run({"x": xv})["y0"]
    from gguf import quants, GGMLQuantizationType as T
    want = xv @ quants.dequantize(raw, T[qtype]).T
    err = np.abs(got - want).max() / np.abs(want).max()
    t = gpu_pass_seconds(exe, warmup_s=0.3) / copies
    exe.destroy()
    return t, err
import re
UNROLLED = """
fn unit_dot(rb0: u32, rows_live: u32, u: u32, xv: u32) {
    let wi = (rb0 + u * 20u) >> 2u;
    let h = buf[wi];
    let d = f16_to_f32(h & 0xffffu);
    let mn = f16_to_f32(h >> 16u);
    let w0 = buf[wi + 1u];
    let w1 = buf[wi + 2u];
    let w2 = buf[wi + 3u];
    let w3 = buf[wi + 4u];
    let x0 = xs[xv]; let x1 = xs[xv + 1u]; let x2 = xs[xv + 2u]; let x3 = xs[xv + 3u];
    let x4 = xs[xv + 4u]; let x5 = xs[xv + 5u]; let x6 = xs[xv + 6u]; let x7 = xs[xv + 7u];
    let mk = 0x0f0f0f0fu;
    let dq = dot(bytes4(w0 & mk), x0) + dot(bytes4(w1 & mk), x1) + dot(bytes4(w2 & mk), x2) + dot(bytes4(w3 & mk), x3)
        + dot(bytes4((w0 >> 4u) & mk), x4) + dot(bytes4((w1 >> 4u) & mk), x5) + dot(bytes4((w2 >> 4u) & mk), x6)
        + dot(bytes4((w3 >> 4u) & mk), x7);
    let sx = dot(((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7)), vec4<f32>(1.0));
    acc[0][0] = acc[0][0] + (d * dq + mn * sx);
}
"""
from rlxpy.wgpu_backend.kernels import params as P
_orig = P.Kernel.source
def _patched(self, **subs):
    text = _orig(self, **subs)
    if self.name == "quant_gguf_gemv" and PATCH[0]:
        start = text.index("fn unit_dot(")
        end = text.index("@compute")
        text = text[:start] + UNROLLED + text[end:]
    return text
P.Kernel.source = _patched
PATCH = [False]
shapes = [("Q4_1", 49152, 576, 10), ("Q8_0", 49152, 576, 6), ("Q4_1", 1536, 576, 256), ("Q4_1", 576, 1536, 256), ("Q4_1", 576, 576, 256)]
for spec in sys.argv[1:]:
    PATCH[0] = spec.startswith("u")
    lanes, mg, tr = map(int, spec.lstrip("u").split(","))
    for qtype, n, k, copies in shapes:
        if PATCH[0] and qtype != "Q4_1":
            continue
        raw_bytes = n * k // 32 * (20 if qtype == "Q4_1" else 34)
        t, err = run(qtype, n, k, copies, lanes, mg, tr)
        print(f"lanes={lanes} min_groups={mg} team_rows={tr} {qtype} {n}x{k}: {t*1e6:.2f} us {raw_bytes/t/1e9:.0f} GB/s err {err:.1e}", flush=True)

if __name__ == "__main__" and "unrolled" in sys.argv[0:1] + sys.argv:
    pass
