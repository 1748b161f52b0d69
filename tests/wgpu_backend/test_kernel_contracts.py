"""Kernel contracts (kernels/contract.py): declared in ``kernel(...)``, enforced by ``LowerCtx.dispatch``.

Lowering only (no device): a node a kernel does not take is refused naming the node, a variant past
the device's workgroup limits is refused, every registered kernel declares a contract that fits a
WebGPU-minimum device and agrees with its rendered WGSL, and the inputs an op declares mutated are
the ones its reference mutates, written back by host steps and checked for GPU steps.
"""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest
from test_kernel_sources import BUILDERS

import rlxpy
from rlxpy.errors import LimitError, RegistryError, UnsupportedOpError
from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.ops.base import MaskKind
from rlxpy.ir.reference import reference_of
from rlxpy.wgpu_backend import compiler
from rlxpy.wgpu_backend.compiler import lower_graph, prepare
from rlxpy.wgpu_backend.host_step import host_steps
from rlxpy.wgpu_backend.kernels.contract import ANY, accepts
from rlxpy.wgpu_backend.kernels.params import KERNELS
from rlxpy.wgpu_backend.lowering.attention import scratch_bytes
from rlxpy.wgpu_backend.schedule import SCRATCH, DeviceFacts, LowerCtx, scratch_needed

GPU = DeviceFacts()  # WebGPU's default limits: 256 invocations, 16 KiB of workgroup memory
CPU = DeviceFacts(cpu=True)
WIDE = DeviceFacts(max_invocations=1024, max_workgroup_storage=32768)


def lower(g: rlxpy.Graph, facts: DeviceFacts = GPU):
    return lower_graph(prepare(g), facts).steps


# -- dtypes ---------------------------------------------------------------------------------------
def test_a_wrong_dtype_is_refused_naming_the_node_and_its_types():
    g = rlxpy.Graph("bad")
    g.output(g.cumsum(g.input("x", (3, 5), "i32"), name="running"))
    with pytest.raises(UnsupportedOpError, match=r"running \(Cumsum\): reduce_cumsum_lines is lowered for "
                                                 r"f32 only, input 0 x is i32\[3, 5\] \(inputs i32\[3, 5\] "
                                                 r"-> i32\[3, 5\]\)"):
        lower(g)


def test_every_input_of_a_norm_must_be_f32():
    g = rlxpy.Graph("bad_gamma")
    x = g.input("x", (2, 8))
    g.output(g.rms_norm(x, g.param("gamma", (8,), "f16"), name="norm"))
    with pytest.raises(UnsupportedOpError, match=r"norm \(RmsNorm\): norm_rows is lowered for f32 only, "
                                                 r"input 1 gamma is f16\[8\]"):
        lower(g)


def test_packed_attention_checks_the_tensors_its_kernel_reads():
    """The kernel reads q, k and v from the packed parent (``operands``): its mask may be any word type."""
    g = rlxpy.Graph("packed")
    qkv = g.input("qkv", (1, 6, 3 * 2 * 8))
    op = ops.PackedAttention(2, 8, mask_kind=MaskKind.CUSTOM, batch=1, seq=6, row=48, q_col=0, k_col=16,
                             v_col=32)
    g.output(g.apply(op, [qkv, g.input("mask", (1, 6, 6), "bool")], "att"))
    (step,) = lower(g)
    assert step.kernel == "attention_flash_rows"  # head_dim <= 64


def test_accepts_checks_positions_the_rest_roles_and_the_output():
    class T:
        def __init__(self, name, dtype):
            self.name, self.dtype, self.type = name, dtype, f"{dtype.value}[1]"

    spec = accepts(DType.F32, rest=(DType.I32, DType.U32), out=DType.F32, gamma=DType.F32)
    x, i, h = T("x", DType.F32), T("i", DType.I32), T("h", DType.F16)
    assert spec.refusal([x, i, i], x, {}) is None
    assert spec.refusal([h], x, {})[:2] == ("input 0", h)
    assert spec.refusal([x, h], x, {})[:2] == ("input 1", h)
    assert spec.refusal([x], x, {"gamma": h})[:2] == ("gamma", h)
    assert spec.refusal([x], x, {"beta": h}) is None  # a role it says nothing about
    assert spec.refusal([x], i, {})[:2] == ("output", i)
    assert accepts().sets() == [ANY, ANY]


