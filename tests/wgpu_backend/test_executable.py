"""Executable behaviour: params, inputs, partial outputs, upload skipping, errors, debug tools."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_close, rand

import rlxpy
from rlxpy import env
from rlxpy.errors import GraphError, InputError, UnsupportedOpError
from rlxpy.ir.reference import run_reference


def mlp_graph():
    g = rlxpy.Graph("mlp2")
    x = g.input("x", [5, 7])
    h = g.linear(x, g.param("w1", [7, 9]), g.param("b1", [9]), "relu", name="h")
    y = g.matmul(h, g.param("w2", [9, 3]), name="y")
    g.output(y, h)
    params = {"w1": rand((7, 9), 1), "b1": rand((9,), 2), "w2": rand((9, 3), 3)}
    return g, params


@pytest.fixture(scope="module")
def mlp(device):
    g, params = mlp_graph()
    exe = rlxpy.compile(g)
    for k, v in params.items():
        exe.set_param(k, v)
    return g, params, exe


def test_two_layer_mlp_matches_torch(mlp):
    import torch

    g, params, exe = mlp
    x = rand((5, 7), 4)
    out = exe.run({"x": x})
    h = torch.relu(torch.from_numpy(x) @ torch.from_numpy(params["w1"]) + torch.from_numpy(params["b1"]))
    y = h @ torch.from_numpy(params["w2"])
    assert_close(out["y"], y.numpy(), 1e-4, 1e-5, "y")
    assert_close(out["h"], h.numpy(), 1e-4, 1e-5, "h")


def test_outputs_subset_reads_and_runs_only_what_it_needs(mlp):
    g, params, exe = mlp
    x = rand((5, 7), 5)
    out = exe.run({"x": x}, outputs=["h"])
    assert list(out) == ["h"]
    needed = exe._needed([exe.graph["h"]], True)[1]
    assert len(needed) < len(exe.schedule.steps)
    assert_close(out["h"], run_reference(g, {"x": x}, params)["h"], 1e-5, 1e-6)


def test_bad_inputs_raise_clear_errors_and_executable_stays_usable(mlp):
    g, params, exe = mlp
    x = rand((5, 7), 6)
    with pytest.raises(InputError, match="missing inputs: x"):
        exe.run({})
    with pytest.raises(InputError, match=r"unknown inputs \['z'\]"):
        exe.run({"x": x, "z": x})
    with pytest.raises(InputError, match=r"'x': expected shape \[5, 7\]"):
        exe.run({"x": rand((7, 5), 6)})
    with pytest.raises(InputError, match="not a graph output"):
        exe.run({"x": x}, outputs=["nope"])
    with pytest.raises(InputError, match="no param named 'w9'"):
        exe.set_param("w9", params["w1"])
    with pytest.raises(InputError, match="expected shape"):
        exe.set_param("w1", params["w2"])
    out = exe.run({"x": x})
    assert_close(out["y"], run_reference(g, {"x": x}, params)["y"], 1e-4, 1e-5)


def test_missing_param_is_reported(device):
    g, params = mlp_graph()
    exe = rlxpy.compile(g)
    exe.set_param("w1", params["w1"])
    with pytest.raises(InputError, match="params not set: b1, w2"):
        exe.run({"x": rand((5, 7))})


def test_unchanged_inputs_are_not_uploaded_again(mlp):
    g, params, exe = mlp
    x = rand((5, 7), 7)
    calls = []
    original = exe.arena.write

    def counting(offset, data):
        calls.append(offset)
        return original(offset, data)

    exe.arena.write = counting
    try:
        exe.run({"x": x})
        exe.run({"x": x})
        assert len(calls) <= 1
        with exe.flags.override(force_input_upload=1):  # the executable's copy of the flag
            exe.run({"x": x})
        assert len(calls) >= 1 + (len(calls) > 1)
        before = len(calls)
        exe.run({"x": x + 1})
        assert len(calls) == before + 1
    finally:
        exe.arena.write = original


def test_an_input_that_changes_only_past_its_first_bytes_is_uploaded(device):
    """The comparison with the last upload looks at the first 4 KiB first: a change after them counts."""
    g = rlxpy.Graph("tail")
    g.output(g.activation(g.input("x", (3, 1000)), "neg", name="y"))
    exe = rlxpy.compile(g)
    x = rand((3, 1000), 3)
    np.testing.assert_array_equal(exe.run({"x": x})["y"], -x)
    x2 = x.copy()
    x2[2, 999] += 1.0  # byte 11,996: past the first 4,096
    np.testing.assert_array_equal(exe.run({"x": x2})["y"], -x2)


def test_a_big_input_is_written_every_run_and_not_kept(device, monkeypatch):
    """Past REMEMBERED_INPUT_BYTES no copy is kept: the same array, changed in place, still counts."""
    from rlxpy.wgpu_backend import executable

    monkeypatch.setattr(executable, "REMEMBERED_INPUT_BYTES", 1024)
    g = rlxpy.Graph("big")
    g.output(g.activation(g.input("x", (3, 1000)), "neg", name="y"))
    exe = rlxpy.compile(g)
    x = rand((3, 1000), 4)
    np.testing.assert_array_equal(exe.run({"x": x})["y"], -x)
    assert "x" not in exe._last_inputs
    x[0, 0] += 1.0  # the caller's own array, changed in place
    np.testing.assert_array_equal(exe.run({"x": x})["y"], -x)


def test_unknown_op_and_unlowered_op_errors(device):
    g = rlxpy.Graph()
    with pytest.raises(GraphError, match="is not an IR op"):
        g.apply("softmax", [])
    from rlxpy.wgpu_backend.schedule import LOWERERS

    x = g.input("x", [4])
    g.output(g.copy(x, name="c"))
    saved = LOWERERS.pop(rlxpy.ops.Copy)
    try:
        with pytest.raises(UnsupportedOpError, match=r"c \(Copy\): .*inputs \[4\]"):
            rlxpy.compile(g)
    finally:
        LOWERERS[rlxpy.ops.Copy] = saved


def test_first_nan_node_names_the_culprit(device):
    g = rlxpy.Graph()
    x = g.input("x", [4])
    y = g.activation(x, "log", name="log_x")
    z = g.add(y, y, name="twice")
    g.output(z)
    exe = rlxpy.compile(g)
    found = exe.first_nan_node({"x": np.array([1.0, -1.0, 2.0, 3.0], np.float32)})
    assert found["node"] == "log_x" and found["op"] == "Activation" and found["inputs_finite"]
    assert found["first_index"] == 1
    assert exe.first_nan_node({"x": np.ones(4, np.float32)}) is None


def test_report_counts_steps_and_arena(mlp):
    _, _, exe = mlp
    report = exe.report()
    assert report.summary["steps"] == len(exe.schedule.steps) == 2
    assert report.summary["steps_by_kind"] == {"G": 2}
    assert [r["kernel"] for r in report.rows] == ["matmul_skinny", "matmul_skinny"]  # 5 rows each
    text = report.text(2)
    assert "matmul_skinny" in text and "arena" in text


def test_raw_and_wrapper_encoding_agree(device):
    g, params = mlp_graph()
    x = rand((5, 7), 8)
    results = []
    for raw in (1, 0):
        with env.override(RLX_WGPU_RAW_ENCODE=raw):
            exe = rlxpy.compile(g)
        for k, v in params.items():
            exe.set_param(k, v)
        results.append(exe.run({"x": x})["y"])
    np.testing.assert_array_equal(results[0], results[1])


def test_feeding_an_output_back_without_a_host_round_trip(device):
    g = rlxpy.Graph("counter")
    x = g.input("x", [6])
    y = g.add(x, g.param("one", [6]), name="y")
    g.param("other", [7])
    g.output(y)
    exe = rlxpy.compile(g)
    exe.set_param("one", np.ones(6, np.float32))
    exe.set_param("other", np.ones(7, np.float32))
    exe.run({"x": np.arange(6, dtype=np.float32)})
    handle = exe.handle("y")
    uploads = []
    original = exe.arena.write
    exe.arena.write = lambda offset, data: uploads.append(offset) or original(offset, data)
    try:
        for _ in range(3):
            exe.run(feeds={"x": handle}, outputs=["y"])
    finally:
        exe.arena.write = original
    assert uploads == []  # nothing went through the host
    np.testing.assert_array_equal(handle.read(), np.arange(6) + 4)
    with pytest.raises(InputError, match="types differ"):
        exe.run(feeds={"x": exe.handle("other")})
    with pytest.raises(InputError, match="not a graph input"):
        exe.run(feeds={"y": handle})


def test_feeding_an_input_its_own_slot_copies_nothing_and_sync_waits(device):
    """A feed of the input's own handle (the last run's input, left on the GPU) records no copy;
    ``sync`` returns once the submitted runs are done (their outputs are then in the arena)."""
    g = rlxpy.Graph("own_slot")
    x = g.input("x", [5])
    g.output(g.mul(x, 3.0, name="y"))
    exe = rlxpy.compile(g)
    values = np.array([1, -2, 0.5, 7, 3], np.float32)
    exe.run({"x": values})
    copies = []
    original = exe.arena.gpu_copies
    exe.arena.gpu_copies = lambda encoder, moves: copies.append(list(moves)) or original(encoder, moves)
    try:
        with exe.flags.override(dispatch_only=1):
            for _ in range(3):
                exe.run(feeds={"x": exe.handle("x")})
            exe.sync()
    finally:
        exe.arena.gpu_copies = original
    assert all(not moves for moves in copies), copies
    np.testing.assert_array_equal(exe.handle("y").read(), values * 3)
    np.testing.assert_array_equal(exe.run(feeds={"x": exe.handle("x")})["y"], values * 3)


def test_submitted_runs_in_flight_read_back_their_own_results(device):
    """submit() returns before the GPU is done: a fed run submitted before the previous one is read
    back, with readback sets of different sizes in between, still returns each run's own values."""
    g = rlxpy.Graph("counter2")
    x = g.input("x", [6])
    y = g.add(x, g.param("one", [6]), name="y")
    g.output(y, g.reshape(g.mul(y, 2.0, name="twice"), [2, 3], name="wide"))
    exe = rlxpy.compile(g)
    exe.set_param("one", np.ones(6, np.float32))
    pending = exe.submit({"x": np.zeros(6, np.float32)}, outputs=["y"])
    for step in range(1, 9):  # each run adds one to the last run's y, fed on the GPU
        outputs = ["y"] if step % 2 else ["wide", "y"]  # two pre-encoded keys, readbacks of two sizes
        following = exe.submit(feeds={"x": exe.handle("y")}, outputs=outputs)
        out = pending()  # read run `step` while run `step + 1` is in flight
        np.testing.assert_array_equal(out["y"], np.full(6, step, np.float32))
        if "wide" in out:
            np.testing.assert_array_equal(out["wide"], np.full((2, 3), 2 * step, np.float32))
        pending = following
    np.testing.assert_array_equal(pending()["y"], np.full(6, 9, np.float32))


