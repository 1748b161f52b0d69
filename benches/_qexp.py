"""scratch: GEMV variants on the device (deleted after use)."""
import sys, time
sys.path.insert(0, "benches")
import numpy as np
import rlxpy
from rlxpy.ir.dtype import DType
from rlxpy.wgpu_backend.lowering import quant_gguf as Q
from rlxpy.wgpu_backend.kernels import params as P
from bench_quant import gpu_pass_seconds, quantised

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
    XLOADS
    let mk = 0x0f0f0f0fu;
    let dq = dot(bytes4(w0 & mk), x0) + dot(bytes4(w1 & mk), x1) + dot(bytes4(w2 & mk), x2) + dot(bytes4(w3 & mk), x3)
        + dot(bytes4((w0 >> 4u) & mk), x4) + dot(bytes4((w1 >> 4u) & mk), x5) + dot(bytes4((w2 >> 4u) & mk), x6)
        + dot(bytes4((w3 >> 4u) & mk), x7);
    let sx = dot(((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7)), vec4<f32>(1.0));
    acc[0][0] = acc[0][0] + (d * dq + mn * sx);
}
"""
XS_LOADS = " ".join(f"let x{c} = xs[{c}u * UPC + xv];" for c in range(8))
GX = "\n".join(f"let x{c} = vec4<f32>(bitcast<f32>(buf[xb + {4*c}u]), bitcast<f32>(buf[xb + {4*c+1}u]), bitcast<f32>(buf[xb + {4*c+2}u]), bitcast<f32>(buf[xb + {4*c+3}u]));" for c in range(8))
GLOBAL_LOADS = "let xb = p.x + u * 32u;\n" + GX
MODE = ["base"]
_orig = P.Kernel.source
def _patched(self, **subs):
    text = _orig(self, **subs)
    if self.name != "quant_gguf_gemv" or MODE[0] == "base":
        return text
    start, end = text.index("fn unit_dot("), text.index("@compute")
    loads = GLOBAL_LOADS if MODE[0] == "global" else XS_LOADS
    text = text[:start] + UNROLLED.replace("XLOADS", loads) + text[end:]
    if "noreduce" in MODE[0]:
        a = text.index("    for (var i = 0u; i < RR; i = i + 1u) {\n        for (var r = 0u; r < MR; r = r + 1u) {\n            let s = ")
        b = text.index("}\n", text.index("buf[y_base"))
        text = text[:a] + "    if (lane == 0u && rows_live > 0u) { buf[y_base + row0] = bitcast<u32>(acc[0][0]); }\n" + text[b + 2:]
    if "nobar" in MODE[0]:
        text = text.replace("        workgroupBarrier();\n        if (rows_live > 0u) {", "        if (rows_live > 0u) {", 1)
    if MODE[0] == "global":
        text = text.replace("for (var j = t; j < MR * KC4; j = j + 256u) {", "for (var j = t; j < 0u; j = j + 256u) {")
    if MODE[0] == "global_nobar":
        pass
    return text
P.Kernel.source = _patched

_chunk = Q.chunk_elems
def build(qtype, n, k, copies):
    Q.chunk_elems = (lambda rows, k: max(32, -(-k // 32) * 32)) if "kc32" in MODE[0] else _chunk
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
    return exe, np.abs(got - want).max() / np.abs(want).max()

def yardstick():
    g = rlxpy.Graph("ew")
    x = g.input("x", (4_423_680,))
    h = x
    for i in range(10):
        h = g.activation(h, "neg") if hasattr(g, "activation") else g.neg(h)
    g.output(h)
    exe = rlxpy.compile(g)
    exe.run({"x": np.ones(4_423_680, np.float32)})
    t = gpu_pass_seconds(exe, warmup_s=0.5) / 10
    return 2 * 4_423_680 * 4 / t / 1e9

CONFIGS = [  # mode, lanes, min_groups, team_rows, qtype, n, k, copies
    ("base", 32, 128, 1, "Q4_1", 49152, 576, 10),
    ("base", 32, 128, 4, "Q4_1", 49152, 576, 10),
    ("base", 8, 128, 1, "Q4_1", 49152, 576, 10),
    ("base", 8, 128, 4, "Q4_1", 49152, 576, 10),
    ("base", 4, 128, 1, "Q4_1", 49152, 576, 10),
    ("base", 4, 128, 4, "Q4_1", 49152, 576, 10),
    ("base", 8, 128, 4, "Q8_0", 49152, 576, 6),
    ("base", 4, 128, 4, "Q8_0", 49152, 576, 6),
    ("base", 32, 128, 1, "Q4_1", 1536, 576, 256),
    ("base", 32, 128, 1, "Q4_1", 576, 1536, 256),
    ("base", 32, 128, 1, "Q4_1", 576, 576, 256),
    ("base", 8, 128, 1, "Q4_1", 1536, 576, 256),
    ("base", 8, 128, 1, "Q4_1", 576, 1536, 256),
    ("base", 8, 128, 1, "Q4_1", 576, 576, 256),
]
print("ew yardstick GB/s", yardstick(), flush=True)
built = []
for cfg in CONFIGS:
    mode, lanes, mg, tr, qtype, n, k, copies = cfg
    MODE[0] = mode
    Q.MAX_LANES, Q.MIN_GROUPS, Q.MAX_TEAM_ROWS = lanes, mg, tr
    built.append((cfg, *build(qtype, n, k, copies)))
for rep in range(1):
    for cfg, exe, err in built:
        mode, lanes, mg, tr, qtype, n, k, copies = cfg
        t = gpu_pass_seconds(exe, warmup_s=0.2) / copies
        wb = n * k // 32 * (20 if qtype == "Q4_1" else 34)
        print(f"{mode} lanes={lanes} rows/team={tr} {qtype} {n}x{k}: {t*1e6:.2f} us {wb/t/1e9:.0f} GB/s err {err:.1e}", flush=True)
