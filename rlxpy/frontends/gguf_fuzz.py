"""A structure-aware fuzzer for the GGUF loader (issue 17, "Hostile inputs").

:func:`field_map` parses a valid seed file on its own (independently of the loader's reader) into
the byte positions of every field: header (magic, version, counts), each metadata pair (key length,
key, value type, string lengths, array item type/count/items, scalars) and each tensor info (name,
n_dims, dims, type, offset), the data section and each tensor's bytes. Mutators then hit fields, not
just random bytes: edge values (0, ±1, 2**63, 2**64-1, NaN, ...), invalid UTF-8, duplicate or
renamed keys and tensors, deleted or inserted pairs and infos, swapped dims, overlapping or
misaligned offsets, truncation anywhere, byte flips in the header region and data section writes.
A case stacks one to three mutations, drawn from ``numpy.random.default_rng(seed)``.

A case is a real file on disk. For a large seed (the SmolLM2 GGUF) only the region up to the data
section is kept in memory; the file is that (mutated) prefix followed by a sparse hole as long as the
original data section (zeros: the loader never reads tensor bytes, it only maps them), plus any
data-section writes and the truncation. A small seed (tests/tiny_llama.py's) is written whole.

:func:`check_case` is the oracle: ``load_gguf`` must either load, and then every param the llama
graph declares must find source tensors of exactly its byte size (so a later compile and upload
cannot fail on a missing or misshapen tensor), or raise ``ModelError`` whose message names the file
and does not leak Python/gguf-py internals. Anything else (another exception type, a message without
the file name, a case over its time limit) is a failure.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from rlxpy.errors import ModelError
from rlxpy.fuzz import Outcome, Report, guarded, judge_refusal, pick, stack_count, weighted
from rlxpy.fuzz import run as run_cases

# GGUF metadata value types and their sizes (see gguf_check's docstring for the layout).
STRING, ARRAY = 8, 9
SCALAR_FORMATS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<B", 10: "<Q",
                  11: "<q", 12: "<d"}
#: Keys whose values the llama loader interprets: mutated more often.
HOT_KEYS = ("general.architecture", "general.alignment", "block_count", "embedding_length",
            "feed_forward_length", "attention.head_count", "attention.head_count_kv",
            "rope.dimension_count", "context_length", "vocab_size", "layer_norm_rms_epsilon",
            "rope.freq_base", "tokenizer.ggml.tokens")
U64_EDGES = (0, 1, 2, 3, 7, 31, 32, 2**31, 2**32 - 1, 2**32, 2**62, 2**63 - 1, 2**63, 2**64 - 1)


@dataclass
class Field:
    """One field of the seed: ``kind`` (e.g. "kv.key_len"), the key/tensor it belongs to, its byte
    position and size, and the struct format of a numeric field ("" for raw bytes)."""

    kind: str
    owner: str
    offset: int
    size: int
    fmt: str = ""
    value: Any = None


@dataclass
class Entry:
    """A whole metadata pair or tensor info: [start, end) and its fields."""

    owner: str
    start: int
    end: int
    fields: list[Field] = field(default_factory=list)
    value_type: int = -1
    item_type: int = -1
    count: int = 0


@dataclass
class FieldMap:
    header: dict[str, Field]
    kvs: list[Entry]
    infos: list[Entry]
    alignment: int
    infos_end: int
    data_offset: int
    size: int
    tensor_ranges: dict[str, tuple[int, int]]


class _Cursor:
    """Reads little-endian fields of a GGUF in order, recording where each one sits."""

    def __init__(self, data: bytes | memoryview) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str) -> tuple[int, Any]:
        start = self.pos
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return start, value

    def field(self, kind: str, owner: str, fmt: str, entry: Entry | None = None) -> Field:
        at, value = self.take(fmt)
        f = Field(kind, owner, at, struct.calcsize(fmt), fmt, value)
        if entry is not None:
            entry.fields.append(f)
        return f

    def string(self, kind: str, owner: str, entry: Entry) -> str:
        length = self.field(f"{kind}_len", owner, "<Q", entry).value
        raw = bytes(self.data[self.pos : self.pos + length])
        entry.fields.append(Field(kind, owner, self.pos, length, "", raw))
        self.pos += length
        return raw.decode("utf-8")

    def named_entry(self, kind: str) -> Entry:
        """A new entry whose owner is the string (key or tensor name) read first."""
        entry = Entry("", self.pos, 0)
        entry.owner = self.string(kind, "", entry)
        for f in entry.fields:
            f.owner = entry.owner
        return entry


def _map_array(cur: _Cursor, entry: Entry) -> None:
    key = entry.owner
    entry.item_type = cur.field("kv.item_type", key, "<I", entry).value
    entry.count = cur.field("kv.count", key, "<Q", entry).value
    for index in range(entry.count):
        sampled = index < 32 or index % 997 == 0  # item fields kept for mutation
        if entry.item_type == STRING:
            if sampled:
                cur.string("kv.item", key, entry)
            else:
                (length,) = struct.unpack_from("<Q", cur.data, cur.pos)
                cur.pos += 8 + length
        else:
            cur.field("kv.item", key, SCALAR_FORMATS[entry.item_type], entry if sampled else None)


def _map_kv(cur: _Cursor) -> Entry:
    entry = cur.named_entry("kv.key")
    key = entry.owner
    entry.value_type = cur.field("kv.type", key, "<I", entry).value
    if entry.value_type == STRING:
        cur.string("kv.str", key, entry)
    elif entry.value_type == ARRAY:
        _map_array(cur, entry)
    else:
        cur.field("kv.scalar", key, SCALAR_FORMATS[entry.value_type], entry)
    entry.end = cur.pos
    return entry


def _map_info(cur: _Cursor) -> Entry:
    entry = cur.named_entry("ti.name")
    name = entry.owner
    entry.count = cur.field("ti.n_dims", name, "<I", entry).value
    for _axis in range(entry.count):
        cur.field("ti.dim", name, "<Q", entry)
    entry.item_type = cur.field("ti.type", name, "<I", entry).value
    cur.field("ti.offset", name, "<Q", entry)
    entry.end = cur.pos
    return entry


def _gguf_tensor_bytes(type_id: int, dims: list[int]) -> int:
    block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(type_id)]
    return int(np.prod(dims)) // block * type_size


def field_map(
    data: bytes | memoryview, size: int | None = None, tensor_bytes: Callable | None = None
) -> FieldMap:
    """Positions of every field of a valid GGUF (``data``: at least the bytes up to the data section).

    ``tensor_bytes(type_id, dims)`` gives a tensor's byte size (gguf-py's block table by default)."""
    size = len(data) if size is None else size
    cur = _Cursor(data)
    header = {"magic": Field("magic", "header", 0, 4)}
    cur.pos = 4
    for name, fmt in (("version", "<I"), ("tensor_count", "<Q"), ("kv_count", "<Q")):
        header[name] = cur.field(name, "header", fmt)
    kvs = [_map_kv(cur) for _ in range(header["kv_count"].value)]
    alignment = 32
    for entry in kvs:
        if entry.owner == "general.alignment" and entry.value_type not in (STRING, ARRAY):
            alignment = entry.fields[-1].value
    infos = [_map_info(cur) for _ in range(header["tensor_count"].value)]
    infos_end = cur.pos
    data_offset = -(-cur.pos // alignment) * alignment
    tensor_bytes = tensor_bytes or _gguf_tensor_bytes
    ranges = {}
    for entry in infos:
        dims = [f.value for f in entry.fields if f.kind == "ti.dim"]
        offset = next(f.value for f in entry.fields if f.kind == "ti.offset")
        start = data_offset + offset
        ranges[entry.owner] = (start, start + tensor_bytes(entry.item_type, dims))
    return FieldMap(header, kvs, infos, alignment, infos_end, data_offset, size, ranges)


@dataclass
class Seed:
    """A valid GGUF to mutate: ``head`` (its bytes up to the data section, or all of them) and its
    full size; ``sparse``: the rest is written as a hole rather than copied."""

    name: str
    path: Path
    head: bytes
    size: int
    fields: FieldMap
    sparse: bool

    @classmethod
    def load(cls, name: str, path: Path, sparse: bool | None = None) -> Seed:
        path = Path(path)
        size = path.stat().st_size
        sparse = size > (8 << 20) if sparse is None else sparse
        with open(path, "rb") as f:
            data = f.read(size if not sparse else min(size, 64 << 20))
        fields = field_map(data, size)
        head = data if not sparse else data[: fields.data_offset]
        return cls(name, path, bytes(head), size, fields, sparse)


@dataclass
class Draft:
    """A case under construction: the seed's head (mutable), a hole after it, writes past the head,
    and an optional final size."""

    head: bytearray
    tail: int
    writes: list[tuple[int, bytes]] = field(default_factory=list)
    truncate: int | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def size(self) -> int:
        return len(self.head) + self.tail

    def put(self, offset: int, raw: bytes) -> None:
        end = offset + len(raw)
        if end <= len(self.head):
            self.head[offset:end] = raw
        else:
            self.writes.append((offset, raw))

    def write_to(self, path: Path) -> None:
        with open(path, "wb") as f:
            f.write(self.head)
            if self.tail:
                f.truncate(self.size)  # a hole: zeros that take no disk space
            for offset, raw in self.writes:
                f.seek(offset)
                f.write(raw)
            if self.truncate is not None:
                f.truncate(self.truncate)


def _u64(rng: np.random.Generator, current: int) -> int:
    choice = rng.integers(0, 4)
    if choice == 0:
        value = int(rng.choice(U64_EDGES))
    elif choice == 1:
        value = current + int(rng.choice((-2, -1, 1, 2)))
    elif choice == 2:
        value = int(rng.integers(0, 2**63, dtype=np.int64)) * int(rng.integers(1, 3))
    else:
        value = current * int(rng.choice((2, 3, 10, 1000))) if current else int(rng.integers(2, 100))
    return min(max(value, 0), 2**64 - 1)


def _edge_value(rng: np.random.Generator, fmt: str, current: Any) -> bytes:
    code = fmt[-1]
    if code in "fd":
        edges = [0.0, -1.0, np.nan, np.inf, -np.inf, 1e30, 1e-30, -current if current else 5.0]
        value = float(rng.choice(edges))
        return struct.pack(fmt, value)
    bits = struct.calcsize(fmt) * 8
    signed = code.islower()
    low, high = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    candidates = [low, high, 0, 1, 2, 3, current - 1, current + 1, current * 2, current // 2, current * 1000]
    candidates.append(int(rng.integers(0, 2**31)))
    if code == "B":  # bool and uint8
        candidates += [2, 255]
    value = int(rng.choice(candidates))
    return struct.pack(fmt, min(max(value, low), high))


BAD_UTF8 = (b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80", b"\xf8\x88\x80\x80\x80", b"\xc0\xaf")


def _bad_text(rng: np.random.Generator, raw: bytes) -> bytes:
    """``raw`` with one invalid UTF-8 sequence written over it, same length."""
    if not raw:
        return raw
    bad = BAD_UTF8[int(rng.integers(0, len(BAD_UTF8)))][: len(raw)]
    at = int(rng.integers(0, len(raw) - len(bad) + 1))
    return raw[:at] + bad + raw[at + len(bad) :]


def _pick_kv(rng: np.random.Generator, fm: FieldMap) -> Entry:
    if rng.random() < 0.5:
        hot = [e for e in fm.kvs if e.owner.endswith(HOT_KEYS)]
        if hot:
            return pick(rng, hot)
    return pick(rng, fm.kvs)


def _first(entry: Entry, kind: str) -> Field | None:
    return next((f for f in entry.fields if f.kind == kind), None)


# -- mutators: (rng, seed, draft) -> description; those in RESIZING change the head's length ---------


def m_magic(rng, seed, d):
    d.put(0, bytes(pick(rng, [b"GGUG", b"FUGG", b"\0\0\0\0", b"ggml", b"GGU", b"GGJT"]))[:4].ljust(4, b"\0"))
    return "magic"


def m_version(rng, seed, d):
    value = int(pick(rng, [0, 1, 2, 3, 4, 0x03000000, 0x00030000, 2**32 - 1, int(rng.integers(0, 2**32))]))
    d.put(4, struct.pack("<I", value))
    return f"version={value}"


def m_count(rng, seed, d):
    name = pick(rng, ["tensor_count", "kv_count"])
    f = seed.fields.header[name]
    value = _u64(rng, f.value)
    d.put(f.offset, struct.pack("<Q", value))
    return f"{name}={value}"


def m_kv_field(rng, seed, d):
    entry = _pick_kv(rng, seed.fields)
    f = pick(rng, entry.fields)
    return _mutate_field(rng, d, f)


def m_kv_value(rng, seed, d):
    entry = _pick_kv(rng, seed.fields)
    f = pick(rng, [f for f in entry.fields if not f.kind.startswith("kv.key")])
    return _mutate_field(rng, d, f)


def m_kv_type(rng, seed, d):
    entry = _pick_kv(rng, seed.fields)
    f = _first(entry, "kv.type")
    value = int(pick(rng, list(range(14)) + [2**32 - 1, int(rng.integers(0, 2**32))]))
    d.put(f.offset, struct.pack("<I", value))
    return f"{entry.owner}.type={value}"


def m_tensor_field(rng, seed, d):
    entry = pick(rng, seed.fields.infos)
    f = pick(rng, entry.fields)
    return _mutate_field(rng, d, f, seed)


def m_tensor_dim(rng, seed, d):
    entry = pick(rng, seed.fields.infos)
    dims = [f for f in entry.fields if f.kind == "ti.dim"]
    f = pick(rng, dims)
    if len(dims) == 2 and rng.random() < 0.3:  # transpose
        d.put(dims[0].offset, struct.pack("<Q", dims[1].value))
        d.put(dims[1].offset, struct.pack("<Q", dims[0].value))
        return f"{entry.owner} dims swapped"
    value = int(pick(rng, [0, 1, f.value - 1, f.value + 1, f.value // 2, f.value * 2, 2**63, 2**64 - 1,
                            2**64 - f.value, f.value + 32, 2**32 + f.value]))
    d.put(f.offset, struct.pack("<Q", max(0, min(value, 2**64 - 1))))
    return f"{entry.owner}.dim={value}"


def m_tensor_type(rng, seed, d):
    entry = pick(rng, seed.fields.infos)
    f = _first(entry, "ti.type")
    value = int(pick(rng, [0, 1, 2, 3, 4, 5, 8, 12, 14, 16, 24, 28, 30, 39, 40, 99, 2**32 - 1]))
    d.put(f.offset, struct.pack("<I", value))
    return f"{entry.owner}.type={value}"


def m_tensor_offset(rng, seed, d):
    fm = seed.fields
    entry = pick(rng, fm.infos)
    f = _first(entry, "ti.offset")
    other = pick(rng, fm.infos)
    other_offset = _first(other, "ti.offset").value
    data = fm.size - fm.data_offset
    align = fm.alignment
    value = int(pick(rng, [0, f.value + 1, f.value + align, f.value - align, other_offset,
                            other_offset + align, data, data - align, 2**63, 2**64 - align,
                            int(rng.integers(0, max(data, 1))) // align * align]))
    d.put(f.offset, struct.pack("<Q", max(0, min(value, 2**64 - 1))))
    return f"{entry.owner}.offset={value}"


def m_tensor_name(rng, seed, d):
    fm = seed.fields
    entry = pick(rng, fm.infos)
    f = _first(entry, "ti.name")
    same = [e for e in fm.infos if e is not entry and len(e.owner) == len(entry.owner)]
    if same and rng.random() < 0.4:  # a duplicate name
        d.put(f.offset, pick(rng, same).owner.encode())
        return f"{entry.owner} renamed to a duplicate"
    if rng.random() < 0.5:
        raw = bytearray(f.value)
        raw[int(rng.integers(0, len(raw)))] = int(rng.integers(0x21, 0x7F))
        d.put(f.offset, bytes(raw))
        return f"{entry.owner} renamed"
    d.put(f.offset, _bad_text(rng, f.value))
    return f"{entry.owner} name not UTF-8"


def m_flip(rng, seed, d):
    limit = min(len(d.head), 2 << 20)
    notes = []
    for _ in range(int(rng.integers(1, 9))):
        at = int(rng.integers(0, limit))
        d.head[at] ^= 1 << int(rng.integers(0, 8)) if rng.random() < 0.7 else int(rng.integers(1, 256))
        notes.append(str(at))
    return "flip@" + ",".join(notes)


def m_header_bytes(rng, seed, d):
    """Random bytes over a random span of the header region (up to 64 bytes)."""
    end = seed.fields.infos_end
    at = int(rng.integers(0, end))
    length = int(rng.integers(1, 65))
    d.put(at, rng.integers(0, 256, min(length, end - at), dtype=np.uint8).tobytes())
    return f"junk@{at}+{length}"


def m_data(rng, seed, d):
    fm = seed.fields
    if fm.size <= fm.data_offset:
        return "data (empty)"
    at = int(rng.integers(fm.data_offset, fm.size))
    length = int(min(rng.integers(1, 4096), fm.size - at))
    d.put(at, rng.integers(0, 256, length, dtype=np.uint8).tobytes())
    return f"data@{at}+{length}"


def m_truncate(rng, seed, d):
    fm = seed.fields
    if rng.random() < 0.5:
        cut = int(rng.integers(0, fm.data_offset + 1))
    elif rng.random() < 0.5:  # inside or at the end of a tensor's bytes
        start, end = pick(rng, list(fm.tensor_ranges.values()))
        cut = int(rng.integers(start, end + 1))
    else:
        cut = int(rng.integers(0, fm.size))
    d.truncate = min(cut, d.size) if d.truncate is None else min(cut, d.truncate)
    return f"truncate@{cut}"


def m_extend(rng, seed, d):
    extra = int(rng.integers(1, 1 << 16))
    d.writes.append((d.size, rng.integers(0, 256, extra, dtype=np.uint8).tobytes()))
    return f"extend+{extra}"


def _bump(d: Draft, seed: Seed, name: str, delta: int) -> None:
    f = seed.fields.header[name]
    d.head[f.offset : f.offset + 8] = struct.pack("<Q", f.value + delta)


def realign(head: bytearray, fm: FieldMap, delta: int) -> None:
    """After the metadata/tensor-info region of ``head`` grew by ``delta`` bytes, pad (or unpad) it so
    the data section starts aligned again and every tensor offset still points at its bytes."""
    new_start = -(-(fm.infos_end + delta) // fm.alignment) * fm.alignment
    at = fm.data_offset + delta  # where the data section's first byte is now
    fix = new_start - at
    if fix > 0:
        head[at:at] = bytes(fix)
    elif fix < 0:
        del head[at + fix : at]


def m_kv_delete(rng, seed, d):
    entry = _pick_kv(rng, seed.fields)
    del d.head[entry.start : entry.end]
    _bump(d, seed, "kv_count", -1)
    realign(d.head, seed.fields, entry.start - entry.end)
    return f"delete kv {entry.owner}"


def m_kv_duplicate(rng, seed, d):
    entry = _pick_kv(rng, seed.fields)
    d.head[entry.end : entry.end] = d.head[entry.start : entry.end]
    _bump(d, seed, "kv_count", 1)
    realign(d.head, seed.fields, entry.end - entry.start)
    return f"duplicate kv {entry.owner}"


def m_kv_insert(rng, seed, d):
    arch = "llama"
    key = str(pick(rng, ["general.alignment", f"{arch}.vocab_size", f"{arch}.rope.dimension_count",
                          f"{arch}.attention.head_count_kv", f"{arch}.context_length", "general.extra"]))
    value_type = int(pick(rng, [4, 4, 4, 10, 5, 6, 8, 7, 0]))
    if value_type == 8:
        value = struct.pack("<Q", 3) + b"abc"
    else:
        fmt = SCALAR_FORMATS[value_type]
        value = _edge_value(rng, fmt, int(pick(rng, [0, 1, 3, 63, 64, 49152, 1 << 20])))
    raw = struct.pack("<Q", len(key)) + key.encode() + struct.pack("<I", value_type) + value
    at = seed.fields.kvs[-1].end if rng.random() < 0.5 else seed.fields.kvs[0].start
    d.head[at:at] = raw
    _bump(d, seed, "kv_count", 1)
    realign(d.head, seed.fields, len(raw))
    return f"insert kv {key} type {value_type}"


def m_tensor_delete(rng, seed, d):
    entry = pick(rng, seed.fields.infos)
    del d.head[entry.start : entry.end]
    _bump(d, seed, "tensor_count", -1)
    realign(d.head, seed.fields, entry.start - entry.end)
    return f"delete tensor {entry.owner}"


def m_tensor_duplicate(rng, seed, d):
    entry = pick(rng, seed.fields.infos)
    d.head[entry.end : entry.end] = d.head[entry.start : entry.end]
    _bump(d, seed, "tensor_count", 1)
    realign(d.head, seed.fields, entry.end - entry.start)
    return f"duplicate tensor {entry.owner}"


def _mutate_field(rng: np.random.Generator, d: Draft, f: Field, seed: Seed | None = None) -> str:
    where = f"{f.owner}:{f.kind}"
    if f.kind in ("kv.key", "kv.str", "kv.item", "ti.name") and f.fmt == "":
        if not f.value:
            return f"{where} (empty)"
        if rng.random() < 0.6:
            d.put(f.offset, _bad_text(rng, f.value))
            return f"{where} not UTF-8"
        raw = bytearray(f.value)
        raw[int(rng.integers(0, len(raw)))] ^= 1 << int(rng.integers(0, 7))
        d.put(f.offset, bytes(raw))
        return f"{where} changed"
    if f.fmt == "<Q":
        value = _u64(rng, f.value)
        d.put(f.offset, struct.pack("<Q", value))
        return f"{where}={value}"
    if f.fmt:
        raw = _edge_value(rng, f.fmt, f.value if f.value is not None else 0)
        d.put(f.offset, raw)
        return f"{where}={struct.unpack(f.fmt, raw)[0]}"
    return where


MUTATORS: dict[str, tuple[Callable, float]] = {
    "magic": (m_magic, 0.3), "version": (m_version, 0.5), "count": (m_count, 1.0),
    "kv_field": (m_kv_field, 1.5), "kv_value": (m_kv_value, 2.0), "kv_type": (m_kv_type, 1.0),
    "tensor_field": (m_tensor_field, 1.5), "tensor_dim": (m_tensor_dim, 1.5),
    "tensor_type": (m_tensor_type, 1.0),
    "tensor_offset": (m_tensor_offset, 1.5), "tensor_name": (m_tensor_name, 1.0), "flip": (m_flip, 1.5),
    "header_bytes": (m_header_bytes, 0.7), "data": (m_data, 0.7), "truncate": (m_truncate, 1.0),
    "extend": (m_extend, 0.2),
    "kv_delete": (m_kv_delete, 0.7), "kv_duplicate": (m_kv_duplicate, 0.3), "kv_insert": (m_kv_insert, 0.7),
    "tensor_delete": (m_tensor_delete, 0.7), "tensor_duplicate": (m_tensor_duplicate, 0.3),
}
#: Mutators that change the head's length (shift later fields): at most one per case, applied last.
RESIZING = frozenset(("kv_delete", "kv_duplicate", "kv_insert", "tensor_delete", "tensor_duplicate"))


def make_case(rng: np.random.Generator, seed: Seed) -> Draft:
    """One to three stacked mutations of ``seed``."""
    chosen = weighted(rng, MUTATORS, stack_count(rng))
    resizing = [n for n in chosen if n in RESIZING][:1]
    chosen = [n for n in chosen if n not in RESIZING] + resizing
    draft = Draft(bytearray(seed.head), seed.size - len(seed.head))
    for name in chosen:
        draft.notes.append(f"{name}: {MUTATORS[name][0](rng, seed, draft)}")
    return draft


# -- the oracle ------------------------------------------------------------------------------------


_FIT_CACHE: dict[Any, str] = {}


def graph_fit(model: Any) -> str:
    """"" when every param of the llama graph finds source tensors of exactly its byte size, else why not."""
    from rlxpy.models.llama import build_llama, param_sources

    cfg = model.config
    sizes = tuple(sorted((name, t.nbytes) for name, t in model.tensors.items()))
    key = (repr(cfg), sizes)
    if key in _FIT_CACHE:
        return _FIT_CACHE[key]
    problem = ""
    graph = build_llama(cfg, chunk=4)
    for node in graph.params():
        if node.name.endswith(("k_cache", "v_cache")):
            continue
        sources = param_sources(node.name)
        missing = [s for s in sources if s not in model.tensors]
        if missing:
            problem = f"param {node.name!r} needs tensor {missing[0]!r}, which the file lacks"
            break
        got = sum(model.tensors[s].nbytes for s in sources)
        if got != node.nbytes:
            problem = f"param {node.name!r} ({node.type}): expected {node.nbytes} bytes, the file has {got}"
            break
    _FIT_CACHE[key] = problem
    return problem


def check_case(path: Path, time_limit: float = 10.0, tokenizer: bool = False) -> Outcome:
    """Run the loader on one file under a time limit and judge the result (see the module docstring)."""
    return guarded(path, lambda: _load_and_fit(path, tokenizer), time_limit, (ModelError,))


def _load_and_fit(path: Path, tokenizer: bool) -> tuple[str, str]:
    from rlxpy.frontends.gguf import load_gguf

    try:
        model = load_gguf(path, context=64)
        problem = graph_fit(model)
        if not problem:
            for name in model.tensors:  # the bytes the upload will read are there
                if model.tensor_bytes(name).nbytes != model.tensors[name].nbytes:
                    problem = f"tensor {name!r}: the map holds fewer bytes than the tensor info says"
                    break
        if problem:
            return "failure", f"loaded, but {problem}"
        verdict, detail = "loaded", ""
    except ModelError as e:
        verdict, detail = judge_refusal(path, e)
    if tokenizer:
        from rlxpy.frontends.gguf_tokenizer import GgufTokenizer

        try:
            GgufTokenizer.from_gguf(path)
        except ModelError as e:
            tok_verdict, tok_detail = judge_refusal(path, e, leaks=False)
            if tok_verdict == "failure":
                verdict, detail = "failure", f"tokenizer: {tok_detail}"
    return verdict, detail


def run(seeds: list[tuple[Seed, int]], workdir: Path, rng_seed: int = 0, time_limit: float = 10.0,
        tokenizer_seeds: tuple[str, ...] = (), progress: Callable[[str], None] | None = None) -> Report:
    """``cases`` mutated files per seed, each checked by :func:`check_case`."""
    return run_cases(seeds, make_case,
                     lambda path, seed: check_case(path, time_limit, tokenizer=seed.name in tokenizer_seeds),
                     workdir, ".gguf", rng_seed, progress)
