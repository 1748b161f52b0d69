"""Sample on the GPU vs torch (argmax, softmax + sorted top-k/top-p filtering + Gumbel-max) and the
numpy reference. The Threefry stream itself is pinned to Random123's known-answer vectors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rlxpy
from rlxpy.errors import GraphError, UnsupportedOpError
from rlxpy.ir.reference import run_reference
from rlxpy.ir.reference.sample import threefry2x32


def sample_graph(shape, temperature=1.0, top_k=0, top_p=1.0, seed=0, seed_input=False):
    g = rlxpy.Graph("sample")
    x = g.input("x", shape)
    s = g.input("seed", (2,), "u32") if seed_input else None
    y = g.sample(x, temperature, top_k, top_p, seed, seed_input=s)
    g.output(y)
    return g, y


def gumbel_scores(logits: np.ndarray, temperature: float, top_k: int, top_p: float, seed: int) -> np.ndarray:
    """Oracle scores [rows, V] (float64): torch softmax, filtering on a stable descending sort,
    log p + Gumbel noise from Threefry2x32-20 (checked against Random123 below); -inf = dropped."""
    rows = torch.from_numpy(logits.reshape(-1, logits.shape[-1])).double()
    probs = torch.softmax(rows / max(temperature, 1e-6), -1)
    vocab = probs.shape[-1]
    if top_k > 0 or 0 < top_p < 1:
        sorted_p, order = torch.sort(probs, dim=-1, descending=True, stable=True)
        mass_before = torch.cumsum(sorted_p, -1) - sorted_p
        keep = torch.ones_like(sorted_p, dtype=torch.bool)
        if top_k > 0:
            keep &= torch.arange(vocab) < top_k
        if 0 < top_p < 1:
            keep &= mass_before < top_p
        probs = torch.zeros_like(probs).scatter(-1, order, torch.where(keep, sorted_p, 0.0))
    zero = np.zeros(1, np.uint32)
    key = threefry2x32((zero, zero), (seed & 0xFFFFFFFF, seed >> 32))
    row_ids, token_ids = np.meshgrid(np.arange(rows.shape[0], dtype=np.uint32),
                                     np.arange(vocab, dtype=np.uint32), indexing="ij")
    bits, _ = threefry2x32((row_ids.ravel(), token_ids.ravel()), (int(key[0][0]), int(key[1][0])))
    u = np.maximum((bits >> np.uint32(8)).astype(np.float64) / 2**24, 1e-30).reshape(rows.shape)
    gumbel = torch.from_numpy(-np.log(-np.log(u)))
    return torch.where(probs > 0, torch.log(probs) + gumbel, -torch.inf).numpy()


def assert_same_tokens(gpu: np.ndarray, scores: np.ndarray) -> None:
    """GPU tokens equal the oracle's argmax; a row may differ only on a near-tie (f32 vs f64 noise)."""
    want = scores.argmax(-1)
    got = gpu.reshape(-1)
    for row in np.flatnonzero(got != want):
        margin = scores[row, want[row]] - scores[row, got[row]]
        assert margin < 1e-4, f"row {row}: GPU chose {got[row]}, oracle {want[row]} (score margin {margin})"
    assert (got == want).mean() > 0.95


