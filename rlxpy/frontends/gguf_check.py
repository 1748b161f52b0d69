"""Read a GGUF file's layout strictly: header, metadata, tensor infos, data section.

The format (ggml's docs/gguf.md), little-endian throughout::

    magic "GGUF" | u32 version (2 or 3) | u64 tensor count | u64 metadata count
    metadata:     (string key, u32 value type, value) x metadata count
    tensor infos: (string name, u32 n_dims, u64 dims[n_dims], u32 ggml type, u64 offset) x tensor count
    padding to ``general.alignment`` (default 32), then the data section

A string is a u64 byte length and that many UTF-8 bytes; an array is a u32 item type, a u64 count
and the items. A tensor's offset is relative to the data section; ``dims[0]`` is the row length
(GGUF's dims order, the reverse of numpy's shape).

Every problem raises :class:`~rlxpy.errors.ModelError` as ``"<file>: <what>"`` naming the metadata key
or tensor, in this project's words. The reader never reads tensor bytes (only the header region,
through a memory map), so a check of a 100 MB model costs the parse of its metadata.
"""

from __future__ import annotations

import math
import mmap
import os
import struct
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from rlxpy.errors import ModelError

MAGIC = b"GGUF"
VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4  # GGML_MAX_DIMS
INT64_MAX = 2**63 - 1

# GGUF metadata value types.
UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
TYPE_NAMES = {
    UINT8: "uint8", INT8: "int8", UINT16: "uint16", INT16: "int16", UINT32: "uint32", INT32: "int32",
    FLOAT32: "float32", BOOL: "bool", STRING: "string", ARRAY: "array", UINT64: "uint64", INT64: "int64",
    FLOAT64: "float64",
}
#: struct format and numpy dtype of each scalar type.
SCALARS: dict[int, tuple[str, str]] = {
    UINT8: ("<B", "<u1"), INT8: ("<b", "<i1"), UINT16: ("<H", "<u2"), INT16: ("<h", "<i2"),
    UINT32: ("<I", "<u4"), INT32: ("<i", "<i4"), FLOAT32: ("<f", "<f4"), BOOL: ("<B", "<u1"),
    UINT64: ("<Q", "<u8"), INT64: ("<q", "<i8"), FLOAT64: ("<d", "<f8"),
}
INTEGERS = frozenset((UINT8, INT8, UINT16, INT16, UINT32, INT32, UINT64, INT64))
FLOATS = frozenset((FLOAT32, FLOAT64))
#: The fewest bytes a metadata pair (u64 key length, u32 type, 1-byte value) and a tensor info
#: (u64 name length, u32 n_dims, u32 type, u64 offset) can take: bounds the counts by the file size.
MIN_KV_BYTES = 8 + 4 + 1
MIN_TENSOR_INFO_BYTES = 8 + 4 + 4 + 8
_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")


def type_name(value_type: int) -> str:
    return TYPE_NAMES.get(value_type, f"type {value_type}")


def ggml_type_name(type_id: int) -> str:
    try:
        return GGMLQuantizationType(type_id).name
    except ValueError:
        return f"unknown type {type_id}"


@dataclass
class MetaValue:
    """One metadata pair. ``value``: str, int, float or bool; arrays: list[str] or a numpy array."""

    key: str
    type: int
    value: Any
    offset: int  # where the pair (its key's length) starts
    value_offset: int  # where the value (after the u32 type) starts
    end: int
    item_type: int | None = None  # arrays only

    def describe_type(self) -> str:
        if self.type == ARRAY:
            return f"array of {type_name(self.item_type if self.item_type is not None else -1)}"
        return type_name(self.type)


@dataclass
class TensorInfo:
    """One tensor info. ``dims`` is in GGUF order (row length first)."""

    name: str
    dims: tuple[int, ...]
    type_id: int
    offset: int  # relative to the data section
    info_offset: int  # where the info (its name's length) starts in the file
    info_end: int
    start: int = 0  # absolute byte range of the data, set once the data section is known
    nbytes: int = 0

    @property
    def tensor_type(self) -> GGMLQuantizationType:
        return GGMLQuantizationType(self.type_id)

    @property
    def type_name(self) -> str:
        return ggml_type_name(self.type_id)

    @property
    def shape(self) -> list[int]:
        return list(self.dims)

    @property
    def end(self) -> int:
        return self.start + self.nbytes

    @property
    def n_elements(self) -> int:
        return math.prod(self.dims)

    def describe(self) -> str:
        return f"tensor {self.name!r} ({self.type_name} {list(self.dims)})"


