"""Uniform layouts and kernel declarations, shared by every lowering family.

A layout is a flat record of 4-byte scalars (u32/i32/f32, never vec3) declared once in Python
beside its lowerer; each .wgsl file writes the same struct out in full, and a test checks the
two agree field by field. ``scales`` names the fields that grow with the active extent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rlxpy.errors import RegistryError

U32, I32, F32 = "u32", "i32", "f32"
_NUMPY = {U32: "<u4", I32: "<i4", F32: "<f4"}
KERNEL_DIR = Path(__file__).parent
PARAMS: dict[str, Layout] = {}
KERNELS: dict[str, Kernel] = {}


@dataclass(frozen=True)
class Layout:
    name: str
    fields: tuple[tuple[str, str], ...]
    scales: tuple[str, ...] = ()

    @property
    def size(self) -> int:
        return 4 * len(self.fields)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.fields)

    def pack(self, values: dict[str, float | int]) -> bytes:
        missing = [n for n in self.names if n not in values]
        extra = [n for n in values if n not in self.names]
        if missing or extra:
            raise ValueError(f"{self.name}: missing fields {missing}, unknown fields {extra}")
        record = np.zeros(1, dtype=[(n, _NUMPY[t]) for n, t in self.fields])
        for name, kind in self.fields:
            value = values[name]
            if kind == U32 and not 0 <= int(value) < 1 << 32:
                raise ValueError(f"{self.name}.{name} = {value} does not fit u32")
            if kind == I32 and not -(1 << 31) <= int(value) < 1 << 31:
                raise ValueError(f"{self.name}.{name} = {value} does not fit i32")
            record[name] = value
        return record.tobytes()

    def unpack(self, data: bytes) -> dict[str, float | int]:
        record = np.frombuffer(data[: self.size], dtype=[(n, _NUMPY[t]) for n, t in self.fields])[0]
        return {n: record[n].item() for n in self.names}

    def wgsl_struct(self) -> str:
        body = "".join(f"    {name}: {kind},\n" for name, kind in self.fields)
        return f"struct {self.name} {{\n{body}}}"


def params(name: str, scales: tuple[str, ...] = (), **fields: str) -> Layout:
    """Declare a uniform layout; field order is the keyword order."""
    if name in PARAMS:
        raise RegistryError(f"uniform layout {name} declared twice")
    for field_name, kind in fields.items():
        if kind not in _NUMPY:
            raise RegistryError(f"{name}.{field_name}: type {kind!r} is not u32/i32/f32")
    unknown = [s for s in scales if s not in fields]
    if unknown:
        raise RegistryError(f"{name}: scaled fields {unknown} are not fields")
    layout = Layout(name, tuple(fields.items()), tuple(scales))
    PARAMS[name] = layout
    return layout


@dataclass(frozen=True)
class Kernel:
    """A WGSL file ``kernels/<name>.wgsl`` with entry point ``main``.

    ``{{KEY}}`` placeholders in the file are filled per use (element type, workgroup size ...),
    so one file can serve f32/i32 variants; each distinct text is one cached pipeline."""

    name: str
    params: Layout
    workgroup: tuple[int, int, int] = (256, 1, 1)
    shared_bytes: int = 0
    #: Grid axis that shrinks with the active extent (0 = a folded 1-D grid), -1 = keep the grid.
    extent_axis: int = -1

    def source(self, **subs: object) -> str:
        text = include((KERNEL_DIR / f"{self.name}.wgsl").read_text())
        # the uniform struct is written from the Python layout, so the two cannot disagree
        text = _PARAMS_LINE.sub(lambda _: self.params.wgsl_struct(), text, count=1)
        values = {"WG": self.workgroup[0], **subs}
        for key, value in values.items():
            text = text.replace("{{" + key + "}}", str(value))
        left = re.findall(r"\{\{(\w+)\}\}", text)
        if left:
            raise RegistryError(f"kernel {self.name}: placeholders {sorted(set(left))} not filled")
        return text


INCLUDE_DIR = KERNEL_DIR / "include"
_PARAMS_LINE = re.compile(r"^#params$", re.MULTILINE)
_INCLUDE = re.compile(r'^#include "([\w.]+)"$', re.MULTILINE)


def include(text: str) -> str:
    """Replace each ``#include "name.wgsl"`` line by kernels/include/name.wgsl (WGSL has no includes)."""
    def snippet(match: re.Match) -> str:
        path = INCLUDE_DIR / match.group(1)
        if not path.exists():
            raise RegistryError(f"#include {match.group(1)}: no file kernels/include/{match.group(1)}")
        return include(path.read_text())

    return _INCLUDE.sub(snippet, text)


def kernel(name: str, params: Layout, workgroup: tuple[int, int, int] = (256, 1, 1),
           shared_bytes: int = 0, extent_axis: int = -1) -> Kernel:
    if name in KERNELS:
        raise RegistryError(f"kernel {name} declared twice")
    if not (KERNEL_DIR / f"{name}.wgsl").exists():
        raise RegistryError(f"kernel {name}: no file kernels/{name}.wgsl")
    KERNELS[name] = Kernel(name, params, workgroup, shared_bytes, extent_axis)
    return KERNELS[name]


def parse_wgsl_structs(text: str) -> dict[str, tuple[tuple[str, str], ...]]:
    """``struct XParams { a: u32, ... }`` blocks of a WGSL file (for the layout test)."""
    found = {}
    for name, body in re.findall(r"struct\s+(\w+Params)\s*\{([^}]*)\}", text):
        fields = re.findall(r"(\w+)\s*:\s*(\w+)\s*,?", body)
        found[name] = tuple(fields)
    return found
