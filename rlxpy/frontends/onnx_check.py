"""Validation of an ONNX ModelProto before import (issue 17, "Hostile inputs").

:func:`check_model` refuses, with a ModelError that names the file and the node, initializer or
field, everything the importer would otherwise trip over: a missing or unknown opset; graph inputs
and outputs without a tensor type, with an unknown element type, negative dims or an undefined
name; initializers (and Constant / ConstantOfShape tensors) with an element type rlxpy does not
read, negative dims, or bytes that do not match dims x element size; external data outside the
model's folder or past the end of its file; nodes that read a value no earlier node, input or
initializer defines (dangling names, cycles, use before definition) or define a name twice; and,
against the operator's ONNX schema at the model's opset, input and output counts, unknown
attributes, attributes of the wrong type, missing required attributes and strings that are not
UTF-8.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from rlxpy.errors import ModelError

#: TensorProto element types rlxpy reads from initializers, and the typed field that holds them
#: when there is no raw_data.
TENSOR_TYPES: dict[int, tuple[type, str]] = {
    1: (np.float32, "float_data"), 2: (np.uint8, "int32_data"), 3: (np.int8, "int32_data"),
    4: (np.uint16, "int32_data"), 5: (np.int16, "int32_data"), 6: (np.int32, "int32_data"),
    7: (np.int64, "int64_data"), 9: (np.bool_, "int32_data"), 10: (np.float16, "int32_data"),
    11: (np.float64, "double_data"), 12: (np.uint32, "uint64_data"), 13: (np.uint64, "uint64_data"),
}
MAX_DIM = 1 << 40
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")
EXTERNAL = 1  # TensorProto.DataLocation.EXTERNAL


def check_model(proto: Any, source: str, base_dir: Path | None = None) -> int:
    """Validate ``proto`` (see the module docstring); returns its default-domain opset."""
    opset = _opset(proto, source)
    graph = proto.graph
    defined: set[str] = set()
    _texts(f"{source}: graph", *(v.name for v in (*graph.initializer, *graph.input, *graph.output)),
           *(o.domain for o in proto.opset_import))
    for tensor in graph.initializer:
        where = f"{source}: initializer {tensor.name!r}"
        if not tensor.name:
            raise ModelError(f"{source}: an initializer has no name")
        if tensor.name in defined:
            raise ModelError(f"{where} is defined twice")
        check_tensor(tensor, where, base_dir)
        defined.add(tensor.name)
    if len(graph.sparse_initializer):
        raise ModelError(f"{source}: sparse initializers are not supported")
    for value in graph.input:
        if value.name in defined and value.name in {t.name for t in graph.initializer}:
            continue  # an initializer listed as an input (IR < 4): its value is the initializer's
        _check_value_info(value, f"{source}: graph input {value.name!r}", source)
        if value.name in defined:
            raise ModelError(f"{source}: graph input {value.name!r} is declared twice")
        defined.add(value.name)
    for index, node in enumerate(graph.node):
        _check_node(node, index, defined, opset, source, base_dir)
    if not len(graph.output):
        raise ModelError(f"{source}: the graph has no outputs")
    for value in graph.output:
        if value.name not in defined:
            raise ModelError(f"{source}: graph output {value.name!r} is not computed by any node")
        if value.type.HasField("tensor_type") and value.type.tensor_type.elem_type < 0:
            raise ModelError(f"{source}: graph output {value.name!r} has element type "
                             f"{value.type.tensor_type.elem_type}")
    return opset


def _opset(proto: Any, source: str) -> int:
    from onnx import defs

    versions = [o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")]
    if not versions:
        raise ModelError(f"{source}: the model imports no version of the default ONNX operator set "
                         "(opset_import)")
    if len(versions) > 1:
        raise ModelError(f"{source}: opset_import names the default operator set {len(versions)} times")
    newest = defs.onnx_opset_version()
    if not 1 <= versions[0] <= newest:
        raise ModelError(f"{source}: opset {versions[0]} is outside the versions ONNX defines (1..{newest})")
    return versions[0]


def _check_value_info(value: Any, where: str, source: str) -> None:
    if not value.name:
        raise ModelError(f"{source}: a graph input has no name")
    if not value.type.HasField("tensor_type"):
        raise ModelError(f"{where} is not a tensor (no tensor type)")
    tensor = value.type.tensor_type
    if tensor.elem_type <= 0:
        raise ModelError(f"{where} has no element type ({tensor.elem_type})")
    if not tensor.HasField("shape"):
        raise ModelError(f"{where} has no shape")
    for axis, dim in enumerate(tensor.shape.dim):
        if dim.HasField("dim_value") and not 0 <= dim.dim_value <= MAX_DIM:
            raise ModelError(f"{where}: dim {axis} is {dim.dim_value}")


def check_tensor(tensor: Any, where: str, base_dir: Path | None) -> None:
    """Element type, dims and byte size of a TensorProto (initializer or tensor attribute)."""
    if tensor.data_type not in TENSOR_TYPES:
        raise ModelError(f"{where}: element type {tensor.data_type} is not supported (rlxpy reads float, "
                         "float16, double, signed and unsigned integers and bool)")
    dims = list(tensor.dims)
    if any(not 0 <= d <= MAX_DIM for d in dims):
        raise ModelError(f"{where}: dims {dims}")
    count = 1
    for d in dims:
        count *= d
    dtype, typed = TENSOR_TYPES[tensor.data_type]
    if tensor.data_location == EXTERNAL:
        _check_external(tensor, where, count * np.dtype(dtype).itemsize, base_dir)
        return
    if tensor.data_location != 0:
        raise ModelError(f"{where}: unknown data_location {tensor.data_location}")
    holders = [name for name in ("raw_data", *{f for _, f in TENSOR_TYPES.values()}, "string_data")
               if len(getattr(tensor, name))]
    if len(holders) > 1:
        raise ModelError(f"{where}: data in both {holders[0]} and {holders[1]}")
    if holders and holders[0] not in ("raw_data", typed):
        raise ModelError(f"{where}: a {np.dtype(dtype).name} tensor with its data in {holders[0]}")
    if holders == ["raw_data"]:
        want, got, unit = count * np.dtype(dtype).itemsize, len(tensor.raw_data), "bytes"
    else:
        want, got, unit = count, len(getattr(tensor, typed)), "values"
    if want != got:
        raise ModelError(f"{where}: dims {dims} of {np.dtype(dtype).name} need {want} {unit}, the file "
                         f"has {got}")


def _check_external(tensor: Any, where: str, nbytes: int, base_dir: Path | None) -> None:
    info = {entry.key: entry.value for entry in tensor.external_data}
    location = info.get("location", "")
    if base_dir is None:
        raise ModelError(f"{where}: external data, but the model was not read from a file")
    if not location or os.path.isabs(location) or ".." in Path(location).parts:
        raise ModelError(f"{where}: external data location {location!r} is not a file beside the model")
    path = base_dir / location
    if not path.is_file():
        raise ModelError(f"{where}: external data file {location!r} does not exist")
    try:
        offset, length = int(info.get("offset", 0)), int(info.get("length", nbytes))
    except ValueError:
        raise ModelError(f"{where}: external data offset/length {info} are not integers") from None
    if length != nbytes or offset < 0 or offset + length > path.stat().st_size:
        raise ModelError(f"{where}: external data [{offset}, {offset + length}) of {location!r} does not "
                         f"hold the tensor's {nbytes} bytes (file of {path.stat().st_size} bytes)")


def _schema(op_type: str, opset: int) -> Any:
    from onnx import defs

    for version in (opset, defs.onnx_opset_version()):
        try:
            return defs.get_schema(op_type, version, "")
        except defs.SchemaError:
            continue
    return None


def _texts(where: str, *values: Any) -> None:
    """Every name is text (protobuf hands out bytes for a string field that is not UTF-8)."""
    for value in values:
        if not isinstance(value, str):
            raise ModelError(f"{where}: name {value!r} is not UTF-8 text")


def _check_node(node: Any, index: int, defined: set[str], opset: int, source: str,
                base_dir: Path | None) -> None:
    _texts(f"{source}: node {index}", node.name, node.op_type, node.domain, *node.input, *node.output,
           *(a.name for a in node.attribute))
    where = f"{source}: node {node.name or index!r} ({node.op_type or 'no op_type'})"
    if not NAME.match(node.op_type) or node.domain and not NAME.match(node.domain):
        raise ModelError(f"{source}: node {index} has op_type {node.op_type!r} in domain {node.domain!r}, "
                         "which is not an operator name")
    for name in node.input:
        if name and name not in defined:
            raise ModelError(f"{where} reads {name!r}, which no earlier node, graph input or initializer "
                             "defines")
    outputs = [o for o in node.output if o]
    if not outputs:
        raise ModelError(f"{where} has no outputs")
    for name in outputs:
        if name in defined:
            raise ModelError(f"{where} defines {name!r}, which is already defined")
        defined.add(name)
    if node.domain in ("", "ai.onnx"):
        schema = _schema(node.op_type, opset)
        if schema is not None:
            _check_against_schema(node, schema, where)
    names = set()
    for attr in node.attribute:
        if attr.name in names:
            raise ModelError(f"{where}: attribute {attr.name!r} is given twice")
        names.add(attr.name)
        _check_attribute(attr, where, base_dir)


def _check_against_schema(node: Any, schema: Any, where: str) -> None:
    n_in = len(node.input)
    while n_in and not node.input[n_in - 1]:
        n_in -= 1  # trailing optional inputs left empty
    if not schema.min_input <= n_in <= schema.max_input:
        raise ModelError(f"{where}: {n_in} inputs, the operator takes {schema.min_input}..{schema.max_input}")
    n_out = len(node.output)
    if not schema.min_output <= n_out <= schema.max_output:
        raise ModelError(f"{where}: {n_out} outputs, the operator has {schema.min_output}.."
                         f"{schema.max_output}")
    given = {a.name: a for a in node.attribute}
    for name, spec in schema.attributes.items():
        if spec.required and name not in given:
            raise ModelError(f"{where}: required attribute {name!r} is missing")
    for name, attr in given.items():
        spec = schema.attributes.get(name)
        if spec is None:
            raise ModelError(f"{where}: unknown attribute {name!r}")
        if int(spec.type) != attr.type:
            raise ModelError(f"{where}: attribute {name!r} has type {attr.type}, the operator wants "
                             f"{spec.type.name}")
    if node.op_type == "Constant" and len(given) != 1:
        raise ModelError(f"{where}: a Constant needs exactly one value attribute, it has {len(given)}")


#: AttributeProto types rlxpy decodes (FLOAT, INT, STRING, TENSOR, GRAPH, FLOATS, INTS, STRINGS).
ATTRIBUTE_TYPES = {1, 2, 3, 4, 5, 6, 7, 8}


def _check_attribute(attr: Any, where: str, base_dir: Path | None) -> None:
    if not attr.name:
        raise ModelError(f"{where}: an attribute has no name")
    if attr.type not in ATTRIBUTE_TYPES:
        raise ModelError(f"{where}: attribute {attr.name!r} has type {attr.type}, which rlxpy does not read")
    if attr.type == 4:
        check_tensor(attr.t, f"{where}: attribute {attr.name!r}", base_dir)
    for text in ([attr.s] if attr.type == 3 else list(attr.strings) if attr.type == 8 else []):
        try:
            text.decode("utf-8")
        except UnicodeDecodeError:
            raise ModelError(f"{where}: attribute {attr.name!r} is not UTF-8 text") from None
