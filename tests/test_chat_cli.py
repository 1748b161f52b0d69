"""`rlxpy chat` as a user runs it: a subprocess fed on stdin (SmolLM2, greedy)."""

from __future__ import annotations

import re
import subprocess
import sys


def test_chat_repl_streams_replies_resets_and_exits(device):
    script = "Hi\n/reset\n\nHi\n/bogus\n/exit\nthis line is never read\n"
    done = subprocess.run(
        [sys.executable, "-m", "rlxpy.cli", "chat", "--max-tokens", "3", "--chunk", "4", "--context", "256",
         "--system", "Be brief."],
        input=script, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    replies = [line for line in done.stdout.splitlines() if line.strip()]
    assert len(replies) == 2, done.stdout
    assert replies[0] == replies[1]  # /reset: the same first turn again, greedy
    assert "/reset starts a new conversation" in done.stderr
    assert "new conversation" in done.stderr
    assert "unknown command '/bogus'" in done.stderr
    turns = re.findall(r"prefill (\d+) tokens \((\d+) reused from the cache\)", done.stderr)
    assert len(turns) == 2, done.stderr
    (first, reused_first), (second, reused_second) = [(int(a), int(b)) for a, b in turns]
    assert reused_first == 0 and first > 5
    # After /reset the same conversation starts again: all but its last prompt token are cached.
    assert (second, reused_second) == (1, first - 1)