@dataclass
class GgufLayout:
    path: Path
    size: int
    version: int
    tensor_count: int
    kv_count: int
    meta: dict[str, MetaValue] = field(default_factory=dict)
    tensors: dict[str, TensorInfo] = field(default_factory=dict)
    alignment: int = DEFAULT_ALIGNMENT
    infos_end: int = 0
    data_offset: int = 0

    def value(self, key: str, default: Any = None) -> Any:
        entry = self.meta.get(key)
        return default if entry is None else entry.value

    @cached_property
    def memmap(self) -> np.ndarray:
        """The whole file as a read-only u8 memory map (for tensor bytes)."""
        return np.memmap(self.path, dtype=np.uint8, mode="r")

    def tensor_bytes(self, name: str) -> np.ndarray:
        t = self.tensors[name]
        return self.memmap[t.start : t.end]


class _Reader:
    """A cursor over the file's bytes that names what it was reading when the file ends."""

    def __init__(self, label: str, buf: Any, size: int) -> None:
        self.label, self.buf, self.size, self.pos = label, buf, size, 0

    def fail(self, message: str) -> ModelError:
        return ModelError(f"{self.label}: {message}")

    def need(self, count: int, what: str) -> None:
        if count > self.size - self.pos:
            raise self.fail(
                f"the file ends inside {what} (needs {count} bytes at byte {self.pos}, "
                f"the file has {self.size}): truncated or corrupt"
            )

    def u32(self, what: str) -> int:
        self.need(4, what)
        (value,) = _U32.unpack_from(self.buf, self.pos)
        self.pos += 4
        return value

    def u64(self, what: str) -> int:
        self.need(8, what)
        (value,) = _U64.unpack_from(self.buf, self.pos)
        self.pos += 8
        return value

    def raw_string(self, what: str) -> tuple[int, int]:
        """(start, length) of a string's bytes; checks the length against the file."""
        length = self.u64(f"the length of {what}")
        if length > self.size - self.pos:
            raise self.fail(
                f"{what} claims {length} bytes at byte {self.pos}, past the end of the file "
                f"({self.size} bytes)"
            )
        start = self.pos
        self.pos += length
        return start, length

    def decode(self, start: int, length: int, what: str) -> str:
        raw = bytes(self.buf[start : start + length])
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            bad = raw[e.start : e.start + 1].hex()
            raise self.fail(
                f"{what} is not valid UTF-8 (byte 0x{bad} at offset {e.start} of {length}, file byte "
                f"{start + e.start})"
            ) from None

    def string(self, what: str) -> str:
        start, length = self.raw_string(what)
        return self.decode(start, length, what)


def _scalar(r: _Reader, value_type: int, what: str) -> Any:
    fmt, _ = SCALARS[value_type]
    size = struct.calcsize(fmt)
    r.need(size, what)
    (value,) = struct.unpack_from(fmt, r.buf, r.pos)
    r.pos += size
    if value_type == BOOL:
        if value not in (0, 1):
            raise r.fail(f"{what} is a bool of value {value} (not 0 or 1)")
        return bool(value)
    return value


def _array(r: _Reader, what: str) -> tuple[int, Any]:
    item_type = r.u32(f"the item type of {what}")
    count = r.u64(f"the item count of {what}")
    if item_type == ARRAY:
        raise r.fail(f"{what} is an array of arrays, which rlxpy does not read")
    if item_type not in SCALARS and item_type != STRING:
        raise r.fail(f"{what} is an array of {type_name(item_type)}, not a GGUF value type")
    item_size = 8 if item_type == STRING else struct.calcsize(SCALARS[item_type][0])
    if count * item_size > r.size - r.pos:
        raise r.fail(
            f"{what} claims {count} items of {type_name(item_type)} at byte {r.pos}, more than the "
            f"{r.size - r.pos} bytes left in the file"
        )
    if item_type != STRING:
        dtype = SCALARS[item_type][1]
        values = np.frombuffer(r.buf, dtype=dtype, count=count, offset=r.pos).copy()
        r.pos += count * item_size
        if item_type == BOOL:
            if count and int(values.max()) > 1:
                raise r.fail(f"{what} holds a bool that is not 0 or 1")
            values = values.astype(bool)
        return item_type, values
    items: list[str] = []
    buf, size, unpack = r.buf, r.size, _U64.unpack_from
    pos = r.pos
    for index in range(count):
        if pos + 8 > size:
            r.pos = pos
            r.need(8, f"the length of item {index} of {what}")
        (length,) = unpack(buf, pos)
        pos += 8
        if length > size - pos:
            raise r.fail(
                f"item {index} of {what} claims {length} bytes at byte {pos}, past the end of the file "
                f"({size} bytes)"
            )
        try:
            items.append(str(buf[pos : pos + length], "utf-8"))
        except UnicodeDecodeError:
            r.decode(pos, length, f"item {index} of {what}")  # raises with the details
        pos += length
    r.pos = pos
    return item_type, items


