"""The ONNX fuzz harness in CI (issue 17): 505 seeded structure-aware mutations (500 of a one-layer
BERT export, 5 of the all-MiniLM-L6-v2 export with its real weights) must each load and run on a tiny
input (or fail there with an rlxpy error naming the file), or be refused by an rlxpy error naming the
file: no other exception, no hang."""

from __future__ import annotations

import pytest

from rlxpy.frontends.embed import default_model_dir
from rlxpy.frontends.onnx_fuzz import (
    CachedOnnxModel,
    Seed,
    export_bert,
    pretrained_bert,
    run,
    tiny_bert,
    tiny_feeds,
)

TINY_CASES, MINILM_CASES, BUDGET_S = 500, 5, 120.0


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    folder = tmp_path_factory.mktemp("onnx_seeds")
    tiny = Seed.load("tiny_bert", export_bert(folder / "tiny_bert.onnx", tiny_bert()))
    real = Seed.load("minilm", export_bert(folder / "minilm.onnx", pretrained_bert(default_model_dir())))
    return tiny, real


def test_seeds_load_and_run(device, seeds):
    for seed in seeds:
        model = CachedOnnxModel(seed.path)
        out = model.run(tiny_feeds(model))["last_hidden_state"]
        assert out.shape[:2] == (1, 3) and out.dtype.kind == "f"


def test_fuzz_505_cases_load_or_refuse_cleanly(device, seeds, tmp_path):
    tiny, real = seeds
    report = run([(tiny, TINY_CASES), (real, MINILM_CASES)], tmp_path, rng_seed=17, time_limit=30.0)
    print(report.summary())
    assert report.cases == TINY_CASES + MINILM_CASES
    assert report.counts["failure"] == 0, report.summary()
    assert report.counts["refused"] > report.cases // 2 and report.counts["loaded"] > 0
    assert report.seconds < BUDGET_S, report.summary()
