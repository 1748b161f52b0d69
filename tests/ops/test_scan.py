"""GatedDeltaNet runs as a host step that carries its recurrent state across runs."""

from __future__ import annotations

import numpy as np
from helpers import assert_close

import rlxpy
from rlxpy.ir.reference import run_reference


def test_gated_delta_net_host_step_carries_its_state_across_runs(device):
    """The carried state is updated in place: two runs equal one run over both halves."""
    b, s, h, n = 1, 4, 2, 3

    def inputs(seed):
        r = np.random.default_rng(seed)
        q, k = (r.standard_normal((b, s, h, n)).astype(np.float32) for _ in range(2))
        q /= np.linalg.norm(q, axis=-1, keepdims=True)
        k /= np.linalg.norm(k, axis=-1, keepdims=True)
        return {"q": q, "k": k, "v": r.standard_normal((b, s, h, n)).astype(np.float32),
                "g": -r.uniform(0.1, 0.5, (b, s, h)).astype(np.float32),
                "beta": r.uniform(0.2, 0.9, (b, s, h)).astype(np.float32)}

    def build(steps):
        g = rlxpy.Graph()
        ins = [g.input(name, shape) for name, shape in (("q", (b, steps, h, n)), ("k", (b, steps, h, n)),
                                                        ("v", (b, steps, h, n)), ("g", (b, steps, h)),
                                                        ("beta", (b, steps, h)))]
        g.output(g.gated_delta_net(*ins, state=g.param("state", [b, h, n, n]), name="o"))
        return g

    first, second = inputs(1), inputs(2)
    exe = rlxpy.compile(build(s))
    exe.set_param("state", np.zeros((b, h, n, n), np.float32))
    exe.run(first)
    got = exe.run(second)["o"]
    whole = {k: np.concatenate([first[k], second[k]], axis=1) for k in first}
    g2 = build(2 * s)
    want = run_reference(g2, whole, {"state": np.zeros((b, h, n, n), np.float32)})["o"][:, s:]
    assert_close(got, want, 1e-4, 1e-5, "second half after a carried state")
