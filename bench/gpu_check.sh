#!/usr/bin/env bash
# GPU numbers for docs/benchmarks.md, on one CUDA GPU, with a 0.5B-class model built from its config
# (bench/random_model.py: random weights, so every turn runs to max_new_tokens):
#   tests    the GPU tests (tests/training/test_gpu.py: SFT, GRPO, engine and trainer on a CUDA model);
#   rollout  bench/rollout_throughput.py: embedded engine vs naive per-episode generate (tokens/s);
#   step     bench/train_step.py: one GRPO step, embedded vs TRL's GRPOTrainer (when TRL is importable);
#   train    a short `mcprl train -c configs/gpu.yaml` run (SFT + GRPO + eval): the real trainer's step
#            time and rollout tokens/s, from the run's metrics.jsonl;
#   train-kl the same run with a KL loss to the warm start (its reference on the GPU), into OUT_DIR/kl.
#
#   bench/gpu_check.sh OUT_DIR [PART ...]      (parts default to: tests rollout step train)
#
# On a machine without mcprl's dependencies: WHEELS=DIR installs a folder of wheels into /tmp/site
# first (no index needed); TRL_WHEELS=DIR adds TRL for `step`, run against the machine's own
# transformers in a separate path (TRL 1.16 needs a newer transformers than SkyRL 0.3.0 allows).
# Both installs and the model are kept in /tmp for the next call on the same machine.
set -uo pipefail
out=${1:?usage: bench/gpu_check.sh OUT_DIR [tests] [rollout] [step] [train] [train-kl]}
shift
parts=${*:-tests rollout step train}
mkdir -p "$out"
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false MCPRL_CACHE_DIR=${MCPRL_CACHE_DIR:-/tmp/mcprl-cache}
model=/tmp/qwen2.5-0.5b-random
install() {  # install DIR WHEEL...
  local target=$1; shift
  [ -d "$target" ] || $py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$target" "$@"
}

if [ -n "${WHEELS:-}" ]; then
  install /tmp/site "$WHEELS"/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD/src
fi
trl_python=.venv-trl/bin/python
if [ -n "${TRL_WHEELS:-}" ]; then
  install /tmp/site-trl "$TRL_WHEELS"/*.whl "$WHEELS"/{datasets,dill,multiprocess,skyrl_gym,omegaconf}-*.whl || exit 1
  trl_python=/tmp/trl-python
  printf '#!/bin/sh\nPYTHONPATH=/tmp/site-trl:%s/src exec %s "$@"\n' "$PWD" "$(command -v "$py")" > $trl_python
  chmod +x $trl_python
fi

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
$py -c "import torch, transformers, peft; print('torch', torch.__version__, 'transformers', transformers.__version__,
'peft', peft.__version__)" | tee -a "$out/gpu.txt"
[ -f $model/config.json ] || $py bench/random_model.py --out $model --tokenizer "${TOKENIZER:-.gpu/tokenizer}" || exit 1

train() {  # train OUT [OVERRIDE...]: a short configs/gpu.yaml run, its metrics copied to OUT
  local dir=$1; shift
  mkdir -p "$dir"
  rm -rf /tmp/gpu-run
  timeout 200 $py -m mcprl.cli train -c configs/gpu.yaml -o model.name=$model -o run.output_dir=/tmp/gpu-run \
    -o data.train=/tmp/gpu_train.jsonl -o data.eval=/tmp/gpu_test.jsonl -o data.generate.n_train=64 \
    -o data.generate.n_eval=8 -o sft.max_steps=4 -o algo.steps=2 -o algo.save_every=0 \
    -o algo.dynamic_sampling.type=null -o eval.before=false -o eval.after_sft=false -o eval.max_tasks=4 \
    -o logging.wandb.enabled=false "$@" 2>&1 | tee "$dir/train_gpu_yaml.txt"
  cp /tmp/gpu-run/metrics.jsonl /tmp/gpu-run/summary.json "$dir/"
}

for part in $parts; do
  case $part in
  tests)  # the default model's GGUF cannot travel here: a random model of its shape stands in
    smollm=/tmp/smollm2-135m-random
    [ -f $smollm/config.json ] || $py bench/random_model.py --arch smollm2-135m --out $smollm \
      --tokenizer "${TOKENIZER:-.gpu/tokenizer}" || exit 1
    MCPRL_GPU_TEST_MODEL=$smollm timeout 300 $py -m pytest -q -m gpu -p no:cacheprovider tests/training/test_gpu.py 2>&1 | tee "$out/tests.txt" ;;
  rollout)
    timeout 200 $py bench/rollout_throughput.py --model $model --device cuda --quick --episodes 128 --group 8 \
      --new-tokens 128 2>&1 | tee "$out/rollout_throughput.txt" ;;
  step)
    timeout 240 $py bench/train_step.py --model $model --device cuda --prompts 16 --group 8 --new-tokens 256 \
      --micro-batch 16 --steps 3 --trl-python $trl_python --out /tmp/bench_trl 2>&1 | tee "$out/train_step.txt" ;;
  train) train "$out" ;;
  train-kl) train "$out/kl" -o algo.kl_coef=0.1 -o algo.use_kl_loss=true ;;
  *) echo "unknown part: $part (tests, rollout, step, train, train-kl)"; exit 2 ;;
  esac
done
