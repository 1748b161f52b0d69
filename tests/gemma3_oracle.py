"""transformers' answers for the Gemma 3 270M GGUF (the oracle of tests/models/test_gemma3.py).

``python tests/gemma3_oracle.py GGUF OUT.npz N_TOKENS PROMPT...`` loads the file with
``AutoModelForCausalLM.from_pretrained(dir, gguf_file=...)`` (fp32, CPU) and its tokenizer with
``AutoTokenizer.from_pretrained`` and writes, per prompt i: ``ids{i}`` (transformers' token ids),
``logits{i}`` (the last prompt position's logits) and ``greedy{i}`` (N_TOKENS greedy tokens); and
``chat`` (the tokenizer's ``apply_chat_template`` of CHAT_MESSAGES with rlxpy's built-in Gemma
template, which the file lacks). It runs as its own process so the test compiles rlxpy's graph
while transformers loads (two cores in CI).

gguf-py's reader parses the 262k-token vocabulary in ~20-60 s and transformers opens the file three
times (config, weights, tokenizer): one reader serves all three here.
"""

from __future__ import annotations

import os
import sys
import time

#: a multi-turn conversation with a system prompt
CHAT_MESSAGES = [
    {"role": "system", "content": "You are a concise assistant."},
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "Paris."},
    {"role": "user", "content": " And of Italy? "},
]


def _share_one_reader() -> None:
    import gguf

    real, opened = gguf.GGUFReader, {}

    def reader(path, *args, **kwargs):
        key = os.fspath(path)
        if key not in opened:
            opened[key] = real(path, *args, **kwargs)
        return opened[key]

    gguf.GGUFReader = reader  # transformers imports it from gguf inside its loader, at each call


def main(argv: list[str]) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    path, out, tokens, prompts = argv[0], argv[1], int(argv[2]), argv[3:]
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlxpy.frontends.gguf_templates import GEMMA_TEMPLATE

    started = time.perf_counter()
    _share_one_reader()
    folder, name = os.path.dirname(os.path.abspath(path)), os.path.basename(path)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype="float32").eval()
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = time.perf_counter() - started
    result: dict[str, object] = {
        "chat": np.array(tokenizer.apply_chat_template(CHAT_MESSAGES, chat_template=GEMMA_TEMPLATE,
                                                       tokenize=False, add_generation_prompt=True)),
        "file_template": np.array(tokenizer.chat_template or ""),
    }
    with torch.no_grad():
        for i, prompt in enumerate(prompts):
            ids = tokenizer(prompt)["input_ids"]
            batch = torch.tensor([ids])
            result[f"ids{i}"] = np.array(ids)
            result[f"logits{i}"] = model(batch).logits[0, -1].numpy()
            greedy = model.generate(batch, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False)
            result[f"greedy{i}"] = greedy[0, len(ids):].numpy()
    result["seconds"] = np.array([loaded, time.perf_counter() - started])
    np.savez(out + ".partial.npz", **result)
    os.replace(out + ".partial.npz", out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