# -- workgroup limits -----------------------------------------------------------------------------
def test_workgroup_invocations_over_the_device_are_refused():
    g = rlxpy.Graph("wide_rows")
    g.output(g.softmax(g.input("x", (2, 2000)), name="probs"))  # 256 lanes per row
    assert [s.kernel for s in lower(g)] == ["norm_softmax_rows"]
    with pytest.raises(LimitError, match=r"probs \(Softmax\): norm_softmax_rows needs 256 invocations per "
                                         r"workgroup \(256, 1, 1\), the device allows 128"):
        lower(g, DeviceFacts(max_invocations=128))


def test_workgroup_memory_over_the_device_is_refused():
    g = rlxpy.Graph("tiles")
    g.output(g.matmul(g.input("a", (256, 64)), g.input("w", (64, 256)), name="proj"))
    (step,) = lower(g)
    assert step.kernel == "matmul_tiled"
    with pytest.raises(LimitError, match=r"proj \(MatMul\): matmul_tiled needs \d+ B of workgroup memory, "
                                         r"the device allows 4096 B \(inputs f32\[256, 64\], f32\[64, 256\]"):
        lower(g, DeviceFacts(max_workgroup_storage=4096))
    g = rlxpy.Graph("topk")
    g.output(g.topk(g.input("x", (4, 3000)), 3, name="best"))
    with pytest.raises(LimitError, match=r"best \(TopK\): reduce_topk needs 2048 B"):
        lower(g, DeviceFacts(max_workgroup_storage=1024))


def test_lowerers_pick_variants_that_fit_the_device():
    """The skinny GEMM's row lanes and sample's 1024 lanes are chosen from the contract (``fits``)."""
    g = rlxpy.Graph("pick")
    g.output(g.matmul(g.input("a", (2, 4096)), g.param("w", (4096, 64)), name="gemv"),
             g.sample(g.input("logits", (1, 20000)), 1.0, name="tok"))
    small = DeviceFacts(max_invocations=1024, max_workgroup_storage=4096)
    for facts, wy, lanes in ((GPU, 8, 256), (WIDE, 32, 1024), (small, 16, 256)):
        steps = {s.kernel: s for s in lower(g, facts)}
        assert f"@workgroup_size(32, {wy}, 1)" in steps["matmul_skinny"].source
        assert re.search(rf"@workgroup_size\({lanes}\)", steps["sample_rows"].source)


# -- every kernel's contract ----------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_every_kernel_declares_a_contract(name):
    kernel = KERNELS[name]
    assert all(kernel.dtypes.sets()), f"{name}: an empty dtype set"
    size, shared = kernel.launch()
    assert math.prod(size) <= GPU.max_invocations, f"{name}: default workgroup {size}"
    assert shared <= GPU.max_workgroup_storage, f"{name}: default variant needs {shared} B"
    assert set(kernel.mutates) <= set(kernel.params.names)


_SCALARS = {"f32": 4, "i32": 4, "u32": 4, "f16": 2}


def _int_expr(text: str, consts: dict[str, int]) -> int:
    """A WGSL constant integer expression (literals, ``const`` names, + - * / and parentheses)."""
    expr = re.sub(r"\b(\d+)[ui]?\b", r"\1", text)
    expr = re.sub(r"\b[A-Za-z_]\w*\b", lambda m: str(consts[m[0]]), expr)
    assert re.fullmatch(r"[\d\s+*/()-]+", expr), f"not a constant integer expression: {text!r}"
    return int(eval(expr.replace("/", "//")))  # noqa: S307 - digits and operators only


