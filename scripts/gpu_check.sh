#!/usr/bin/env bash
# GPU check of trl_envs' distributed paths: tiny multi-turn GRPO runs of the offline tiny model through our
# accelerate configs, with the same assertions as the CPU tests (every rank finished, whole groups per rank, rewards and
# advantages equal to a single-process computation, env metrics over all ranks' episodes, generate calls in lock-step).
# Each stage is one test of tests/test_gpu.py (skipped there without a GPU):
#
#   vllm_colocate  accelerate_configs/single_gpu.yaml, use_vllm colocate, guess_number (multi-turn); TRL's
#                  importance-sampling correction uses our per-token vLLM logprobs (ratio logged, finite, near 1)
#   zero2          accelerate_configs/zero2.yaml, min(2, GPUs) processes (2 GPUs: + ranks of uneven episode lengths);
#                  also max_staleness 1 (a sampler process per GPU, its weights shared through CUDA IPC)
#   zero3          accelerate_configs/zero3.yaml, likewise (parameter gathering around every generate call)
#   fsdp2          accelerate_configs/fsdp2.yaml, likewise
#   ddp            accelerate_configs/multi_gpu.yaml, 2 processes (needs 2 GPUs)
#   vllm_server    `trl vllm-serve` on the last GPU + 2 training ranks (needs 3 GPUs): equal prompt lists per rank
#
# Usage (from anywhere; a few minutes per stage at most, most of it start-up):
#   bash scripts/gpu_check.sh                          # every stage; those the machine cannot run are SKIPPED
#   STAGES="vllm_colocate zero2" bash scripts/gpu_check.sh
# Writes one log per stage and summary.txt to $OUT (default ./gpu_check_out); exits 1 if a stage FAILED, 2 if no GPU.
# Needs torch with CUDA, and vllm / deepspeed for their stages (missing ones are reported as SKIPPED, not passed).
# The tiny model is built on first use (about a minute on a multi-core machine) unless a built one is found in
# $TRL_ENVS_CACHE, or in .cache/trl_envs/ inside the repository (copy ~/.cache/trl_envs there to carry it along).
set -uo pipefail
cd "$(dirname "$0")/.."

export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 TRL_EXPERIMENTAL_SILENCE=1 TOKENIZERS_PARALLELISM=false
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-4}"
if [ -z "${TRL_ENVS_CACHE:-}" ] && [ -d .cache/trl_envs ]; then export TRL_ENVS_CACHE="$PWD/.cache/trl_envs"; fi
OUT_DIR="${OUT:-$PWD/gpu_check_out}"
mkdir -p "$OUT_DIR"
STAGES="${STAGES:-vllm_colocate zero2 zero3 fsdp2 ddp vllm_server}"
STAGE_TIMEOUT="${STAGE_TIMEOUT:-300}"
declare -A TESTS=(
  [vllm_colocate]=test_gpu_vllm_colocate_multi_turn [zero2]=test_gpu_zero2 [zero3]=test_gpu_zero3
  [fsdp2]=test_gpu_fsdp2 [ddp]=test_gpu_ddp_multi_gpu [vllm_server]=test_gpu_vllm_server_two_ranks
)

{
  date -u
  nvidia-smi -L 2>&1 || echo "nvidia-smi: not found"
  python - <<'EOF'
import importlib, torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "GPUs", torch.cuda.device_count())
for name in ("transformers", "trl", "accelerate", "deepspeed", "vllm", "peft"):
    try:
        print(name, importlib.import_module(name).__version__)
    except Exception as e:  # noqa: BLE001 - report, do not fail
        print(name, "NOT AVAILABLE:", type(e).__name__, str(e)[:200])
EOF
} 2>&1 | tee "$OUT_DIR/env.txt"

if ! python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "no CUDA GPU visible: nothing to check (the CPU paths are covered by: python -m pytest tests)" \
    | tee "$OUT_DIR/summary.txt"
  exit 2
fi

echo "tiny model: $(python -m trl_envs.tiny_model 2>"$OUT_DIR/tiny_model.log")" | tee -a "$OUT_DIR/env.txt"

failed=0
: > "$OUT_DIR/summary.txt"
for stage in $STAGES; do
  test_name="${TESTS[$stage]:-}"
  if [ -z "$test_name" ]; then echo "unknown stage: $stage (known: ${!TESTS[*]})"; failed=1; continue; fi
  start=$(date +%s)
  timeout --kill-after=20 "$STAGE_TIMEOUT" python -m pytest "tests/test_gpu.py::$test_name" -q -s -rs \
    -p no:cacheprovider >"$OUT_DIR/$stage.log" 2>&1
  rc=$?
  seconds=$(( $(date +%s) - start ))
  if [ $rc -eq 0 ] && grep -qE "^[0-9]+ passed" <(tail -n 3 "$OUT_DIR/$stage.log"); then
    verdict=PASSED
  elif [ $rc -eq 0 ]; then
    verdict="SKIPPED ($(grep -m1 -oE 'SKIPPED \[[0-9]+\] [^ ]+: .*' "$OUT_DIR/$stage.log" | cut -d: -f3- | sed 's/^ //'))"
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    verdict="FAILED (timed out after ${STAGE_TIMEOUT}s: hang?)"; failed=1
  else
    verdict="FAILED (exit $rc, see $stage.log)"; failed=1
  fi
  printf '%-14s %5ss  %s\n' "$stage" "$seconds" "$verdict" | tee -a "$OUT_DIR/summary.txt"
done
echo "logs: $OUT_DIR"
exit $failed
