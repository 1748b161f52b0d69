"""GgufTokenizer against Hugging Face ``tokenizers`` built from the same GGUF, on a ~20k-token document.

Encoders compared (SmolLM2-135M-Instruct's GGUF, pre-tokenizer ``smollm``):

* ``GgufTokenizer(backend="python")``: the pure-Python byte-level BPE (llama.cpp's algorithm).
* ``GgufTokenizer()`` (default): the same vocabulary, merges and split regexes run in ``tokenizers``.
* transformers' GGUF tokenizer conversion (``AutoTokenizer.from_pretrained(dir, gguf_file=...)``), whose
  pre-tokenizer is GPT-2's split for this file, and the same backend with SmolLM2's own
  pre-tokenizer (each digit apart, then GPT-2's split), as its ``tokenizer.json`` has.

"load" is reading the file (and building the ``tokenizers`` twin), "cold" the first encode of a
fresh tokenizer (empty word caches), "warm" the median of later ones. Ids are compared position by
position with the Python encoder (the llama.cpp reference).
"""

from __future__ import annotations

import os
import platform
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from common import emit, parse_args, timeit  # noqa: E402

from rlxpy.frontends.gguf import default_model_path  # noqa: E402
from rlxpy.frontends.gguf_tokenizer import GgufTokenizer  # noqa: E402

MULTILINGUAL = (
    "café naïve résumé Ångström 日本語のテキストと中文字符 한국어 문장입니다 emoji 🎉👍🏽 "
    "Привет, мир! Ελληνικά שלום עולם مرحبا 1234567890 pi is 3.14159\n"
)


def document(chars: int) -> str:
    """Python's own help topics (English prose and code) with multilingual lines between them."""
    import pydoc_data.topics as topics

    parts = []
    for name in sorted(topics.topics):
        parts.extend((topics.topics[name], MULTILINGUAL))
    return "".join(parts)[:chars]


def timed(fn):
    started = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - started


def mismatches(ids: list[int], reference: list[int]) -> dict:
    differ = sum(a != b for a, b in zip(ids, reference))
    first = next((i for i, (a, b) in enumerate(zip(ids, reference)) if a != b), None)
    return {"equal": ids == reference, "tokens": len(ids), "positions_differing": differ,
            "first_difference": first}


def measure_gguf_tokenizer(path: str, text: str, backend: str) -> tuple[dict, list[int]]:
    def load() -> GgufTokenizer:
        tokenizer = GgufTokenizer.from_gguf(path, backend=backend)
        tokenizer.backend  # noqa: B018  (builds the tokenizers twin, otherwise built on first encode)
        return tokenizer

    tokenizer, build = timed(load)
    ids, cold = timed(lambda: tokenizer.encode(text))
    warm = timeit(lambda: tokenizer.encode(text), repeat=9, warmup=1)
    assert tokenizer.decode(ids) == text
    return {"backend": tokenizer.backend, "load_s": build, "cold_s": cold, "warm_s": warm}, ids


def measure_transformers(path: str, text: str) -> tuple[dict, dict, list[int], list[int]]:
    from tokenizers import Tokenizer, pre_tokenizers
    from transformers import AutoTokenizer

    directory, name = os.path.split(path)
    hf, load = timed(lambda: AutoTokenizer.from_pretrained(directory, gguf_file=name))
    backend = hf.backend_tokenizer
    converted, cold = timed(lambda: backend.encode(text, add_special_tokens=False).ids)
    warm = timeit(lambda: backend.encode(text, add_special_tokens=False), repeat=9, warmup=1)
    own = Tokenizer.from_str(backend.to_str())
    own.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    split_ids, split_cold = timed(lambda: own.encode(text, add_special_tokens=False).ids)
    split_warm = timeit(lambda: own.encode(text, add_special_tokens=False), repeat=9, warmup=1)
    return ({"load_s": load, "cold_s": cold, "warm_s": warm},
            {"cold_s": split_cold, "warm_s": split_warm}, converted, split_ids)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    path = str(args.model or default_model_path())
    text = document(20_000 if args.quick else 75_000)
    python, reference = measure_gguf_tokenizer(path, text, "python")
    fast, fast_ids = measure_gguf_tokenizer(path, text, "auto")
    converted, own_split, converted_ids, split_ids = measure_transformers(path, text)
    results = {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "document": {"chars": len(text), "tokens": len(reference)},
        "gguf_tokenizer_python": {**python, **mismatches(reference, reference)},
        "gguf_tokenizer_tokenizers": {**fast, **mismatches(fast_ids, reference)},
        "transformers_gguf_conversion": {**converted, **mismatches(converted_ids, reference)},
        "transformers_with_smollm_split": {**own_split, **mismatches(split_ids, reference)},
    }
    print(f"document: {len(text)} chars, {len(reference)} tokens ({results['machine']})")
    print(f"{'encoder':34} {'load s':>8} {'cold ms':>8} {'warm ms':>8}  ids equal to the Python encoder")
    for name, row in results.items():
        if not isinstance(row, dict) or "cold_s" not in row:
            continue
        load = f"{row['load_s']:.2f}" if "load_s" in row else "-"
        verdict = "yes" if row["equal"] else (
            f"no: {row['positions_differing']} positions differ, first at {row['first_difference']}, "
            f"{row['tokens']} tokens")
        print(f"{name:34} {load:>8} {row['cold_s'] * 1e3:8.1f} {row['warm_s'] * 1e3:8.1f}  {verdict}")
    emit(results, args.json)


if __name__ == "__main__":
    main()
