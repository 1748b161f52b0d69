"""Front doors into rlxpy: GGUF models (+ tokenizer), torch.compile, ONNX."""
