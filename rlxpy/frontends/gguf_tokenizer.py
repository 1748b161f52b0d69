"""A tokenizer built only from a GGUF file's ``tokenizer.*`` metadata.

Two vocabulary kinds are supported, named by ``tokenizer.ggml.model``:

* ``gpt2``: byte-level BPE. Text is split by the pre-tokenizer that ``tokenizer.ggml.pre`` names, each
  piece is spelled in GPT-2's byte alphabet and merged by merge rank, as llama.cpp's
  ``llm_tokenizer_bpe`` and Hugging Face's ``ByteLevel`` + ``BPE`` do.
* ``llama``: SentencePiece-style BPE over token scores, with ``▁`` for spaces and ``<0xXX>`` byte
  fallback, as llama.cpp's ``llm_tokenizer_spm`` does.

Nothing here needs transformers or regex: Unicode classes come from ``unicodedata``; chat templates
are the file's own Jinja, rendered by :mod:`rlxpy.frontends.gguf_chat`.
"""

from __future__ import annotations

import codecs
import functools
import heapq
import numbers
import os
import re
import sys
import unicodedata
from collections.abc import Sequence
from typing import Any

import gguf

from rlxpy.errors import InputError, ModelError
from rlxpy.frontends.gguf_chat import ChatTemplate
from rlxpy.frontends.gguf_templates import builtin_template

# llama.cpp's token types (gguf.TokenType).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
# Types that are matched whole in the text before BPE (llama.cpp's cache_special_tokens).
_WHOLE_MATCH_TYPES = (UNKNOWN, CONTROL, USER_DEFINED)
# Types that decode(skip_special=True) drops.
_SPECIAL_TYPES = (UNKNOWN, CONTROL)

_SPACE_MARK = "\u2581"  # SentencePiece's "▁"
_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")
_BPE_CACHE_LIMIT = 200_000


# ---------------------------------------------------------------------------------------------------------
# GPT-2 byte alphabet
# ---------------------------------------------------------------------------------------------------------


