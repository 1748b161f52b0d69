"""Session: a conversation over one KV cache, each turn prefilling only its new tokens (SmolLM2)."""

from __future__ import annotations

import pytest

from rlxpy.frontends.gguf import default_model_path, load_generator
from rlxpy.frontends.gguf_tokenizer import GgufTokenizer
from rlxpy.models.session import PrefixCache, Session, TurnStats, stop_ids

MAX_TOKENS = 4
CHUNK = 4  # lavapipe: a small chunk keeps short prefills short
SYSTEM = "Be brief."  # shorter than the template's default system prompt: less to prefill


@pytest.fixture(scope="module")
def tokenizer():
    return GgufTokenizer.from_gguf(default_model_path())


@pytest.fixture(scope="module")
def session(device, tokenizer):
    gen, _ = load_generator(default_model_path(), context=256, chunk=CHUNK)
    return Session(gen, tokenizer, system=SYSTEM, max_tokens=MAX_TOKENS)


@pytest.fixture(scope="module")
def fresh(device):
    """A second generator that has seen nothing: the reference for whole-conversation prefills."""
    gen, _ = load_generator(default_model_path(), context=256, chunk=CHUNK)
    return gen


def test_second_turn_prefills_only_its_new_tokens_and_matches_a_fresh_generator(session, tokenizer, fresh):
    session.reset()
    pieces = list(session.stream("Hi"))
    first = session.last
    assert first.reused == 0 and first.prefilled == first.prompt_tokens
    assert len(pieces) >= 2 and "".join(pieces) == session.messages[-1]["content"]
    ids1 = session.prompt_ids(session.messages[:-1])
    assert first.prompt_tokens == len(ids1)

    session.send("2+2?")
    second = session.last
    ids2 = session.prompt_ids(session.messages[:-1])
    # The cache holds turn 1's prompt and every reply token but the last (never fed back).
    cached = ids1 + first.tokens[:-1]
    assert ids2[: len(cached)] == cached, "the reply re-tokenizes as generated"
    assert second.reused == len(cached)
    assert second.prefilled == len(ids2) - len(cached) == second.prompt_tokens - second.reused
    assert second.prefilled < len(ids2) // 2

    want = list(fresh.generate(ids2, MAX_TOKENS, stop=stop_ids(tokenizer)))
    assert second.tokens == want


def test_a_changed_history_is_prefilled_from_the_first_differing_token(session, tokenizer):
    session.reset()
    session.send("Hi")
    ids1 = session.prompt_ids(session.messages[:-1])
    session.messages[-1]["content"] = "Hey there, what do you need?"  # edit the assistant's reply
    session.send("Bye")
    ids2 = session.prompt_ids(session.messages[:-1])
    common = next(i for i, (a, b) in enumerate(zip(ids1 + session.turns[0].tokens, ids2)) if a != b)
    assert session.last.reused == common
    assert session.last.prefilled == len(ids2) - common


def test_reset_starts_over_and_reuses_the_common_start(session):
    session.reset()
    session.send("Hi")
    first = session.last
    session.reset()
    assert session.messages == [{"role": "system", "content": SYSTEM}] and session.turns == []
    session.send("Hi")  # the same conversation again: all but the last prompt token come from the cache
    assert session.last.reused == first.prompt_tokens - 1 and session.last.prefilled == 1
    assert session.last.tokens == first.tokens


def test_stopping_a_stream_early_keeps_the_cache_consistent(session, tokenizer, fresh):
    session.reset()
    stream = session.stream("Go on.", max_tokens=8)
    next(stream)
    stream.close()  # the caller leaves after the first piece: a decode step may be in flight
    cache: PrefixCache = session.cache
    assert session.messages[-1]["role"] == "assistant"
    position = session.cache.generator.position
    assert len(cache.tokens) == position
    ids = session.prompt_ids(session.messages[:-1])
    assert cache.tokens[: len(ids)] == ids
    # What the cache holds is exactly what a fresh prefill would compute: the next request agrees.
    stats = TurnStats()
    probe = cache.tokens + [tokenizer.token_id("<|im_end|>")]
    got = list(cache.generate(probe, 2, stats=stats))
    assert stats.reused == len(probe) - 1
    assert got == list(fresh.generate(probe, 2))


def test_prompt_past_the_context_is_refused(session):
    with pytest.raises(Exception, match="context"):
        session.send("word " * 300)
    assert session.turns == [] or session.turns[-1].prompt_tokens < 256
