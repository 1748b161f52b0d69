"""Every registered kernel, rendered in the variants its lowerers ask for: the text is finished WGSL.

The graphs below are only lowered (no device): together they reach every kernel in ``KERNELS``,
each GGUF type's decoder, each generic quant scheme, both GEMM access modes and both kernel
variants (GPU and CPU adapters). A rendered source keeps no ``{{KEY}}``, no ``{T}``-style
format slot, no directive (``#include``, ``#params``), and has exactly one uniform struct: the
one generated from the kernel's Python layout.
"""

from __future__ import annotations

import ast
import re

import pytest

import rlxpy
from rlxpy.ir.dtype import DType
from rlxpy.ir.ops.backward import GatedDeltaNetBackward, PoolBackward, SelectiveScanBackward
from rlxpy.ir.ops.base import ActKind, BinaryOp, CmpOp
from rlxpy.ir.ops.region import ChainStep, chain_input, chain_step
from rlxpy.wgpu_backend import lowering  # noqa: F401  (registers every kernel)
from rlxpy.wgpu_backend.compiler import lower_graph, prepare
from rlxpy.wgpu_backend.kernels.params import INCLUDE_DIR, KERNEL_DIR, KERNELS, parse_wgsl_structs
from rlxpy.wgpu_backend.lowering.quant_gguf import GPU_TYPES
from rlxpy.wgpu_backend.schedule import DeviceFacts

GPU = DeviceFacts()
CPU = DeviceFacts(cpu=True)


def _elementwise(g: rlxpy.Graph) -> None:
    x, i, u = g.input("x", [5, 7]), g.input("i", [5, 7], "i32"), g.input("u", [5, 7], "u32")
    h = g.input("h", [5, 7], "f16")
    x4 = g.input("x4", [4, 6])  # 24 elements at aligned offsets: the 16-byte (vec4) variants
    outs = [g.gelu(x), g.activation(x, "sin"), g.pow(x, x), g.pow(i, i), g.div(u, u),
            g.gelu(x4), g.pow(x4, x4), g.cast(x4, "i32"),
            g.add(g.compare(x, x, "lt"), g.compare(i, u, "ge")), g.compare(i, i, "ne"),
            g.where(g.compare(x, 0.0, "gt"), i, i), g.cast(x, "i32"), g.cast(i, "bool"), g.cast(x, "f16"),
            g.cast(h, "i32"), g.cast(g.cast(x, "bf16"), "f32"), g.copy(x)]
    g.output(*outs)


def _matmul(g: rlxpy.Graph) -> None:
    a, w, bias = g.input("a", [70, 16]), g.param("w", [16, 24]), g.param("b", [24])
    odd, w_odd = g.input("odd", [70, 15]), g.param("w_odd", [15, 9])
    half = g.param("w16", [16, 24], "f16")
    few = g.input("few", [3, 16])
    g.output(g.linear(a, w, bias, "relu"), g.matmul(odd, w_odd), g.matmul(few, w), g.matmul(few, half))
    g.output(g.matmul(g.input("wide", [24, 1024]), g.input("tokens", [1024, 20])))  # split K
    experts = g.param("experts", [3, 16, 24])
    g.output(g.grouped_matmul(a, experts, g.input("expert_ids", [70], "i32")))
    g.output(g.grouped_matmul(few, experts, g.input("few_ids", [3], "i32")))  # the few-rows kernel


def _norm_reduce(g: rlxpy.Graph) -> None:
    x, long = g.input("x", [6, 20]), g.input("long", [3, 300])
    tall = g.input("tall", [200, 20])
    gamma, beta = g.param("gamma", [20]), g.param("beta", [20])
    g.output(g.layer_norm(x, gamma, beta), g.rms_norm(x, gamma), g.softmax(x), g.softmax(long),
             g.softmax(tall, axis=0), g.sum(x, [1]), g.mean(long, [1]), g.reduce(tall, "max", [0]),
             g.cumsum(x), g.cumsum(long, exclusive=True), g.argmax(long), g.topk(long, 100),
             g.sample(long, temperature=0.7, top_k=5), g.argmax(g.input("logits", [1, 9000])))
    image, channel = g.input("image", [2, 4, 5, 3]), g.param("channel", [4])
    g.output(g.group_norm(image, 2, channel, channel),
             g.batch_norm(image, channel, channel, channel, channel))