def _byte_alphabet() -> list[str]:
    """GPT-2's byte -> printable character table: printable Latin-1 bytes map to themselves,
    the rest to code points from 256 upward, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    table = [""] * 256
    extra = 0
    for byte in range(256):
        if byte in printable:
            table[byte] = chr(byte)
        else:
            table[byte] = chr(256 + extra)
            extra += 1
    return table


BYTE_TO_CHAR: list[str] = _byte_alphabet()
CHAR_TO_BYTE: dict[str, int] = {char: byte for byte, char in enumerate(BYTE_TO_CHAR)}


# ---------------------------------------------------------------------------------------------------------
# Pre-tokenizers
# ---------------------------------------------------------------------------------------------------------


@functools.cache
def _unicode_class_bodies() -> dict[str, str]:
    """Character-class bodies (no brackets) for \\p{L}, \\p{N}, \\p{P} and Unicode \\s.

    Python's ``re`` has no \\p{..}, and its \\s also matches U+001C..U+001F, which Oniguruma's and
    llama.cpp's \\s (Unicode White_Space) do not, so all four are spelled out as code point ranges.
    """
    members: dict[str, list[int]] = {"L": [], "N": [], "P": [], "s": []}
    for code_point in range(sys.maxunicode + 1):
        category = unicodedata.category(chr(code_point))
        head = category[0]
        if head in "LNP":
            members[head].append(code_point)
        if category in ("Zs", "Zl", "Zp") or 0x09 <= code_point <= 0x0D or code_point == 0x85:
            members["s"].append(code_point)
    bodies = {}
    for name, code_points in members.items():
        parts = []
        start = previous = code_points[0]
        for code_point in [*code_points[1:], -2]:
            if code_point != previous + 1:
                parts.append(f"\\U{start:08x}" if start == previous else f"\\U{start:08x}-\\U{previous:08x}")
                start = code_point
            previous = code_point
        bodies[name] = "".join(parts)
    return bodies


@functools.cache
def _compile(pattern: str) -> re.Pattern[str]:
    """Compile a split pattern written with \\p{L}, \\p{N}, \\p{P} and \\s inside [...] classes."""
    bodies = _unicode_class_bodies()
    for marker, name in (("\\p{L}", "L"), ("\\p{N}", "N"), ("\\p{P}", "P"), ("\\s", "s")):
        pattern = pattern.replace(marker, bodies[name])
    return re.compile(pattern)


# GPT-2's split; "[^\s]" stands for \S. The trailing "|[\s]+" only changes what is matched versus left
# over as a gap, and gaps are kept as pieces, so it matches llama.cpp's form without it.
_GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?[\p{L}]+| ?[\p{N}]+| ?[^\s\p{L}\p{N}]+|[\s]+(?![^\s])|[\s]+"
_LLAMA3_SPLIT = (
    r"'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]|[^\r\n\p{L}\p{N}]?[\p{L}]+|[\p{N}]{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|[\s]*[\r\n]+|[\s]+(?![^\s])|[\s]+"
)
_EACH_DIGIT = r"[\p{N}]"

# tokenizer.ggml.pre -> the regexes applied one after another, as llama.cpp's llm_tokenizer_bpe does.
_PRE_TOKENIZERS: dict[str, tuple[str, ...]] = {
    "default": (r"[\p{P}\$\+<=>\^~\|]+", _GPT2_SPLIT, r"[\p{N}]+", r"[0-9][0-9][0-9]"),
    "gpt2": (_GPT2_SPLIT,),
    "gpt-2": (_GPT2_SPLIT,),
    "smollm": (_EACH_DIGIT, _GPT2_SPLIT),
    "starcoder": (_EACH_DIGIT, _GPT2_SPLIT),
    "refact": (_EACH_DIGIT, _GPT2_SPLIT),
    "llama3": (_LLAMA3_SPLIT,),
    "llama-v3": (_LLAMA3_SPLIT,),
    "llama-bpe": (_LLAMA3_SPLIT,),
}
# llama.cpp sets ignore_merges for the llama3 family: a piece that is a whole token skips BPE.
_IGNORE_MERGES = {"llama3", "llama-v3", "llama-bpe"}


def pre_tokenize(text: str, pre: str) -> list[str]:
    """Split ``text`` into BPE words with the pre-tokenizer ``pre`` names.

    Mirrors llama.cpp's ``unicode_regex_split``: each regex splits every piece the previous one made,
    and the text between matches is kept as a piece of its own.
    """
    pieces = [text]
    for pattern in _PRE_TOKENIZERS[pre]:
        regex = _compile(pattern)
        split: list[str] = []
        for piece in pieces:
            start = 0
            for match in regex.finditer(piece):
                if match.start() > start:
                    split.append(piece[start : match.start()])
                if match.end() > match.start():
                    split.append(match.group())
                start = match.end()
            if start < len(piece):
                split.append(piece[start:])
        pieces = split
    return pieces


# ---------------------------------------------------------------------------------------------------------
# The tokenizer
# ---------------------------------------------------------------------------------------------------------


def _gguf_field_value(field: Any) -> Any:
    """A GGUFReader field as a plain Python value (str, int, float, bool or a list of those)."""
    types = field.types
    if not types:
        return None
    if types[0] == gguf.GGUFValueType.ARRAY:
        if len(types) > 1 and types[1] == gguf.GGUFValueType.STRING:
            return [bytes(field.parts[index]).decode("utf-8", "replace") for index in field.data]
        return [field.parts[index][0].item() for index in field.data]
    if types[0] == gguf.GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]).decode("utf-8", "replace")
    value = field.parts[field.data[0]][0].item()
    return bool(value) if types[0] == gguf.GGUFValueType.BOOL else value


def _fast_bpe(vocab: dict[str, int], ranks: dict[tuple[str, str], int], pre: str, ignore_merges: bool,
              unknown: str | None) -> Any:
    """The same byte-level BPE in Hugging Face's ``tokenizers`` (Rust), or None where it could differ.

    The pre-tokenizer is the same regex sequence as :func:`pre_tokenize` (tokenizers' Oniguruma reads
    ``\\p{..}`` and Unicode ``\\s`` natively), each split keeping its gaps ("isolated"), then the GPT-2
    byte alphabet without a regex of its own. A byte whose character is no token becomes the
    unknown token in both. Where the Python encoder's other fallbacks could act (a merge whose result
    is no token, a merge of a missing byte or of the unknown token itself, no unknown token for a
    missing byte), the file stays on the Python encoder.
    """
    try:
        from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    except ImportError:
        return None
    missing = {char for char in BYTE_TO_CHAR if char not in vocab}
    if missing and unknown is None:
        return None
    merges = sorted(ranks, key=ranks.__getitem__)
    for left, right in merges:
        if left + right not in vocab or unknown in (left, right) or (missing and missing & set(left + right)):
            return None
    try:
        fast = Tokenizer(models.BPE(vocab, merges, unk_token=unknown, ignore_merges=ignore_merges))
        fast.pre_tokenizer = pre_tokenizers.Sequence(
            [
                # tokenizers' native digit split (char::is_numeric is \p{N}) is faster than the regex
                pre_tokenizers.Digits(individual_digits=True)
                if pattern == _EACH_DIGIT
                else pre_tokenizers.Split(Regex(pattern), behavior="isolated")
                for pattern in _PRE_TOKENIZERS[pre]
            ]
            + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
        )
    except Exception:  # noqa: BLE001  (a vocabulary tokenizers refuses: the Python encoder takes it)
        return None
    return fast


class GgufTokenizer:
    """Encode, decode, stream and chat-format text with a GGUF's own vocabulary.

    Build one with :meth:`from_gguf` (a path or an open ``gguf.GGUFReader``) or :meth:`from_metadata`.
    ``backend`` picks the byte-level BPE encoder: ``"auto"`` (the default) runs it in Hugging Face's
    ``tokenizers`` where that is installed and gives the same ids (7x faster on a cold 20k-token
    document, ``benches/bench_tokenizer.py``), ``"python"`` always runs the pure-Python one. SPM
    vocabularies are always encoded in Python.
    """

    def __init__(self, fields: dict[str, Any], source: str, backend: str = "auto") -> None:
        if backend not in ("auto", "python"):
            raise InputError(f"tokenizer backend {backend!r}: expected 'auto' or 'python'")
        self.source = source
        self._backend = backend
        self.model: str = self._required(fields, "tokenizer.ggml.model", str)
        if self.model not in ("gpt2", "llama"):
            raise ModelError(
                f"{source}: unsupported tokenizer model {self.model!r} in 'tokenizer.ggml.model' "
                "(supported: 'gpt2', 'llama')"
            )
        tokens = self._required(fields, "tokenizer.ggml.tokens", list)
        self.tokens: list[str] = [str(token) for token in tokens]
        if not self.tokens:
            raise ModelError(f"{source}: 'tokenizer.ggml.tokens' is empty")
        self.vocab_size: int = len(self.tokens)
        token_types = fields.get("tokenizer.ggml.token_type")
        try:
            self.token_types: list[int] = (
                [NORMAL] * self.vocab_size if token_types is None else [int(kind) for kind in token_types]
            )
        except (TypeError, ValueError):
            raise ModelError(f"{source}: 'tokenizer.ggml.token_type' holds non-integers") from None
        if len(self.token_types) != self.vocab_size:
            raise ModelError(
                f"{source}: 'tokenizer.ggml.token_type' has {len(self.token_types)} entries "
                f"for {self.vocab_size} tokens"
            )
        # Later duplicates win, as in llama.cpp's token_to_id and Hugging Face's vocab dict.
        self._ids: dict[str, int] = {token: index for index, token in enumerate(self.tokens)}

        # llama.cpp's defaults when a file omits an id: SPM uses 1/2/0, BPE files always name theirs.
        spm = self.model == "llama"
        self.bos_id: int | None = self._token_id(fields, "bos_token_id", 1 if spm else None)
        self.eos_id: int | None = self._token_id(fields, "eos_token_id", 2 if spm else None)
        self.unknown_id: int | None = self._token_id(fields, "unknown_token_id", 0 if spm else None)
        self.padding_id: int | None = self._token_id(fields, "padding_token_id", None)
        self.pre: str = str(fields.get("tokenizer.ggml.pre") or "default")
        # llama.cpp adds BOS by default for SPM and the llama3 pre-tokenizer; the file's flag wins.
        bos_default = spm or self.pre in _IGNORE_MERGES
        self.add_bos: bool = bool(fields.get("tokenizer.ggml.add_bos_token", bos_default))
        self.add_eos: bool = bool(fields.get("tokenizer.ggml.add_eos_token", False))
        self.add_space_prefix: bool = bool(fields.get("tokenizer.ggml.add_space_prefix", spm))
        self.chat_template: str | None = fields.get("tokenizer.chat_template")
        self.architecture: str | None = fields.get("general.architecture")  # type: ignore[assignment]

        if spm:
            scores = self._required(fields, "tokenizer.ggml.scores", list)
            if len(scores) != self.vocab_size:
                raise ModelError(
                    f"{source}: 'tokenizer.ggml.scores' has {len(scores)} entries "
                    f"for {self.vocab_size} tokens"
                )
            try:
                self._scores: list[float] = [float(score) for score in scores]
            except (TypeError, ValueError):
                raise ModelError(f"{source}: 'tokenizer.ggml.scores' holds non-numbers") from None
            self._byte_ids: dict[int, int] = {}
            for index, token in enumerate(self.tokens):
                match = _BYTE_PIECE.fullmatch(token)
                if match and (self.token_types[index] in (BYTE, NORMAL)):
                    self._byte_ids.setdefault(int(match.group(1), 16), index)
        else:
            if self.pre not in _PRE_TOKENIZERS:
                raise ModelError(
                    f"{source}: unsupported pre-tokenizer {self.pre!r} in 'tokenizer.ggml.pre' "
                    f"(supported: {', '.join(sorted(_PRE_TOKENIZERS))})"
                )
            self._ranks: dict[tuple[str, str], int] = {}
            for rank, merge in enumerate(self._required(fields, "tokenizer.ggml.merges", list)):
                left, space, right = str(merge).partition(" ")
                if not space:
                    raise ModelError(
                        f"{source}: entry {rank} of 'tokenizer.ggml.merges' ({merge!r}) is not 'left right'"
                    )
                self._ranks.setdefault((left, right), rank)
            self._ignore_merges = self.pre in _IGNORE_MERGES
            self._bpe_cache: dict[str, tuple[int, ...]] = {}

        whole = sorted(
            (
                token
                for token, kind in zip(self.tokens, self.token_types, strict=True)
                if kind in _WHOLE_MATCH_TYPES and token
            ),
            key=len,
            reverse=True,
        )
        # Longest first, so the alternation takes the longest token at the leftmost position.
        self._special_regex = re.compile("|".join(map(re.escape, whole))) if whole else None
        self._piece_cache: dict[int, bytes] = {}

    # -- construction ----------------------------------------------------------------------------------

    @classmethod
    def from_gguf(
        cls, source: str | os.PathLike[str] | gguf.GGUFReader, backend: str = "auto"
    ) -> GgufTokenizer:
        """Read the tokenizer of a GGUF file (a path or an already open ``gguf.GGUFReader``).

        A path is read by rlxpy's strict parser alone (a refusal names the file and the field), which
        is ~30x faster than ``gguf.GGUFReader`` on a 49k-token vocabulary."""
        if not isinstance(source, gguf.GGUFReader):
            from rlxpy.frontends.gguf_check import read_layout

            layout = read_layout(source)
            fields = {key: entry.value for key, entry in layout.meta.items()
                      if key.startswith("tokenizer.") or key == "general.architecture"}
            return cls.from_metadata(fields, source=os.fspath(source), backend=backend)
        reader, name = source, str(getattr(source.data, "filename", None) or "<GGUFReader>")
        fields = {}
        for key, field in reader.fields.items():
            if key.startswith("tokenizer.") or key == "general.architecture":
                try:
                    fields[key] = _gguf_field_value(field)
                except Exception as error:  # a field gguf-py parsed but cannot turn into a value
                    raise ModelError(
                        f"{name}: metadata {key!r} cannot be read ({type(error).__name__}: {error})"
                    ) from None
        return cls.from_metadata(fields, source=name, backend=backend)

    @classmethod
    def from_metadata(cls, fields: dict[str, object], source: str = "<memory>",
                      backend: str = "auto") -> GgufTokenizer:
        """Build from GGUF key -> plain Python value (``tokenizer.ggml.tokens`` as list[str], ...)."""
        return cls(dict(fields), source, backend)

    @functools.cached_property
    def _fast(self) -> Any:
        """The ``tokenizers`` twin of the byte-level BPE (built on first use), or None."""
        if self.model != "gpt2" or self._backend == "python":
            return None
        unknown = self.tokens[self.unknown_id] if self.unknown_id is not None else None
        return _fast_bpe(self._ids, self._ranks, self.pre, self._ignore_merges, unknown)

    @property
    def backend(self) -> str:
        """Which encoder runs: ``"tokenizers"`` or ``"python"``."""
        return "tokenizers" if self._fast is not None else "python"

    def _required(self, fields: dict[str, Any], key: str, kind: type) -> Any:
        value = fields.get(key)
        if value is None:
            hint = " (the file has no tokenizer metadata)" if key == "tokenizer.ggml.model" else ""
            raise ModelError(f"{self.source}: missing GGUF key {key!r}{hint}")
        if kind is list and hasattr(value, "__len__") and not isinstance(value, (str, bytes)):
            value = list(value)  # tuples and numpy arrays too
        if not isinstance(value, kind):
            raise ModelError(
                f"{self.source}: GGUF key {key!r} is a {type(value).__name__}, expected a {kind.__name__}"
            )
        return value

    def _token_id(self, fields: dict[str, Any], name: str, default: int | None) -> int | None:
        key = f"tokenizer.ggml.{name}"
        value = fields.get(key, default)
        if value is None:
            return None
        integral = isinstance(value, numbers.Integral) and not isinstance(value, bool)
        if not integral or not 0 <= value < self.vocab_size:
            raise ModelError(
                f"{self.source}: GGUF key {key!r} = {value!r} is not a token id below {self.vocab_size}"
            )
        return int(value)

    # -- encoding --------------------------------------------------------------------------------------

    def encode(self, text: str, add_special: bool = True, *, parse_special: bool = True) -> list[int]:
        """Token ids of ``text``.

        ``add_special`` adds BOS / EOS where the file's ``add_bos_token`` / ``add_eos_token`` say so.
        ``parse_special`` matches control and user-defined tokens written literally in the text (e.g.
        ``<|im_start|>``) as whole tokens, as llama.cpp's ``tokenizer_st_partition`` does.
        """
        ids: list[int] = []
        if add_special and self.add_bos and self.bos_id is not None:
            ids.append(self.bos_id)
        previous_was_special = True  # llama.cpp's SPM prefixes a space to text after a special token
        for chunk, special_id in self._partition(text, parse_special):
            if special_id is not None:
                ids.append(special_id)
                previous_was_special = True
            elif self.model == "gpt2":
                fast = self._fast
                if fast is not None:
                    ids.extend(fast.encode(chunk, add_special_tokens=False).ids)
                    continue
                for word in pre_tokenize(chunk, self.pre):
                    ids.extend(self._bpe_word(word))
            else:
                if self.add_space_prefix and previous_was_special:
                    chunk = " " + chunk
                ids.extend(self._spm_chunk(chunk))
                previous_was_special = False
        if add_special and self.add_eos and self.eos_id is not None:
            ids.append(self.eos_id)
        return ids

    def _partition(self, text: str, parse_special: bool) -> list[tuple[str, int | None]]:
        """Split text into (raw text, None) and (token text, special id) runs."""
        if not parse_special or self._special_regex is None:
            return [(text, None)] if text else []
        runs: list[tuple[str, int | None]] = []
        start = 0
        for match in self._special_regex.finditer(text):
            if match.start() > start:
                runs.append((text[start : match.start()], None))
            runs.append((match.group(), self._ids[match.group()]))
            start = match.end()
        if start < len(text):
            runs.append((text[start:], None))
        return runs

    def _bpe_word(self, word: str) -> tuple[int, ...]:
        """Byte-level BPE of one pre-tokenized word: merge the lowest-ranked adjacent pair until none
        is left (GPT-2's ``bpe``; llama.cpp's ``llm_tokenizer_bpe_session``). Results are cached."""
        cached = self._bpe_cache.get(word)
        if cached is not None:
            return cached
        spelled = "".join(BYTE_TO_CHAR[byte] for byte in word.encode("utf-8", "surrogatepass"))
        whole_id = self._ids.get(spelled) if self._ignore_merges else None
        if whole_id is not None:
            result: tuple[int, ...] = (whole_id,)
        else:
            parts = list(spelled)
            ranks = self._ranks
            while len(parts) > 1:
                best_rank, best_pair = None, None
                for pair in zip(parts, parts[1:], strict=False):
                    rank = ranks.get(pair)
                    if rank is not None and (best_rank is None or rank < best_rank):
                        best_rank, best_pair = rank, pair
                if best_pair is None:
                    break
                left, right = best_pair
                merged: list[str] = []
                index = 0
                while index < len(parts):
                    if index + 1 < len(parts) and parts[index] == left and parts[index + 1] == right:
                        merged.append(left + right)
                        index += 2
                    else:
                        merged.append(parts[index])
                        index += 1
                parts = merged
            result = tuple(self._bpe_part_ids(parts))
        if len(self._bpe_cache) >= _BPE_CACHE_LIMIT:
            self._bpe_cache.clear()
        self._bpe_cache[word] = result
        return result

    def _bpe_part_ids(self, parts: list[str]) -> list[int]:
        ids = []
        for part in parts:
            token_id = self._ids.get(part)
            if token_id is not None:
                ids.append(token_id)
                continue
            # A piece the vocabulary lacks: fall back to its characters, then to the unknown token.
            for char in part:
                char_id = self._ids.get(char, self.unknown_id)
                if char_id is not None:
                    ids.append(char_id)
        return ids

    def _spm_chunk(self, text: str) -> list[int]:
        """SentencePiece BPE of one raw-text run, as llama.cpp's ``llm_tokenizer_spm_session``:
        start from single characters, repeatedly merge the adjacent pair whose concatenation is the
        highest-scoring token (leftmost on ties), then map leftovers to ``<0xXX>`` byte tokens."""
        symbols = list(text.replace(" ", _SPACE_MARK))
        count = len(symbols)
        if count == 0:
            return []
        next_index = [*range(1, count), -1]
        previous_index = list(range(-1, count - 1))
        queue: list[tuple[float, int, int, int]] = []

        def push_pair(left: int, right: int) -> None:
            if left < 0 or right < 0:
                return
            token_id = self._ids.get(symbols[left] + symbols[right])
            if token_id is not None:
                size = len(symbols[left]) + len(symbols[right])
                heapq.heappush(queue, (-self._scores[token_id], left, right, size))

        for index in range(1, count):
            push_pair(index - 1, index)
        while queue:
            _, left, right, size = heapq.heappop(queue)
            # Skip pairs that a merge made since they were queued.
            if not symbols[left] or not symbols[right] or len(symbols[left]) + len(symbols[right]) != size:
                continue
            symbols[left] += symbols[right]
            symbols[right] = ""
            next_index[left] = next_index[right]
            if next_index[right] >= 0:
                previous_index[next_index[right]] = left
            push_pair(previous_index[left], left)
            push_pair(left, next_index[left])

        ids: list[int] = []
        index = 0
        while index != -1:
            symbol = symbols[index]
            token_id = self._ids.get(symbol)
            if token_id is not None:
                ids.append(token_id)
            else:
                for byte in symbol.encode("utf-8", "surrogatepass"):
                    byte_id = self._byte_ids.get(byte, self.unknown_id)
                    if byte_id is not None:
                        ids.append(byte_id)
            index = next_index[index]
        return ids

    # -- decoding --------------------------------------------------------------------------------------

    def token_id(self, text: str) -> int | None:
        """The id of the token spelled ``text`` in the vocabulary (e.g. ``"<|im_end|>"``), or None."""
        return self._ids.get(text)

    def is_special(self, token_id: int) -> bool:
        """Whether ``token_id`` is a control or unknown token (what ``skip_special`` drops)."""
        self._check_id(token_id)
        return self.token_types[token_id] in _SPECIAL_TYPES

    def token_bytes(self, token_id: int) -> bytes:
        """The raw bytes one token stands for (may be part of a UTF-8 character).

        Byte-level tokens are mapped back through GPT-2's alphabet, ``<0xXX>`` pieces give their
        byte, ``▁`` gives a space; control and user-defined tokens give their own text.
        """
        self._check_id(token_id)
        cached = self._piece_cache.get(token_id)
        if cached is not None:
            return cached
        text = self.tokens[token_id]
        kind = self.token_types[token_id]
        if kind in (CONTROL, USER_DEFINED, UNKNOWN):
            piece = text.encode("utf-8")
        elif self.model == "gpt2":
            # A character outside the byte alphabet (a mislabelled token) stands for its own UTF-8.
            piece = b"".join(
                bytes((CHAR_TO_BYTE[char],)) if char in CHAR_TO_BYTE else char.encode("utf-8")
                for char in text
            )
        else:
            match = _BYTE_PIECE.fullmatch(text) if kind == BYTE else None
            if match:
                piece = bytes((int(match.group(1), 16),))
            else:
                piece = text.replace(_SPACE_MARK, " ").encode("utf-8")
        self._piece_cache[token_id] = piece
        return piece

    def decode(self, ids: Sequence[int], skip_special: bool = False) -> str:
        """Text of ``ids``; invalid UTF-8 becomes U+FFFD. SPM vocabularies with ``add_space_prefix``
        drop the leading space of the first piece, as llama.cpp's ``detokenize`` does."""
        streamer = self.stream(skip_special=skip_special)
        return "".join(streamer.push(token_id) for token_id in ids) + streamer.flush()

    def stream(self, skip_special: bool = False) -> StreamDecoder:
        """An incremental decoder for generation: push ids one by one, get text as it completes."""
        return StreamDecoder(self, skip_special)

    def _check_id(self, token_id: int) -> None:
        if not 0 <= int(token_id) < self.vocab_size:
            raise InputError(
                f"token id {token_id} is outside the vocabulary of {self.vocab_size} tokens ({self.source})"
            )

    # -- chat ------------------------------------------------------------------------------------------

    @functools.cached_property
    def chat(self) -> ChatTemplate:
        """The file's ``tokenizer.chat_template``, compiled (when there is none: the architecture's
        built-in format, else ChatML; ``chat.fallback_message`` then says so)."""
        names = {"bos_token": self.bos_id, "eos_token": self.eos_id, "unk_token": self.unknown_id,
                 "pad_token": self.padding_id}
        special = {name: self.tokens[index] for name, index in names.items() if index is not None}
        return ChatTemplate(self.chat_template, special, self.source,
                            builtin=None if self.chat_template else builtin_template(self.architecture))

    def apply_chat_template(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
                            **variables: Any) -> str:
        """Render ``messages`` with the file's Jinja chat template, as transformers'
        ``apply_chat_template(..., tokenize=False)`` does."""
        return self.chat.render(messages, add_generation_prompt, **variables)


class StreamDecoder:
    """Turns token ids into text as they arrive, holding back a UTF-8 character split across tokens.

    Concatenating every ``push`` and the final ``flush`` equals ``GgufTokenizer.decode`` of all ids.
    """

    def __init__(self, tokenizer: GgufTokenizer, skip_special: bool = False) -> None:
        self._tokenizer = tokenizer
        self._skip_special = skip_special
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._strip_space = tokenizer.model == "llama" and tokenizer.add_space_prefix

    def push(self, token_id: int) -> str:
        """Add one token; return the text that is now complete (possibly empty)."""
        if self._skip_special and self._tokenizer.is_special(token_id):
            return ""
        piece = self._tokenizer.token_bytes(token_id)
        if self._strip_space:
            # Only the very first piece loses its leading space (the one encode() prefixed).
            self._strip_space = False
            if piece.startswith(b" "):
                piece = piece[1:]
        return self._decoder.decode(piece)

    def flush(self) -> str:
        """Return what is left; an unfinished UTF-8 character becomes U+FFFD."""
        return self._decoder.decode(b"", final=True)
