"""GgufTokenizer against Hugging Face ``tokenizers`` built from the same GGUF, on a ~20k-token document.

Encoders compared (SmolLM2-135M-Instruct's GGUF, pre-tokenizer ``smollm``):

* ``GgufTokenizer(backend="python")``: the pure-Python byte-level BPE (llama.cpp's algorithm).
* ``GgufTokenizer()`` (default): the same vocabulary, merges and split regexes run in ``tokenizers``.
* transformers' GGUF tokenizer conversion (``AutoTokenizer.from_pretrained(dir, gguf_file=...)``), whose
  pre-tokenizer is GPT-2's split for this file, and the same backend with SmolLM2's own
  pre-tokenizer (each digit apart, then GPT-2's split), as its ``tokenizer.json`` has.

"load" is reading the file (and building the ``tokenizers`` twin); then, on ~20k-token documents:
"first" is the first encode of a fresh tokenizer (empty word caches, one-time tables), "new text"
the median over three other documents after it (the steady state of a server: common words cached,
the text new), "same text" the median of encoding the first document again. Ids of every document
are compared with the Python encoder's (the llama.cpp reference). Times are CPU seconds of this
process (a shared machine's other jobs inflate wall time by a varying factor).
"""

from __future__ import annotations

import os
import platform
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from common import emit, parse_args  # noqa: E402

from rlxpy.frontends.gguf import default_model_path  # noqa: E402
from rlxpy.frontends.gguf_tokenizer import GgufTokenizer  # noqa: E402

MULTILINGUAL = (
    "café naïve résumé Ångström 日本語のテキストと中文字符 한국어 문장입니다 emoji 🎉👍🏽 "
    "Привет, мир! Ελληνικά שלום עולם مرحبا 1234567890 pi is 3.14159\n"
)


def documents(chars: int, count: int = 4) -> list[str]:
    """``count`` documents of ``chars`` characters: Python's own help topics (English prose and code)
    with multilingual lines between them."""
    import pydoc_data.topics as topics

    parts = []
    for name in sorted(topics.topics):
        parts.extend((topics.topics[name], MULTILINGUAL))
    text = "".join(parts)
    assert len(text) >= chars * count, "pydoc_data holds too little text for these documents"
    return [text[index * chars:(index + 1) * chars] for index in range(count)]


def timed(fn):
    """(fn(), its CPU seconds): this process's CPU time, which other jobs on a shared machine do not
    inflate the way they do wall time (every encoder here runs on one thread)."""
    started = time.process_time()
    value = fn()
    return value, time.process_time() - started


def measure(encode, texts: list[str], reference: list[list[int]] | None) -> tuple[dict, list[list[int]]]:
    first_ids, first = timed(lambda: encode(texts[0]))
    others = [timed(lambda text=text: encode(text)) for text in texts[1:]]
    same = statistics.median(timed(lambda: encode(texts[0]))[1] for _ in range(5))
    ids = [first_ids] + [found for found, _ in others]
    row = {"first_s": first, "new_text_s": statistics.median(t for _, t in others), "same_text_s": same}
    if reference is not None:
        flat, want = sum(ids, []), sum(reference, [])
        first_difference = next((i for i, (a, b) in enumerate(zip(flat, want)) if a != b), None)
        row.update(equal=ids == reference, tokens=len(flat), first_difference=first_difference,
                   documents_equal=sum(a == b for a, b in zip(ids, reference)))
    return row, ids


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    path = str(args.model or default_model_path())
    texts = documents(20_000 if args.quick else 75_000)

    def gguf_tokenizer(backend: str) -> GgufTokenizer:
        tokenizer = GgufTokenizer.from_gguf(path, backend=backend)
        tokenizer.backend  # noqa: B018  (builds the tokenizers twin, otherwise built on first encode)
        return tokenizer

    python, load_python = timed(lambda: gguf_tokenizer("python"))
    results: dict = {"machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python "
                                f"{platform.python_version()}, load average {os.getloadavg()[0]:.1f}"}
    row, reference = measure(python.encode, texts, None)
    results["gguf_tokenizer_python"] = {"load_s": load_python, **row, "equal": True,
                                        "tokens": sum(map(len, reference))}
    assert python.decode(reference[0]) == texts[0]
    fast, load_fast = timed(lambda: gguf_tokenizer("auto"))
    row, _ = measure(fast.encode, texts, reference)
    results["gguf_tokenizer_tokenizers"] = {"load_s": load_fast, "backend": fast.backend, **row}

    from tokenizers import Tokenizer, pre_tokenizers
    from transformers import AutoTokenizer

    directory, name = os.path.split(path)
    hf, load_hf = timed(lambda: AutoTokenizer.from_pretrained(directory, gguf_file=name))
    backend = hf.backend_tokenizer
    row, _ = measure(lambda text: backend.encode(text, add_special_tokens=False).ids, texts, reference)
    results["transformers_gguf_conversion"] = {"load_s": load_hf, **row}
    own = Tokenizer.from_str(backend.to_str())
    own.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    row, _ = measure(lambda text: own.encode(text, add_special_tokens=False).ids, texts, reference)
    results["transformers_with_smollm_split"] = row

    print(f"4 documents of {len(texts[0])} chars, {sum(map(len, reference))} tokens ({results['machine']})")
    print(f"{'encoder':32} {'load s':>7} {'first ms':>9} {'new text ms':>12} {'same text ms':>13}  ids equal")
    for name, row in results.items():
        if not isinstance(row, dict):
            continue
        load = f"{row['load_s']:.2f}" if "load_s" in row else "-"
        verdict = "yes" if row["equal"] else (
            f"no: {row['documents_equal']} of {len(texts)} documents, the first difference at token "
            f"{row['first_difference']}, {row['tokens']} tokens")
        print(f"{name:32} {load:>7} {row['first_s'] * 1e3:9.1f} {row['new_text_s'] * 1e3:12.1f} "
              f"{row['same_text_s'] * 1e3:13.1f}  {verdict}")
    emit(results, args.json)


if __name__ == "__main__":
    main()
