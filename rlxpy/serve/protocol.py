"""The OpenAI request bodies the server reads (pydantic), and the error it answers with.

Fields OpenAI defines that the server cannot honour are refused by name (``n`` > 1, ``logprobs``,
``tools``, penalties, a sampling setting other than the one the server was compiled with) rather
than silently ignored; fields it does not know are ignored, as OpenAI-compatible servers do.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class ApiError(Exception):
    """An error answered as OpenAI does: ``{"error": {"message", "type", "param", "code"}}``."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 kind: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.kind = kind or ("invalid_request_error" if status < 500 else "server_error")

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


class GenerationRequest(BaseModel):
    """What chat and text completions share."""

    model_config = ConfigDict(extra="allow")

    model: str
    max_tokens: int | None = Field(default=None, ge=1)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    stop: str | list[str] | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0)  # not OpenAI's, but common in compatible servers
    n: int | None = Field(default=None, ge=1)
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    user: str | None = None

    def stop_strings(self) -> list[str]:
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        if len(stops) > 4:
            raise ApiError(400, "'stop' takes at most 4 sequences", "stop")
        return [stop for stop in stops if stop]

    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.get("include_usage"))

    def refuse_unsupported(self) -> None:
        if self.n not in (None, 1):
            raise ApiError(400, f"n={self.n}: this server returns one choice per request (n=1)", "n")
        for name in ("presence_penalty", "frequency_penalty"):
            if getattr(self, name):
                raise ApiError(400, f"'{name}' is not supported (send 0 or leave it out)", name)
        if self.logit_bias:
            raise ApiError(400, "'logit_bias' is not supported", "logit_bias")


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: str
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None


class ChatCompletionRequest(GenerationRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool | None = None
    top_logprobs: int | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    response_format: dict[str, Any] | None = None

    def refuse_unsupported(self) -> None:
        super().refuse_unsupported()
        if self.logprobs or self.top_logprobs:
            raise ApiError(400, "'logprobs' is not supported", "logprobs")
        if self.tools:
            raise ApiError(400, "'tools' (function calling) is not supported", "tools")
        if self.response_format and self.response_format.get("type", "text") != "text":
            raise ApiError(400, f"response_format {self.response_format.get('type')!r} is not supported "
                                "(only 'text')", "response_format")

    def limit(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    def plain_messages(self) -> list[dict[str, Any]]:
        """Messages for the chat template: text content parts joined into one string."""
        messages = []
        for index, message in enumerate(self.messages):
            content = message.content
            if isinstance(content, list):
                texts = []
                for part in content:
                    if part.get("type") != "text" or not isinstance(part.get("text"), str):
                        raise ApiError(400, f"messages[{index}]: only text content parts are supported, "
                                            f"got type {part.get('type')!r}", f"messages[{index}].content")
                    texts.append(part["text"])
                content = "".join(texts)
            plain = message.model_dump(exclude_none=True)
            plain["content"] = content if content is not None else ""
            if plain["role"] == "developer":  # OpenAI's newer name for the system role
                plain["role"] = "system"
            messages.append(plain)
        return messages


class CompletionRequest(GenerationRequest):
    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = Field(default=16, ge=1)  # OpenAI's default for completions
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None
    logprobs: int | None = None

    def refuse_unsupported(self) -> None:
        super().refuse_unsupported()
        if self.suffix:
            raise ApiError(400, "'suffix' (insertion) is not supported", "suffix")
        if self.best_of not in (None, 1):
            raise ApiError(400, "'best_of' is not supported", "best_of")
        if self.logprobs is not None:
            raise ApiError(400, "'logprobs' is not supported", "logprobs")

    def prompt_value(self) -> str | list[int]:
        """One prompt: a string or a list of token ids (a batch of several is refused)."""
        prompt = self.prompt
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
            if len(prompt) != 1:
                raise ApiError(400, f"'prompt' holds {len(prompt)} prompts; send one per request", "prompt")
            prompt = prompt[0]
        if isinstance(prompt, list) and not prompt:
            raise ApiError(400, "'prompt' is empty", "prompt")
        return prompt


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str
    input: str | list[str] | list[int] | list[list[int]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
    user: str | None = None

    def sentences(self) -> list[str]:
        texts = [self.input] if isinstance(self.input, str) else self.input
        if not texts:
            raise ApiError(400, "'input' is empty", "input")
        if not all(isinstance(text, str) for text in texts):
            raise ApiError(400, "'input' as token ids is not supported: send text", "input")
        return list(texts)  # type: ignore[arg-type]
