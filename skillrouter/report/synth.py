"""The synthesis table: what each generation stage made, filtered and spent, once per artifact."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from .collect import find_runs

COLUMNS = ["stage", "artifact", "made", "filtered", "why", "requests", "from log", "retries", "failed", "tokens in",
           "tokens out"]


def _filtered(report: dict) -> tuple[int, str]:
    """How many a stage discarded and the reasons it gave (stage reports differ in what they filter)."""
    if "split" in report:  # r3_pairs
        s, j = report["split"], report["judgements"]
        return (s["straddling_dropped"] + s["leaking_dropped"] + j["failed"],
                f"SKIP {j['skip']} ({', '.join(f'{k} {v}' for k, v in sorted(j['skip_reasons'].items()))}); "
                f"straddling {s['straddling_dropped']}, name leak {s['leaking_dropped']}")
    if "dedupe" in report:  # supp
        return report["queries"]["dropped"] + report["dedupe"]["removed"], \
            f"query leaks {report['queries']['dropped']}, equivalent pool entries removed {report['dedupe']['removed']}"
    rejections = report.get("rejections") or {}
    return report.get("dropped", report.get("missing", 0)), ", ".join(f"{k} {v}" for k, v in sorted(rejections.items()))


def synth_table(run_roots: list[Path]) -> pd.DataFrame:
    rows: dict[tuple[str, str], dict] = {}
    for run in find_runs(run_roots):
        metrics = run / "metrics.json"
        if not metrics.exists():
            continue
        for stage, rep in (json.loads(metrics.read_text()).get("synth") or {}).items():
            usage = rep["usage"]
            made = rep.get("made", rep.get("split", {}).get("train_pairs", rep.get("queries", {}).get("made")))
            filtered, why = _filtered(rep)
            rows[(stage, rep["key"])] = {"stage": stage, "artifact": rep["key"], "made": made, "filtered": filtered,
                                         "why": why, "requests": usage["requests"], "from log": usage["resumed"],
                                         "retries": usage["retries"], "failed": usage["failed"],
                                         "tokens in": usage["prompt_tokens"], "tokens out": usage["completion_tokens"]}
    return pd.DataFrame([rows[k] for k in sorted(rows)], columns=COLUMNS)