def test_an_extent_change_between_runs_in_flight_keeps_each_runs_readback(device):
    """Changing the active extent drops the pre-encoded next run; its replacement must not take the
    readback buffer of the run still awaiting its read (it did: that run then read the next one's
    values, a slot of the batched server reporting its following token)."""
    g = rlxpy.Graph("counter_rows")
    x = g.input("x", [6])
    g.output(g.add(x, g.param("one", [6]), name="y"))
    exe = rlxpy.compile(g)
    exe.set_param("one", np.ones(6, np.float32))
    pending = exe.submit({"x": np.zeros(6, np.float32)}, outputs=["y"])
    for step in range(1, 7):
        following = exe.submit(feeds={"x": exe.handle("y")}, outputs=["y"])
        out = pending()
        exe.set_active_extent((5, 6) if step % 2 else None)  # between reading run `step` and the next submit
        np.testing.assert_array_equal(out["y"][:5], np.full(5, step, np.float32))
        pending = following
    np.testing.assert_array_equal(pending()["y"][:5], np.full(5, 7, np.float32))
    exe.set_active_extent(None)


def test_empty_inputs_and_outputs(device):
    g = rlxpy.Graph()
    x = g.input("x", [0, 3])
    g.output(g.add(x, x, name="y"), g.mul(g.input("z", [2]), 2.0, name="w"))
    exe = rlxpy.compile(g)
    out = exe.run({"x": np.zeros((0, 3), np.float32), "z": np.ones(2, np.float32)})
    assert out["y"].shape == (0, 3)
    np.testing.assert_array_equal(out["w"], [2.0, 2.0])


