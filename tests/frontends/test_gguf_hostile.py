"""Hostile GGUF files (issue 17): each rule of the loader's checks refuses with a ModelError that
names the file and the field or tensor, in rlxpy's words; ``rlxpy info`` gives the same verdict
(exit 2, one error line). Files are tests/tiny_llama.py's GGUF (or the real SmolLM2 one, its data
section a sparse hole) with fields edited at the byte positions gguf_fuzz.field_map finds."""

from __future__ import annotations

import pathlib
import re
import struct

import pytest
from tiny_llama import FFN, HIDDEN, write_tiny_llama

from rlxpy.cli import main
from rlxpy.errors import ModelError
from rlxpy.frontends.gguf import default_model_path, load_gguf
from rlxpy.frontends.gguf_fuzz import Draft, FieldMap, Seed, field_map, realign
from rlxpy.frontends.gguf_tokenizer import GgufTokenizer


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Seed:
    return Seed.load("tiny", write_tiny_llama(tmp_path_factory.mktemp("seed") / "tiny.gguf"))


class Edit:
    """A copy of the tiny file's bytes with helpers that write fields by name."""

    def __init__(self, seed: Seed) -> None:
        self.seed, self.fm, self.data = seed, seed.fields, bytearray(seed.head)

    def field(self, owner: str, kind: str, index: int = 0):
        entries = self.fm.kvs if kind.startswith("kv.") else self.fm.infos
        entry = next(e for e in entries if e.owner == owner)
        return [f for f in entry.fields if f.kind == kind][index]

    def put(self, owner: str, kind: str, raw: bytes, index: int = 0) -> Edit:
        f = self.field(owner, kind, index)
        self.data[f.offset : f.offset + len(raw)] = raw
        return self

    def u64(self, owner: str, kind: str, value: int, index: int = 0) -> Edit:
        return self.put(owner, kind, struct.pack("<Q", value), index)

    def u32(self, owner: str, kind: str, value: int, index: int = 0) -> Edit:
        return self.put(owner, kind, struct.pack("<I", value), index)

    def header(self, name: str, value: int) -> Edit:
        f = self.fm.header[name]
        self.data[f.offset : f.offset + f.size] = struct.pack(f.fmt, value)
        return self

    def delete_tensor(self, name: str) -> Edit:
        entry = next(e for e in self.fm.infos if e.owner == name)
        del self.data[entry.start : entry.end]
        count = self.fm.header["tensor_count"]
        self.data[count.offset : count.offset + 8] = struct.pack("<Q", count.value - 1)
        realign(self.data, self.fm, entry.start - entry.end)
        return self

    def insert_kv(self, key: str, value_type: int, raw: bytes) -> Edit:
        at = self.fm.kvs[-1].end
        pair = struct.pack("<Q", len(key)) + key.encode() + struct.pack("<I", value_type) + raw
        self.data[at:at] = pair
        count = self.fm.header["kv_count"]
        self.data[count.offset : count.offset + 8] = struct.pack("<Q", count.value + 1)
        realign(self.data, self.fm, len(pair))
        return self

    def write(self, path: pathlib.Path, size: int | None = None) -> pathlib.Path:
        path.write_bytes(bytes(self.data if size is None else self.data[:size]))
        return path


