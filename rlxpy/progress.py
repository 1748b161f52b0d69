"""Progress display for long work (a prefill on a slow adapter), drawn with tqdm on a terminal only."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TextIO

from tqdm import tqdm


def prefill_bar(file: TextIO | None = None) -> Callable[[int, int], None]:
    """A ``Generator.progress`` callback drawing one bar per prefill; silent when ``file`` (stderr by
    default) is not a terminal, so logs and pipes stay clean."""
    out = file or sys.stderr
    bar: tqdm | None = None

    def update(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            bar = tqdm(total=total, unit="tok", desc="prefill", file=out, leave=False,
                       disable=not out.isatty())
        bar.update(done - bar.n)
        if done >= total:
            bar.close()
            bar = None

    return update