def test_alternating_output_sets_and_growing_readbacks_stay_correct(mlp):
    """Runs are pre-encoded per output set; switching sets and sizes must never reuse stale buffers."""
    g, params, exe = mlp
    for seed in range(6):
        x = rand((5, 7), 10 + seed)
        want = run_reference(g, {"x": x}, params)
        outputs = [["y"], ["h"], None][seed % 3]
        got = exe.run({"x": x}, outputs=outputs)
        for name, value in got.items():
            assert_close(value, want[name], 1e-4, 1e-5, name)
        exe.read_node("h")  # a synchronous read between pre-encoded runs


def test_profile_times_every_gpu_step_and_scales_with_work(device):
    g = rlxpy.Graph("prof")
    small = g.input("small", [256])
    big = g.input("big", [1 << 20])
    g.output(g.exp(small, name="e_small"), g.exp(big, name="e_big"))
    exe = rlxpy.compile(g)
    report = exe.profile({"small": rand((256,)), "big": rand((1 << 20,))})
    ms = {r["node"]: r["gpu_ms"] for r in report.rows}
    assert set(ms) == {"e_small", "e_big"} and all(v >= 0 for v in ms.values())
    assert ms["e_big"] > ms["e_small"]
    assert " ms " in report.text(2).splitlines()[1] + " "


