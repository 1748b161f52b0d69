"""GatedDeltaNet in chunks of 64 steps (lowering/scan_delta_chunked.py) against a float64 torch loop of
the delta rule (test_scan.delta_torch, independent of rlxpy): odd sequence lengths and head dims, a
carried state, several dispatches, NaN / -inf reaching exactly the outputs the step-by-step rule
reaches. Tolerances: 1e-5 relative and absolute (f32 against float64; the outputs are O(1))."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_close
from test_scan import build_delta, delta_inputs, delta_torch

import rlxpy
from rlxpy import env
from rlxpy.wgpu_backend.lowering import scan_delta_chunked

CHUNKED = ["scan_gated_delta_prep", "scan_gated_delta_chunks"]
TOL = (1e-5, 1e-5)


@pytest.fixture
def always_chunked(monkeypatch):
    """Sequences of any length in chunks (by default short ones run step by step)."""
    monkeypatch.setattr(scan_delta_chunked, "MIN_STEPS", 1)


def kernels(exe) -> list[str]:
    return [s.kernel for s in exe.schedule.steps]


@pytest.mark.parametrize("batch, steps, heads, n", [(1, 1, 1, 1), (2, 3, 2, 5), (1, 17, 3, 33),
                                                    (1, 255, 2, 16), (1, 1000, 1, 33), (1, 130, 1, 128)])
def test_chunked_matches_the_torch_loop(device, always_chunked, batch, steps, heads, n):
    """One partial chunk (1, 3, 17 steps), chunks with a partial tail (255 = 3 x 64 + 63, 1000, 130),
    head dims below, at and across the 16-column blocks and the largest (1, 5, 16, 33, 128)."""
    feeds = delta_inputs(batch, steps, heads, n, seed=steps + n)
    exe = rlxpy.compile(build_delta(batch, steps, heads, n))
    assert kernels(exe) == CHUNKED
    want, _ = delta_torch(*feeds.values())
    assert_close(exe.run(feeds)["o"], want, *TOL, "chunked vs torch loop")


def test_long_prefill_takes_the_chunked_form_and_decode_the_step_kernel(device):
    assert kernels(rlxpy.compile(build_delta(1, 300, 2, 8))) == CHUNKED
    assert kernels(rlxpy.compile(build_delta(1, 1, 2, 8, carry=True))) == ["scan_gated_delta"]


def test_carried_state_in_and_out_then_decode(device, always_chunked):
    """A prefill of 150 steps from a non-zero state writes the final state back; a step-by-step decode
    continues from it."""
    batch, heads, n = 2, 3, 20
    feeds = delta_inputs(batch, 151, heads, n, seed=7)
    start = (0.3 * np.random.default_rng(3).standard_normal((batch, heads, n, n))).astype(np.float32)
    want, want_state = delta_torch(*feeds.values(), state=start)
    prefill = rlxpy.compile(build_delta(batch, 150, heads, n, carry=True))
    assert kernels(prefill) == CHUNKED
    prefill.set_param("state", start)
    assert_close(prefill.run({k: v[:, :150] for k, v in feeds.items()})["o"], want[:, :150], *TOL, "prefill")
    _, mid_state = delta_torch(*(v[:, :150] for v in feeds.values()), state=start)
    assert_close(prefill.read_node("state"), mid_state, *TOL, "state after the prefill")
    decode = rlxpy.compile(build_delta(batch, 1, heads, n, carry=True))
    decode.set_param("state", prefill.read_node("state"))
    assert_close(decode.run({k: v[:, 150:] for k, v in feeds.items()})["o"], want[:, 150:], *TOL, "decode")
    assert_close(decode.read_node("state"), want_state, *TOL, "final state")


@pytest.mark.parametrize("carry", [False, True])
def test_several_dispatches_keep_the_state_between_them(device, monkeypatch, carry):
    """One chunk per dispatch of the chunks pass: the state goes through scratch (or the carried state
    tensor) between them."""
    monkeypatch.setattr(scan_delta_chunked, "chunks_per_dispatch", lambda states: 1)
    feeds = delta_inputs(1, 200, 2, 12, seed=9)
    exe = rlxpy.compile(build_delta(1, 200, 2, 12, carry=carry))
    assert kernels(exe) == CHUNKED[:1] + CHUNKED[1:] * 4
    start = np.zeros((1, 2, 12, 12), np.float32)
    if carry:
        start = (0.2 * np.random.default_rng(1).standard_normal(start.shape)).astype(np.float32)
        exe.set_param("state", start)
    want, want_state = delta_torch(*feeds.values(), state=start)
    assert_close(exe.run(feeds)["o"], want, *TOL, "4 dispatches")
    if carry:
        assert_close(exe.read_node("state"), want_state, *TOL, "carried state")


def test_nan_and_inf_reach_what_the_step_rule_reaches(device):
    """Per head, in chunk 1 or 2 of 3: a NaN in v (one state column from its step on), in k (the whole
    head from its step on), in q (that output row only), in g and beta (the head from its step on), a
    -inf gate (forgets the past: finite). Earlier outputs stay finite."""
    feeds = delta_inputs(1, 150, 6, 9, seed=11)
    feeds["v"][0, 70, 0, 3] = np.nan
    feeds["k"][0, 100, 1, 0] = np.nan
    feeds["q"][0, 64, 2, 5] = np.nan
    feeds["g"][0, 130, 3] = np.nan
    feeds["beta"][0, 90, 4] = np.nan
    feeds["g"][0, 80, 5] = -np.inf
    got = rlxpy.compile(build_delta(1, 150, 6, 9)).run(feeds)["o"]
    want, _ = delta_torch(*feeds.values())
    assert_close(got, want, *TOL, "chunked vs torch loop with NaN / -inf")
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got[0, 70:, 0, 3]).all() and not np.isnan(np.delete(got[0, :, 0], 3, axis=1)).any()
    assert np.isnan(got[0, 100:, 1]).all() and not np.isnan(got[0, :100, 1]).any()
    assert np.isnan(got[0, 64, 2]).all() and np.isnan(got[0, :, 2]).sum() == 9
    assert np.isfinite(got[0, :, 5]).all()


@pytest.mark.parametrize("cap, kernels_wanted", [(1 << 20, CHUNKED), (192 << 10, ["scan_gated_delta"])])
def test_under_a_binding_cap(device, cap, kernels_wanted):
    """RLX_WGPU_MAX_BINDING caps: with room for the chunk records in the node's window the chunked
    form runs; without it (the records alone exceed the window) the step kernel does; never a host
    step, and both match the torch loop."""
    feeds = delta_inputs(1, 200, 2, 16, seed=12)
    with env.override(RLX_WGPU_MAX_BINDING=cap):
        exe = rlxpy.compile(build_delta(1, 200, 2, 16))
    assert kernels(exe) == kernels_wanted
    want, _ = delta_torch(*feeds.values())
    assert_close(exe.run(feeds)["o"], want, *TOL, f"under a {cap} B binding cap")
