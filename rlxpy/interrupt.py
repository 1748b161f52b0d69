"""Ctrl-C that always lands: a KeyboardInterrupt raised inside one of wgpu's cffi callbacks (a
buffer map completing while a run is read back) is printed by cffi and lost, so the run goes on.

``interruptible()`` installs a SIGINT handler that raises at once, except while wgpu's own Python
code runs: there it only remembers the signal, and the caller's ``check()`` raises it at the next
safe point (the next token, the next prefill chunk).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType


def _in_wgpu(frame: FrameType | None) -> bool:
    wgpu = sys.modules.get("wgpu")
    if frame is None or wgpu is None or not getattr(wgpu, "__file__", None):
        return False
    return frame.f_code.co_filename.startswith(os.path.dirname(wgpu.__file__))


@contextlib.contextmanager
def interruptible() -> Iterator[Callable[[], None]]:
    """Yields ``check()``, which raises a KeyboardInterrupt remembered while wgpu ran. Outside the
    main thread (where no handler can be installed) ``check`` does nothing."""
    pending = threading.Event()

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        if _in_wgpu(frame):
            pending.set()
            return
        raise KeyboardInterrupt

    def check() -> None:
        if pending.is_set():
            pending.clear()
            raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield check
        return
    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield check
    finally:
        signal.signal(signal.SIGINT, previous)


__all__ = ["interruptible"]
