"""Graph breaks in the torch.compile backend: a graph with nodes rlxpy cannot take runs those in
eager torch and the rest as rlxpy subgraphs, with results equal to eager torch (the oracle)."""

from __future__ import annotations

import gc
import re
import warnings

import pytest
import torch

import rlxpy
from rlxpy.frontends import torch_fx
from rlxpy.frontends.torch_fx import RlxpyGraphBreakWarning, compiled_graphs, make_backend, rlxpy_backend
from rlxpy.frontends.torch_fx_translate import TRANSLATORS


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    gc.collect()  # compiled_graphs() lists this test's parts only
    torch_fx._WARNED.clear()
    yield
    torch._dynamo.reset()


def run_with_breaks(fn, *inputs):
    """(compiled result, eager result, the graph-break message) of one call under no_grad."""
    compiled = torch.compile(fn, backend=rlxpy_backend)
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = compiled(*inputs)
        want = fn(*inputs)
    breaks = [str(w.message) for w in caught if issubclass(w.category, RlxpyGraphBreakWarning)]
    assert len(breaks) == 1, [str(w.message) for w in caught]
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    return breaks[0]


def share(message: str) -> tuple[int, int, int]:
    """(nodes on rlxpy, all nodes, subgraphs) from the warning."""
    found = re.search(r"(\d+) of (\d+) aten nodes \(\d+%\) run on rlxpy in (\d+) subgraph", message)
    assert found, message
    return int(found[1]), int(found[2]), int(found[3])


def rlxpy_parts(count: int) -> list:
    """The parts rlxpy compiled: ``count`` of them, each compiled once, never run in torch."""
    parts = compiled_graphs()
    assert len(parts) == count
    for part in parts:
        assert (part.compiles, part.eager_calls) == (1, 0)
        (exe,) = part.executables.values()
        assert len(exe.schedule.steps) >= 1
    return parts


# -- one unsupported op in the middle ---------------------------------------------------------------
class Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = torch.nn.Linear(12, 24), torch.nn.Linear(24, 6)

    def forward(self, x):
        h = torch.relu(self.a(x))
        h = torch.cumsum(h, -1)  # aten.cumsum: no translator
        return torch.softmax(self.b(h), -1)


def test_mlp_with_an_unsupported_op_runs_the_rest_on_rlxpy(device):
    message = run_with_breaks(Mlp().eval(), torch.randn(5, 12))
    assert "unsupported aten ops: aten.cumsum.default" in message
    assert share(message) == (6, 7, 2)  # all but the cumsum
    rlxpy_parts(2)


def test_on_unsupported_error_still_raises_naming_the_op(device):
    compiled = torch.compile(Mlp().eval(), backend=make_backend("error"))
    with torch.no_grad(), pytest.raises(rlxpy.UnsupportedOpError, match=r"aten\.cumsum\.default"):
        compiled(torch.randn(5, 12))
    assert compiled_graphs() == []


class Cnn(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x):
        h = torch.nn.functional.max_pool2d(torch.relu(self.conv1(x)), 2)
        h = torch.sigmoid(self.conv2(h))
        return self.head(h.mean((2, 3)))


def test_cnn_with_a_dropped_translator_breaks_only_there(device, monkeypatch):
    monkeypatch.delitem(TRANSLATORS, "max_pool2d_with_indices")
    message = run_with_breaks(Cnn().eval(), torch.randn(2, 3, 10, 10))
    assert "unsupported aten ops: aten.max_pool2d_with_indices.default" in message
    on_rlxpy, total, parts = share(message)
    # torch runs the pool and the getitem taking its values (a tuple never crosses a boundary)
    assert (total - on_rlxpy, parts) == (2, 2)
    rlxpy_parts(2)


# -- where the breaks are ---------------------------------------------------------------------------
def first_unsupported(x, w):
    return torch.tanh(torch.cumsum(x, 0) @ w) * 2 + 1


def last_unsupported(x, w):
    return torch.cumsum(torch.tanh(x @ w) * 2 + 1, 0)


@pytest.mark.parametrize("fn", [first_unsupported, last_unsupported])
def test_graph_whose_first_or_last_node_is_unsupported(device, fn):
    x, w = torch.randn(4, 8), torch.randn(8, 3)
    message = run_with_breaks(fn, x, w)
    assert "aten.cumsum.default" in message and share(message) == (4, 5, 1)
    rlxpy_parts(1)


def two_breaks(x, w):
    h = torch.cumsum(torch.relu(x @ w), -1)
    h = torch.cumsum(torch.tanh(h * 0.5 + 1), -1)
    return torch.sigmoid(h @ w.t()) - 0.5


def test_two_separated_unsupported_nodes_give_three_parts(device):
    message = run_with_breaks(two_breaks, torch.randn(4, 8), torch.randn(8, 8))
    assert share(message) == (9, 11, 3)
    rlxpy_parts(3)


def independent_branches(x, w):
    a = torch.cumsum(x @ w, -1)
    b = torch.tanh(x @ w.t())
    return a * b + 1


def test_nodes_independent_of_a_break_share_the_part_before_it(device):
    """``b`` does not depend on the cumsum: it joins the first part, not a third one."""
    message = run_with_breaks(independent_branches, torch.randn(3, 6), torch.randn(6, 6))
    assert share(message) == (6, 7, 2)
    rlxpy_parts(2)


def floor_divide(x, w):
    h = torch.relu(x @ w) * 3
    h = torch.div(h, 0.7, rounding_mode="floor")  # a translator refusal: rlxpy has no exact float floor
    return torch.tanh(h @ w.t()) + 1


def test_a_node_a_translator_refuses_runs_in_torch(device):
    message = run_with_breaks(floor_divide, torch.randn(4, 5), torch.randn(5, 5))
    assert "div" in message and "floor" in message
    on_rlxpy, total, parts = share(message)
    assert parts == 2 and total - on_rlxpy <= 2
    rlxpy_parts(2)


def float64_island(x, w):
    h = torch.relu(x @ w) + 1
    h = (h.double() * 3).float()
    return torch.tanh(h @ w.t()) * 2


def test_a_float64_island_runs_in_torch(device):
    message = run_with_breaks(float64_island, torch.randn(4, 5), torch.randn(5, 5))
    assert "unsupported dtypes: float64" in message
    assert share(message)[2] == 2
    rlxpy_parts(2)


def test_a_graph_with_no_part_worth_running_falls_back_whole(device):
    def mostly_unsupported(x):
        return torch.cumsum(x, 0) + 1
    compiled = torch.compile(mostly_unsupported, backend=rlxpy_backend)
    x = torch.randn(5, 3)
    with pytest.warns(torch_fx.RlxpyFallbackWarning, match="running a captured graph in eager torch"):
        torch.testing.assert_close(compiled(x), mostly_unsupported(x))
    assert compiled_graphs() == []
