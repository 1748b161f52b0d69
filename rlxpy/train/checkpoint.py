"""Checkpoints in the safetensors format (huggingface/safetensors), read and written here without the
package: an 8-byte little-endian header length, a JSON header {name: {dtype, shape, data_offsets}}
(plus ``__metadata__``: str -> str), then the tensors' bytes, row-major little-endian, in header order."""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from rlxpy.errors import InputError

_DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I32": np.int32, "I64": np.int64,
           "U8": np.uint8, "I8": np.int8, "U32": np.uint32, "BOOL": np.bool_}
_NAMES = {np.dtype(v): k for k, v in _DTYPES.items()}


def save_safetensors(path: str | Path, tensors: Mapping[str, np.ndarray],
                     metadata: Mapping[str, str] | None = None) -> None:
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blobs, offset = [], 0
    for name, value in tensors.items():
        array = np.ascontiguousarray(value)
        if array.dtype not in _NAMES:
            raise InputError(f"checkpoint tensor {name!r}: dtype {array.dtype} has no safetensors name")
        data = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": _NAMES[array.dtype], "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as the reference writer does
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def load_safetensors(path: str | Path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """({name: array}, metadata) of a safetensors file."""
    raw = Path(path).read_bytes()
    if len(raw) < 8:
        raise InputError(f"{path}: not a safetensors file (too short)")
    (size,) = struct.unpack("<Q", raw[:8])
    if 8 + size > len(raw):
        raise InputError(f"{path}: its header says {size} bytes, the file has {len(raw) - 8}")
    header = json.loads(raw[8:8 + size])
    metadata = header.pop("__metadata__", {}) or {}
    body = memoryview(raw)[8 + size:]
    tensors = {}
    for name, info in header.items():
        if info["dtype"] not in _DTYPES:
            raise InputError(f"{path}: tensor {name!r} has dtype {info['dtype']}, not read here")
        begin, end = info["data_offsets"]
        dtype = np.dtype(_DTYPES[info["dtype"]]).newbyteorder("<")
        values = np.frombuffer(body[begin:end], dtype=dtype).reshape(info["shape"])
        tensors[name] = values.astype(dtype.newbyteorder("="))
    return tensors, metadata
