"""Graphs the JSON IR fuzzer (rlxpy/ir/serialize_fuzz.py) mutates: the pattern tests' pre-norm
transformer block (RoPE, a keep-mask), a small CNN (convs, batch norm, pooling, a linear head) and
the control tests' If graph (sub-graphs as ``$graph``)."""

from __future__ import annotations

import sys
from pathlib import Path

import rlxpy

sys.path.insert(0, str(Path(__file__).resolve().parent / "ir"))

from test_reference_control import if_graph  # noqa: E402
from transformer_graphs import pre_norm_block  # noqa: E402

from rlxpy.ir.serialize_fuzz import Seed  # noqa: E402


def small_cnn() -> rlxpy.Graph:
    g = rlxpy.Graph("cnn")
    x = g.input("image", [2, 3, 16, 16])
    h = g.conv(x, g.param("c1.w", [8, 3, 3, 3]), stride=2, padding=1, bias=g.param("c1.b", [8]))
    h = g.batch_norm(h, *(g.param(f"bn1.{k}", [8]) for k in ("mean", "var", "gamma", "beta")))
    h = g.activation(h, "relu")
    h = g.max_pool(h, 2)
    h = g.conv(h, g.param("c2.w", [16, 8, 3, 3]), padding=1, groups=1, activation="relu")
    h = g.reshape(g.global_avg_pool(h), [2, 16])
    g.output(g.softmax(g.linear(h, g.param("fc.w", [16, 10]), g.param("fc.b", [10])), -1))
    return g


def seeds() -> list[Seed]:
    block, _ = pre_norm_block(rope=True, mask=True)
    return [Seed.from_graph("transformer_block", block), Seed.from_graph("cnn", small_cnn()),
            Seed.from_graph("if_graph", if_graph())]
