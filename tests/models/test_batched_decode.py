"""BatchGenerator (continuous batching): per sequence, exactly the tokens of one-sequence decode
(Generator) while sequences of different prompt lengths join and leave between steps; per-request
sampling reproducible from its seed and the same as Generator's sampler. Tiny random GGUFs (llama:
the fused QKV + RoPE path; gemma3: q/k norms, sliding windows, two RoPE bases) and SmolLM2."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from tiny_families import write_tiny
from tiny_llama import write_tiny_llama

from rlxpy.frontends.gguf import default_model_path, load_generator
from rlxpy.frontends.gguf_tokenizer import GgufTokenizer
from rlxpy.models.generate import BatchGenerator, Sampling
from rlxpy.serve.scheduler import END, BatchScheduler, Generation


def run_batched(gen: BatchGenerator, prompts: list[list[int]], lengths: list[int],
                sampling: list[Sampling] | None = None) -> tuple[list[list[int]], list[int]]:
    """Continuous batching: requests join free slots in order between steps and leave after
    ``lengths[i]`` tokens. Returns (tokens per request, sequences decoded per step)."""
    sampling = sampling or [Sampling()] * len(prompts)
    got: list[list[int]] = [[] for _ in prompts]
    owner: dict[int, int] = {}
    waiting, batches = list(range(len(prompts))), []
    while waiting or any(gen.active):
        while waiting and gen.free_slots():
            i = waiting.pop(0)
            slot, first = gen.admit(prompts[i], sampling[i])
            owner[slot] = i
            got[i].append(first)
            if len(got[i]) >= lengths[i]:
                gen.release(slot)
        batches.append(gen.busy)
        for slot, token in gen.step().items():
            i = owner[slot]
            got[i].append(token)
            if len(got[i]) >= lengths[i]:
                gen.release(slot)
    return got, batches


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    return write_tiny_llama(tmp_path_factory.mktemp("batched") / "tiny-llama.gguf")


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_batched_greedy_is_exactly_one_sequence_decode(device, tmp_path, tiny_llama, family):
    if family == "llama":
        path = tiny_llama
    else:
        path = tmp_path / f"{family}.gguf"
        write_tiny(path, family)
    one, _ = load_generator(path, context=64, chunk=8)
    vocab = one.config.vocab_size
    rng = np.random.default_rng(5)
    # lengths 1..20 (one, two and three prefill chunks), the same first token (prefix reuse)
    prompts = [[1] + rng.integers(3, vocab, n).tolist() for n in (5, 0, 13, 2, 19, 8)]
    lengths = [9, 4, 12, 1, 6, 10]
    want = [list(one.generate(p, n)) for p, n in zip(prompts, lengths)]
    gen = BatchGenerator.from_gguf(str(path), slots=3, context=64, chunk=8)
    got, batches = run_batched(gen, prompts, lengths)
    assert got == want
    assert max(batches) == 3 and 1 in batches[-3:]  # slots filled up, then emptied as requests left


def test_batched_logits_match_one_sequence_decode(device, tiny_llama):
    """The logits of a slot's step against Generator's decode step at the same position (f32)."""
    one, _ = load_generator(tiny_llama, context=64, chunk=8)
    gen = BatchGenerator.from_gguf(str(tiny_llama), slots=4, context=64, chunk=8)
    prompts = [[1, 40, 41, 42], [1, 7, 8, 9, 10, 11, 12, 13, 14, 15], [1, 99]]
    for p in prompts:
        gen.admit(p)
    tokens = gen.tokens.copy()
    pos = np.array(gen.positions, np.int32)
    feed = {"batch_tokens": tokens, "batch_pos": pos, "batch_settings": np.zeros((4, 3), np.float32),
            "batch_seeds": np.zeros((4, 2), np.uint32)}
    out = gen.exe.run(feed, outputs=["batch_logits"])["batch_logits"]
    for slot, p in enumerate(prompts):
        first = one.prefill(p)
        assert first == tokens[slot]
        want = one.exe.run({"decode_tokens": np.array([first], np.int32),
                            "decode_pos": np.array([len(p)], np.int32)}, outputs=["decode_logits"])
        np.testing.assert_allclose(out[slot], want["decode_logits"].reshape(-1), rtol=1e-5, atol=1e-5)


def test_the_server_scheduler_pipelines_steps_and_keeps_each_sequence_exact(device, tiny_llama):
    """BatchScheduler queues step t+1 (its tokens fed on the GPU) before reading step t back: every
    request still gets Generator's tokens, a stop token ends its request mid-way although the next
    step was already decoding, and a request waiting for a slot joins when one frees. Steps with
    one live slot run one row."""
    one, _ = load_generator(tiny_llama, context=64, chunk=2)
    rng = np.random.default_rng(9)
    prompts = [[1] + rng.integers(3, one.config.vocab_size, n).tolist() for n in (4, 11, 1, 7, 3)]
    lengths = [10, 6, 12, 3, 8]
    want = [list(one.generate(p, n)) for p, n in zip(prompts, lengths)]
    stops = [[want[0][4]], [], [], [], [want[4][2]]]  # end two requests early on a token of their own
    want = [w[:w.index(s[0]) + 1] if s else w for w, s in zip(want, stops)]
    # prefill chunks of as many rows as there are slots: a lone slot's steps run one row (active
    # extent), and each prefill must run its whole chunk again
    gen = BatchGenerator.from_gguf(str(tiny_llama), slots=2, context=64, chunk=2)
    assert gen.scales

    async def main():
        scheduler = BatchScheduler(gen)
        jobs = []
        for prompt, n, stop in zip(prompts, lengths, stops):
            got: list[int] = []
            request = Generation(prompt, n, stop, Sampling(), lambda job, t, got=got: got.append(t),
                                 lambda job, result, got=got: job.emit("done", got))
            jobs.append(scheduler.submit_generation(request))
        results = []
        for job in jobs:
            while (event := await asyncio.wait_for(job.events.get(), 120))[0] != END:
                if event[0] == "error":
                    raise event[1]
                results.append(event[1]) if event[0] == "done" else None
        scheduler.close()
        return results, scheduler.peak

    results, peak = asyncio.run(main())
    assert results == want and peak == 2
    assert gen._in_flight == 0
    # a sequence admitted after steps of one live slot (one row) prefills its whole chunks
    slot, first = gen.admit(prompts[0])
    tokens = [first] + [gen.step()[slot] for _ in range(3)]
    other, second = gen.admit(prompts[1])
    assert (slot, other) == (0, 1) and tokens == want[0][:4] and second == want[1][0]


def test_per_request_sampling_is_reproducible_and_matches_the_compiled_sampler(device, tiny_llama):
    """A sampled request gives Generator(sampler, seed)'s tokens, whichever slot it gets and whatever
    decodes beside it; another seed gives other tokens; greedy neighbours stay greedy."""
    settings = {"temperature": 0.9, "top_k": 40, "top_p": 0.95}
    sampler, _ = load_generator(tiny_llama, context=64, chunk=8, sampler=settings, seed=11)
    greedy, _ = load_generator(tiny_llama, context=64, chunk=8)
    prompt, other = [1, 20, 21, 22, 23], [1, 50, 51]
    want = list(sampler.generate(prompt, 12))
    want_greedy = list(greedy.generate(other, 12))
    gen = BatchGenerator.from_gguf(str(tiny_llama), slots=3, context=64, chunk=8)
    sampled = Sampling(seed=11, **settings)
    first, _ = run_batched(gen, [prompt, other], [12, 12], [sampled, Sampling()])
    assert first == [want, want_greedy]
    # again, now in slot 2 behind two greedy requests, then with another seed
    again, _ = run_batched(gen, [other, other, prompt, prompt], [12, 12, 12, 12],
                           [Sampling(), Sampling(), sampled, Sampling(seed=12, **settings)])
    assert again[2] == want and again[0] == again[1] == want_greedy
    assert again[3] != want


def test_smollm2_batched_greedy_is_exactly_one_sequence_decode(device):
    path = default_model_path()
    tokenizer = GgufTokenizer.from_gguf(path)
    texts = ["The capital of France is", "1, 2, 3,", "Once upon a time there was a little",
             "Water boils at", "def add(a, b):"]
    prompts = [tokenizer.encode(text) for text in texts]
    lengths = [6, 3, 5, 2, 4]
    one, _ = load_generator(path, context=64, chunk=4)
    want = [list(one.generate(p, n)) for p, n in zip(prompts, lengths)]
    gen = BatchGenerator.from_gguf(path, slots=3, context=64, chunk=4)
    got, batches = run_batched(gen, prompts, lengths)
    assert got == want
    assert max(batches) == 3
