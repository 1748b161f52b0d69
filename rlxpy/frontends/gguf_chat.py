"""Native renderers for the chat templates GGUF files commonly carry, without jinja2.

The template text (``tokenizer.chat_template``) is only inspected to recognise its family and to read
the constants it bakes in (a default system prompt, a date); each family is then rendered by hand to
give the same string that Hugging Face's ``apply_chat_template`` gets from the Jinja source.
"""

from __future__ import annotations

import re
import time

from rlxpy.errors import InputError, ModelError

_IM_START, _IM_END = "<|im_start|>", "<|im_end|>"
_HEADER_START, _HEADER_END, _EOT = "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"

# A Jinja string literal that opens a default system turn: '<|im_start|>system\n...<|im_end|>'.
_CHATML_DEFAULT_SYSTEM = re.compile(r"""(['"])<\|im_start\|>system(?:\n|\\n)(.*?)<\|im_end\|>""", re.DOTALL)
_JINJA_ESCAPE = re.compile(r"\\(.)", re.DOTALL)
_JINJA_ESCAPES = {"n": "\n", "t": "\t", "r": "\r"}


def _unescape(literal: str) -> str:
    """The value of the body of a Jinja (Python-style) string literal."""
    return _JINJA_ESCAPE.sub(lambda match: _JINJA_ESCAPES.get(match.group(1), match.group(1)), literal)


def _checked(messages: list[dict[str, str]]) -> list[tuple[str, str]]:
    pairs = []
    for index, message in enumerate(messages):
        try:
            pairs.append((str(message["role"]), str(message["content"])))
        except (KeyError, TypeError) as error:
            raise InputError(f"chat message {index} needs 'role' and 'content': {message!r}") from error
    return pairs


def render_chatml(template: str, messages: list[tuple[str, str]], add_generation_prompt: bool) -> str:
    """ChatML (``<|im_start|>role\\ncontent<|im_end|>\\n``), as SmolLM2's and Qwen2's templates.

    A default system prompt the template writes when the first message is not a system one (SmolLM2:
    "You are a helpful AI assistant named SmolLM, ...") is read from the template and written the same
    way: before the first message, only when there is one.
    """
    default = _CHATML_DEFAULT_SYSTEM.search(template)
    parts = []
    if default is not None and messages and messages[0][0] != "system":
        parts.append(f"{_IM_START}system\n{_unescape(default.group(2))}{_IM_END}\n")
    parts.extend(f"{_IM_START}{role}\n{content}{_IM_END}\n" for role, content in messages)
    if add_generation_prompt:
        parts.append(f"{_IM_START}assistant\n")
    return "".join(parts)


def render_llama3(
    template: str, messages: list[tuple[str, str]], add_generation_prompt: bool, bos: str
) -> str:
    """Llama-3 turns: ``<|start_header_id|>role<|end_header_id|>\\n\\n`` + trimmed content + ``<|eot_id|>``.

    Meta's 3.0 template puts BOS before the first message. The 3.1/3.2 templates always open with BOS
    and a system turn holding "Cutting Knowledge Date" and "Today Date" lines before the (trimmed) system
    message; their tool-calling branches are not rendered.
    """
    parts = []
    if "Cutting Knowledge Date" in template:
        knowledge = re.search(r"Cutting Knowledge Date: ([^\"'\\\n]*)", template)
        date = re.search(r"""set date_string = (['"])(.*?)\1""", template)
        if "strftime_now" in template:
            today = time.strftime("%d %b %Y")
        else:
            today = date.group(2) if date else "26 Jul 2024"
        system = ""
        if messages and messages[0][0] == "system":
            system, messages = messages[0][1].strip(), messages[1:]
        parts.append(
            f"{bos}{_HEADER_START}system{_HEADER_END}\n\n"
            f"Cutting Knowledge Date: {knowledge.group(1) if knowledge else 'December 2023'}\n"
            f"Today Date: {today}\n\n{system}{_EOT}"
        )
    elif messages:
        parts.append(bos)
    parts.extend(
        f"{_HEADER_START}{role}{_HEADER_END}\n\n{content.strip()}{_EOT}" for role, content in messages
    )
    if add_generation_prompt:
        parts.append(f"{_HEADER_START}assistant{_HEADER_END}\n\n")
    return "".join(parts)


def render_llama2(messages: list[tuple[str, str]], bos: str, eos: str) -> str:
    """Meta's Llama-2 chat template: ``<s>[INST] <<SYS>>\\nsystem\\n<</SYS>>\\n\\nuser [/INST] answer </s>``.

    The system message is folded into the first user turn; user and assistant must alternate, starting
    with the user, as the template's ``raise_exception`` demands. It has no generation prompt.
    """
    system = None
    if messages and messages[0][0] == "system":
        system, messages = messages[0][1], messages[1:]
    parts = []
    for index, (role, content) in enumerate(messages):
        if (role == "user") != (index % 2 == 0):
            raise InputError("Conversation roles must alternate user/assistant/user/assistant/...")
        if index == 0 and system is not None:
            content = f"<<SYS>>\n{system}\n<</SYS>>\n\n{content}"
        if role == "user":
            parts.append(f"{bos}[INST] {content.strip()} [/INST]")
        elif role == "assistant":
            parts.append(f" {content.strip()} {eos}")
    return "".join(parts)


def render_chat(
    template: str | None,
    messages: list[dict[str, str]],
    add_generation_prompt: bool,
    bos: str,
    eos: str,
    source: str,
) -> str:
    """Render ``messages`` with the family that ``template`` belongs to, or raise ModelError."""
    if not template:
        raise ModelError(f"{source}: no chat template (missing GGUF key 'tokenizer.chat_template')")
    pairs = _checked(messages)
    if _IM_START in template:
        return render_chatml(template, pairs, add_generation_prompt)
    if _HEADER_START in template:
        return render_llama3(template, pairs, add_generation_prompt, bos)
    if "[INST]" in template and "<<SYS>>" in template:
        return render_llama2(pairs, bos, eos)
    raise ModelError(f"{source}: unsupported chat template {template[:60]!r}")
