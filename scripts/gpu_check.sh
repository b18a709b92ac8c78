#!/usr/bin/env bash
# The GPU check of trl_envs in one command, offline: installs what the GPU image lacks from the bundle that
# scripts/gpu_bundle.py gathered on a machine with the network, then runs scripts/gpu_check.py's stages (each prints
# PASS / FAIL / SKIP with its time; summary.json and summary.txt in the output folder):
#
#   versions      torch, CUDA, the GPU, transformers, trl, accelerate, deepspeed, peft
#   zero2 zero3 fsdp2   tests/test_gpu.py's runs of accelerate_configs/{zero2,zero3,fsdp2}.yaml on one GPU (zero2 also
#                 with max_staleness 1: a sampler process on the GPU)
#   async_exit    scripts/train_grpo.py --max_staleness 1: exits 0 and leaves no child process
#   recipe_0.5b   scripts/configs/qwen2.5-0.5b/arithmetic.yaml, 4 steps, full-size random Qwen2.5-0.5B: step time, memory
#   gpu_rollouts  bench/gpu_rollouts.py (the samplers' speed), when the tree has it
#   (opt-in with --stages: vllm_colocate, ddp, vllm_server: they need vllm, 2 or 3 GPUs)
#
# Usage, from the repository (with .gpu_bundle/ in it, or --bundle DIR):
#   python scripts/gpu_bundle.py                     # on a machine with the network: gathers .gpu_bundle/ (~23 MB)
#   bash scripts/gpu_check.sh                        # on the GPU machine: about 6 minutes on one H200
#   bash scripts/gpu_check.sh --stages versions zero3 --out /tmp/check
#   bash scripts/gpu_check.sh --cpu                  # the same stages on the CPU, small; no bundle needed
# Output folder: --out, else $OUT when set, else ./gpu_check_out. Exit status: 0 no stage failed, 1 one did, 2 no GPU.
set -uo pipefail
cd "$(dirname "$0")/.."

BUNDLE="$PWD/.gpu_bundle"
SITE="${GPU_CHECK_SITE:-/tmp/trl_envs_gpu_site}"
CPU=0
ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle)
      if [ ! -d "${2:-}" ]; then
        echo "gpu_check.sh: --bundle: no folder at '${2:-}' (python scripts/gpu_bundle.py makes one)" >&2; exit 2
      fi
      BUNDLE="$(cd "$2" && pwd)"; shift 2 ;;
    --cpu) CPU=1; ARGS+=("$1"); shift ;;
    *) ARGS+=("$1"); shift ;;
  esac
done

# Offline: no Hub requests; transformers 5 turns Hub kernels on by default on CUDA (needs the network and `kernels`).
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 USE_HUB_KERNELS=NO TRL_EXPERIMENTAL_SILENCE=1
export TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1 OMP_NUM_THREADS="${OMP_NUM_THREADS:-4}"
PY="$(command -v python3 || command -v python)"

if [ "$CPU" = 0 ] && [ -d "$BUNDLE/wheels" ]; then
  stamp="$(ls -l "$BUNDLE/wheels" "$BUNDLE/sdist" | cksum)"
  if [ "$(cat "$SITE/.bundle" 2>/dev/null)" != "$stamp" ]; then
    echo "installing $BUNDLE into $SITE (offline)"
    start=$(date +%s)
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
      "$BUNDLE"/wheels/*.whl || { echo "FAIL: installing the bundle's wheels"; exit 1; }
    DS_BUILD_OPS=0 "$PY" -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --no-cache-dir \
      --upgrade --target "$SITE" "$BUNDLE"/sdist/deepspeed-*.tar.gz || { echo "FAIL: installing deepspeed"; exit 1; }
    echo "$stamp" > "$SITE/.bundle"
    echo "installed in $(( $(date +%s) - start ))s"
  fi
  export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
elif [ "$CPU" = 0 ]; then
  echo "no bundle at $BUNDLE: using the packages installed here (python scripts/gpu_bundle.py gathers one)"
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi

OUT_ARGS=()
if [ -n "${OUT:-}" ]; then OUT_ARGS=(--out "$OUT"); fi
exec "$PY" scripts/gpu_check.py "${OUT_ARGS[@]}" "${ARGS[@]}"
