"""The numpy reference of the norm family against torch: LayerNorm, RmsNorm (plus beta) and the
residual-fused norms."""

from __future__ import annotations

import numpy as np
import pytest
import torch.nn.functional as F
from reference_helpers import close_loose as close
from reference_helpers import rand_plain as rand
from reference_helpers import run, t

# -- normalisation ----------------------------------------------------------------------------------
NORM_SHAPES = [(1, 1), (3, 17), (255, 33), (2, 3, 257)]


@pytest.mark.parametrize("with_beta", [False, True])
@pytest.mark.parametrize("shape", NORM_SHAPES, ids=str)
def test_layer_norm_matches_torch(shape, with_beta):
    hidden = shape[-1]
    x, gamma, beta = rand(shape, 10, 3.0) + 2, rand((hidden,), 11), rand((hidden,), 12)
    if with_beta:
        out = run(lambda g, a, b, c: g.layer_norm(a, b, c, eps=1e-5), x=x, gamma=gamma, beta=beta)
    else:
        out = run(lambda g, a, b: g.layer_norm(a, b, eps=1e-5), x=x, gamma=gamma)
    expected = F.layer_norm(t(x).double(), (hidden,), t(gamma).double(),
                            t(beta).double() if with_beta else None, eps=1e-5)
    close(out, expected)


@pytest.mark.parametrize("with_beta", [False, True])
@pytest.mark.parametrize("shape", NORM_SHAPES, ids=str)
def test_rms_norm_matches_torch_plus_beta(shape, with_beta):
    hidden = shape[-1]
    x, gamma, beta = rand(shape, 13, 3.0), rand((hidden,), 14), rand((hidden,), 15)
    if with_beta:
        out = run(lambda g, a, b, c: g.rms_norm(a, b, c, eps=1e-6), x=x, gamma=gamma, beta=beta)
    else:
        out = run(lambda g, a, b: g.rms_norm(a, b, eps=1e-6), x=x, gamma=gamma)
    expected = F.rms_norm(t(x).double(), (hidden,), t(gamma).double(), eps=1e-6)
    close(out, expected + (t(beta).double() if with_beta else 0))


@pytest.mark.parametrize("kind", ["layer", "rms"])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("shape", NORM_SHAPES[1:], ids=str)
def test_fused_residual_norms_match_torch(shape, with_bias, kind):
    hidden = shape[-1]
    x, res = rand(shape, 16, 2.0), rand(shape, 17, 2.0)
    bias, gamma, beta = rand((hidden,), 18), rand((hidden,), 19), rand((hidden,), 20)
    arrays = dict(x=x, res=res, gamma=gamma, beta=beta) | ({"bias": bias} if with_bias else {})
    method = "residual_layer_norm" if kind == "layer" else "residual_rms_norm"

    def build(g, a, r, gm, bt, *b):
        return getattr(g, method)(a, r, gm, bt, bias=b[0] if b else None)

    out = run(build, **arrays)
    total = (t(x).double() + t(res).double() + (t(bias).double() if with_bias else 0)).float().double()
    if kind == "layer":
        expected = F.layer_norm(total, (hidden,), t(gamma).double(), t(beta).double(), eps=1e-5)
    else:
        expected = F.rms_norm(total, (hidden,), t(gamma).double(), eps=1e-6) + t(beta).double()
    close(out, expected)


# -- channel norms of CNNs --------------------------------------------------------------------------
@pytest.mark.parametrize("shape,groups", [((2, 6, 5), 3), ((1, 4, 3, 7), 4), ((3, 8, 2, 3, 5), 1),
                                          ((2, 5, 1), 5)],
                         ids=str)
@pytest.mark.parametrize("with_beta", [False, True])
def test_group_norm_matches_torch(shape, groups, with_beta):
    x, gamma, beta = rand(shape, 30, 3.0) + 1, rand((shape[1],), 31), rand((shape[1],), 32)
    arrays = dict(x=x, gamma=gamma) | ({"beta": beta} if with_beta else {})
    out = run(lambda g, a, gm, *b: g.group_norm(a, groups, gm, b[0] if b else None, eps=1e-5), **arrays)
    expected = F.group_norm(t(x).double(), groups, t(gamma).double(),
                            t(beta).double() if with_beta else None, eps=1e-5)
    close(out, expected)


def test_group_norm_with_c_groups_is_instance_norm_and_nan_spreads_over_its_group():
    x, gamma, beta = rand((2, 3, 4, 5), 33), rand((3,), 34), rand((3,), 35)
    x[1, 2, 0, 0] = np.nan
    x[0, 1, 3, 4] = np.inf
    out = run(lambda g, a, gm, b: g.group_norm(a, 3, gm, b), x=x, gamma=gamma, beta=beta)
    expected = F.instance_norm(t(x), weight=t(gamma), bias=t(beta), eps=1e-5)
    close(out, expected)
    assert np.isnan(out[1, 2]).all() and np.isnan(out[0, 1]).all() and not np.isnan(out[0, 0]).any()


@pytest.mark.parametrize("shape", [(2, 3), (1, 5, 7), (2, 4, 3, 5), (1, 2, 3, 4, 2)], ids=str)
def test_batch_norm_matches_torch_eval(shape):
    channels = shape[1]
    x = rand(shape, 36, 2.0)
    mean, var = rand((channels,), 37), np.abs(rand((channels,), 38)) + 0.1
    gamma, beta = rand((channels,), 39), rand((channels,), 40)
    x.reshape(-1)[:2] = [np.nan, np.inf]
    out = run(lambda g, *a: g.batch_norm(*a, eps=1e-3), x=x, mean=mean, var=var, gamma=gamma, beta=beta)
    expected = F.batch_norm(t(x).double(), t(mean).double(), t(var).double(), t(gamma).double(),
                            t(beta).double(), training=False, eps=1e-3)
    close(out, expected)
