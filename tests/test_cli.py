"""The `rlxpy` command's inspection subcommands (generate has its own tests with the model)."""

from __future__ import annotations

from rlxpy import env
from rlxpy.cli import main


def test_info_lists_architecture_types_and_arena_plan(capsys):
    assert main(["info", "--context", "256"]) == 0
    out = capsys.readouterr().out
    assert "architecture llama: 30 layers, hidden 576, heads 9/3 (head dim 64)" in out
    assert "Q4_1 ×210" in out and "Q8_0 ×1" in out
    assert "arena plan (context 256)" in out


def test_flags_prints_every_flag(capsys):
    assert main(["flags"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in env.FLAGS)


def test_demo_runs_a_graph_and_prints_its_report(device, capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "matmul_skinny" in out and "probs: shape [8, 10]" in out  # 8 rows: the skinny GEMM


def test_bad_model_path_is_a_clear_error(capsys):
    assert main(["info", "/nonexistent/model.gguf"]) == 2
    assert "no such GGUF file" in capsys.readouterr().err
