"""Who runs on the GPU when: requests become jobs, and one worker thread runs them one at a time.

A job is a function of the :class:`Job` handed to it; it reports events with :meth:`Job.emit`
(delivered to the request's asyncio task) and checks :attr:`Job.cancelled` between steps (set when
the client goes away, or when the request has all it wants). The generator, its KV cache and the
embedding encoder are only ever touched from the worker thread.

:class:`SerialScheduler` is the whole scheduling policy (first come, first served, one at a time);
a batching scheduler that decodes several requests per step can replace it behind ``submit``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from rlxpy.errors import RlxError

log = logging.getLogger("rlxpy.serve")

#: The last event of every job: ("end", None), after its own events (an error is ("error", exc)).
END = "end"


class Job:
    """One request's work: events flow to the asyncio side through :attr:`events`."""

    _ids = itertools.count(1)

    def __init__(self, work: Callable[[Job], None], loop: asyncio.AbstractEventLoop) -> None:
        self.id = next(self._ids)
        self.work = work
        self.loop = loop
        self.events: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self._cancelled = threading.Event()
        self.started = threading.Event()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def cancel(self) -> None:
        """Ask the job to stop at its next step (or not to start at all)."""
        self._cancelled.set()

    def emit(self, kind: str, value: Any = None) -> None:
        """Send an event to the request (from the worker thread)."""
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, (kind, value))
        except RuntimeError:  # the event loop is closed: the server is shutting down
            self.cancel()


class SerialScheduler:
    """Runs jobs one at a time on one worker thread, in the order they were submitted."""

    def __init__(self, name: str = "rlxpy-gpu") -> None:
        self._queue: queue.Queue[Job | None] = queue.Queue()
        self._lock = threading.Lock()
        self.waiting = 0  # jobs submitted and not started
        self.running: Job | None = None
        self.completed = 0
        self.cancelled = 0
        self.busy_seconds = 0.0  # time spent running jobs
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def submit(self, work: Callable[[Job], None], loop: asyncio.AbstractEventLoop | None = None) -> Job:
        """Queue ``work``; its events arrive on the returned job's ``events`` queue."""
        job = Job(work, loop or asyncio.get_running_loop())
        with self._lock:
            self.waiting += 1
        self._queue.put(job)
        return job

    def close(self, timeout: float | None = 10.0) -> None:
        """Stop: the job in progress ends at its next step, queued jobs never start."""
        self._closing.set()
        self._queue.put(None)
        running = self.running
        if running is not None:
            running.cancel()
        self._thread.join(timeout)

    def _loop(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                self._drain()
                return
            with self._lock:
                self.waiting -= 1
            if self._closing.is_set():
                job.cancel()
            if job.cancelled:  # the client left while the job was queued (or the server is closing)
                self.cancelled += 1
                job.emit(END)
                continue
            self.running = job
            job.started.set()
            started = time.perf_counter()
            try:
                job.work(job)
            except Exception as error:  # noqa: BLE001  (reported to the request, the worker goes on)
                if not isinstance(error, RlxError):
                    log.exception("job %d failed", job.id)
                job.emit("error", error)
            finally:
                self.busy_seconds += time.perf_counter() - started
                self.running = None
                self.completed += 1
                if job.cancelled:
                    self.cancelled += 1
                job.emit(END)

    def _drain(self) -> None:
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                return
            if job is not None:
                job.cancel()
                job.emit(END)
