"""Symbolic dims: lazy compile per binding, params survive recompiles, clear binding errors."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_close, rand

import rlxpy
from rlxpy.errors import GraphError, InputError
from rlxpy.ir.reference import run_reference


def graph():
    g = rlxpy.Graph("dyn")
    x = g.input("x", ["T", 6])
    y = g.linear(x, g.param("w", [6, 4]), g.param("b", [4]), "silu", name="y")
    g.output(g.softmax(y, name="p"))
    return g


@pytest.fixture()
def exe(device):
    e = rlxpy.compile(graph())
    e.set_param("w", rand((6, 4), 1))  # set before the first compile: queued, then replayed
    e.set_param("b", rand((4,), 2))
    return e


def test_compiles_at_first_run_and_again_only_for_a_new_binding(exe):
    params = {"w": rand((6, 4), 1), "b": rand((4,), 2)}
    for rows in (3, 3, 17, 17, 3):
        x = rand((rows, 6), rows)
        out = exe.run({"x": x})["p"]
        assert out.shape == (rows, 4)
        assert_close(out, run_reference(graph(), {"x": x}, params)["p"], 1e-5, 1e-6)
    assert exe.compiles == 3  # 3, 17, then 3 again (one executable is kept at a time)
    assert exe.binding == {"T": 3}


def test_params_set_after_compile_survive_a_recompile(exe):
    exe.run({"x": rand((2, 6), 3)})
    exe.set_param("b", np.zeros(4, np.float32))
    x = rand((5, 6), 4)
    out = exe.run({"x": x})["p"]
    want = run_reference(graph(), {"x": x}, {"w": rand((6, 4), 1), "b": np.zeros(4, np.float32)})["p"]
    assert_close(out, want, 1e-5, 1e-6)


def test_bindings_up_front_and_bad_bindings(device):
    e = rlxpy.compile(graph(), bindings={"T": 7})
    assert e.compiles == 1 and e.current is not None
    with pytest.raises(GraphError, match=r"symbols \['S'\] that graph 'dyn' does not use"):
        rlxpy.compile(graph(), bindings={"S": 4})
    with pytest.raises(InputError, match="do not fit"):
        e.set_param("w", rand((6, 4), 1))
        e.set_param("b", rand((4,), 2))
        e.run({"x": np.zeros(13, np.float32)})
