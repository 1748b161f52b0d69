"""Graph builders for model families (llama, ...), used by the CLI, tests and benches."""
