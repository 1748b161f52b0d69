"""Checks of JSON-decoded attribute values against an op's field types, before the op is built
(issue 17, "Hostile inputs").

serialize.py decodes JSON into Python values (lists become tuples, ``{"$enum": ..}`` an enum member,
``{"$graph": ..}`` a graph); :func:`coerce` then checks each value against the type hint of the op's
dataclass field (int, float, bool, str, bytes, enums, ``X | None``, unions, ``tuple[X, ...]``, shapes,
nested dataclasses such as a region's chain steps, sub-graphs) and returns it in the field's form, or
raises a GraphError that names the node and the attribute. Ints are bounded (|v| <= 2**62) and shape
dims are non-negative, so no later arithmetic sees a huge or negative size.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from typing import Any

from rlxpy.errors import GraphError
from rlxpy.ir.shape import Shape, Sym

MAX_INT = 1 << 62
#: Dims of a shape field: at most this (a graph's sizes fit in 2**40 elements by far).
MAX_DIM = 1 << 40


@functools.cache
def field_hints(cls: type) -> dict[str, Any]:
    """The resolved type hints of a dataclass's fields."""
    return typing.get_type_hints(cls)


def coerce(value: Any, hint: Any, where: str, low_dim: int = -1) -> Any:
    """``value`` checked against ``hint`` (see the module docstring); shape dims must be at least
    ``low_dim`` (-1 for a reshape's "infer this dim", 0 for the shape of an input or weight)."""
    if hint is Any or hint is typing.Any:
        return value
    if hint == Shape:
        return _shape(value, where, low_dim)
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        return _union(value, typing.get_args(hint), where)
    if origin is tuple:
        return _tuple(value, typing.get_args(hint), where)
    if hint is type(None):
        if value is not None:
            raise GraphError(f"{where}: expected null, got {_kind(value)}")
        return None
    if isinstance(hint, type):
        return _plain(value, hint, where)
    return value  # a Protocol such as control.Branch: the op's own check judges it


def _kind(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:40]}{'...' if len(text) > 40 else ''}"


def _plain(value: Any, hint: type, where: str) -> Any:
    if hint is bool:
        if not isinstance(value, bool):
            raise GraphError(f"{where}: expected true or false, got {_kind(value)}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int) or abs(value) > MAX_INT:
            raise GraphError(f"{where}: expected an integer within +-2**62, got {_kind(value)}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                isinstance(value, int) and abs(value) > MAX_INT:
            raise GraphError(f"{where}: expected a number, got {_kind(value)}")
        return float(value)
    if issubclass(hint, enum.Enum):
        if not isinstance(value, hint):
            raise GraphError(f"{where}: expected a {hint.__name__} ({{\"$enum\": \"{hint.__name__}\", "
                             f"\"name\": ...}}), got {_kind(value)}")
        return value
    if dataclasses.is_dataclass(hint):
        return _dataclass(value, hint, where)
    if hint in (str, bytes, Sym) or typing.get_origin(hint) is None:
        if not isinstance(value, hint):
            raise GraphError(f"{where}: expected {hint.__name__}, got {_kind(value)}")
    return value


def _union(value: Any, options: tuple, where: str) -> Any:
    if value is None and type(None) in options:
        return None
    problems = []
    for option in options:
        if option is type(None):
            continue
        try:
            return coerce(value, option, where)
        except GraphError as e:
            problems.append(str(e).rsplit(": ", 1)[-1])
    raise GraphError(f"{where}: {'; or '.join(problems)}")


def _tuple(value: Any, args: tuple, where: str) -> tuple:
    if not isinstance(value, tuple):
        raise GraphError(f"{where}: expected a list, got {_kind(value)}")
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(coerce(v, args[0], f"{where}[{i}]") for i, v in enumerate(value))
    if len(value) != len(args):
        raise GraphError(f"{where}: expected a list of {len(args)} items, got {len(value)}")
    return tuple(coerce(v, a, f"{where}[{i}]") for i, (v, a) in enumerate(zip(value, args)))


def _shape(value: Any, where: str, low: int) -> Shape:
    if not isinstance(value, tuple):
        raise GraphError(f"{where}: a shape must be a list, got {_kind(value)}")
    for axis, dim in enumerate(value):
        if isinstance(dim, Sym):
            continue
        if isinstance(dim, bool) or not isinstance(dim, int) or not low <= dim <= MAX_DIM:
            raise GraphError(f"{where}: dim {axis} must be an integer in [{low}, 2**40] or a symbol, got "
                             f"{_kind(dim)}")
    return value


def _dataclass(value: Any, hint: type, where: str) -> Any:
    """A nested dataclass (a region's chain step) serialised as the list of its fields."""
    if isinstance(value, hint):
        return value
    fields = dataclasses.fields(hint)
    if not isinstance(value, tuple) or len(value) != len(fields):
        raise GraphError(f"{where}: expected a {hint.__name__} as a list of {len(fields)} fields "
                         f"({', '.join(f.name for f in fields)}), got {_kind(value)}")
    hints = field_hints(hint)
    return hint(*(coerce(v, hints[f.name], f"{where}.{f.name}") for f, v in zip(fields, value)))


def op_attrs(op_type: type, raw: dict[str, Any], where: str) -> dict[str, Any]:
    """An op's attributes from decoded JSON: every field without a default present, every value of
    its field's type (attributes the op does not have are ignored, as they always were)."""
    hints = field_hints(op_type)
    low_dim = 0 if op_type.arity == (0, 0) else -1  # a leaf's shape is a real one
    attrs = {}
    for f in dataclasses.fields(op_type):
        if f.name not in raw:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise GraphError(f"{where}: attribute {f.name!r} is missing")
            continue
        attrs[f.name] = coerce(raw[f.name], hints[f.name], f"{where}: attribute {f.name!r}", low_dim)
    return attrs
