#!/usr/bin/env bash
# The GPU checks (issues 10 and 43) as one prepared script, for a machine with a CUDA GPU (the device tool's
# H200, a cluster node). Writes its whole output to OUT_DIR/gpu_check.txt (default reports/perf/).
#
#   bash benchmarks/gpu_check.sh [OUT_DIR]
#
# Needs: a python (PYTHON, default python3) with a CUDA build of torch and this project's dependencies
# importable (an env, or wheels put on PYTHONPATH); no hub (models are tiny random Qwen3 stand-ins, and
# the benchmarks fall back to the built-in pool when ../shared/data is absent: carry the real sample into the
# checkout and pass it as POOL=path/skills-sample.jsonl.gz for real-length skills).
# What it exercises: bf16 weights, SDPA / FlashAttention-2, token-budget batches with pinned copies, the
# exact search on the GPU, the Qwen3 presets' exact inputs on CUDA, the online path's latency, and the served router
# under load on stand-ins of the papers' 0.6B size (random weights: compute and memory, not accuracy).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-${OUT:-reports/perf}}
PY=${PYTHON:-python3}
mkdir -p "$OUT_DIR"
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 WANDB_MODE=disabled
TINY=$(mktemp -d)
{
  echo "== $(date -u) $(hostname)"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  $PY -c "import torch, importlib.util as u; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0), 'flash_attn', bool(u.find_spec('flash_attn')))"
  echo "== the suite on CUDA (every device-dependent comparison on one device, or at its tolerance)"
  $PY -m pytest -q -p no:cacheprovider -m "not slurm and not agents" -k "not onnx" tests/
  echo "== peaks this process reaches: bf16 and fp32 matmul"
  $PY -c "from skillrouter.throughput import matmul_peak as p; print('bf16', round(p('cuda','bfloat16'),1), 'fp32', round(p('cuda','float32'),1), 'TFLOP/s')"
  echo "== tiny Qwen3 stand-ins"
  $PY -m skillrouter.models --out "$TINY"
  echo "== embedding throughput on the GPU: plain sentence-transformers vs token budget (bf16)"
  $PY benchmarks/gpu_embed.py --model "$TINY/base" ${POOL:+--pool "$POOL"}
  echo "== serving latency, tiny Qwen3 stand-ins with the released presets' settings"
  $PY benchmarks/serving_latency.py --queries 50 --name gpu_tiny_qwen3 encoder=skillrouter_emb_0.6b \
      "encoder.model=$TINY/base" reranker=skillrouter_rank_0.6b "reranker.model=$TINY/causal_lm"
  echo "== route serve under load: Qwen3-0.6B-size random stand-ins (the paper's serving setting, its p50 495.8 ms)"
  $PY -m skillrouter.models --paper-size --out "$TINY/paper"
  $PY benchmarks/route_load.py --requests 96 --name gpu_qwen3_0.6b encoder=skillrouter_emb_0.6b \
      "encoder.model=$TINY/paper/base" reranker=skillrouter_rank_0.6b "reranker.model=$TINY/paper/causal_lm"
  echo "== embed_pool at the 0.6B size: utilisation on the 13.6K sample, then 80K real-length skills (goal <= 6 min)"
  $PY benchmarks/gpu_embed.py --model "$TINY/paper/base" --n 13647 --plain-n 500 --name gpu_embed_0.6b_13k ${POOL:+--pool "$POOL"}
  $PY benchmarks/gpu_embed.py --model "$TINY/paper/base" --n 80000 --plain-n 500 --name gpu_embed_0.6b_80k ${POOL:+--pool "$POOL"}
  echo "== training memory per step, cached vs uncached (max_memory_allocated on CUDA)"
  $PY benchmarks/train_memory.py --name train_memory_gpu --batches 16 64 --precisions fp32 bf16 --profile 64
  echo "== done"
} 2>&1 | tee "$OUT_DIR/gpu_check.txt"
