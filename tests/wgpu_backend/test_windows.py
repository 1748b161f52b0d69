"""Bind-window math (windows.py) and the window planning of compiler.lower_graph: no GPU.

Property tests on random layouts: every window is aligned, within the cap and the arena, and
covers every unit the node touches directly or through its staged copy; staged copies land in
free bytes (never on a tensor alive at that node) and never on each other. A CPU simulator runs
whole compiled schedules of random graphs (element-wise ops and matmuls) under random binding
caps, reading and writing only through each step's window, and must match the numpy reference.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import rlxpy
from rlxpy.errors import LimitError
from rlxpy.ir.reference import REFERENCE, run_reference
from rlxpy.wgpu_backend import windows
from rlxpy.wgpu_backend.arena import is_view, pinned, plan_arena
from rlxpy.wgpu_backend.compiler import liveness, lower_graph, prepare
from rlxpy.wgpu_backend.kernels.params import KERNELS
from rlxpy.wgpu_backend.memplan import Buffer, align_up, place
from rlxpy.wgpu_backend.schedule import DeviceFacts
from rlxpy.wgpu_backend.windows import Access, Region, WindowPlan

ALIGN = 256
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def overlaps(a: Region, b: Region) -> bool:
    return a.offset < b.end and b.offset < a.end and a.size > 0 and b.size > 0


# -- random layouts: live buffers side by side, some of them the node's tensors, some dead -------------
@st.composite
def layouts(draw):
    """(units, live regions, dead regions, arena size, window): disjoint aligned buffers in a row."""
    count = draw(st.integers(2, 9))
    sizes = draw(st.lists(st.integers(1, 24), min_size=count, max_size=count))
    kinds = draw(st.lists(st.sampled_from(["node", "live", "dead"]), min_size=count, max_size=count))
    if "node" not in kinds:
        kinds[0] = "node"
    regions, cursor = [], 0
    for size, kind in zip(sizes, kinds):
        gap = draw(st.integers(0, 3)) * ALIGN
        regions.append((Region(cursor + gap, size * ALIGN - draw(st.integers(0, 3)) * 4), kind))
        cursor += gap + size * ALIGN
    arena = cursor + draw(st.integers(0, 4)) * ALIGN
    accesses = [Access(i, r.offset, r.size, written=(i == 0))
                for i, (r, k) in enumerate(regions) if k == "node"]
    units = windows.merge_units(accesses)
    need = sum(align_up(u.size, ALIGN) for u in units)
    window = draw(st.integers(max(need, ALIGN) // ALIGN, max(arena, need) // ALIGN + 1)) * ALIGN
    live = [r for r, k in regions if k != "dead"]
    dead = [r for r, k in regions if k == "dead"]
    return units, live, dead, max(arena, window), window


def free_function(live, arena):
    def free_between(lo, hi):
        return windows.complement(sorted(r for r in live if r.offset < hi and r.end > lo), lo, hi, ALIGN)
    return free_between


def check_plan(plan: WindowPlan, units, live, arena, window):
    assert plan.base % ALIGN == 0 and plan.size == window
    assert 0 <= plan.base and plan.base + window <= arena
    staged = {s.unit: s.slot for s in plan.staged}
    slots = []
    for unit in units:
        if unit in staged:
            slot = Region(staged[unit], unit.size)
            assert slot.offset % ALIGN == 0
            assert windows.covers(plan.base, window, slot.offset, slot.size), "staged copy outside the window"
            assert not any(overlaps(slot, r) for r in live), "staging overwrites a live tensor"
            assert not any(overlaps(slot, other) for other in slots), "two staged copies overlap"
            slots.append(slot)
        else:
            assert windows.covers(plan.base, window, unit.offset, unit.size), "unit not in window nor staged"
    scratch = Region(*plan.scratch)
    if scratch.size:
        assert windows.covers(plan.base, window, scratch.offset, scratch.size)
        assert not any(overlaps(scratch, r) for r in [*live, *slots])


@FAST
@given(layouts())
def test_plan_window_covers_every_unit_and_stages_only_into_free_bytes(layout):
    units, live, dead, arena, window = layout
    try:
        plan = windows.plan_window(units, arena, window, ALIGN, free_function(live, arena), "n (Test)")
    except windows.NoRoom as e:
        # one gap beside the biggest unit always makes room: insert it and plan again
        spans = [(r.offset, r.offset + align_up(r.size, ALIGN)) for r in live + dead]
        cut, size = windows.gap_request(e.units, windows.cut_points(spans), window, ALIGN, "n (Test)")
        moved = [(cut, size)]
        units = [windows.Unit(windows.shift(u.offset, moved), u.size,
                              tuple(Access(a.id, windows.shift(a.offset, moved), a.size, a.written)
                                    for a in u.parts))
                 for u in units]
        live = [Region(windows.shift(r.offset, moved), r.size) for r in live]
        arena += size
        plan = windows.plan_window(units, arena, window, ALIGN, free_function(live, arena), "n (Test)")
        assert plan.staged, "a gap was needed, so something is staged"
        event("needed a gap")
    event(f"staged={bool(plan.staged)}")
    check_plan(plan, units, live, arena, window)


@FAST
@given(st.integers(1, 1 << 34), st.integers(1, 1 << 32), st.sampled_from([4, 32, 256, 1024]))
def test_window_size_is_aligned_and_within_the_cap(arena, cap, alignment):
    if cap < alignment:
        with pytest.raises(LimitError, match="below the offset alignment"):
            windows.window_size(arena, cap, alignment)
        return
    window = windows.window_size(arena, cap, alignment)
    assert window % alignment == 0 and 0 < window <= cap and window <= align_up(arena, alignment)


@FAST
@given(st.integers(0, 1 << 20), st.integers(0, 1 << 16), st.integers(1, 64), st.integers(1, 64))
def test_cover_base_contains_the_span_or_reports_none(lo, length, window_units, extra_units):
    window = window_units * ALIGN
    arena = window + extra_units * ALIGN + align_up(lo + length, ALIGN)
    base = windows.cover_base(lo, lo + length, arena, window, ALIGN)
    if lo + length - lo // ALIGN * ALIGN <= window:
        assert base is not None
    if base is not None:
        assert base % ALIGN == 0 and windows.covers(base, window, lo, length) and base + window <= arena


@FAST
@given(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 20)), min_size=1, max_size=12))
def test_cut_points_never_split_a_span(raw):
    spans = [(s * 64, (s + n) * 64) for s, n in raw]
    cuts = windows.cut_points(spans)
    for cut in cuts:
        assert not any(s < cut < e for s, e in spans)
    for s, e in spans:  # a span's ends are cuts unless another span strictly contains them
        for x in (s, e):
            if e > s and not any(a < x < b for a, b in spans):
                assert x in cuts


@FAST
@given(st.lists(st.tuples(st.integers(1, 5000), st.integers(0, 20), st.integers(0, 20)), min_size=1,
                max_size=12), st.data())
def test_gaps_keep_a_valid_memory_plan(raw, data):
    buffers = [Buffer(i, size, min(a, b), max(a, b)) for i, (size, a, b) in enumerate(raw)]
    plan = place(buffers, ALIGN)
    spans = [(plan.offsets[b.key], plan.offsets[b.key] + align_up(b.size, ALIGN)) for b in buffers]
    cuts = windows.cut_points(spans + [(plan.size, plan.size)])
    chosen = data.draw(st.lists(st.sampled_from(cuts), max_size=3, unique=True))
    gaps = sorted((c, data.draw(st.integers(1, 4)) * ALIGN) for c in chosen)
    moved = {b.key: windows.shift(plan.offsets[b.key], gaps) for b in buffers}
    for a in buffers:
        for b in buffers:
            if a.key < b.key and a.overlaps_in_time(b) and a.size and b.size:
                ra, rb = Region(moved[a.key], a.size), Region(moved[b.key], b.size)
                assert not overlaps(ra, rb)
    for cut, size in gaps:  # nothing lands inside an inserted gap
        start = windows.shift(cut, gaps) - size
        assert not any(overlaps(Region(start, size), Region(moved[b.key], b.size)) for b in buffers)


def test_merge_units_joins_views_and_in_place_outputs():
    units = windows.merge_units([Access(1, 0, 512), Access(2, 0, 512), Access(3, 1024, 100, True),
                                 Access(4, 1024, 100)])
    assert [(u.offset, u.size, len(u.parts)) for u in units] == [(0, 512, 2), (1024, 100, 2)]
    assert units[1].read and units[1].written and units[0].read and not units[0].written
    plan = WindowPlan(0, 4096, (windows.Staging(units[1], 2048),))
    assert plan.relocations() == {3: 2048, 4: 2048} and plan.staged_bytes == 100


def test_check_fits_names_the_op_its_tensors_and_the_limit():
    units = windows.merge_units([Access(1, 0, 3000, name="w"), Access(2, 4096, 2000, True, name="y")])
    with pytest.raises(LimitError, match=r"mm \(MatMul\): its tensors need 0\.005 MiB .*w 0\.003 MiB.*"
                                         r"y 0\.002 MiB.*at most 0\.004 MiB"):
        windows.check_fits(units, 4096, ALIGN, "mm (MatMul)")
    windows.check_fits(units, 5120, ALIGN, "mm (MatMul)")


def test_gap_request_without_a_close_cut_is_a_limit_error():
    units = windows.merge_units([Access(1, 4096, 2048, name="w"), Access(2, 0, 256, True, name="y")])
    with pytest.raises(LimitError, match="no cut point"):
        windows.gap_request(units, [0, 40960], 4096, ALIGN, "mm (MatMul)")
    assert windows.gap_request(units, [0, 4096, 6144], 4096, ALIGN, "mm (MatMul)") == (4096, 256)
    assert windows.gap_request(units, [0, 6144], 4096, ALIGN, "mm (MatMul)") == (6144, 256)


def test_liveness_frees_dead_buffers_only():
    live = windows.Liveness([(0, 512, 0, 9), (512, 512, 2, 4), (1024, 512, 5, 7)])
    assert live.busy(3, 0, 2048) == [Region(0, 1024)]
    assert live.free(3, 0, 2048, ALIGN) == [Region(1024, 1024)]
    assert live.free(6, 256, 2048, ALIGN) == [Region(512, 512), Region(1536, 512)]


# -- whole schedules on a CPU simulator -------------------------------------------------------------------
INPUT_FIELDS = {"elementwise_unary": ("x",), "elementwise_binary": ("a", "b"),
                "matmul_tiled": ("a", "w", "bias"), "matmul_skinny": ("a", "w", "bias"),
                "elementwise_copy_words": ("x",), "elementwise_unary_vec4": ("x",),
                "elementwise_binary_vec4": ("a", "b")}


def simulate(schedule, feeds: dict[int, np.ndarray], seed: int) -> np.ndarray:
    """Run a compiled schedule on a numpy arena: every GPU step reads its inputs and writes its output
    at the word offsets of its uniforms, relative to its window, and must stay inside the window."""
    graph = schedule.graph
    arena = np.random.default_rng(seed).standard_normal(schedule.arena.size // 4).astype(np.float32)
    for node_id, value in feeds.items():
        start = schedule.node_offset(node_id) // 4
        arena[start: start + value.size] = value.ravel()
    for step in schedule.steps:
        if step.kind == "copy":
            src, dst, nbytes = step.copy
            arena[dst // 4: (dst + nbytes) // 4] = arena[src // 4: (src + nbytes) // 4].copy()
            continue
        assert step.kind == "gpu" and step.window[1] == schedule.window_size
        base, size = step.window
        assert base % ALIGN == 0 and base + size <= schedule.arena.size
        fields = KERNELS[step.kernel].params.unpack(step.uniforms)
        node = graph[step.node]
        if step.kernel == "elementwise_copy_words":
            assert step.copy is not None
            data = window_view(arena, step, fields["x"], fields["n"]).copy()
            window_view(arena, step, fields["y"], fields["n"])[:] = data
            continue
        inputs = [graph.nodes[i] for i in node.inputs]
        names = INPUT_FIELDS[step.kernel][: len(inputs)]
        args = [window_view(arena, step, fields[f], x.numel).reshape(x.shape).copy()
                for f, x in zip(names, inputs)]
        out = np.asarray(REFERENCE[type(node.op)](node.op, args, node), dtype=np.float32)
        window_view(arena, step, fields["y"], node.numel)[:] = out.ravel()
    return arena


def window_view(arena: np.ndarray, step, start: int, count: int) -> np.ndarray:
    """``count`` words at word offset ``start`` of the step's window; they must lie inside it."""
    base, size = step.window
    assert start + count <= size // 4, f"{step.label}: an access runs past the window"
    return arena[base // 4 + start: base // 4 + start + count]


@st.composite
def graphs(draw):
    """A random DAG of element-wise ops and matmuls over [rows, cols] tensors; some params large."""
    rows, cols = draw(st.integers(1, 3)), draw(st.sampled_from([7, 33, 64, 100]))
    g = rlxpy.Graph("random")
    values = {"x0": np.random.default_rng(1).standard_normal((rows, cols)).astype(np.float32)}
    pool = [g.input("x0", [rows, cols])]
    params = {}
    for i in range(draw(st.integers(2, 9))):
        kind = draw(st.sampled_from(["add", "mul", "sub", "relu", "tanh", "matmul", "linear", "param"]))
        a = pool[draw(st.integers(0, len(pool) - 1))]
        b = pool[draw(st.integers(0, len(pool) - 1))]
        if kind == "param":
            params[f"p{i}"] = np.random.default_rng(i).standard_normal((rows, cols)).astype(np.float32)
            pool.append(g.param(f"p{i}", [rows, cols]))
        elif kind in ("add", "mul", "sub"):
            pool.append(getattr(g, kind)(a, b))
        elif kind in ("relu", "tanh"):
            pool.append(getattr(g, kind)(a))
        else:
            weight = np.random.default_rng(i).standard_normal((cols, cols)) / cols
            params[f"w{i}"] = weight.astype(np.float32)
            w = g.param(f"w{i}", [cols, cols])
            if kind == "matmul":
                pool.append(g.matmul(a, w))
            else:
                params[f"b{i}"] = np.random.default_rng(i + 50).standard_normal(cols).astype(np.float32)
                pool.append(g.linear(a, w, g.param(f"b{i}", [cols]), activation="relu"))
    outs = [pool[-1], *draw(st.lists(st.sampled_from(pool[1:]), max_size=2))]
    g.output(*dict.fromkeys(o for o in outs if o is not pool[0] or len(pool) == 1))
    return g, values, params


def unit_need(node, graph, arena) -> int:
    from rlxpy.wgpu_backend.compiler import accesses
    return sum(align_up(u.size, ALIGN) for u in windows.merge_units(accesses(node, graph, arena)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs(), st.floats(0.0, 1.2), st.booleans())
def test_random_schedules_under_a_binding_cap_match_the_reference(case, fraction, keep_all):
    g, values, params = case
    graph = prepare(g)
    base_plan = plan_arena(graph, ALIGN, keep_all=keep_all)
    nodes = [n for n in graph.nodes if not (pinned(n) or is_view(n, graph))]
    need = max([unit_need(n, graph, base_plan) for n in nodes] + [ALIGN])
    cap = align_up(int(need + fraction * max(base_plan.size - need, 0)), ALIGN)
    schedule = lower_graph(graph, DeviceFacts(max_binding=cap, storage_align=ALIGN), keep_all=keep_all)
    assert schedule.window_size <= cap and schedule.window_size % ALIGN == 0
    check_schedule_staging(schedule)
    event(f"windows={'multi' if schedule.windows else 'one'} staged={bool(schedule.staged_bytes)} "
          f"gaps={bool(schedule.arena.gaps)} two_hop={any(s.kind == 'copy' for s in schedule.steps)}")
    feeds = {}
    for n in graph.nodes:
        if isinstance(n.op, rlxpy.ir.ops.Input):
            feeds[n.id] = values[n.op.name]
        elif isinstance(n.op, rlxpy.ir.ops.Param):
            feeds[n.id] = params[n.op.name]
    arena = simulate(schedule, feeds, seed=len(schedule.steps))
    want = run_reference(graph, values, params)
    for out in graph.outputs:
        node = graph.nodes[out]
        start = schedule.node_offset(out) // 4
        got = arena[start: start + node.numel].reshape(node.shape)
        np.testing.assert_allclose(got, want[node.name], rtol=1e-5, atol=1e-5, err_msg=node.name)


def check_schedule_staging(schedule):
    """Every staged slot lies in its node's window and on bytes no tensor alive at that node holds."""
    live = liveness(schedule.arena, ALIGN)
    for node_id, plan in schedule.windows.items():
        for staging in plan.staged:
            slot = Region(staging.slot, staging.unit.size)
            assert windows.covers(plan.base, plan.size, slot.offset, slot.size)
            assert not any(overlaps(slot, r) for r in live.busy(node_id, 0, schedule.arena.size))
    for step in schedule.steps:
        if step.copy is not None and step.kind == "gpu":
            src, dst, nbytes = step.copy
            assert windows.covers(step.window[0], step.window[1], src, nbytes)
            assert windows.covers(step.window[0], step.window[1], dst, nbytes)


def test_a_node_too_big_for_any_window_is_a_limit_error_naming_it():
    g = rlxpy.Graph("big")
    x = g.input("x", [4, 64])
    g.output(g.matmul(x, g.param("w", [64, 64]), name="mm"))
    with pytest.raises(LimitError, match=r"mm \(MatMul\): its tensors need 0\.018 MiB.*w 0\.016 MiB.*"
                                         r"at most 0\.016 MiB"):
        lower_graph(prepare(g), DeviceFacts(max_binding=16384, storage_align=ALIGN))


def test_weight_beyond_the_first_window_gets_a_gap_and_stages_only_activations():
    g = rlxpy.Graph("two_weights")
    x = g.input("x", [2, 64])
    h = g.matmul(x, g.param("w1", [64, 100]), name="h")
    g.output(g.matmul(h, g.param("w2", [100, 90]), name="y"))
    schedule = lower_graph(prepare(g), DeviceFacts(max_binding=40960, storage_align=ALIGN))
    kinds = [(s.kind, s.kernel, s.label.split(":")[0]) for s in schedule.steps]
    assert ("gpu", "matmul_skinny", "matmul_skinny") in kinds  # 2 rows: the skinny GEMM
    staged = [s for s in schedule.steps if s.copy is not None]
    assert staged and all(s.copy[2] <= 2 * 100 * 4 for s in staged), "only activations are staged"
    assert schedule.arena.gaps, "the weights are packed: staging needed a gap"
    assert {s.label.split(":")[0] for s in staged} <= {"stage_in", "stage_out"}


def test_a_lowerer_addressing_a_tensor_outside_the_window_is_caught(monkeypatch):
    from rlxpy.ir import ops
    from rlxpy.wgpu_backend import schedule as schedule_module
    from rlxpy.wgpu_backend.lowering.elementwise import lower_activation

    g = rlxpy.Graph("stray")
    far = g.param("far", [6000])
    x = g.input("x", [64])
    g.output(g.add(g.relu(x, name="r"), x), g.relu(far))
    graph = prepare(g)
    far_id = graph["far"].id

    def stray(node, ctx):  # also looks at a tensor that is not its input
        if node.name == "r":
            ctx.byte_offset(far_id)
        return lower_activation(node, ctx)

    monkeypatch.setitem(schedule_module.LOWERERS, ops.Activation, stray)
    with pytest.raises(LimitError, match=r"r \(Activation\): its lowerer addresses far, which lies outside"):
        lower_graph(graph, DeviceFacts(max_binding=49152, storage_align=ALIGN))


def test_f16_shadow_halves_a_weight_and_counts_aligned_tensors_against_the_cap():
    assert [windows.f16_bytes(n) for n in (0, 4, 8, 1000, 4096)] == [0, 4, 4, 500, 2048]
    # 4096 B of f32 weight + 2 tensors of 100 B: 4096 + 256 + 256 in 256-byte slots
    assert not windows.shadow_needed(4096, [100, 100], 4608, ALIGN)
    assert windows.shadow_needed(4096, [100, 100], 4607, ALIGN)  # the cap rounds down to 4352
    assert windows.shadow_fits(4096, [100, 100], 2560, ALIGN)
    assert not windows.shadow_fits(4096, [100, 100], 2559, ALIGN)


def test_a_host_step_needs_no_window_even_when_its_tensors_exceed_the_cap():
    g = rlxpy.Graph("host_big")
    x = g.input("x", [3000])
    y = g.cast(x, "f64", name="wide")  # f64 casts run on the host
    g.output(g.relu(g.input("z", [8])), y)
    schedule = lower_graph(prepare(g), DeviceFacts(max_binding=16384, storage_align=ALIGN))
    assert [s.kind for s in schedule.steps if s.node == "wide"] == ["host"]
    assert schedule.window_size == 16384
