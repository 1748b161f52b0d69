"""An OpenAI-compatible HTTP server (``rlxpy serve``): chat and text completions from a GGUF model,
embeddings from a sentence-transformers BERT, requests to the one GPU serialised by a scheduler.

Needs the ``serve`` extra (FastAPI and uvicorn); nothing else in rlxpy imports this package.
"""
