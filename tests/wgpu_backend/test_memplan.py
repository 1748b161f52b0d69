"""The memory plan, property-tested without a GPU."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import rlxpy
from rlxpy.wgpu_backend.arena import plan_arena
from rlxpy.wgpu_backend.memplan import Buffer, align_up, place

buffers = st.lists(
    st.tuples(st.integers(0, 5000), st.integers(0, 40), st.integers(0, 40)), min_size=1, max_size=40,
).map(lambda rows: [Buffer(i, size, min(a, b), max(a, b)) for i, (size, a, b) in enumerate(rows)])


@settings(max_examples=300, deadline=None)
@given(buffers, st.sampled_from([4, 16, 256]))
def test_live_buffers_never_overlap(bufs, alignment):
    plan = place(bufs, alignment)
    for buf in bufs:
        assert plan.offsets[buf.key] % alignment == 0
        assert plan.offsets[buf.key] + buf.size <= plan.size
    for a in bufs:
        for b in bufs:
            if a.key < b.key and a.overlaps_in_time(b) and a.size and b.size:
                a0, b0 = plan.offsets[a.key], plan.offsets[b.key]
                assert a0 + a.size <= b0 or b0 + b.size <= a0, (a, b, a0, b0)


@settings(max_examples=200, deadline=None)
@given(buffers)
def test_arena_is_at_most_the_sum_of_sizes(bufs):
    plan = place(bufs, 256)
    assert plan.size <= sum(align_up(b.size, 256) for b in bufs)
    assert 0.0 <= plan.saving <= 1.0


def deep_chain(depth: int = 64, width: int = 1024) -> rlxpy.Graph:
    g = rlxpy.Graph("deep")
    x = g.input("x", [width])
    w = g.param("w", [width])
    for i in range(depth):
        x = g.mul(g.add(x, w, name=f"add{i}"), w, name=f"mul{i}")
    g.output(x)
    return g


def test_deep_graph_reuses_dead_tensors():
    g = deep_chain()
    plan = plan_arena(g)
    # 128 intermediates of 4 KiB each fit in a handful of slots once dead ones are reused
    assert plan.plan.saving > 0.9, plan.plan
    print(f"deep chain: {plan.plan.total_requested} B requested, {plan.plan.size} B planned, "
          f"saving {plan.plan.saving:.0%}")


def test_inputs_params_and_outputs_are_never_reused():
    g = deep_chain(depth=8)
    plan = plan_arena(g)
    pinned = [n.id for n in g.nodes if n.name in ("x", "w")]
    for node in g.nodes:
        # inputs/params: no other tensor ever; outputs: nothing born after them
        for keep in pinned + [o for o in g.outputs if o < node.id]:
            if node.id != keep:
                a, b = plan.offsets[node.id], plan.offsets[keep]
                assert a + node.nbytes <= b or b + g.nodes[keep].nbytes <= a, (node.name, g.nodes[keep].name)


def test_views_alias_their_root():
    g = rlxpy.Graph()
    x = g.input("x", [4, 6])
    r = g.reshape(x, [24])
    y = g.add(r, r)
    g.output(y)
    plan = plan_arena(g)
    assert plan.offsets[r.id] == plan.offsets[x.id]


def test_contiguous_narrow_is_a_view_and_strided_one_is_not(device):
    import numpy as np

    g = rlxpy.Graph()
    row = g.input("row", [1, 12])
    mat = g.input("mat", [3, 12])
    a = g.narrow(row, 1, 4, 5, name="a")  # one row: a contiguous run
    b = g.narrow(mat, 1, 4, 5, name="b")  # three rows: strided, needs a copy
    g.output(g.add(a, 1.0, name="a1"), g.add(b, 1.0, name="b1"))
    plan = plan_arena(g)
    assert plan.offsets[a.id] == plan.offsets[row.id] + 16
    exe = rlxpy.compile(g)
    assert [s.node for s in exe.schedule.steps].count("a") == 0
    assert [s.node for s in exe.schedule.steps].count("b") == 1
    r, m = np.arange(12, dtype=np.float32)[None], np.arange(36, dtype=np.float32).reshape(3, 12)
    out = exe.run({"row": r, "mat": m})
    np.testing.assert_array_equal(out["a1"], r[:, 4:9] + 1)
    np.testing.assert_array_equal(out["b1"], m[:, 4:9] + 1)
