"""The input contract (rlxpy/ir/values.py) as exe.run, set_param and the reference apply it: exact
shape, the tensor's dtype or a lossless widening, Python values by value; anything else an InputError
naming the input, what it expects and what it got; the executable stays usable after a refusal."""

from __future__ import annotations

import numpy as np
import pytest

import rlxpy
from rlxpy.errors import InputError
from rlxpy.ir import Graph
from rlxpy.ir.reference import run_reference


def _graph() -> Graph:
    g = Graph("contract")
    x = g.input("x", (8, 64))
    idx = g.input("idx", (3,), "i32")
    w = g.param("w", (64,))
    g.output(g.mul(g.gather(x, idx, 0), w, name="y"))
    return g


@pytest.fixture(scope="module")
def exe(device):
    exe = rlxpy.compile(_graph(), device=device)
    exe.set_param("w", np.linspace(-1, 1, 64, dtype=np.float32))
    return exe


X = np.arange(512, dtype=np.float32).reshape(8, 64) / 100
IDX = np.array([7, 0, 3], np.int32)


def _expected(x: np.ndarray = X, idx: np.ndarray = IDX) -> np.ndarray:
    return x[idx] * np.linspace(-1, 1, 64, dtype=np.float32)


@pytest.mark.parametrize(("name", "value", "message"), [
    ("x", X.astype(np.float64), r"input 'x' \(f32\[8, 64\]\): got float64 data, expected float32"),
    ("x", X.reshape(-1), r"input 'x': expected shape \[8, 64\] \(f32\), got \[512\]"),
    ("x", X[:, :32], r"got \[8, 32\]"),
    ("idx", IDX.astype(np.int64), r"input 'idx' \(i32\[3\]\): got int64 data, expected int32"),
    ("idx", IDX.astype(np.float32), r"got float32 data, expected int32"),
    ("idx", [7.5, 0, 3], r"non-integer values"),
    ("idx", [2**31, 0, 3], r"values \[0, 2147483648\] do not fit i32"),
    ("x", "text", r"cannot read str values"),
])
def test_run_refuses_what_the_contract_does_not_take_and_stays_usable(exe, name, value, message):
    inputs = {"x": X, "idx": IDX, name: value}
    with pytest.raises(InputError, match=message):
        exe.run(inputs)
    np.testing.assert_allclose(exe.run({"x": X, "idx": IDX})["y"], _expected(), rtol=1e-6)


def test_run_takes_lossless_widenings_and_python_values(exe):
    half = X.astype(np.float16)
    np.testing.assert_allclose(exe.run({"x": half, "idx": IDX.astype(np.int16)})["y"],
                               _expected(half.astype(np.float32)), rtol=1e-6)
    np.testing.assert_allclose(exe.run({"x": X.tolist(), "idx": [7, 0, 3]})["y"], _expected(), rtol=1e-6)
    np.testing.assert_allclose(exe.run({"x": X, "idx": np.array([7, 0, 3], np.uint8)})["y"], _expected(),
                               rtol=1e-6)


def test_set_param_follows_the_same_contract(exe):
    with pytest.raises(InputError, match=r"param 'w' \(f32\[64\]\): got float64 data"):
        exe.set_param("w", np.ones(64))
    with pytest.raises(InputError, match=r"param 'w': expected shape \[64\] \(f32\), got \[8, 8\]"):
        exe.set_param("w", np.ones((8, 8), np.float32))
    exe.set_param("w", np.linspace(-1, 1, 64, dtype=np.float32))
    np.testing.assert_allclose(exe.run({"x": X, "idx": IDX})["y"], _expected(), rtol=1e-6)


def test_the_reference_applies_the_same_contract():
    g = _graph()
    w = np.linspace(-1, 1, 64, dtype=np.float32)
    with pytest.raises(InputError, match="got float64 data"):
        run_reference(g, {"x": X.astype(np.float64), "idx": IDX}, {"w": w})
    np.testing.assert_allclose(run_reference(g, {"x": X, "idx": IDX}, {"w": w})["y"], _expected(), rtol=1e-6)


def test_nan_and_inf_inputs_are_legal_and_the_nan_trace_names_them(exe, capsys):
    x = X.copy()
    x[7, 5], x[0, 1] = np.nan, np.inf
    with exe.flags.override(nan_trace=1):
        y = exe.run({"x": x, "idx": IDX})["y"]
    assert np.isnan(y[0, 5]) and np.isinf(y[1, 1])
    assert exe.last_nan is not None and "x (input)" in exe.last_nan["bad_inputs"]
    assert "reads NaN/Inf from x (input)" in capsys.readouterr().err