def _attention_rope_kv(g: rlxpy.Graph) -> None:
    q, k = g.input("q", [1, 2, 70, 16]), g.input("k", [1, 2, 70, 16])
    qd, kd = g.input("qd", [1, 4, 1, 16]), g.input("kd", [1, 2, 600, 16])
    mask = g.input("mask", [1, 70, 70])
    cos, sin = g.param("cos", [96, 8]), g.param("sin", [96, 8])
    pos = g.input("pos", [1], "i32")
    kc, vc = g.param("kc", [96, 32]), g.param("vc", [96, 32])
    qkv = g.input("qkv", [2, 96])
    ql = g.input("ql", [1, 2, 70, 80])  # head_dim > 64: attention_flash (16: attention_flash_rows)
    g.output(g.attention(q, k, k, 2, 16, mask_kind="custom", mask=mask), g.attention(ql, ql, ql, 2, 80),
             g.attention(qd, kd, kd, 4, 16, num_kv_heads=2, mask_kind="causal"),
             g.attention(qd, g.input("kr", [1, 2, 100, 16]), g.input("vr", [1, 2, 100, 16]), 4, 16,
                         num_kv_heads=2),  # few keys: no split, attention_decode_row
             g.rope(q, cos, sin, 16, position=pos), g.cache_write(kc, g.input("rows", [2, 32]), pos),
             g.rope_kv_append(qkv, kc, vc, cos, sin, pos, 16, 32, 32, interleaved=True))


def _shape(g: rlxpy.Graph) -> None:
    x, idx = g.input("x", [6, 4]), g.input("idx", [3], "i32")
    h = g.input("h", [6, 5], "f16")
    fidx = g.input("fidx", [2])
    g.output(g.transpose(x, [1, 0]), g.concat([h, h], 1), g.gather(x, idx), g.gather(h, fidx),
             g.scatter_add(x, g.input("sidx", [6], "i64"), 4))
    g.output(g.resize(g.input("image", [1, 2, 3, 4]), (5, 7), "linear", "half_pixel"))


def _scan(g: rlxpy.Graph) -> None:
    """SelectiveScan: one chunk (decode, carried state) and the chunked scan's three passes; its
    backward's two kernels; GatedDeltaNet step by step and in chunks."""
    for steps, carry in ((1, True), (300, False)):
        x, bc = g.input(f"x{steps}", [1, steps, 8]), g.input(f"bc{steps}", [1, steps, 4])
        state = g.param(f"state{steps}", [1, 8, 4]) if carry else None
        a = g.param(f"A{steps}", [8, 4])
        g.output(g.selective_scan(x, x, a, bc, bc, state=state))
    g.output(g.apply(SelectiveScanBackward(4), [x, x, a, bc, bc, x]))
    q, gate = g.input("q", [1, 3, 2, 4]), g.input("gate", [1, 3, 2])
    g.output(g.gated_delta_net(q, q, q, gate, gate, state=g.param("delta_state", [1, 2, 4, 4])))
    q, gate = g.input("q20", [1, 20, 2, 4]), g.input("gate20", [1, 20, 2])  # the chunked form
    g.output(g.gated_delta_net(q, q, q, gate, gate))


