#!/usr/bin/env bash
# Regenerate the committed reports/ from scratch: every paper sweep on the built-in data, the Qwen3 paths on tiny
# random stand-ins (field attention; the SkillRouter reproduction on the eval-core sample of ../shared/data when it
# is there), then `python -m skillrouter.report`. The figures show the formats, not model quality.
#   make report-demo        (about an hour on a 2-core CPU; stages shared between sweeps are built once)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
TINY=.cache/stand-ins
[ -d "$TINY/causal_lm" ] || "$PY" -m skillrouter.models --out "$TINY"
for sweep in encoder_results pipeline_results body_removal fn_filter loss_ablation skip_ablation topk_ablation \
             synth_demo synth_r3_demo tune_reranker_lr; do
  "$PY" launch.py -m -cd sweeps -cn "$sweep" progress=false
done
"$PY" launch.py -m -cd sweeps -cn field_attention progress=false reranker.base.model="$TINY/causal_lm"
CORE=../shared/data/skillrouter-eval-core-sample
if [ -d "$CORE" ]; then
  "$PY" launch.py -m -cd sweeps -cn reproduce_skillrouter progress=false data.root="$CORE" \
    encoder.model="$TINY/base" ++reranker.model="$TINY/causal_lm"
fi
"$PY" -m skillrouter.report --significance
