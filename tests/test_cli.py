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


def test_ctrl_c_during_generate_stops_with_one_line_and_code_130(device):
    """SIGINT once the first generated text is out (SmolLM2, greedy, a short prompt): the text line
    is ended, stderr's last line says why, no traceback, exit code 130."""
    import os
    import select
    import signal
    import subprocess
    import sys
    import time

    prompt = "Once upon a time"
    process = subprocess.Popen(
        [sys.executable, "-m", "rlxpy.cli", "generate", "--no-chat", "--max-tokens", "200",
         "--context", "256", "--chunk", "8", prompt],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    text, deadline = b"", time.monotonic() + 300
    try:
        while len(text) < len(prompt) + 3 and time.monotonic() < deadline:  # the prompt, then tokens
            ready, _, _ = select.select([process.stdout], [], [], 5)
            if ready:
                chunk = os.read(process.stdout.fileno(), 256)
                assert chunk, f"generate ended before any token: {process.wait()}"
                text += chunk
        assert len(text) > len(prompt), "no token within the deadline"
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    errors = err.decode()
    assert process.returncode == 130, errors[-2000:]
    assert "Traceback" not in errors and "cffi" not in errors, errors[-2000:]
    assert errors.strip().splitlines()[-1] == "rlxpy: interrupted"
    assert (text + out).decode(errors="replace").startswith(prompt) and (text + out).endswith(b"\n")
