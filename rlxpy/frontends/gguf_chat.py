"""Chat prompts rendered from the GGUF's own Jinja template (``tokenizer.chat_template``).

The template runs in jinja2's ``ImmutableSandboxedEnvironment`` with the settings and helpers that
Hugging Face's ``apply_chat_template`` gives it (``trim_blocks``, ``lstrip_blocks``, the loop-control
extension, ``raise_exception``, ``strftime_now``, a ``tojson`` that does not escape HTML, ``dict`` and
``namespace``, and the ``{% generation %}`` block as a no-op), with the same variables
(``messages``, ``add_generation_prompt``, ``tools``, ``documents``, ``bos_token``, ``eos_token``, ...),
so a prompt is the string transformers renders from the same file.

Only a file with no template falls back to a built-in one: its architecture's documented format
where :mod:`rlxpy.frontends.gguf_templates` has one (Gemma), else ChatML (as llama.cpp does); the
:attr:`ChatTemplate.fallback_message` says so, and the CLI prints it.
"""

from __future__ import annotations

import datetime
import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from rlxpy.errors import InputError, ModelError
from rlxpy.frontends.gguf_templates import BuiltinTemplate

#: What a file without ``tokenizer.chat_template`` is rendered with (ChatML, llama.cpp's default).
FALLBACK_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


class _TemplateRaised(Exception):
    """``raise_exception(message)`` inside a template: the conversation is not one it accepts."""


def _raise_exception(message: str) -> None:
    raise _TemplateRaised(str(message))


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: Any = None, sort_keys: bool = False) -> str:
    # Jinja's own tojson escapes <, >, & and ' for HTML; chat templates want the plain JSON.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _strftime_now(format: str) -> str:
    return datetime.datetime.now().strftime(format)


class _DictFactory:
    """``dict(...)`` for templates, without exposing the ``dict`` type itself."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict:
        return dict.fromkeys(*args, **kwargs)


@functools.cache
def _environment() -> Any:
    import jinja2
    import jinja2.ext
    import jinja2.nodes
    import jinja2.utils
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class GenerationBlock(jinja2.ext.Extension):
        """``{% generation %}...{% endgeneration %}`` marks assistant text for training masks; here
        it renders its body unchanged."""

        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        @staticmethod
        def _body(caller: Any) -> str:
            return caller()

    class Namespace(jinja2.utils.Namespace):
        """``namespace(...)`` that refuses underscore names (no route to interpreter internals)."""

        def __init__(*args: Any, **kwargs: Any) -> None:
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                Namespace._check(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name: str, value: Any) -> None:
            Namespace._check(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check(name: Any) -> None:
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(f"namespace attribute {name!r} starts with '_'")

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationBlock, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now, dict=_DictFactory(),
                       namespace=Namespace)
    return env


@functools.lru_cache(maxsize=32)
def _compile(text: str) -> Any:
    return _environment().from_string(text)


def _plain(value: Any) -> Any:
    """Only plain JSON-like values reach the sandbox (no objects with methods of their own)."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {_plain(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if callable(getattr(value, "model_dump", None)):  # pydantic messages (the OpenAI client's)
        return _plain(value.model_dump())
    return f"<{type(value).__name__}>"


def check_messages(messages: Sequence[Any]) -> list[dict[str, Any]]:
    """Messages as plain dicts without None values; each needs a string ``role`` and a ``content``
    (a string, or a list of content parts the template reads)."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise InputError(f"chat messages must be a list of {{'role', 'content'}} dicts, got {messages!r}")
    checked = []
    for index, message in enumerate(messages):
        plain = _plain(message)
        if not isinstance(plain, dict):
            raise InputError(f"chat message {index} is not a dict: {message!r}")
        plain = {key: value for key, value in plain.items() if value is not None}
        if not isinstance(plain.get("role"), str) or "content" not in plain:
            raise InputError(f"chat message {index} needs 'role' and 'content': {message!r}")
        checked.append(plain)
    return checked


class ChatTemplate:
    """A GGUF's chat template, compiled once; :meth:`render` turns messages into the prompt text.

    ``special_tokens`` are the template variables transformers passes from the tokenizer's special
    tokens (``bos_token``, ``eos_token``, ``unk_token``, ``pad_token``).
    """

    def __init__(self, text: str | None, special_tokens: Mapping[str, str] | None = None,
                 source: str = "<memory>", builtin: BuiltinTemplate | None = None) -> None:
        self.source = source
        self.fallback = not text
        #: the family's built-in format a file without a template is rendered with (else ChatML)
        self.builtin = builtin if self.fallback else None
        if not self.fallback:
            self.text = str(text)
        else:
            self.text = self.builtin.text if self.builtin else FALLBACK_TEMPLATE
        self.special_tokens = dict(special_tokens or {})
        try:
            self._template = _compile(self.text)
        except Exception as error:  # jinja2.TemplateSyntaxError and friends
            raise ModelError(f"{source}: the chat template in 'tokenizer.chat_template' does not compile "
                             f"({type(error).__name__}: {error})") from None

    @property
    def fallback_message(self) -> str | None:
        """Why the prompt may not be the model's own format (None when the file has a template)."""
        if not self.fallback:
            return None
        if self.builtin is not None:
            return (f"{self.source} has no chat template (GGUF key 'tokenizer.chat_template'): "
                    f"formatting the conversation in {self.builtin.name}, rlxpy's built-in template "
                    "for its architecture")
        return (f"{self.source} has no chat template (GGUF key 'tokenizer.chat_template'): "
                "formatting the conversation as ChatML (<|im_start|>role ... <|im_end|>), "
                "which this model may not have been trained on")

    def render(self, messages: Sequence[Any], add_generation_prompt: bool = True, **variables: Any) -> str:
        """The prompt for ``messages``. Extra ``variables`` reach the template (``tools``,
        ``documents``, ``date_string``, ...), overriding the special tokens of the same name."""
        import jinja2

        context = {**self.special_tokens, **_plain(variables)}
        context.setdefault("tools", None)
        context.setdefault("documents", None)
        try:
            return self._template.render(messages=check_messages(messages),
                                         add_generation_prompt=bool(add_generation_prompt), **context)
        except _TemplateRaised as error:
            raise InputError(f"the chat template refuses this conversation: {error}") from None
        except jinja2.exceptions.SecurityError as error:
            raise ModelError(f"{self.source}: the chat template did something the sandbox forbids: "
                             f"{error}") from None
        except (jinja2.TemplateError, TypeError, ValueError, KeyError, IndexError, AttributeError) as error:
            raise InputError(f"the chat template of {self.source} cannot render this conversation "
                             f"({type(error).__name__}: {error})") from None
