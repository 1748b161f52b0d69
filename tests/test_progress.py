"""The prefill progress bar: drawn on a terminal, silent otherwise."""

from __future__ import annotations

import io

from rlxpy.progress import prefill_bar


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_prefill_bar_draws_on_a_terminal_and_closes_at_the_end() -> None:
    out = _Tty()
    update = prefill_bar(out)
    for done in (32, 64, 70):
        update(done, 70)
    text = out.getvalue()
    assert "prefill" in text and "/70" in text
    assert text.endswith("\r")  # closed: the bar is wiped (leave=False), the stream goes on clean


def test_prefill_bar_is_silent_when_not_a_terminal() -> None:
    out = io.StringIO()
    update = prefill_bar(out)
    update(32, 64)
    update(64, 64)
    assert out.getvalue() == ""
