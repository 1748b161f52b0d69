"""BatchScheduler (continuous batching) on its own, over a stand-in generator (no model, no GPU):
requests join free slots between steps, leave on a stop token, their limit or a cancel, and each
gets exactly its own tokens. Each test runs over a generator that steps one at a time and over one
whose next step can be queued behind the step in flight (the GPU generator's pipelining)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from rlxpy.serve.scheduler import END, BatchScheduler, Generation


class CountingGenerator:
    """Each slot's next token is its last plus one; the first is the prompt's last token plus one."""

    def __init__(self, slots: int, context: int = 1000, delay: float = 0.002) -> None:
        self.slots, self.context, self.delay = slots, context, delay
        self.active = [False] * slots
        self.last = [0] * slots
        self.position = [0] * slots
        self.batches: list[int] = []  # slots decoded per step
        self.last_reused = 0

    def free_slots(self) -> list[int]:
        return [s for s in range(self.slots) if not self.active[s]]

    def admit(self, ids, sampling):
        slot = self.free_slots()[0]
        self.active[slot], self.last[slot], self.position[slot] = True, ids[-1] + 1, len(ids)
        return slot, ids[-1] + 1

    def step(self):
        time.sleep(self.delay)
        live = [s for s in range(self.slots) if self.active[s]]
        self.batches.append(len(live))
        for s in live:
            self.last[s] += 1
            self.position[s] += 1
        return {s: self.last[s] for s in live}

    def room(self, slot):
        return self.context - self.position[slot]

    def release(self, slot):
        self.active[slot] = False


class PipelinedGenerator(CountingGenerator):
    """submit_step/can_follow like BatchGenerator: a followed step continues from the tokens of the
    step in flight; a slot released meanwhile gets no token; nothing is admitted while steps fly."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.in_flight = 0
        self.followed = 0

    def admit(self, ids, sampling):
        assert self.in_flight == 0, "admitted while a step was in flight"
        return super().admit(ids, sampling)

    def can_follow(self):
        live = [s for s in range(self.slots) if self.active[s]]
        return bool(live) and all(self.position[s] < self.context for s in live)

    def submit_step(self, follow=False):
        assert self.in_flight <= (1 if follow else 0)
        self.followed += follow
        out = CountingGenerator.step(self)
        self.in_flight += 1

        def read():
            self.in_flight -= 1
            return {s: t for s, t in out.items() if self.active[s]}

        return read

    def step(self):
        raise AssertionError("a pipelined generator is driven through submit_step")


@pytest.fixture(params=[CountingGenerator, PipelinedGenerator])
def generator(request):
    return request.param


def _generation(start: int, max_tokens: int, stop=(), log=None):
    got = []

    def on_token(job, token):
        got.append(token)

    def on_end(job, result):
        job.emit("done", (list(got), result.finish_reason))

    return Generation([start], max_tokens, list(stop), None, on_token, on_end)


async def _done(job):
    value = None
    while True:
        kind, item = await asyncio.wait_for(job.events.get(), 20)
        if kind == "done":
            value = item
        elif kind == "error":
            raise item
        elif kind == END:
            return value


def test_more_requests_than_slots_all_finish_with_their_own_tokens(generator):
    async def main():
        gen = generator(slots=3)
        scheduler = BatchScheduler(gen)
        lengths = [5, 2, 7, 1, 4, 6, 3]
        jobs = [scheduler.submit_generation(_generation(100 * i, n)) for i, n in enumerate(lengths)]
        results = [await _done(job) for job in jobs]
        scheduler.close()
        for i, (n, (tokens, reason)) in enumerate(zip(lengths, results)):
            assert tokens == list(range(100 * i + 1, 100 * i + 1 + n)) and reason == "length"
        assert max(gen.batches) == 3 and scheduler.peak == 3  # slots were shared
        assert scheduler.completed == len(lengths) and scheduler.cancelled == 0 and not any(gen.active)
        if generator is PipelinedGenerator:
            assert gen.followed > 0 and gen.in_flight == 0

    asyncio.run(main())


def test_a_stop_token_frees_the_slot_for_a_waiting_request(generator):
    async def main():
        gen = generator(slots=1)
        scheduler = BatchScheduler(gen)
        first = scheduler.submit_generation(_generation(10, 50, stop=[13]))
        second = scheduler.submit_generation(_generation(20, 2))
        assert await _done(first) == ([11, 12, 13], "stop")
        assert await _done(second) == ([21, 22], "length")
        scheduler.close()

    asyncio.run(main())


def test_cancelled_requests_leave_running_or_never_start_and_plain_jobs_run_between_steps(generator):
    async def main():
        gen = generator(slots=1, delay=0.01)
        scheduler = BatchScheduler(gen)
        running = scheduler.submit_generation(_generation(0, 10_000))
        waiting = scheduler.submit_generation(_generation(50, 3))
        plain_ran = threading.Event()
        plain = scheduler.submit(lambda job: (plain_ran.set(), job.emit("done", "plain")))
        while not gen.batches:
            await asyncio.sleep(0.01)
        waiting.cancel()
        running.cancel()
        assert (await _done(running))[1] == "cancelled"
        assert await _done(waiting) is None  # never admitted
        assert await _done(plain) == "plain" and plain_ran.is_set()
        assert scheduler.cancelled == 2 and scheduler.waiting == 0 and scheduler.running is None
        assert len(gen.batches) < 1000
        scheduler.close()

    asyncio.run(main())


def test_close_ends_live_and_waiting_generations(generator):
    async def main():
        gen = generator(slots=2, delay=0.01)
        scheduler = BatchScheduler(gen)
        jobs = [scheduler.submit_generation(_generation(i, 10_000)) for i in range(3)]
        while not gen.batches:
            await asyncio.sleep(0.01)
        began = time.perf_counter()
        scheduler.close()
        assert time.perf_counter() - began < 2
        outcomes = [await _done(job) for job in jobs]
        assert [o[1] for o in outcomes[:2]] == ["cancelled", "cancelled"] and outcomes[2] is None

    asyncio.run(main())
