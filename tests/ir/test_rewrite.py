"""The pattern engine (ir/passes/rewrite.py): the registry, the skip flag, and the one rebuild."""

from __future__ import annotations

import pytest

import rlxpy
from rlxpy import env
from rlxpy.errors import GraphError, RegistryError
from rlxpy.ir import ops
from rlxpy.ir.passes import rewrite
from rlxpy.ir.passes.rewrite import PATTERNS, Pattern, copy_graph, fuse, register


def structure(g: rlxpy.Graph) -> list:
    return [(n.op, n.inputs, n.name, n.type) for n in g.nodes] + [g.outputs]


def tiled() -> rlxpy.Graph:
    """A matmul read only by narrows tiling its columns: split_qkv is the one pattern that fires."""
    g = rlxpy.Graph("tiled")
    x = g.input("x", [4, 8])
    y = g.matmul(x, g.param("w", [8, 12]), name="y")
    g.output(g.narrow(y, 1, 0, 6, name="a"), g.narrow(y, 1, 6, 6, name="b"))
    return g


def test_registry_holds_the_flag_names_in_run_order():
    assert list(PATTERNS) == ["decode", "conv_epilogue", "packed_attention", "split_qkv", "residual_norm"]


def test_a_name_registered_twice_is_refused(monkeypatch):
    monkeypatch.setattr(rewrite, "PATTERNS", dict(PATTERNS))
    nothing = Pattern("nothing", lambda graph: [], lambda out, remap, match, site: {})
    register(nothing)
    with pytest.raises(RegistryError, match="pattern 'nothing' is already registered"):
        register(Pattern("nothing", nothing.match, nothing.emit))
    with pytest.raises(RegistryError, match="'split_qkv' is already registered"):
        register(Pattern("split_qkv", nothing.match, nothing.emit))


def test_a_skipped_pattern_leaves_the_graph_unchanged():
    g = tiled()
    assert "SplitMatMul" in [type(n.op).__name__ for n in fuse(g).nodes]
    assert fuse(g, skip={"split_qkv"}) is g


def test_the_skip_flag_reaches_the_engine():
    from rlxpy.wgpu_backend.compiler import prepare

    g = tiled()
    assert any(isinstance(n.op, ops.SplitMatMul) for n in prepare(g).nodes)
    with env.override(RLX_WGPU_NO_PATTERNS=1):
        plain = prepare(g)
    with env.override(RLX_WGPU_SKIP_PATTERNS=" split_qkv , residual_norm"):
        assert structure(prepare(g)) == structure(plain)
    with env.override(RLX_WGPU_SKIP_PATTERNS="split_qvk"):
        with pytest.raises(GraphError, match="unknown patterns"):
            prepare(g)


def test_copy_graph_keeps_names_and_outputs_and_remaps_ids():
    g = rlxpy.Graph("copy")
    x = g.input("x", [3])
    dead = g.exp(x, name="dead")
    y = g.relu(x, name="y")
    g.output(g.exp(y, name="z"), y)
    assert structure(copy_graph(g)) == structure(g)
    out = copy_graph(g, {y.id: rewrite.with_op(y, ops.Activation(ops.ActKind.SILU))}, drop={dead.id})
    assert [n.name for n in out.nodes] == ["x", "y", "z"] and out["y"].op.fn is ops.ActKind.SILU
    assert [out.nodes[i].name for i in out.outputs] == ["z", "y"] and out["z"].inputs == (out["y"].id,)
    same = copy_graph(g, {y.id: rewrite.alias(y.id, x.id)})
    assert "y" not in [n.name for n in same.nodes] and same["z"].inputs == (same["x"].id,)


def test_two_matches_at_one_node_are_refused():
    g = tiled()
    y = g["y"]
    twice = Pattern("twice", lambda graph: [rewrite_at(y.id), rewrite_at(y.id)],
                    lambda out, remap, match, site: {})
    with pytest.raises(GraphError, match="y: two pattern matches"):
        twice.apply(g)


class rewrite_at:  # noqa: N801 (a minimal match)
    def __init__(self, site: int) -> None:
        self.sites, self.replaced = (site,), ()