def test_nan_trace_and_dump_flags_print_the_culprit(device, capsys):
    g = rlxpy.Graph()
    x = g.input("x", [3])
    g.output(g.add(g.activation(x, "sqrt", name="root"), 1.0, name="plus"))
    with env.override(RLX_WGPU_NAN_TRACE=1, RLX_WGPU_DUMP_NODES=1):  # copied when the executable is built
        exe = rlxpy.compile(g)
        exe.run({"x": np.array([4.0, -1.0, 9.0], np.float32)})
    err = capsys.readouterr().err
    assert "NaN trace: root (Activation) [3]: 1 NaN" in err
    assert "rlxpy dump: root" in err and "nan=1" in err


def test_run_flags_are_copied_when_the_executable_is_built(device, capsys):
    g = rlxpy.Graph("flags_copied")
    x = g.input("x", [2])
    g.output(g.exp(x, name="e"))
    value = {"x": np.ones(2, np.float32)}
    plain = rlxpy.compile(g)
    with env.override(RLX_WGPU_NAN_TRACE=1):
        flagged = rlxpy.compile(g)
        plain.run(value)  # built before the flag was set: not explained
    assert "NaN trace" not in capsys.readouterr().err
    assert (plain.flags.nan_trace, flagged.flags.nan_trace) == (0, 1)
    flagged.run(value)  # built with it: explained, the flag being unset now notwithstanding
    assert "rlxpy NaN trace: every node finite" in capsys.readouterr().err
    with plain.flags.override(nan_trace=1):  # one executable's copy changes
        plain.run(value)
    assert "rlxpy NaN trace: every node finite" in capsys.readouterr().err
    assert plain.flags.nan_trace == 0


def test_runs_in_flight_up_to_the_readback_ring_read_back_their_own_results(device):
    """A pipelined caller (Generator.generate, several decode steps deep) has up to STAGING_RING runs
    of one key submitted and unread: each still reads its own values. One more is a clear error that
    leaves the executable usable; a caller that reads each run before the next uses two buffers."""
    from rlxpy.wgpu_backend.encode import STAGING_RING

    g = rlxpy.Graph("counter_deep")
    x = g.input("x", [5])
    g.output(g.add(x, g.param("one", [5]), name="y"))
    exe = rlxpy.compile(g)
    exe.set_param("one", np.ones(5, np.float32))
    for _ in range(3):
        np.testing.assert_array_equal(exe.run({"x": np.zeros(5, np.float32)}, outputs=["y"])["y"], 1)
    ring = next(iter(exe.encoder._key_stagings.values()))
    assert sum(b is not None for b in ring[:-1]) == 2  # one run read, one encoded ahead
    in_flight = [exe.submit({"x": np.zeros(5, np.float32)}, outputs=["y"])]
    for _ in range(STAGING_RING):  # the fed runs are one key (their feed copy makes them another)
        in_flight.append(exe.submit(feeds={"x": exe.handle("y")}, outputs=["y"]))
    with pytest.raises(InputError, match="submitted and not read back"):
        exe.submit(feeds={"x": exe.handle("y")}, outputs=["y"])
    for step, pending in enumerate(in_flight, 1):
        np.testing.assert_array_equal(pending()["y"], np.full(5, step, np.float32))
    out = exe.run(feeds={"x": exe.handle("y")}, outputs=["y"])
    np.testing.assert_array_equal(out["y"], np.full(5, STAGING_RING + 2, np.float32))


def test_a_dropped_executable_gives_its_memory_back(device):
    """Every executable keeps its next run encoded ahead, and wgpu-native keeps a buffer alive while a
    never-submitted command buffer refers to it: dropping an executable used to leak its whole arena
    (on a CPU adapter the arena is host memory, so the process grew by it each time). Every adapter:
    the arena's buffers are destroyed once the executable goes; lavapipe: the process stays its size
    (a GPU's device memory does not show in it, and llvmpipe's GL driver keeps destroyed buffers'
    memory in pools of its own: 0-16 MiB more per run there, whichever way rlxpy frees them)."""
    import gc

    def resident_mib() -> float:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096 / 2**20

    a = np.ones((1024, 2048), np.float32)  # a 16 MiB arena (the input and x + x), a 4 KiB readback
    sizes = []
    for _ in range(6):
        g = rlxpy.Graph("dropped")
        x = g.input("a", [1024, 2048])
        g.output(g.sum(g.add(x, x), 1, name="y"))
        exe = rlxpy.compile(g)
        np.testing.assert_array_equal(exe.run({"a": a})["y"], np.full(1024, 4096, np.float32))
        freed = exe.arena._finalizer  # destroys the arena's buffers when it runs
        del exe, g
        gc.collect()
        assert not freed.alive
        sizes.append(resident_mib())
    if device.is_cpu and device.info.get("backend_type") == "Vulkan":
        assert sizes[-1] - sizes[1] < 24, sizes  # a leak adds 16 MiB per executable: 64 over these four
