#!/usr/bin/env bash
# GPU numbers for docs/benchmarks.md, on one CUDA GPU, with a 0.5B-class model built from its config
# (bench/random_model.py: random weights, so every turn runs to max_new_tokens):
#   1. bench/rollout_throughput.py: embedded engine vs naive per-episode generate (tokens/s);
#   2. bench/train_step.py: one GRPO step, embedded vs TRL's GRPOTrainer (only when TRL is importable);
#   3. a short `mcprl train -c configs/gpu.yaml` run (SFT + GRPO + eval): step time and rollout tokens/s
#      of the real trainer, from the run's metrics.jsonl.
#
#   bench/gpu_check.sh [OUT_DIR]
#
# On a machine without mcprl's dependencies: WHEELS=DIR installs a folder of wheels into /tmp/site
# first (no index needed); TRL_WHEELS=DIR adds TRL for step 2, run against the machine's own transformers
# in a separate path (TRL 1.16 needs a newer transformers than SkyRL 0.3.0 allows).
set -uo pipefail
out=${1:-runs/gpu_check}
mkdir -p "$out"
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false MCPRL_CACHE_DIR=${MCPRL_CACHE_DIR:-/tmp/mcprl-cache}
model=/tmp/qwen2.5-0.5b-random

if [ -n "${WHEELS:-}" ]; then
  $py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$WHEELS"/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD/src
fi
trl_python=".venv-trl/bin/python"
if [ -n "${TRL_WHEELS:-}" ]; then
  trl_deps=$(ls "$WHEELS"/{datasets,dill,multiprocess,skyrl_gym,omegaconf}-*.whl)
  $py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site-trl \
    "$TRL_WHEELS"/*.whl $trl_deps || exit 1
  trl_python=/tmp/trl-python
  printf '#!/bin/sh\nPYTHONPATH=/tmp/site-trl:%s/src exec %s "$@"\n' "$PWD" "$(command -v $py)" > $trl_python
  chmod +x $trl_python
fi

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
$py -c "import torch, transformers, peft; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__)" | tee -a "$out/gpu.txt"
$py bench/random_model.py --out $model --tokenizer "${TOKENIZER:-.gpu/tokenizer}" || exit 1

timeout 200 $py bench/rollout_throughput.py --model $model --device cuda --quick --episodes 128 --group 8 \
  --new-tokens 128 2>&1 | tee "$out/rollout_throughput.txt"

if [ -x "$trl_python" ]; then
  timeout 300 $py bench/train_step.py --model $model --device cuda --prompts 16 --group 8 --new-tokens 256 \
    --micro-batch 16 --steps 3 --trl-python $trl_python --out /tmp/bench_trl 2>&1 | tee "$out/train_step.txt"
fi

timeout 300 $py -m mcprl.cli train -c configs/gpu.yaml -o model.name=$model -o run.output_dir=/tmp/gpu-run \
  -o data.train=/tmp/gpu_train.jsonl -o data.eval=/tmp/gpu_test.jsonl -o data.generate.n_train=64 \
  -o data.generate.n_eval=8 -o sft.max_steps=4 -o algo.steps=2 -o algo.save_every=0 \
  -o algo.dynamic_sampling.type=null -o eval.before=false -o eval.after_sft=false -o eval.max_tasks=8 \
  -o eval.n_samples=1 -o logging.wandb.enabled=false 2>&1 | tee "$out/train_gpu_yaml.txt"
cp /tmp/gpu-run/metrics.jsonl /tmp/gpu-run/summary.json "$out/" 2>/dev/null
exit 0
