"""The numpy reference of Sample: the Random123 known answers for Threefry2x32-20 and empirical
sampling distributions."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlxpy.ir import DType, Graph
from rlxpy.ir.reference import run_reference
from rlxpy.ir.reference.sample import threefry2x32


def run(build, **arrays: np.ndarray) -> np.ndarray:
    """One Input per keyword array, ``build(g, *inputs)`` -> node, evaluated by the reference."""
    g = Graph("t")
    nodes = [g.input(name, a.shape, DType.parse(a.dtype)) for name, a in arrays.items()]
    out = build(g, *nodes)
    g.output(out)
    return run_reference(g, arrays)[out.name]


def rand(shape, seed: int = 0, scale: float = 1.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def t(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x))


# -- sampling ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("counter,key,expected", [
    ((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x243F6A88, 0x85A308D3), (0x13198A2E, 0x03707344), (0xC4923A9C, 0x483DF7A0)),
])
def test_threefry2x32_20_known_answers(counter, key, expected):
    # Random123's kat_vectors for threefry2x32_20 (counter, key -> output)
    x0, x1 = threefry2x32((np.array([counter[0]], np.uint32), np.array([counter[1]], np.uint32)), key)
    assert (int(x0[0]), int(x1[0])) == expected


def test_threefry2x32_is_elementwise_over_counters():
    c0 = np.array([0, 0xFFFFFFFF, 0x243F6A88, 7], np.uint32)
    c1 = np.array([0, 0xFFFFFFFF, 0x85A308D3, 9], np.uint32)
    key = (0x13198A2E, 0x03707344)
    x0, x1 = threefry2x32((c0, c1), key)
    for i in range(4):
        y0, y1 = threefry2x32((c0[i:i + 1], c1[i:i + 1]), key)
        assert (x0[i], x1[i]) == (y0[0], y1[0])


def sample(logits: np.ndarray, seed_pair: np.ndarray | None = None, **attrs) -> np.ndarray:
    arrays = dict(logits=logits) | ({"seed": seed_pair} if seed_pair is not None else {})
    return run(lambda g, x, *s: g.sample(x, seed_input=s[0] if s else None, **attrs), **arrays)


class SeedSweep:
    """One graph with a u32[2] seed input, run over many seeds (rows x seeds draws)."""

    def __init__(self, logits: np.ndarray, **attrs) -> None:
        self.logits = logits
        self.graph = Graph("sample")
        x = self.graph.input("logits", logits.shape)
        seed = self.graph.input("seed", (2,), "u32")
        self.graph.output(self.graph.sample(x, seed_input=seed, name="token", **attrs))

    def draws(self, seeds: range) -> np.ndarray:
        picks = []
        for seed in seeds:
            pair = np.array([seed, seed * 7919], np.uint32)  # vary both words of the 64-bit seed
            picks.append(run_reference(self.graph, {"logits": self.logits, "seed": pair})["token"].ravel())
        return np.concatenate(picks)


@pytest.mark.parametrize("shape", [(1, 1), (3, 17), (2, 3, 255)], ids=str)
def test_sample_temperature_zero_is_argmax(shape):
    logits = rand(shape, 45, 3.0)
    out = sample(logits, temperature=0.0, seed=123)
    assert out.dtype == np.int32 and out.shape == shape[:-1]
    np.testing.assert_array_equal(out, torch.argmax(t(logits), -1).numpy())


@pytest.mark.parametrize("temperature", [0.3, 1.0, 2.5])
@pytest.mark.parametrize("seed", [0, 1, 2**40 + 5])
def test_sample_top_k_one_is_argmax(temperature, seed):
    logits = rand((17, 255), 46, 2.0)
    out = sample(logits, temperature=temperature, top_k=1, seed=seed)
    np.testing.assert_array_equal(out, torch.argmax(t(logits), -1).numpy())


@pytest.mark.parametrize("temperature", [0.7, 1.0, 1.6])
def test_sample_distribution_matches_softmax_over_seeds(temperature):
    logits = np.array([[1.0, 0.2, -0.5, 2.0, 0.0]], dtype=np.float32).repeat(16, axis=0)
    draws = SeedSweep(logits, temperature=temperature).draws(range(250))  # 4000 draws
    frequency = np.bincount(draws, minlength=5) / draws.size
    expected = torch.softmax(t(logits[0]).double() / temperature, -1).numpy()
    tolerance = 4.5 * np.sqrt(expected * (1 - expected) / draws.size) + 1e-3
    assert np.all(np.abs(frequency - expected) < tolerance), (frequency, expected)


def _allowed(probabilities: np.ndarray, top_k: int, top_p: float) -> np.ndarray:
    """Tokens the filters keep: the k most likely (stable order), and those whose better mass < p."""
    order = np.argsort(-probabilities, kind="stable")
    before = np.concatenate([[0.0], np.cumsum(probabilities[order])[:-1]])
    keep = np.ones(order.size, bool)
    if top_k:
        keep &= np.arange(order.size) < top_k
    if top_p < 1:
        keep &= before < top_p
    return np.sort(order[keep])


@pytest.mark.parametrize("top_k,top_p", [(5, 1.0), (0, 0.6), (0, 0.95), (3, 0.5), (8, 0.9)])
def test_sample_never_picks_a_filtered_token(top_k, top_p):
    logits = rand((1, 17), 47, 1.5).repeat(8, axis=0)
    temperature = 1.3
    draws = SeedSweep(logits, temperature=temperature, top_k=top_k, top_p=top_p).draws(range(150))
    probabilities = torch.softmax(t(logits[0]).double() / temperature, -1).numpy()
    allowed = _allowed(probabilities, top_k, top_p)
    assert 1 <= allowed.size < 17
    assert set(np.unique(draws)) <= set(allowed.tolist())
    # and the kept tokens keep their renormalised odds
    frequency = np.bincount(draws, minlength=17)[allowed] / draws.size
    expected = probabilities[allowed] / probabilities[allowed].sum()
    assert np.all(np.abs(frequency - expected) < 4.5 * np.sqrt(expected * (1 - expected) / draws.size) + 1e-3)


def test_sample_seed_input_overrides_the_seed_attribute():
    logits = np.zeros((33, 255), np.float32)  # flat: every token equally likely
    seed = (9 << 32) | 12345
    by_attr = sample(logits, seed=seed)
    by_input = sample(logits, np.array([12345, 9], np.uint32), seed=777)
    np.testing.assert_array_equal(by_attr, by_input)
    np.testing.assert_array_equal(by_attr, sample(logits, seed=seed))  # deterministic
    assert (by_attr != sample(logits, seed=seed + 1)).any()
    assert len(np.unique(by_attr)) > 20  # rows draw independently
