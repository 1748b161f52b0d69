"""A small built-in graph (MLP + layer norm + softmax head) for `rlxpy demo` and smoke tests."""

from __future__ import annotations

import numpy as np

from rlxpy.ir import Graph


def build_demo(batch: int = 8, features: int = 64, hidden: int = 128, classes: int = 10,
               seed: int = 0) -> tuple[Graph, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Returns (graph, params, inputs) of a 2-layer MLP classifier."""
    rng = np.random.default_rng(seed)
    g = Graph("demo_mlp")
    x = g.input("x", [batch, features])
    w1, b1 = g.param("w1", [features, hidden]), g.param("b1", [hidden])
    w2, b2 = g.param("w2", [hidden, classes]), g.param("b2", [classes])
    gamma, beta = g.param("ln_gamma", [hidden]), g.param("ln_beta", [hidden])
    h = g.linear(x, w1, b1, "gelu", name="fc1")
    h = g.layer_norm(h, gamma, beta, name="ln")
    logits = g.linear(h, w2, b2, name="fc2")
    g.output(g.softmax(logits, name="probs"))
    params = {
        "w1": (rng.standard_normal((features, hidden)) / np.sqrt(features)).astype(np.float32),
        "b1": rng.standard_normal(hidden).astype(np.float32) * 0.1,
        "w2": (rng.standard_normal((hidden, classes)) / np.sqrt(hidden)).astype(np.float32),
        "b2": np.zeros(classes, np.float32),
        "ln_gamma": np.ones(hidden, np.float32), "ln_beta": np.zeros(hidden, np.float32),
    }
    return g, params, {"x": rng.standard_normal((batch, features)).astype(np.float32)}