def _value(r: _Reader, value_type: int, what: str) -> tuple[Any, int | None]:
    if value_type == STRING:
        return r.string(what), None
    if value_type == ARRAY:
        item_type, values = _array(r, what)
        return values, item_type
    if value_type in SCALARS:
        return _scalar(r, value_type, what), None
    raise r.fail(f"{what} has value type {value_type}, not a GGUF value type (0 to 12)")


def _open(path: Path) -> tuple[int, Any, Any]:
    try:
        if not path.is_file():
            raise ModelError(f"{path}: no such GGUF file")
        handle = open(path, "rb")  # noqa: SIM115 - closed by read_layout
    except OSError as e:
        raise ModelError(f"{path}: cannot open ({e.strerror or e})") from None
    size = os.fstat(handle.fileno()).st_size
    if size == 0:
        handle.close()
        raise ModelError(f"{path}: the file is empty, not a GGUF file")
    try:
        buf = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as e:
        handle.close()
        raise ModelError(f"{path}: cannot map the file ({e})") from None
    return size, handle, buf


def read_layout(path: str | os.PathLike[str]) -> GgufLayout:
    """Parse and check the whole layout; raises ModelError naming the file and the field or tensor."""
    path = Path(path)
    size, handle, buf = _open(path)
    try:
        return _parse(path, size, buf)
    finally:
        buf.close()
        handle.close()


