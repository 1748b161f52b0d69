"""The JSON IR fuzz harness in CI (issue 17): 600 seeded structure-aware mutations of serialised
graphs (a transformer block, a CNN, an If graph) must each load (and serialise back to the same
JSON) or be refused by an rlxpy error that says where in the JSON: no other exception, no hang."""

from __future__ import annotations

import json

import pytest
from ir_fuzz_seeds import seeds

from rlxpy.errors import GraphError
from rlxpy.ir import Graph
from rlxpy.ir.serialize_fuzz import run

CASES_PER_SEED, BUDGET_S = 200, 30.0


def test_fuzz_600_cases_load_or_refuse_cleanly(tmp_path):
    plan = [(seed, CASES_PER_SEED) for seed in seeds()]
    report = run(plan, tmp_path, rng_seed=17, time_limit=10.0)
    print(report.summary())
    assert report.cases == CASES_PER_SEED * len(plan)
    assert report.counts["failure"] == 0, report.summary()
    assert report.counts["refused"] > report.cases // 2 and report.counts["loaded"] > 0
    assert report.seconds < BUDGET_S, report.summary()


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d["nodes"][3].update(inputs=[99]), r"99 is not a node of graph .* \(JSON graph, node #3\)"),
    (lambda d: d["nodes"][3].update(inputs=[3]), r"3 is not a node of graph .* \(JSON graph, node #3\)"),
    (lambda d: d["nodes"][0]["attrs"].update(shape=[2, -5]), r"x \(Input\), JSON graph node #0: attribute "
     r"'shape': dim 1 must be an integer in \[0, 2\*\*40\]"),
    (lambda d: d["nodes"][0]["attrs"].pop("shape"), r"x \(Input\), JSON graph node #0: attribute 'shape' is "
     "missing"),
    (lambda d: d["nodes"][0]["attrs"].update(dtype={"$enum": "DType", "name": "F99"}),
     "attribute 'dtype': DType has no member 'F99'"),
    (lambda d: d.update(outputs=[1000]), r"JSON graph: output: 1000 is not a node"),
    (lambda d: d["nodes"][1].update(name=None), r"JSON graph: node #1: field 'name' must be str"),
])
def test_refusals_name_the_node_and_field(edit, message):
    seed = next(s for s in seeds() if s.name == "transformer_block")
    data = json.loads(seed.text)
    edit(data)
    with pytest.raises(GraphError, match=message):
        Graph.from_json(json.dumps(data))


def test_truncated_and_deep_json_are_refused():
    text = seeds()[0].text
    with pytest.raises(GraphError, match="JSON graph: not valid JSON"):
        Graph.from_json(text[: len(text) // 2])
    with pytest.raises(GraphError, match="JSON graph: nested too deeply"):
        Graph.from_json("[" * 100000 + "]" * 100000)
    with pytest.raises(GraphError, match="JSON graph: not UTF-8 text"):
        Graph.from_json(b"\xff" + text.encode())