def _conv(g: rlxpy.Graph) -> None:
    """Conv on every kernel (forward and transposed; a deep one splits K, one with many channels over
    1024 positions takes conv_gemm_taps, a 3x3 one over 512 2x2 tiles Winograd), both pool kernels,
    im2col."""
    x, x1 = g.input("cx", [1, 4, 9, 9]), g.input("cx1", [2, 3, 40])
    g.output(g.conv(x, g.param("cw", [32, 4, 3, 3]), 2, 1, bias=g.param("cb", [32]), activation="relu"),
             g.conv(x, g.param("dw", [4, 1, 3, 3]), groups=4),
             g.conv_transpose(x, g.param("tw", [4, 2, 2, 2]), 2),
             g.conv_transpose(x1, g.param("tw1", [3, 24, 3]), 2), g.max_pool(x, 3, 2, 1, ceil_mode=True),
             g.global_avg_pool(g.input("big", [1, 2, 30, 30])), g.im2col(x, 3, padding=1),
             g.conv(g.input("deep", [1, 64, 7, 7]), g.param("deep_w", [64, 64, 3, 3]), padding=1),
             g.conv(g.input("wide", [1, 256, 32, 32]), g.param("wide_w", [128, 256, 3, 3]), padding=1),
             g.conv(g.input("wino", [2, 128, 32, 32]), g.param("wino_w", [128, 128, 3, 3]), padding=1))


def _loss_backward(g: rlxpy.Graph) -> None:
    """The loss family and the backward family's kernels (norm parameter gradients over two chunks)."""
    x, t, dy = g.input("lx", [200, 20]), g.input("lt", [200], "i32"), g.input("ldy", [200, 20])
    gamma = g.param("lgamma", [20])
    cos, sin = g.param("lcos", [210, 10]), g.param("lsin", [210, 10])
    g.output(g.log_softmax(x), g.cross_entropy(x, t), g.cross_entropy_backward(x, t, g.input("lrows", [200])),
             g.rms_norm_backward_input(x, gamma, dy), g.layer_norm_backward_gamma(x, dy),
             g.rms_norm_backward_beta(x, gamma, dy), g.rope_backward(dy, cos, sin, 20),
             g.cumsum_backward(dy, 0), g.gather_backward(dy, t, 7),
             g.activation_backward(x, dy, "gelu_approx"), g.activation_backward(x, dy, "tanh", True))
    px = g.input("px", [1, 2, 5, 5])
    pooled = g.max_pool(px, 2)
    g.output(g.apply(PoolBackward.of(pooled.op), [px, pooled, pooled]))
    dq, dgate = g.input("dq", [1, 3, 2, 4]), g.input("dgate", [1, 3, 2])
    g.output(g.apply(GatedDeltaNetBackward(4), [dq, dq, dq, dgate, dgate, dq]))
    q = g.input("aq", [1, 2, 20, 8])
    g.output(*(g.attention_backward(q, q, q, q, wrt, 2, 8, mask_kind="causal") for wrt in ("query", "value")))
    w, hyper = g.param("ow", [20]), g.input("hyper", [3])
    scale = g.grad_clip_scale([w, x], 1.0)
    g.output(scale, g.adam_step(w, w, g.param("om", [20]), g.param("ov", [20]), hyper, scale, decoupled=True),
             g.sgd_step(g.param("op", [20]), w, hyper, g.param("ob", [20]), momentum=0.9),
             g.accumulate_grad(g.param("oa", [20]), w, hyper),
             g.adam_step_group([[g.param(f"g{n}{i}", [20]) if n else w for n in ("p", "", "m", "v")]
                                for i in range(2)], hyper, scale))


def _region(g: rlxpy.Graph) -> None:
    """A region with every step kind (integer pow: T), and a batch region with the resize prologue."""
    x, i = g.input("rx", [4, 6]), g.input("ri", [4, 6], "i32")
    chain = (ChainStep.binary(BinaryOp.POW, chain_input(1), chain_input(1)),
             ChainStep.cast(DType.F32, chain_step(0)),
             ChainStep.compare(CmpOp.LT, chain_input(0), chain_step(1)),
             ChainStep.where(chain_step(2), chain_input(0), chain_step(1)),
             ChainStep.activation(ActKind.GELU, chain_step(3)))
    lows = [g.input(f"low{k}", [1, 2, 2, 3]) for k in range(2)]
    g.output(g.elementwise_region([x, i], chain),
             g.batch_elementwise_region(lows, (ChainStep.activation(ActKind.RELU, chain_input(0)),),
                                        shape=(2, 2, 4, 6), prologue="resize_nearest_2x"))


def _custom(g: rlxpy.Graph) -> None:
    g.output(g.umap_knn(g.input("pairwise", [20, 20]), 5))