def _parse(path: Path, size: int, buf: Any) -> GgufLayout:
    r = _Reader(str(path), buf, size)
    layout = _header(r, path, size, buf)
    _read_metadata(r, layout)
    if layout.tensor_count * MIN_TENSOR_INFO_BYTES > size - r.pos:
        raise r.fail(
            f"the tensor count {layout.tensor_count} is more than the {size - r.pos} bytes after the "
            "metadata can hold"
        )
    layout.alignment = _alignment(r, layout)
    _read_tensor_infos(r, layout)
    layout.infos_end = r.pos
    layout.data_offset = -(-r.pos // layout.alignment) * layout.alignment
    _place_tensors(r, layout)
    return layout


def _header(r: _Reader, path: Path, size: int, buf: Any) -> GgufLayout:
    """Magic, version and the two counts (each checked against what the file can hold)."""
    if size < 4 or bytes(buf[:4]) != MAGIC:
        raise r.fail(f"not a GGUF file (it starts with {bytes(buf[:4])!r}, not {MAGIC!r})")
    r.pos = 4
    version = r.u32("the version")
    if version not in VERSIONS:
        if version & 0xFFFF == 0 and int.from_bytes(version.to_bytes(4, "little"), "big") in VERSIONS:
            raise r.fail("a big-endian GGUF file, which rlxpy does not read")
        raise r.fail(f"GGUF version {version} is not supported (rlxpy reads versions 2 and 3)")
    tensor_count = r.u64("the tensor count")
    kv_count = r.u64("the metadata count")
    left = size - r.pos
    if kv_count * MIN_KV_BYTES > left:
        raise r.fail(f"the metadata count {kv_count} is more than the {size}-byte file can hold")
    if tensor_count * MIN_TENSOR_INFO_BYTES > left:
        raise r.fail(f"the tensor count {tensor_count} is more than the {size}-byte file can hold")
    return GgufLayout(path, size, version, tensor_count, kv_count)


def _read_metadata(r: _Reader, layout: GgufLayout) -> None:
    for index in range(layout.kv_count):
        offset = r.pos
        key = r.string(f"the key of metadata pair #{index}")
        if not key:
            raise r.fail(f"metadata pair #{index} (at byte {offset}) has an empty key")
        if key in layout.meta:
            first = layout.meta[key].offset
            raise r.fail(f"metadata key {key!r} appears twice (pairs at bytes {first} and {offset})")
        value_type = r.u32(f"the value type of metadata {key!r}")
        value_offset = r.pos
        value, item_type = _value(r, value_type, f"metadata {key!r}")
        layout.meta[key] = MetaValue(key, value_type, value, offset, value_offset, r.pos, item_type)


def _alignment(r: _Reader, layout: GgufLayout) -> int:
    entry = layout.meta.get("general.alignment")
    if entry is None:
        return DEFAULT_ALIGNMENT
    if entry.type != UINT32:
        raise r.fail(f"metadata 'general.alignment' is a {entry.describe_type()}, expected a uint32")
    alignment = entry.value
    if alignment <= 0 or alignment & (alignment - 1):
        raise r.fail(f"metadata 'general.alignment' = {alignment} is not a power of two")
    return alignment


def _read_tensor_infos(r: _Reader, layout: GgufLayout) -> None:
    for index in range(layout.tensor_count):
        info_offset = r.pos
        name = r.string(f"the name of tensor #{index}")
        if not name:
            raise r.fail(f"tensor #{index} (info at byte {info_offset}) has an empty name")
        if name in layout.tensors:
            raise r.fail(f"tensor {name!r} appears twice (tensor infos at bytes "
                         f"{layout.tensors[name].info_offset} and {info_offset})")
        n_dims = r.u32(f"the dimension count of tensor {name!r}")
        if not 1 <= n_dims <= MAX_DIMS:
            raise r.fail(f"tensor {name!r} has {n_dims} dimensions (GGUF allows 1 to {MAX_DIMS})")
        dims = tuple(r.u64(f"dimension {axis} of tensor {name!r}") for axis in range(n_dims))
        type_id = r.u32(f"the type of tensor {name!r}")
        offset = r.u64(f"the data offset of tensor {name!r}")
        layout.tensors[name] = TensorInfo(name, dims, type_id, offset, info_offset, r.pos)
        _check_tensor_info(r, layout.tensors[name], layout.alignment)


def _signed_dims(dims: tuple[int, ...]) -> list[int]:
    return [d - 2**64 if d > INT64_MAX else d for d in dims]


def _check_tensor_info(r: _Reader, t: TensorInfo, alignment: int) -> None:
    shown = _signed_dims(t.dims)
    if any(d > INT64_MAX for d in t.dims):
        raise r.fail(f"tensor {t.name!r} has shape {shown}: a negative dimension")
    if 0 in t.dims:
        raise r.fail(f"tensor {t.name!r} has shape {shown}: a zero dimension")
    if t.n_elements > INT64_MAX:
        raise r.fail(f"tensor {t.name!r} has shape {shown}: {t.n_elements} elements, more than GGUF allows")
    try:
        kind = GGMLQuantizationType(t.type_id)
    except ValueError:
        raise r.fail(f"tensor {t.name!r} has type {t.type_id}, not a GGML type") from None
    block, type_size = GGML_QUANT_SIZES[kind]
    if t.dims[0] % block:
        raise r.fail(
            f"tensor {t.name!r} has shape {shown}: rows of {t.dims[0]} elements, not a multiple of "
            f"{kind.name}'s block of {block}"
        )
    t.nbytes = t.n_elements // block * type_size
    if t.offset % alignment:  # llama.cpp refuses these too
        raise r.fail(f"tensor {t.name!r} has data offset {t.offset}, not a multiple of alignment {alignment}")


def _place_tensors(r: _Reader, layout: GgufLayout) -> None:
    data, size = layout.data_offset, layout.size
    for t in layout.tensors.values():
        t.start = data + t.offset
        if t.offset > size or t.end > size:
            raise r.fail(
                f"{t.describe()} has its {t.nbytes} bytes at [{t.start}, {t.end}), outside the data "
                f"section [{data}, {size}) (truncated file or a bad offset)"
            )
    ordered = sorted(layout.tensors.values(), key=lambda t: t.start)
    for before, after in zip(ordered, ordered[1:]):
        if before.end > after.start:
            raise r.fail(
                f"tensors {before.name!r} and {after.name!r} overlap: bytes [{before.start}, {before.end}) "
                f"and [{after.start}, {after.end})"
            )