def test_threefry_matches_random123_known_answers():
    """Random123 kat_vectors for threefry2x32_20 (also used by JAX's tests)."""
    cases = [((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
             ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
             ((0x243F6A88, 0x85A308D3), (0x13198A2E, 0x03707344), (0xC4923A9C, 0x483DF7A0))]
    for counter, key, want in cases:
        x0, x1 = threefry2x32((np.array([counter[0]], np.uint32), np.array([counter[1]], np.uint32)), key)
        assert (int(x0[0]), int(x1[0])) == want


@pytest.mark.parametrize("shape", [(1,), (3,), (17, 5), (255, 33), (2, 3, 257)])
def test_temperature_zero_is_torch_argmax(device, shape):
    rng = np.random.default_rng(len(shape))
    x = rng.integers(-3, 4, size=shape).astype(np.float32)  # small integers: many ties -> first index
    g, y = sample_graph(shape, temperature=0.0)
    exe = rlxpy.compile(g)
    assert [s.kernel for s in exe.schedule.steps] == ["sample_rows"]
    gpu = exe.run({"x": x})[y.name]
    np.testing.assert_array_equal(gpu, torch.argmax(torch.from_numpy(x), -1).numpy())
    np.testing.assert_array_equal(gpu, run_reference(g, {"x": x})[y.name])


def test_argmax_edge_values_like_torch(device):
    x = np.array([[1, np.nan, 3, np.nan], [-np.inf] * 4, [np.inf, 2, np.inf, 0], [0, -0.0, 0, 1e-45]],
                 np.float32)
    g, y = sample_graph(x.shape, temperature=0.0)
    gpu = rlxpy.compile(g).run({"x": x})[y.name]
    np.testing.assert_array_equal(gpu, torch.argmax(torch.from_numpy(x), -1).numpy())


def test_top_k_one_is_argmax(device):
    x = np.random.default_rng(1).standard_normal((9, 301)).astype(np.float32)
    x[3, 10] = x[3, 200] = x[3].max() + 1  # tie: the first index wins
    g, y = sample_graph(x.shape, temperature=0.7, top_k=1, seed=11)
    gpu = rlxpy.compile(g).run({"x": x})[y.name]
    np.testing.assert_array_equal(gpu, torch.argmax(torch.from_numpy(x), -1).numpy())


@pytest.mark.parametrize("temperature,top_k,top_p,seed", [
    (1.0, 0, 1.0, 1), (0.6, 0, 1.0, 2**40 + 7), (1.3, 40, 1.0, 3), (0.9, 0, 0.8, 4), (1.1, 25, 0.6, 5),
])
def test_chosen_tokens_match_oracle_for_fixed_seeds(device, temperature, top_k, top_p, seed):
    x = (np.random.default_rng(seed % 97).standard_normal((64, 1031)) * 2.5).astype(np.float32)
    x[:, 7] = -np.inf  # a masked-out token is never chosen
    g, y = sample_graph(x.shape, temperature, top_k, top_p, seed)
    gpu = rlxpy.compile(g).run({"x": x})[y.name]
    assert_same_tokens(gpu, gumbel_scores(x, temperature, top_k, top_p, seed))
    assert_same_tokens(run_reference(g, {"x": x})[y.name], gumbel_scores(x, temperature, top_k, top_p, seed))
    assert not (gpu == 7).any()


def test_large_vocab_uses_wide_workgroups_and_matches_oracle(device):
    """A 20000-token row runs 1024 threads per row (where the device allows) with the same choice."""
    x = (np.random.default_rng(8).standard_normal((3, 20000)) * 3).astype(np.float32)
    for temperature, top_k, top_p in ((0.0, 0, 1.0), (0.9, 30, 0.7)):
        g, y = sample_graph(x.shape, temperature, top_k, top_p, seed=17)
        exe = rlxpy.compile(g)
        assert "@workgroup_size(1024)" in exe.schedule.steps[0].source
        gpu = exe.run({"x": x})[y.name]
        if temperature == 0:
            np.testing.assert_array_equal(gpu, torch.argmax(torch.from_numpy(x), -1).numpy())
        else:
            assert_same_tokens(gpu, gumbel_scores(x, temperature, top_k, top_p, 17))


def test_seed_input_overrides_the_attribute(device):
    x = np.random.default_rng(9).standard_normal((16, 300)).astype(np.float32)
    g, y = sample_graph(x.shape, 1.0, 50, 0.9, seed=123, seed_input=True)
    exe = rlxpy.compile(g)
    for seed in (0, 5, 2**33 + 1):
        feed = {"x": x, "seed": np.array([seed & 0xFFFFFFFF, seed >> 32], np.uint32)}
        gpu = exe.run(feed)[y.name]
        assert_same_tokens(gpu, gumbel_scores(x, 1.0, 50, 0.9, seed))
        np.testing.assert_array_equal(gpu, run_reference(g, feed)[y.name])


def test_empirical_distribution_matches_softmax(device):
    """2000 seeds through one compiled graph: a chi-square test against softmax(logits / T)."""
    logits = np.array([[0.3, -1.0, 1.2, 0.0, 0.8]], np.float32)
    temperature = 1.5
    g, y = sample_graph(logits.shape, temperature, seed_input=True)
    exe = rlxpy.compile(g)
    counts = np.zeros(5)
    for seed in range(2000):
        counts[exe.run({"x": logits, "seed": np.array([seed, 7], np.uint32)})[y.name][0]] += 1
    expected = 2000 * torch.softmax(torch.from_numpy(logits[0]).double() / temperature, -1).numpy()
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 20.0, f"chi-square {chi2:.1f} (4 dof) for counts {counts}, expected {expected.round(1)}"


def test_filtered_tokens_are_never_chosen(device):
    """160 rows of one distribution (each row draws its own noise): only the kept tokens appear.
    top_k 2 among three tied maxima keeps the two lowest indices; top_p 0.5 keeps the crossing token."""
    probs = np.array([0.05, 0.3, 0.02, 0.3, 0.3, 0.03])
    x = np.tile(np.log(probs).astype(np.float32), (160, 1))
    x[:, [1, 3, 4]] = x[0, 1]  # exact ties
    cases = ((2, 1.0, {1, 3}), (0, 0.5, {1, 3}), (4, 1.0, {1, 3, 4, 0}), (0, 0.95, {1, 3, 4, 0}))
    for top_k, top_p, allowed in cases:
        g, y = sample_graph(x.shape, 1.0, top_k, top_p, seed=21)
        gpu = rlxpy.compile(g).run({"x": x})[y.name]
        assert set(np.unique(gpu)) == allowed, (top_k, top_p, np.unique(gpu))
        np.testing.assert_array_equal(gpu, run_reference(g, {"x": x})[y.name])


@pytest.mark.filterwarnings("ignore:invalid value encountered")
def test_sampling_edge_rows_follow_the_reference(device):
    """Rows with -inf entries sample among the finite ones; a NaN or all -inf row gives token 0."""
    x = np.random.default_rng(2).standard_normal((4, 40)).astype(np.float32)
    x[0, :30] = -np.inf
    x[1, 5] = np.nan
    x[2, :] = -np.inf
    x[3, 11] = np.inf
    g, y = sample_graph(x.shape, 0.8, 10, 0.9, seed=3)
    gpu = rlxpy.compile(g).run({"x": x})[y.name]
    np.testing.assert_array_equal(gpu, run_reference(g, {"x": x})[y.name])
    assert gpu[0] >= 30 and list(gpu[1:]) == [0, 0, 0]


def test_logits_are_not_overwritten(device):
    g = rlxpy.Graph("keep")
    x = g.input("x", (3, 50))
    scaled = g.mul(x, 2.0)
    y = g.sample(scaled, 1.0, top_k=5, seed=1)
    g.output(y, scaled)
    x_value = np.random.default_rng(3).standard_normal((3, 50)).astype(np.float32)
    exe = rlxpy.compile(g)
    out = exe.run({"x": x_value})
    np.testing.assert_array_equal(out[scaled.name], 2 * x_value)
    np.testing.assert_array_equal(exe.read_node("x"), x_value)


def test_bad_sample_inputs_are_named_errors(device):
    g = rlxpy.Graph("bad")
    g.output(g.sample(g.input("x", (2, 8), "f16"), 1.0))
    with pytest.raises(UnsupportedOpError, match=r"sample_0 \(Sample\): sample_rows is lowered for f32 only, "
                                                 r"input 0 x"):
        rlxpy.compile(g)
    g = rlxpy.Graph("bad_seed")
    g.output(g.sample(g.input("x", (2, 8)), 1.0, seed_input=g.input("s", (2,), "f32")))
    with pytest.raises(GraphError, match=r"\(Sample\): seed input must be u32\[2\]"):
        rlxpy.compile(g)
    g = rlxpy.Graph("bad_attrs")
    x = g.input("x", (2, 8))
    with pytest.raises(GraphError, match="seed input must be"):
        g.sample(x, 1.0, seed_input=g.input("s3", (3,), "u32"))
    with pytest.raises(GraphError, match="temperature -1"):
        g.sample(x, -1.0)
    with pytest.raises(GraphError, match="top_p 1.5"):
        g.sample(x, 1.0, top_p=1.5)
