"""The numpy reference of Softmax (norm family) against torch, on any axis and with NaN/inf."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from reference_helpers import close_tight as close
from reference_helpers import rand_edges as rand
from reference_helpers import run, t


# -- softmax, cumsum ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
@pytest.mark.parametrize("shape", [(3, 17, 5), (1, 1, 255), (2, 3, 257)], ids=str)
def test_softmax_matches_torch_on_any_axis(shape, axis):
    x = rand(shape, seed=29, scale=10.0, edges=False)
    close(run(lambda g, a: g.softmax(a, axis), x=x), torch.softmax(t(x).double(), axis).float())


def test_softmax_rows_with_inf_and_nan_like_torch():
    ninf, inf, nan = -np.inf, np.inf, np.nan
    x = np.array([[ninf, ninf, ninf, ninf],  # fully masked row: NaN, as torch
                  [ninf, 0.0, 1.0, ninf],  # partly masked: zeros where -inf
                  [1.0, inf, 2.0, 0.0],  # +inf: NaN (inf - inf), as torch
                  [1.0, nan, 2.0, 0.0],  # NaN propagates to the whole row
                  [1e4, -1e4, 0.0, 1e4]], dtype=np.float32)  # large values: max-subtracted, no overflow
    out = run(lambda g, a: g.softmax(a), x=x)
    close(out, torch.softmax(t(x), -1))
    assert np.isnan(out[0]).all() and out[1, 0] == 0 and np.isnan(out[2]).all() and np.isnan(out[3]).all()
    np.testing.assert_allclose(out[4], [0.5, 0, 0, 0.5])
