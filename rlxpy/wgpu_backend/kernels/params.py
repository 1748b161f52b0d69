"""Uniform layouts and kernel declarations, shared by every lowering family.

A layout is a flat record of 4-byte scalars (u32/i32/f32, never vec3) declared once in Python
beside its lowerer; a kernel's ``#params`` line (most kernels get it through
``include/common_arena.wgsl``) becomes the struct generated from it, so the two cannot disagree.
``scales`` names the fields that grow with the active extent.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rlxpy.errors import RegistryError
from rlxpy.wgpu_backend.kernels.contract import Accepts

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
    """A WGSL file ``kernels/<name>.wgsl`` with entry point ``main``, rendered by ``source``.

    Three directives, and nothing else, make the text (WGSL has no preprocessor):

    * ``#include "name.wgsl"`` pastes ``kernels/include/name.wgsl`` (its own includes resolved; a
      file already pasted into this kernel is not pasted again). The name may hold ``{{KEY}}``s, so
      a per-use value picks the file (a GGUF type's decoder, a GEMM's access mode).
    * ``#params`` becomes the uniform struct, generated from the Python layout.
    * ``{{KEY}}`` is filled per use (element type, workgroup size, an expression ...), so one file
      serves f32/i32 variants; each distinct text is one cached pipeline. ``{{WG}}`` defaults to
      the workgroup's x size, ``{{PARAMS}}`` is the layout's struct name."""

    name: str
    params: Layout
    #: Workgroup size; ``{{WG}}`` overrides x, and a y or z given as a placeholder's name is set by it.
    workgroup: tuple[int, int | str, int | str] = (256, 1, 1)
    #: Bytes of workgroup memory: a number, or a function of the substitutions (``launch``).
    shared_bytes: int | Callable[[Mapping[str, object]], int] = 0
    #: Grid axis that shrinks with the active extent (0 = a folded 1-D grid), -1 = keep the grid.
    extent_axis: int = -1
    #: The contract (kernels/contract.py): the dtypes it takes, the uniform fields of inputs it
    #: may write in place, and the defaults of placeholders that size it (for ``launch``).
    dtypes: Accepts = Accepts()
    mutates: tuple[str, ...] = ()
    sizes: tuple[tuple[str, int], ...] = ()
    #: False: compiled without WGSL's runtime checks (index clamps, loop bounding; Device.pipeline).
    #: Only for a kernel whose every index is in range by construction and whose global reads are
    #: guarded in its own code (test_kernel_contracts lists them); RLX_WGPU_CHECKED_SHADERS=1 puts
    #: the checks back, e.g. to rule them out while chasing a wrong result.
    checked: bool = True

    def launch(self, subs: Mapping[str, object] | None = None) -> tuple[tuple[int, int, int], int]:
        """(workgroup size, workgroup memory bytes) of the variant made with ``subs``."""
        values = {**dict(self.sizes), "WG": self.workgroup[0], **(subs or {})}
        x, y, z = self.workgroup
        size = (int(values["WG"]),) + tuple(int(values[a]) if isinstance(a, str) else a for a in (y, z))
        shared = self.shared_bytes(values) if callable(self.shared_bytes) else self.shared_bytes
        return size, shared  # type: ignore[return-value]

    def source(self, **subs: object) -> str:
        values = {"WG": self.workgroup[0], "PARAMS": self.params.name, **subs}
        what = f"kernel {self.name}"
        text = include((KERNEL_DIR / f"{self.name}.wgsl").read_text(), values, what)
        # the uniform struct is written from the Python layout, so the two cannot disagree
        text, count = _PARAMS_LINE.subn(lambda _: self.params.wgsl_struct(), text)
        if count != 1:
            raise RegistryError(f"{what}: {count} #params lines (its includes counted), not 1")
        return fill(text, values, what)


INCLUDE_DIR = KERNEL_DIR / "include"
_PARAMS_LINE = re.compile(r"^#params$", re.MULTILINE)
_INCLUDE = re.compile(r'^#include "([\w.{}]+)"$', re.MULTILINE)
_KEY = re.compile(r"\{\{(\w+)\}\}")


def fill(text: str, values: dict[str, object], what: str = "wgsl") -> str:
    """Every ``{{KEY}}`` of ``text`` replaced by ``str(values[KEY])`` in one pass (a value's own text
    is not scanned again); a key without a value is an error."""
    missing = sorted({key for key in _KEY.findall(text) if key not in values})
    if missing:
        raise RegistryError(f"{what}: placeholders {missing} not filled")
    return _KEY.sub(lambda match: str(values[match.group(1)]), text)


def include(text: str, values: dict[str, object] | None = None, what: str = "wgsl",
            done: set[str] | None = None) -> str:
    """Replace each ``#include "name.wgsl"`` line by kernels/include/name.wgsl, its ``{{KEY}}``s in
    the name filled from ``values`` first; a file already included (``done``) is not included again."""
    done = set() if done is None else done

    def snippet(match: re.Match) -> str:
        name = fill(match.group(1), values or {}, f"{what}: #include {match.group(1)}")
        if name in done:
            return ""
        done.add(name)
        path = INCLUDE_DIR / name
        if not path.exists():
            raise RegistryError(f"{what}: #include {name}: no file kernels/include/{name}")
        return include(path.read_text().rstrip("\n"), values, what, done)

    return _INCLUDE.sub(snippet, text)


def kernel(name: str, params: Layout, *, dtypes: Accepts,
           workgroup: tuple[int, int | str, int | str] = (256, 1, 1),
           shared_bytes: int | Callable[[Mapping[str, object]], int] = 0, extent_axis: int = -1,
           mutates: tuple[str, ...] = (), sizes: Mapping[str, int] | None = None,
           checked: bool = True) -> Kernel:
    """Declare the kernel of ``kernels/<name>.wgsl`` with its contract (kernels/contract.py): the
    dtypes it takes, its workgroup size and memory (``shared_bytes`` may be a function of the
    substitutions, ``sizes`` gives the defaults of those it reads), and the uniform fields of the
    inputs it writes in place (``mutates``); ``checked=False`` drops WGSL's runtime checks (see
    ``Kernel.checked``). ``LowerCtx.dispatch`` enforces it for every step."""
    if name in KERNELS:
        raise RegistryError(f"kernel {name} declared twice")
    if not (KERNEL_DIR / f"{name}.wgsl").exists():
        raise RegistryError(f"kernel {name}: no file kernels/{name}.wgsl")
    unknown = [f for f in mutates if f not in params.names]
    if unknown:
        raise RegistryError(f"kernel {name}: mutated fields {unknown} are not fields of {params.name}")
    if not isinstance(workgroup[0], int):
        raise RegistryError(f"kernel {name}: the workgroup's x size is a number ({{{{WG}}}} overrides it)")
    declared = Kernel(name, params, workgroup, shared_bytes, extent_axis, dtypes, tuple(mutates),
                      tuple((sizes or {}).items()), checked)
    try:
        declared.launch()
    except KeyError as e:
        raise RegistryError(f"kernel {name}: no default for the sizing placeholder {e} (sizes=)") from None
    KERNELS[name] = declared
    return declared


def parse_wgsl_structs(text: str) -> dict[str, tuple[tuple[str, str], ...]]:
    """``struct XParams { a: u32, ... }`` blocks of a WGSL file (for the layout test)."""
    found = {}
    for name, body in re.findall(r"struct\s+(\w+Params)\s*\{([^}]*)\}", text):
        fields = re.findall(r"(\w+)\s*:\s*(\w+)\s*,?", body)
        found[name] = tuple(fields)
    return found
