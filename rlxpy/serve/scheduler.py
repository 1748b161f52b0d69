"""Who runs on the GPU when: requests become jobs, and one worker thread runs them.

A job is a function of the :class:`Job` handed to it; it reports events with :meth:`Job.emit`
(delivered to the request's asyncio task) and checks :attr:`Job.cancelled` between steps (set when
the client goes away, or when the request has all it wants). The generator, its KV cache and the
embedding encoder are only ever touched from the worker thread.

:class:`SerialScheduler` runs jobs first come, first served, one at a time. :class:`BatchScheduler`
(continuous batching) decodes every admitted generation together, one
:meth:`~rlxpy.models.generate.BatchGenerator.step` for all of them: between steps it admits waiting
requests into free decode slots (prefilling each), runs other jobs (embeddings), and frees the slots
of requests that finished, hit a stop token, or whose client went away.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
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


@dataclass
class Generation:
    """A generation request for :class:`BatchScheduler`. ``on_token(job, token)`` runs on the worker for
    each new token (a stop token included, which ends it); ``on_end(job, result)`` once at the end,
    unless the job failed (then the scheduler emits the error)."""

    ids: list[int]
    max_tokens: int
    stop: Sequence[int]
    sampling: Any  # rlxpy.models.generate.Sampling
    on_token: Callable[[Job, int], None]
    on_end: Callable[[Job, GenerationResult], None]


@dataclass
class GenerationResult:
    finish_reason: str  # "stop", "length" or "cancelled"
    prompt_tokens: int
    reused: int  # prompt tokens whose KV rows were already computed
    tokens: list[int] = field(default_factory=list)  # generated, a stop token included
    seconds: float = 0.0


@dataclass
class _Live:
    job: Job
    request: Generation
    result: GenerationResult
    started: float


class BatchScheduler:
    """Continuous batching over a :class:`~rlxpy.models.generate.BatchGenerator` on one worker
    thread. Generations wait first come, first served for a free slot; plain jobs (``submit``) run
    between decode steps in their turn."""

    def __init__(self, generator: Any, name: str = "rlxpy-gpu") -> None:
        self.generator = generator
        self._queue: queue.Queue[Job | None] = queue.Queue()
        self._waiting: deque[Job] = deque()
        self._live: dict[int, _Live] = {}  # slot -> its request
        self._lock = threading.Lock()
        self.waiting = 0  # jobs submitted and not started
        self.completed = 0
        self.cancelled = 0
        self.busy_seconds = 0.0
        self.steps = 0
        self.peak = 0  # most sequences decoded in one step
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    @property
    def running(self) -> int | None:
        """How many generations hold a decode slot (None when none: the serial scheduler's idle)."""
        return len(self._live) or None

    def submit(self, work: Callable[[Job], None], loop: asyncio.AbstractEventLoop | None = None) -> Job:
        """Queue a plain job (run whole, between decode steps)."""
        return self._put(Job(work, loop or asyncio.get_running_loop()))

    def submit_generation(self, request: Generation, loop: asyncio.AbstractEventLoop | None = None) -> Job:
        """Queue a generation; it decodes in a slot alongside the others."""
        job = Job(_no_work, loop or asyncio.get_running_loop())
        job.generation = request  # type: ignore[attr-defined]
        return self._put(job)

    def _put(self, job: Job) -> Job:
        with self._lock:
            self.waiting += 1
        self._queue.put(job)
        return job

    def close(self, timeout: float | None = 10.0) -> None:
        """Stop: generations in progress end at the next step, queued jobs never start."""
        self._closing.set()
        self._queue.put(None)
        for live in list(self._live.values()):
            live.job.cancel()
        self._thread.join(timeout)

    # -- the worker --------------------------------------------------------------------------------

    def _loop(self) -> None:
        pending = None  # a decode step submitted and not yet read back
        try:
            while self._take(block=not self._live and not self._waiting and pending is None):
                if pending is not None and (not self._live or self._can_start()):
                    self._read(pending)  # admissions and plain jobs run between steps
                    pending = None
                if pending is None:
                    self._start_waiting()
                if self._live:
                    pending = self._advance(pending)
        finally:
            if pending is not None:
                self._read(pending)
            for live in list(self._live.values()):
                live.job.cancel()
                self._finish(live, "cancelled")
            for job in self._waiting:
                self._skip(job)
            self._waiting.clear()

    def _can_start(self) -> bool:
        """Whether the first waiting job could start now (it then waits for no decode step)."""
        if not self._waiting:
            return False
        job = self._waiting[0]
        return job.cancelled or getattr(job, "generation", None) is None or bool(self.generator.free_slots())

    def _take(self, block: bool) -> bool:
        """Move submitted jobs to the waiting line; False once the scheduler closes."""
        try:
            job = self._queue.get() if block else self._queue.get_nowait()
        except queue.Empty:
            return not self._closing.is_set()
        while True:
            if job is None:
                return False
            self._waiting.append(job)
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                return not self._closing.is_set()

    def _start_waiting(self) -> None:
        """Start waiting jobs in order while they can: plain jobs run now, generations take free
        slots (the first that finds none waits, and so do the jobs behind it)."""
        while self._waiting:
            job = self._waiting[0]
            request = getattr(job, "generation", None)
            if not job.cancelled and request is not None and not self.generator.free_slots():
                return
            self._waiting.popleft()
            with self._lock:
                self.waiting -= 1
            if job.cancelled:
                self._skip(job)
            elif request is None:
                self._run_plain(job)
            else:
                self._admit(job, request)

    def _skip(self, job: Job) -> None:
        """A job cancelled before it started (the client left while it waited)."""
        self.cancelled += 1
        job.emit(END)

    def _run_plain(self, job: Job) -> None:
        job.started.set()
        started = time.perf_counter()
        try:
            job.work(job)
        except Exception as error:  # noqa: BLE001  (reported to the request, the worker goes on)
            _report(job, error)
        finally:
            self.busy_seconds += time.perf_counter() - started
            self.completed += 1
            self.cancelled += job.cancelled
            job.emit(END)

    def _admit(self, job: Job, request: Generation) -> None:
        job.started.set()
        started = time.perf_counter()
        gen = self.generator
        try:
            slot, first = gen.admit(request.ids, request.sampling)
        except Exception as error:  # noqa: BLE001
            _report(job, error)
            self.busy_seconds += time.perf_counter() - started
            self.completed += 1
            job.emit(END)
            return
        live = _Live(job, request, GenerationResult("length", len(request.ids), gen.last_reused), started)
        self._live[slot] = live
        self.busy_seconds += time.perf_counter() - started
        self._deliver(slot, first)

    def _advance(self, pending: Callable[[], dict[int, int]] | None) -> Callable[[], dict[int, int]] | None:
        """Decode one step and deliver its tokens. Where the generator can, the next step is submitted
        (fed on the GPU) before this one is read back, so the GPU works while the host streams;
        returns that step, still in flight, or None."""
        gen = self.generator
        pipelined = hasattr(gen, "submit_step")
        started = time.perf_counter()
        try:
            if pending is None:
                pending = gen.submit_step() if pipelined else gen.step
            following = gen.submit_step(follow=True) if pipelined and gen.can_follow() else None
        except Exception as error:  # noqa: BLE001  (every sequence of the step fails with it)
            if pending is not None:
                self._read(pending)
            self._fail_all(error)
            return None
        finally:
            self.busy_seconds += time.perf_counter() - started
        self._read(pending)
        return following

    def _read(self, pending: Callable[[], dict[int, int]]) -> None:
        """Wait for a submitted step and hand each live slot its token."""
        started = time.perf_counter()
        self.peak = max(self.peak, len(self._live))
        try:
            tokens = pending()
        except Exception as error:  # noqa: BLE001  (every sequence of the step fails with it)
            self._fail_all(error)
            return
        finally:
            self.busy_seconds += time.perf_counter() - started
        self.steps += 1
        for slot, token in tokens.items():
            if slot in self._live:
                self._deliver(slot, token)

    def _fail_all(self, error: Exception) -> None:
        for slot, live in list(self._live.items()):
            _report(live.job, error)
            self.generator.release(slot)
            del self._live[slot]
            self.completed += 1
            live.job.emit(END)

    def _deliver(self, slot: int, token: int) -> None:
        """Hand ``slot``'s new token to its request; free the slot when the request is done."""
        live = self._live[slot]
        result, request = live.result, live.request
        if live.job.cancelled:
            self._end(slot, "cancelled")
            return
        result.tokens.append(token)
        live.job.started.set()
        request.on_token(live.job, token)
        if token in request.stop:
            self._end(slot, "stop")
        elif len(result.tokens) >= request.max_tokens or self.generator.room(slot) <= 0:
            self._end(slot, "length")

    def _end(self, slot: int, reason: str) -> None:
        live = self._live.pop(slot)
        self.generator.release(slot)
        self._finish(live, reason)

    def _finish(self, live: _Live, reason: str) -> None:
        live.result.finish_reason = reason
        live.result.seconds = time.perf_counter() - live.started
        try:
            live.request.on_end(live.job, live.result)
        except Exception as error:  # noqa: BLE001
            _report(live.job, error)
        self.completed += 1
        self.cancelled += live.job.cancelled
        live.job.emit(END)


def _no_work(job: Job) -> None:
    raise RlxError("a generation job runs through BatchScheduler's slots, not as plain work")


def _report(job: Job, error: Exception) -> None:
    if not isinstance(error, RlxError):
        log.exception("job %d failed", job.id)
    job.emit("error", error)
