"""The server's scheduling and stop-string pieces on their own (no model, no GPU)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from rlxpy.serve.engine import StopStrings
from rlxpy.serve.scheduler import END, SerialScheduler


async def _events(job) -> list[tuple[str, object]]:
    events = []
    while True:
        kind, value = await asyncio.wait_for(job.events.get(), 10)
        events.append((kind, value))
        if kind == END:
            return events


def test_jobs_run_one_at_a_time_in_order_and_a_failure_is_reported():
    async def main():
        scheduler = SerialScheduler()
        active, log, lock = [], [], threading.Lock()

        def work(name: str, fail: bool = False):
            def run(job):
                with lock:
                    active.append(name)
                    assert len(active) == 1, active
                time.sleep(0.02)
                log.append(name)
                with lock:
                    active.remove(name)
                if fail:
                    raise ValueError(f"{name} failed")
                job.emit("done", name)
            return run

        jobs = [scheduler.submit(work(name, fail=name == "b")) for name in "abc"]
        results = [await _events(job) for job in jobs]
        scheduler.close()
        assert log == ["a", "b", "c"]
        assert results[0] == [("done", "a"), (END, None)]
        assert results[1][0][0] == "error" and str(results[1][0][1]) == "b failed"
        assert results[2] == [("done", "c"), (END, None)]
        assert scheduler.completed == 3 and scheduler.cancelled == 0

    asyncio.run(main())


def test_a_job_cancelled_while_queued_never_runs_and_a_running_one_sees_the_flag():
    async def main():
        scheduler = SerialScheduler()
        started, ran = threading.Event(), []

        def long(job):
            started.set()
            while not job.cancelled:
                time.sleep(0.01)
            ran.append("long stopped")

        def never(job):
            ran.append("never")

        running = scheduler.submit(long)
        queued = scheduler.submit(never)
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 10)
        assert scheduler.waiting == 1
        queued.cancel()
        running.cancel()
        assert await _events(running) == [(END, None)]
        assert await _events(queued) == [(END, None)]
        assert ran == ["long stopped"] and scheduler.cancelled == 2
        scheduler.close()

    asyncio.run(main())


def test_close_stops_the_running_job_and_cancels_the_queue():
    async def main():
        scheduler = SerialScheduler()

        def slow(job):
            for _ in range(500):
                if job.cancelled:
                    return
                time.sleep(0.01)

        jobs = [scheduler.submit(slow) for _ in range(3)]
        await asyncio.sleep(0.05)
        began = time.perf_counter()
        scheduler.close()
        assert time.perf_counter() - began < 2
        for job in jobs:
            assert await _events(job) == [(END, None)]
        assert scheduler.cancelled == 3

    asyncio.run(main())


@pytest.mark.parametrize(
    ("pieces", "stops", "sent", "hit"),
    [
        (["Hello", " wor", "ld"], ["world"], "Hello ", True),  # a stop split across pieces
        (["ab", "c", "d"], ["cx"], "abcd", False),  # a held-back tail that did not become a stop
        (["one\n", "\ntwo"], ["\n\n", "two"], "one", True),  # the earliest of several stops
        (["x"], [], "x", False),
    ],
)
def test_stop_strings_cut_at_the_first_stop_and_hold_back_only_possible_starts(pieces, stops, sent, hit):
    matcher = StopStrings(stops)
    out, found = "", False
    for piece in pieces:
        text, found = matcher.push(piece)
        out += text
        if found:
            break
    if not found:
        out += matcher.flush()
    assert (out, found) == (sent, hit)