def _quant_generic(g: rlxpy.Graph) -> None:
    k, n = 64, 12
    for scheme, extra in (("int8", 1), ("int8_asym", 2), ("int4", 1), ("fp8_e4m3", 0), ("fp8_e5m2", 0),
                          ("nvfp4", 2)):
        bits = 4 if scheme in ("int4", "nvfp4") else 8
        w = g.param(f"w_{scheme}", [k * n * bits // 8], "u8")
        if scheme == "nvfp4":
            scale, zp = g.param("s_nv", [k // 16 * n], "u8"), g.param("g_nv", [1], "f16")
        else:
            scale = g.param(f"s_{scheme}", [k // 32 * n]) if extra else None
            zp = g.param(f"z_{scheme}", [k // 32 * n]) if extra > 1 else None
        for rows in (2, 70):
            g.output(g.dequant_matmul(g.input(f"x_{scheme}_{rows}", [rows, k]), w, scale, zp, scheme, k, n))



def _signal(g: rlxpy.Graph) -> None:
    z, wave = g.input("z", [3, 17], "c64"), g.input("wave", [2, 900])
    spectra, filters = g.stft(wave, g.param("win", [64]), 64, 16), g.param("mel", [5, 33])
    floored = g.log_mel(spectra, filters, 2)
    g.output(g.fft(z), g.rfft(g.input("long", [2, 5000])), g.irfft(z, 30), spectra, floored,
             g.log_mel(spectra, filters), g.log_mel_backward(spectra, filters, floored, 2),
             g.welch_peaks(z, 3, 3))


def _gguf(qtype: str):
    def build(g: rlxpy.Graph) -> None:
        from rlxpy.ir.ops.quant import gguf_row_bytes

        k, n = 256, 64
        w = g.param("w", [n, gguf_row_bytes(qtype, k)], "u8")
        wu = g.param("wu", [n, gguf_row_bytes(qtype, k)], "u8")
        gamma = g.param("gamma", [k])
        x1, x3 = g.input("x1", [1, k]), g.input("x3", [3, k])
        h = g.rms_norm(x1, gamma, eps=1e-5)
        gate, up = g.dequant_matmul_gguf(h, w, qtype, n, k), g.dequant_matmul_gguf(h, wu, qtype, n, k)
        act = g.mul(g.silu(gate), up)
        experts = g.param("experts", [2, n, gguf_row_bytes(qtype, k)], "u8")
        outs = [g.add(act, g.input("res", [1, n])), g.dequant_matmul_gguf(x3, w, qtype, n, k),
                g.dequant_matmul_gguf(g.input("xt", [2100, k]), w, qtype, n, k),
                g.gather_gguf(w, g.input("idx", [4], "i32"), qtype, k),
                g.dequant_grouped_matmul(x3, experts, g.input("e", [3], "i32"), qtype, n, k)]
        # the QKV GEMV with RoPE + KV append in its epilogue
        kc, vc = g.param("kc", [16, 16]), g.param("vc", [16, 16])
        qkv = g.dequant_matmul_gguf(g.rms_norm(x1, gamma, eps=1e-5), w, qtype, 32 + 2 * 16, k)
        outs.append(g.rope_kv_append(qkv, kc, vc, g.param("cos", [16, 8]), g.param("sin", [16, 8]),
                                     g.input("pos", [1], "i32"), 16, 32, 16))
        g.output(*outs)

    return build


BUILDERS = {"elementwise": _elementwise, "matmul": _matmul, "norm_reduce": _norm_reduce,
            "attention_rope_kv": _attention_rope_kv, "shape": _shape, "conv": _conv,
            "quant_generic": _quant_generic, "loss_backward": _loss_backward,
            "scan": _scan, "region": _region, "custom": _custom, "signal": _signal,
            **{f"gguf_{qtype}": _gguf(qtype) for qtype in sorted(GPU_TYPES)}}


def rendered(name: str) -> list[tuple[str, str]]:
    """(kernel, source) of every GPU step of graph ``name``, lowered for a GPU and a CPU adapter."""
    g = rlxpy.Graph(name)
    BUILDERS[name](g)
    prepared = prepare(g)
    return [(s.kernel, s.source) for facts in (GPU, CPU) for s in lower_graph(prepared, facts).steps
            if s.kind == "gpu"]


@pytest.fixture(scope="module")
def sources() -> dict[str, list[tuple[str, str]]]:
    return {name: rendered(name) for name in BUILDERS}


def test_the_graphs_reach_every_kernel(sources):
    reached = {kernel for steps in sources.values() for kernel, _ in steps}
    assert reached == set(KERNELS), f"not reached: {sorted(set(KERNELS) - reached)}"


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_rendered_sources_are_finished_wgsl(sources, name):
    assert sources[name]
    for kernel, text in sources[name]:
        assert "{{" not in text and "}}" not in text, f"{kernel}: an unfilled placeholder"
        slot = re.search(r"\{\w+\}", text)  # a str.format / .replace slot such as {T}
        assert slot is None, f"{kernel}: a format slot {slot and slot[0]}"
        assert not re.search(r"^#(include|params)", text, re.MULTILINE), f"{kernel}: a directive is left"
        layout = KERNELS[kernel].params
        assert parse_wgsl_structs(text) == {layout.name: layout.fields}, f"{kernel}: uniform struct"
        assert f"var<uniform> p: {layout.name};" in text
        for fn in re.findall(r"^fn (\w+)\(", text, re.MULTILINE):  # an include pasted twice would repeat
            assert len(re.findall(rf"^fn {fn}\(", text, re.MULTILINE)) == 1, f"{kernel}: fn {fn} twice"


def test_every_include_resolves_and_is_used():
    names = {p.name for p in INCLUDE_DIR.glob("*.wgsl")}
    pattern = re.compile(r'^#include "([\w.{}]+)"$', re.MULTILINE)
    used = set()
    for path in [*KERNEL_DIR.glob("*.wgsl"), *INCLUDE_DIR.glob("*.wgsl")]:
        for name in pattern.findall(path.read_text()):
            template = re.compile(re.sub(r"\\\{\\\{\w+\\\}\\\}", r"\\w+", re.escape(name)) + "$")
            matches = {n for n in names if template.match(n)}
            assert matches, f"{path.name}: #include {name} matches no file in kernels/include"
            used |= matches
    assert used == names, f"include files nobody includes: {sorted(names - used)}"
    text = "".join(p.read_text() for p in [*KERNEL_DIR.glob("*.wgsl"), *INCLUDE_DIR.glob("*.wgsl")])
    assert not re.search(r"^#(?!include |params$)", text, re.MULTILINE), "a directive other than the two"


def test_python_holds_no_wgsl_functions():
    """WGSL functions live in .wgsl files: no Python string of the backend defines one."""
    backend = KERNEL_DIR.parent
    for path in [*backend.glob("*.py"), *backend.glob("*/*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert not re.search(r"\bfn \w+\(", node.value), f"{path.name}: WGSL function text in Python"
    wgsl = KERNEL_DIR / "wgsl.py"
    assert not wgsl.exists() or "fn " not in wgsl.read_text(), "wgsl.py holds WGSL function text"


@pytest.mark.parametrize("qtype", sorted(GPU_TYPES))
def test_gguf_block_geometry_comes_from_gguf_py(qtype):
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    from rlxpy.ir.ops.quant import GGUF_BLOCKS
    from rlxpy.wgpu_backend.lowering.quant_gguf_wgsl import decode_subs

    elements, nbytes = GGML_QUANT_SIZES[GGMLQuantizationType[qtype]]
    assert GGUF_BLOCKS[qtype] == (elements, nbytes)
    subs = decode_subs(qtype)
    assert subs["BLOCK_BYTES"] == nbytes and 32 << subs["UNIT_SHIFT"] == max(32, elements)
    decoder = (INCLUDE_DIR / f"quant_gguf_decode_{subs['DECODER']}.wgsl").read_text()
    if elements > 1:  # a float type's "block" is one element
        assert f"{nbytes}u" not in decoder, f"{qtype}: its block size is written in its decoder"
