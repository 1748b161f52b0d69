"""The WebGPU backend: arena planning, lowering to Steps, and the executable that runs them."""
