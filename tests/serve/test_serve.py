"""`rlxpy serve` as clients use it: a real server process on a free localhost port, the official
`openai` client (streaming and not), concurrent clients, disconnects and bad requests (SmolLM2,
greedy; all-MiniLM-L6-v2 for embeddings)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import openai
import pytest

CONTEXT = 256
SYSTEM = {"role": "system", "content": "Be brief."}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def server(device, tmp_path_factory):
    port = _free_port()
    log = tmp_path_factory.mktemp("serve") / "server.log"
    with open(log, "w") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "rlxpy.cli", "serve", "--port", str(port), "--context", str(CONTEXT),
             "--chunk", "4", "--max-tokens", "8"],
            stdout=sink, stderr=subprocess.STDOUT, env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while True:
        if process.poll() is not None:
            pytest.fail(f"rlxpy serve exited with {process.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"rlxpy serve did not answer in 180 s:\n{log.read_text()}")
        time.sleep(0.5)
    yield url
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    print(log.read_text())


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=180)


@pytest.fixture(scope="module")
def model(client):
    return next(m.id for m in client.models.list().data if m.id != "all-MiniLM-L6-v2")


def _health(server: str) -> dict:
    return httpx.get(f"{server}/health", timeout=10).json()


def test_models_lists_the_chat_and_the_embedding_model(client):
    ids = [m.id for m in client.models.list().data]
    assert len(ids) == 2 and "all-MiniLM-L6-v2" in ids
    assert client.models.retrieve(ids[0]).id == ids[0]


def test_chat_completion_streaming_and_not_agree(client, model):
    messages = [SYSTEM, {"role": "user", "content": "Hi"}]
    whole = client.chat.completions.create(model=model, messages=messages, max_tokens=4)
    choice = whole.choices[0]
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason == "length" and whole.usage.completion_tokens == 4
    chunks = list(client.chat.completions.create(model=model, messages=messages, max_tokens=4, stream=True,
                                                 stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == choice.message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    usage = chunks[-1].usage
    assert usage.prompt_tokens == whole.usage.prompt_tokens
    # The same conversation again: the KV cache holds it, one token is prefilled.
    assert usage.prompt_tokens_details.cached_tokens == usage.prompt_tokens - 1


def test_completion_streaming_and_not_agree_and_stop_strings_cut(client, model):
    prompt = "The capital of France is"
    whole = client.completions.create(model=model, prompt=prompt, max_tokens=3)
    text = whole.choices[0].text
    streamed = "".join(c.choices[0].text for c in
                       client.completions.create(model=model, prompt=prompt, max_tokens=3, stream=True))
    assert streamed == text and len(text) > 2
    cut = client.completions.create(model=model, prompt=prompt, max_tokens=3, stop=[text[1:3]])
    assert cut.choices[0].text == text[:1] and cut.choices[0].finish_reason == "stop"
    echoed = client.completions.create(model=model, prompt=prompt, max_tokens=3, echo=True)
    assert echoed.choices[0].text == prompt + text


def test_embeddings_float_and_base64(client, server):
    texts = ["A cat.", "A kitten.", "Tax law."]  # short: one 8-token batch shape, the encoder compiles once
    result = client.embeddings.create(model="all-MiniLM-L6-v2", input=texts)  # the client asks for base64
    vectors = np.array([item.embedding for item in result.data])
    assert vectors.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-4)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.3
    plain = httpx.post(f"{server}/v1/embeddings", json={"model": "all-MiniLM-L6-v2", "input": texts,
                                                        "encoding_format": "float"}, timeout=120).json()
    floats = np.array([item["embedding"] for item in plain["data"]])
    assert np.array_equal(np.float32(floats), np.float32(vectors))  # base64 (decoded by the client) = floats
    assert [item["index"] for item in plain["data"]] == [0, 1, 2] and plain["usage"]["prompt_tokens"] > 9


def test_thirty_two_concurrent_streaming_clients_each_get_their_own_tokens(client, model, server):
    prompts = [f"The number {n} is" for n in range(1, 33)]
    alone = [client.completions.create(model=model, prompt=p, max_tokens=2).choices[0].text for p in prompts]
    before = _health(server)["completed"]

    def stream(prompt: str) -> tuple[str, str | None]:
        text, finish = [], None
        for chunk in client.completions.create(model=model, prompt=prompt, max_tokens=2, stream=True):
            text.append(chunk.choices[0].text)
            finish = chunk.choices[0].finish_reason or finish
        return "".join(text), finish

    with ThreadPoolExecutor(32) as pool:
        together = list(pool.map(stream, prompts))
    assert [finish for _, finish in together] == ["length"] * 32  # no request lost or cut short
    assert [text for text, _ in together] == alone
    assert len(set(alone)) > 1  # the prompts lead to different texts: no client got another's
    health = _health(server)
    assert health["completed"] - before == 32
    assert health["peak_batch"] > 1  # the concurrent requests decoded together


def test_per_request_sampling_is_reproducible_from_its_seed(client, model, server):
    """Each request samples with its own temperature / top_p / seed while others decode beside it."""
    def ask(seed: int | None, temperature: float = 0.9) -> str:
        return client.completions.create(model=model, prompt="Once upon a time", max_tokens=6, seed=seed,
                                          temperature=temperature, top_p=0.95).choices[0].text

    with ThreadPoolExecutor(6) as pool:
        texts = list(pool.map(ask, [1, 1, 2, 3, 4, 5]))
    assert texts[0] == texts[1] == ask(1)  # the same seed, alone or beside others: the same text
    assert len(set(texts)) > 2  # other seeds draw other texts
    greedy = client.completions.create(model=model, prompt="Once upon a time", max_tokens=6).choices[0].text
    assert ask(7, temperature=0.0) == greedy
    assert _health(server)["slots"] > 1


def test_disconnected_streams_are_cancelled_queued_or_running(server, model):
    before = _health(server)
    body = {"model": model, "prompt": "Once upon a time", "max_tokens": 200, "stream": True}
    started = time.monotonic()
    with httpx.Client(timeout=60) as first, httpx.Client(timeout=60) as second:
        with first.stream("POST", f"{server}/v1/completions", json=body) as running:
            lines = running.iter_lines()
            assert next(line for line in lines if line.startswith("data:"))  # it is generating
            with second.stream("POST", f"{server}/v1/completions", json=body) as queued:
                assert queued.status_code == 200  # accepted, waiting behind the first
        # both connections are closed now, mid-stream
    deadline = time.monotonic() + 60
    while True:
        health = _health(server)
        if health["cancelled"] - before["cancelled"] == 2 and not health["running"] and not health["waiting"]:
            break
        assert time.monotonic() < deadline, health
        time.sleep(0.2)
    assert time.monotonic() - started < 60  # 2 x 200 tokens would take minutes here


def _error(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    return error["message"]


def test_bad_requests_get_a_clear_4xx_and_the_server_keeps_serving(server, client, model):
    post = lambda path, **kw: httpx.post(f"{server}/v1/{path}", timeout=60, **kw)  # noqa: E731
    chat = {"model": model, "messages": [{"role": "user", "content": "Hi"}]}
    assert "not valid JSON" in _error(post("chat/completions", content=b'{"model": '), 400)
    assert "must be a JSON object" in _error(post("chat/completions", json=[1, 2]), 400)
    assert "messages: Field required" in _error(post("chat/completions", json={"model": model}), 400)
    assert "'nope' does not exist" in _error(post("chat/completions", json={**chat, "model": "nope"}), 404)
    message = _error(post("chat/completions", json={**chat, "max_tokens": 5000}), 400)
    assert "max_tokens=5000 is beyond the context of 256 tokens" in message
    long = {**chat, "messages": [{"role": "user", "content": "word " * 400}]}
    assert "more than the context of 256" in _error(post("chat/completions", json=long), 400)
    too_much = {"model": model, "prompt": "Hi " * 100, "max_tokens": 200}
    assert "together exceed the context of 256 tokens" in _error(post("completions", json=too_much), 400)
    assert "top_p" in _error(post("chat/completions", json={**chat, "top_p": 0}), 400)
    assert "temperature" in _error(post("chat/completions", json={**chat, "temperature": -1}), 400)
    assert "n=2" in _error(post("chat/completions", json={**chat, "n": 2}), 400)
    assert "does not serve embeddings" in _error(post("embeddings", json={"model": model, "input": "x"}), 400)
    assert "Not Found" in _error(httpx.get(f"{server}/v1/nothing", timeout=10), 404)
    with pytest.raises(openai.BadRequestError, match="beyond the context"):
        client.chat.completions.create(model=model, messages=chat["messages"], max_tokens=1000)
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.completions.create(model="gpt-4", prompt="Hi", max_tokens=1)
    # Still serving, and the bad requests never reached the GPU.
    after = client.completions.create(model=model, prompt="Hi", max_tokens=1)
    assert after.choices[0].finish_reason == "length"
    assert json.loads(httpx.get(f"{server}/health", timeout=10).text)["status"] == "ok"