def refused(path: pathlib.Path, *expected: str) -> str:
    """load_gguf refuses ``path``: the message names the file and contains each of ``expected``."""
    with pytest.raises(ModelError) as caught:
        load_gguf(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: "), message
    for text in expected:
        assert text in message, (text, message)
    assert not re.search(r"[A-Z][a-z]+Error|out of bounds for axis", message), message
    return message


# -- structure: missing tensors, zero dims, shapes, types and sizes ------------------------------------


def test_missing_output_norm(tiny, tmp_path):
    path = Edit(tiny).delete_tensor("output_norm.weight").write(tmp_path / "model.gguf")
    refused(path, "tensor 'output_norm.weight' is missing")


def test_smollm2_tensor_count_that_drops_output_norm(tmp_path):
    """The issue's case: the last tensor info (output_norm) cut off by a tensor count one short.
    The real header, the data section as a sparse hole as long as the real one."""
    seed = Seed.load("smollm2", default_model_path(), sparse=True)
    assert seed.fields.infos[-1].owner == "output_norm.weight"
    count = seed.fields.header["tensor_count"]
    draft = Draft(bytearray(seed.head), seed.size - len(seed.head))
    draft.put(count.offset, struct.pack("<Q", count.value - 1))
    draft.write_to(tmp_path / "smol.gguf")
    refused(tmp_path / "smol.gguf", "tensor 'output_norm.weight' is missing")


@pytest.mark.parametrize("axis", [0, 1])
def test_zero_dimension(tiny, tmp_path, axis):
    path = Edit(tiny).u64("blk.1.ffn_up.weight", "ti.dim", 0, axis).write(tmp_path / "model.gguf")
    shape = [0, FFN] if axis == 0 else [HIDDEN, 0]
    refused(path, f"tensor 'blk.1.ffn_up.weight' has shape {shape}: a zero dimension")


def test_negative_dimension_and_too_many_dims(tiny, tmp_path):
    path = Edit(tiny).u64("blk.0.attn_k.weight", "ti.dim", 2**64 - 32, 1).write(tmp_path / "neg.gguf")
    refused(path, "tensor 'blk.0.attn_k.weight' has shape [64, -32]: a negative dimension")
    path = Edit(tiny).u32("blk.0.attn_k.weight", "ti.n_dims", 9).write(tmp_path / "dims.gguf")
    refused(path, "tensor 'blk.0.attn_k.weight' has 9 dimensions")


def test_shape_that_does_not_match_the_hyperparameters(tiny, tmp_path):
    path = Edit(tiny).u64("blk.1.ffn_up.weight", "ti.dim", FFN // 2, 1).write(tmp_path / "model.gguf")
    shapes = f"[{HIDDEN}, {FFN // 2}], expected [{HIDDEN}, {FFN}]"
    refused(path, f"tensor 'blk.1.ffn_up.weight' has shape {shapes}",
            "[hidden, ffn] in GGUF order")
    path = Edit(tiny).u64("output_norm.weight", "ti.dim", HIDDEN // 2).write(tmp_path / "norm.gguf")
    refused(path, f"tensor 'output_norm.weight' has shape [{HIDDEN // 2}], expected [{HIDDEN}]")


def test_type_changes(tiny, tmp_path):
    # Q8_0 -> F32: 4x the bytes, which run into the next tensor's
    path = Edit(tiny).u32("blk.0.attn_q.weight", "ti.type", 0).write(tmp_path / "bigger.gguf")
    message = refused(path, "overlap", "'blk.0.attn_q.weight'")
    assert re.search(r"bytes \[\d+, \d+\) and \[\d+, \d+\)", message)
    path = Edit(tiny).u32("blk.0.attn_q.weight", "ti.type", 99).write(tmp_path / "unknown.gguf")
    refused(path, "tensor 'blk.0.attn_q.weight' has type 99, not a GGML type")
    path = Edit(tiny).u32("blk.0.attn_norm.weight", "ti.type", 1).write(tmp_path / "f16norm.gguf")
    refused(path, "tensor 'blk.0.attn_norm.weight' (F16 [64])", "norm weights must be F32")
    path = Edit(tiny).u32("blk.0.attn_q.weight", "ti.type", 16).write(tmp_path / "iq2.gguf")  # IQ2_XXS
    refused(path, "tensor 'blk.0.attn_q.weight'", "not a multiple of IQ2_XXS's block of 256")


def test_byte_size_past_the_end_of_the_file(tiny, tmp_path):
    """Shape x type says more bytes than the file has: the last tensor's data is cut."""
    last = max(tiny.fields.tensor_ranges.items(), key=lambda item: item[1][0])
    path = Edit(tiny).write(tmp_path / "model.gguf", size=last[1][1] - 10)
    refused(path, f"tensor {last[0]!r}", "outside the data section", "truncated file")


# -- offsets -----------------------------------------------------------------------------------------


def test_offset_outside_the_data_section(tiny, tmp_path):
    path = Edit(tiny).u64("blk.0.ffn_up.weight", "ti.offset", 1 << 40).write(tmp_path / "model.gguf")
    refused(path, "tensor 'blk.0.ffn_up.weight' (Q8_0 [64, 96])", "outside the data section")
    path = Edit(tiny).u64("blk.0.ffn_up.weight", "ti.offset", 2**64 - 32).write(tmp_path / "wrap.gguf")
    refused(path, "tensor 'blk.0.ffn_up.weight'", "outside the data section")


def test_overlapping_and_misaligned_offsets(tiny, tmp_path):
    other = tiny.fields.infos[0]
    offset = next(f.value for f in other.fields if f.kind == "ti.offset")
    path = Edit(tiny).u64("blk.1.ffn_down.weight", "ti.offset", offset).write(tmp_path / "overlap.gguf")
    refused(path, "overlap", "'blk.1.ffn_down.weight'", repr(other.owner))
    path = Edit(tiny).u64("blk.1.ffn_down.weight", "ti.offset", offset + 1).write(tmp_path / "odd.gguf")
    refused(path, "tensor 'blk.1.ffn_down.weight' has data offset", "not a multiple of alignment 32")


# -- undecodable strings -----------------------------------------------------------------------------


def test_undecodable_strings_name_the_field(tiny, tmp_path):
    path = Edit(tiny).put("general.architecture", "kv.str", b"\xff").write(tmp_path / "arch.gguf")
    refused(path, "metadata 'general.architecture' is not valid UTF-8", "byte 0xff")
    key = tiny.fields.kvs[3]
    path = Edit(tiny).put(key.owner, "kv.key", b"\xc3").write(tmp_path / "key.gguf")
    refused(path, "the key of metadata pair #3 is not valid UTF-8")
    path = Edit(tiny).put("tokenizer.ggml.tokens", "kv.item", b"\xed\xa0\x80", 20).write(tmp_path / "t.gguf")
    refused(path, "item 20 of metadata 'tokenizer.ggml.tokens' is not valid UTF-8")
    path = Edit(tiny).put("blk.0.ffn_up.weight", "ti.name", b"\x80").write(tmp_path / "name.gguf")
    refused(path, "the name of tensor #", "is not valid UTF-8")


def test_tokenizer_reads_of_hostile_files_are_model_errors(tiny, tmp_path):
    path = Edit(tiny).put("general.architecture", "kv.str", b"\xff").write(tmp_path / "arch.gguf")
    with pytest.raises(ModelError, match=r"arch\.gguf: metadata 'general.architecture' is not valid UTF-8"):
        GgufTokenizer.from_gguf(path)
    path = Edit(tiny).header("kv_count", 2**62).write(tmp_path / "count.gguf")
    with pytest.raises(ModelError, match=r"count\.gguf: the metadata count"):
        GgufTokenizer.from_gguf(path)


# -- counts and lengths ------------------------------------------------------------------------------


def test_counts_past_the_file_size(tiny, tmp_path):
    size = tiny.size
    path = Edit(tiny).header("kv_count", 2**63).write(tmp_path / "kv.gguf")
    refused(path, f"the metadata count {2**63} is more than the {size}-byte file can hold")
    path = Edit(tiny).header("tensor_count", 2**64 - 1).write(tmp_path / "tensors.gguf")
    refused(path, f"the tensor count {2**64 - 1} is more than")
    path = Edit(tiny).u64("tokenizer.ggml.tokens", "kv.count", 2**40).write(tmp_path / "array.gguf")
    refused(path, f"metadata 'tokenizer.ggml.tokens' claims {2**40} items of string")
    path = Edit(tiny).u64("general.architecture", "kv.str_len", 2**50).write(tmp_path / "string.gguf")
    refused(path, f"metadata 'general.architecture' claims {2**50} bytes", "past the end of the file")
    path = Edit(tiny).u64("tokenizer.ggml.tokens", "kv.item_len", 10**9, 5).write(tmp_path / "item.gguf")
    refused(path, "item 5 of metadata 'tokenizer.ggml.tokens' claims 1000000000 bytes")


def test_header_magic_version_and_truncation(tiny, tmp_path):
    path = Edit(tiny).header("version", 1).write(tmp_path / "v1.gguf")
    refused(path, "GGUF version 1 is not supported")
    path = Edit(tiny).header("version", 0x03000000).write(tmp_path / "be.gguf")
    refused(path, "big-endian")
    path = Edit(tiny).write(tmp_path / "cut.gguf", size=tiny.fields.kvs[4].start + 3)
    refused(path, "the file ends inside", "truncated or corrupt")
    (tmp_path / "empty.gguf").write_bytes(b"")
    refused(tmp_path / "empty.gguf", "the file is empty")


# -- metadata values: types and ranges ---------------------------------------------------------------


def test_metadata_of_the_wrong_type(tiny, tmp_path):
    path = Edit(tiny).u32("llama.block_count", "kv.type", 6).write(tmp_path / "model.gguf")  # float32
    refused(path, "metadata 'llama.block_count' is a float32, expected an integer")
    path = Edit(tiny).u32("general.architecture", "kv.type", 4).write(tmp_path / "arch.gguf")  # uint32
    refused(path)  # the value's bytes shift: whatever is refused, it is named and in rlxpy's words
    path = Edit(tiny).u32("llama.block_count", "kv.type", 42).write(tmp_path / "type.gguf")
    refused(path, "metadata 'llama.block_count' has value type 42, not a GGUF value type")


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("llama.attention.head_count", 0, "metadata 'llama.attention.head_count' = 0 is out of range"),
        ("llama.embedding_length", 2**32 - 1, "'llama.embedding_length' = 4294967295 is out of range"),
        ("llama.block_count", 0, "metadata 'llama.block_count' = 0 is out of range"),
        ("llama.block_count", 3, "tensor 'blk.2.attn_norm.weight' is missing"),
        ("llama.feed_forward_length", 128, "'blk.0.ffn_gate.weight' has shape [64, 96], expected [64, 128]"),
        ("llama.attention.head_count_kv", 3, "'llama.attention.head_count' = 4 is not a multiple of "
                                             "'llama.attention.head_count_kv' = 3"),
        ("llama.attention.head_count", 6, "metadata 'llama.embedding_length' = 64 is not a multiple of "
                                          "'llama.attention.head_count' = 6"),
        ("llama.context_length", 0, "metadata 'llama.context_length' = 0 is out of range"),
    ],
)
def test_metadata_out_of_range(tiny, tmp_path, key, value, expected):
    path = Edit(tiny).u32(key, "kv.scalar", value).write(tmp_path / "model.gguf")
    refused(path, expected)


def test_metadata_that_disagrees_with_the_tensors(tiny, tmp_path):
    path = Edit(tiny).insert_kv("llama.vocab_size", 4, struct.pack("<I", 300)).write(tmp_path / "vocab.gguf")
    refused(path, "metadata 'llama.vocab_size' = 300 but tensor 'token_embd.weight' (Q8_0 [64, 297]) has 297")
    rope = "llama.rope.dimension_count"
    path = Edit(tiny).insert_kv(rope, 4, struct.pack("<I", 15)).write(tmp_path / "odd.gguf")
    refused(path, "the head size 15", "is odd")
    path = Edit(tiny).insert_kv(rope, 4, struct.pack("<I", 8)).write(tmp_path / "rope.gguf")
    refused(path, "tensor 'blk.0.attn_q.weight' has shape [64, 64], expected [64, 32]")
    path = Edit(tiny).insert_kv("general.alignment", 4, struct.pack("<I", 48)).write(tmp_path / "align.gguf")
    refused(path, "metadata 'general.alignment' = 48 is not a power of two")
    path = Edit(tiny).insert_kv("general.alignment", 8, struct.pack("<Q", 2) + b"32").write(tmp_path / "s")
    refused(path, "metadata 'general.alignment' is a string, expected a uint32")
    path = Edit(tiny).u32("llama.rope.freq_base", "kv.scalar", 0x7FC00000).write(tmp_path / "nan.gguf")
    refused(path, "metadata 'llama.rope.freq_base' = nan is not a positive finite number")


def test_duplicates(tiny, tmp_path):
    fm: FieldMap = tiny.fields
    assert {"blk.0.attn_k.weight", "blk.0.attn_q.weight"} <= {e.owner for e in fm.infos}
    path = Edit(tiny).put("blk.0.attn_q.weight", "ti.name", b"blk.0.attn_k.weight").write(tmp_path / "m.gguf")
    refused(path, "tensor 'blk.0.attn_k.weight' appears twice")
    key = "llama.block_count"
    path = Edit(tiny).insert_kv(key, 4, struct.pack("<I", 2)).write(tmp_path / "kv.gguf")
    refused(path, f"metadata key {key!r} appears twice")


# -- the untouched files load; rlxpy info gives the same verdict ---------------------------------------


def test_unmodified_tiny_file_loads_and_fits_the_graph(tiny):
    from rlxpy.frontends.gguf_fuzz import graph_fit

    model = load_gguf(tiny.path, context=64)
    assert graph_fit(model) == ""
    assert model.tensors["token_embd.weight"].dims == (HIDDEN, model.config.vocab_size)  # GGUF order
    assert field_map(tiny.head).data_offset == model.layout.data_offset


def test_info_refuses_with_one_error_line_and_exit_2(tiny, tmp_path, capsys):
    path = Edit(tiny).u64("blk.1.ffn_up.weight", "ti.dim", 0, 1).write(tmp_path / "model.gguf")
    assert main(["info", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip() == (
        f"rlxpy: error: {path}: tensor 'blk.1.ffn_up.weight' has shape [{HIDDEN}, 0]: a zero dimension"
    )
    path = Edit(tiny).put("general.architecture", "kv.str", b"\xff").write(tmp_path / "utf.gguf")
    assert main(["info", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "not valid UTF-8" in err