def _type_layout(text: str, consts: dict[str, int]) -> tuple[int, int]:
    """(size, alignment) of a WGSL type used for workgroup variables."""
    text = text.strip()
    if text in _SCALARS:
        return _SCALARS[text], _SCALARS[text]
    if m := re.fullmatch(r"atomic<(\w+)>", text):
        return 4, 4
    if m := re.fullmatch(r"vec([234])<(\w+)>", text):
        n, scalar = int(m[1]), _SCALARS[m[2]]
        return n * scalar, (2 if n == 2 else 4) * scalar
    if m := re.fullmatch(r"array<(.+?(?:<[^<>]*>)?),\s*([^,<>]+)>", text):
        size, align = _type_layout(m[1], consts)
        return -(-size // align) * align * _int_expr(m[2], consts), align
    raise AssertionError(f"workgroup variable of type {text!r}: not parsed")


def wgsl_launch(source: str) -> tuple[tuple[int, ...], int]:
    """(workgroup size, workgroup memory) a rendered kernel declares, by WebGPU's counting rules."""
    consts: dict[str, int] = {}
    for name, expr in re.findall(r"^const\s+(\w+)\s*(?::\s*\w+)?\s*=\s*([^;]+);", source, re.MULTILINE):
        try:
            consts[name] = _int_expr(expr, consts)
        except (AssertionError, KeyError):
            pass  # a float or boolean constant: no size is made of it
    (size,) = re.findall(r"@workgroup_size\(([^)]*)\)", source)
    dims = tuple(_int_expr(d, consts) for d in size.split(",") if d.strip())
    shared = sum(-(-_type_layout(t, consts)[0] // 16) * 16
                 for t in re.findall(r"var<workgroup>\s+\w+\s*:\s*([^;]+);", source))
    return dims + (1,) * (3 - len(dims)), shared


def _wide_variants(g: rlxpy.Graph) -> None:
    """The variants only a device past WebGPU's minimum runs: 32 skinny row lanes, 1024 sample lanes."""
    g.output(g.matmul(g.input("a", (2, 4096)), g.param("w", (4096, 64))),
             g.sample(g.input("logits", (1, 20000)), 0.7, top_k=5))


#: kernels compiled without WGSL's runtime checks (Kernel.checked): each one's indices were audited to
#: stay in range by construction; adding one to this set is a deliberate act
UNCHECKED = {"matmul_tiled", "quant_gguf_gemm", "matmul_grouped", "attention_flash", "attention_flash_rows",
             "backward_attention_stats", "backward_attention_dq", "backward_attention_dkv"}


def test_only_audited_kernels_run_without_runtime_checks():
    assert {name for name, k in KERNELS.items() if not k.checked} == UNCHECKED


def test_declared_launches_match_the_rendered_wgsl(monkeypatch):
    """Every dispatch's declared (workgroup, memory) is what its rendered WGSL declares, over the graphs
    that reach every kernel (test_kernel_sources.py) on GPU, CPU and wide adapters."""
    seen: dict[str, set] = {}
    original = LowerCtx.dispatch

    def recording(self, kernel, node, grid, subs=None, *args, **kwargs):
        source = kernel.source(**(subs or {}))
        declared, rendered = kernel.launch(subs), wgsl_launch(source)
        assert declared == rendered, f"{kernel.name} {sorted(subs or {})}: {declared}, WGSL {rendered}"
        seen.setdefault(kernel.name, set()).add(declared)
        return original(self, kernel, node, grid, subs, *args, **kwargs)

    monkeypatch.setattr(LowerCtx, "dispatch", recording)
    for name, build in {**BUILDERS, "wide": _wide_variants}.items():
        g = rlxpy.Graph(name)
        build(g)
        prepared = prepare(g)
        for facts in (GPU, CPU, WIDE):
            lower_graph(prepared, facts)
    assert set(seen) == set(KERNELS), f"not reached: {sorted(set(KERNELS) - set(seen))}"
    assert len(seen["matmul_skinny"]) > 1 and len(seen["sample_rows"]) > 1  # variants of both sizes


# -- scratch --------------------------------------------------------------------------------------
def test_the_compiler_asks_the_registry_for_scratch():
    assert SCRATCH[ops.Attention] is scratch_bytes and SCRATCH[ops.PackedAttention] is scratch_bytes
    g = rlxpy.Graph("decode")
    y = g.attention(g.input("q", (1, 32, 1, 128)), g.input("k", (1, 8, 4096, 128)),
                    g.input("v", (1, 8, 4096, 128)), 32, 128, num_kv_heads=8, mask_kind="causal")
    g.output(y)
    assert scratch_needed(g) == scratch_bytes(y, g) > 0


# -- mutated inputs -------------------------------------------------------------------------------
def _q8_0_weight(rows: int, k: int, rng: np.random.Generator) -> np.ndarray:
    blocks = np.zeros((rows, k // 32, 34), np.uint8)
    blocks[..., :2] = np.frombuffer(np.float16(0.01).tobytes(), np.uint8)
    blocks[..., 2:] = rng.integers(-100, 100, (rows, k // 32, 32)).astype(np.int8).view(np.uint8)
    return blocks.reshape(rows, -1)


def _kv_like_nodes():
    """(node, its input values) of every op that mutates inputs, plus look-alikes that do not."""
    rng = np.random.default_rng(0)
    g = rlxpy.Graph("mutating")
    pos_value = np.array([3], np.int32)
    pos = g.input("pos", (1,), "i32")
    cos, sin = g.param("cos", (16, 8)), g.param("sin", (16, 8))
    kc, vc = g.param("kc", (16, 16)), g.param("vc", (16, 16))
    x1, gamma, w = g.input("x1", (1, 32)), g.param("gamma", (32,)), g.param("w", (64, 34), "u8")
    fused = ops.FusedGgufMatMul("Q8_0", 64, 32, eps=1e-5, head_dim=16, q_width=32, kv_width=16)
    q, k, v = (g.input(n, (1, 3, 2, 4)) for n in "qkv")
    gate, beta = g.input("gate", (1, 3, 2)), g.input("beta", (1, 3, 2))
    nodes = [g.rope_kv_append(g.input("qkv", (2, 64)), kc, vc, cos, sin, pos, 16, 32, 16),
             g.apply(fused, [x1, w, gamma, kc, vc, cos, sin, pos]),
             g.apply(ops.FusedGgufMatMul("Q8_0", 64, 32, eps=1e-5), [x1, w, gamma]),
             g.gated_delta_net(q, k, v, gate, beta, state=g.param("state", (1, 2, 4, 4))),
             g.gated_delta_net(q, k, v, gate, beta),
             g.cache_write(kc, g.input("rows", (2, 16)), pos)]
    for node in nodes:
        values = []
        for i in node.inputs:
            src = g.nodes[i]
            if src.name == "pos":
                values.append(pos_value)
            elif src.name == "w":
                values.append(_q8_0_weight(64, 32, rng))
            elif src.name in ("gate",):
                values.append(-rng.uniform(0.1, 0.5, src.shape).astype(np.float32))
            else:
                values.append(rng.standard_normal(src.shape).astype(np.float32))
        yield node, values


def test_mutated_inputs_are_what_the_reference_mutates():
    seen = []
    for node, values in _kv_like_nodes():
        args = [v.copy() for v in values]
        reference_of(type(node.op))(node.op, args, node)
        changed = tuple(i for i, (a, b) in enumerate(zip(values, args)) if not np.array_equal(a, b))
        assert changed == node.op.mutated_inputs(), f"{node.name}: mutates {changed}"
        seen.append(changed)
    assert (1, 2) in seen and (5,) in seen and () in seen


def test_host_steps_write_back_the_mutated_inputs():
    node, values = next((n, v) for n, v in _kv_like_nodes() if isinstance(n.op, ops.GatedDeltaNet))
    graph_nodes = {i: v for i, v in zip(node.inputs, values)}
    written = {}

    class IO:
        def read(self, node_id):
            return graph_nodes[node_id]

        def write(self, node_id, value):
            written[node_id] = value

    ctx = LowerCtx(rlxpy.Graph("host"), {}, 0, GPU)
    (step,) = host_steps(node, ctx)
    step.host(IO())
    state = node.inputs[5]
    assert set(written) == {node.id, state}
    assert not np.array_equal(written[state], graph_nodes[state])


def test_a_gpu_step_must_write_what_the_op_mutates(monkeypatch):
    g = rlxpy.Graph("append")
    pos = g.input("pos", (1,), "i32")
    kc, vc = g.param("kc", (16, 16)), g.param("vc", (16, 16))
    cos, sin = g.param("cos", (16, 8)), g.param("sin", (16, 8))
    g.output(g.rope_kv_append(g.input("qkv", (2, 64)), kc, vc, cos, sin, pos, 16, 32, 16, name="qkv_rope"))
    assert [s.kernel for s in lower(g)] == ["rope_kv_append"]
    monkeypatch.setitem(KERNELS, "rope_kv_append", dataclasses.replace(KERNELS["rope_kv_append"], mutates=()))
    with pytest.raises(RegistryError, match=r"qkv_rope \(RopeKvAppend\): the op mutates input 1 \(kc\)"):
        lower(g)


def test_staged_windows_copy_mutated_inputs_back():
    g = rlxpy.Graph("append")
    pos = g.input("pos", (1,), "i32")
    kc, vc = g.param("kc", (16, 16)), g.param("vc", (16, 16))
    y = g.rope_kv_append(g.input("qkv", (2, 64)), kc, vc, g.param("cos", (16, 8)), g.param("sin", (16, 8)),
                         pos, 16, 32, 16)
    g.output(y)
    prepared = prepare(g)
    node = prepared[y.name]
    arena = compiler.plan_arena(prepared, 256)
    units = compiler.windows.merge_units(compiler.accesses(node, prepared, arena))
    by_id = {p.id: u for u in units for p in u.parts}
    for cache in (prepared["kc"].id, prepared["vc"].id):
        assert by_id[cache].read and by_id[cache].written  # staged in before the node and out after
    assert not by_id[prepared["qkv"].id].written

