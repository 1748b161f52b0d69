"""The GGUF fuzz harness in CI (issue 17): 1000 seeded structure-aware mutations (880 of the tiny
GGUFWriter llama, tokenizer read too, and 120 of the real SmolLM2 header region) must each load (and
fit the llama graph) or be refused by a ModelError naming the file: no other exception, no hang."""

from __future__ import annotations

from tiny_llama import write_tiny_llama

from rlxpy.frontends.gguf import default_model_path
from rlxpy.frontends.gguf_fuzz import Seed, run

TINY_CASES, SMOL_CASES, BUDGET_S = 880, 120, 60.0


def test_fuzz_1000_cases_load_or_refuse_cleanly(tmp_path):
    tiny = Seed.load("tiny", write_tiny_llama(tmp_path / "tiny.gguf"))
    smol = Seed.load("smollm2", default_model_path(), sparse=True)
    work = tmp_path / "cases"
    work.mkdir()
    report = run([(tiny, TINY_CASES), (smol, SMOL_CASES)], work, rng_seed=17, time_limit=10.0,
                 tokenizer_seeds=("tiny",))
    print(report.summary())
    assert report.cases == TINY_CASES + SMOL_CASES
    assert report.counts["failure"] == 0, report.summary()
    assert report.counts["refused"] > report.cases // 2 and report.counts["loaded"] > 0
    assert report.seconds < BUDGET_S, report.summary()
