"""The cascade and query-condensation tables, from the runs' ``metrics.json``.

* Cascade: per cascade (encoder and steps) and step, the step's depth, the share of GT skills its input still holds
  at that depth (what the step can reach: a step reorders, so it loses none of it) and the latency it adds per query
  (its stages' build seconds over the queries), aggregated over seeds and averaged over the tiers.
* Condensation: Hit@1 and MRR@10 per query method (``raw`` against each condensation), overall and by quartile of
  the raw instruction's length in characters (``eval.breakdown=[query_chars_quartile]``), aggregated over seeds.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..eval.strata import CHARS
from .collect import completed_runs

CASCADE_NOTES = ["Per step: the candidates it reorders (depth), the share of each query's GT skills within that depth of "
                 "the ranking it reads (mean over queries), and its stages' build seconds per query (pair scoring and the "
                 "reorder, or the LLM's pick; trainings left out); mean ± s.d. over seeds and tiers (n runs)."]
CONDENSE_NOTES = ["Hit@1 and MRR@10 in %, mean ± s.d. over seeds and tiers (n runs), overall and by quartile of the raw "
                  "instruction's length in characters (Q1 shortest); each pipeline with the raw query, then condensed "
                  "(query=..., read by the rerank steps unless the row says otherwise); fallbacks: condensed queries "
                  "that came back empty or failed and were kept raw."]
QUARTILES = ("Q1", "Q2", "Q3", "Q4")


def _stat(values: list[float], scale: float = 1.0, digits: int = 1) -> str:
    kept = [v * scale for v in values if v is not None and not np.isnan(v)]
    if not kept:
        return "-"
    sd = f" ± {np.std(kept, ddof=1):.{digits}f}" if len(kept) > 1 else ""
    return f"{np.mean(kept):.{digits}f}{sd} ({len(kept)})"


def pipeline(metrics: dict[str, Any], with_query: bool = True) -> str:
    """A run's pipeline as its row reads: the encoder, its rerank steps (or reranker) and, unless raw, its query."""
    choices, query = metrics.get("choices", {}), metrics.get("query") or {}
    steps = metrics.get("cascade")
    reranking = (" > ".join(f"{s['reranker']}@{s['depth']}" for s in steps) if steps
                 else "" if choices.get("reranker", "none") == "none" else f"{choices['reranker']}@{choices.get('topk')}")
    label = " > ".join(x for x in (choices.get("encoder"), reranking) if x)
    if with_query and choices.get("query", "raw") != "raw":
        label += f" + query={choices['query']}" + (f" ({query['apply']})" if query.get("apply") not in (None, "rerank") else "")
    return label


def cascade_table(run_roots: list[Path], data: str | None = None) -> pd.DataFrame:
    cells: dict[tuple[str, int], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    labels: dict[tuple[str, int], tuple[str, int]] = {}
    for _, metrics in completed_runs(run_roots, data):
        steps = metrics.get("cascade")
        if not steps:
            continue
        name = pipeline(metrics)
        for n, step in enumerate(steps, 1):
            cells[(name, n)]["recall"].append(step["gt_recall"])
            cells[(name, n)]["ms"].append(1000 * step["seconds_per_query"])
            labels[(name, n)] = (step["reranker"], step["depth"])
    rows = [{"cascade": name, "step": n, "reranker": labels[(name, n)][0], "depth": labels[(name, n)][1],
             "GT recall at depth (%)": _stat(v["recall"], 100), "ms per query": _stat(v["ms"], 1, 0)}
            for (name, n), v in sorted(cells.items())]
    return pd.DataFrame(rows, columns=["cascade", "step", "reranker", "depth", "GT recall at depth (%)", "ms per query"])


def condensation_table(run_roots: list[Path], data: str | None = None) -> pd.DataFrame:
    cells: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for _, metrics in completed_runs(run_roots, data):
        m, query = metrics.get("metrics", {}), metrics.get("query") or {}
        if f"{CHARS}=Q1/hit@1" not in m:
            continue
        row = pipeline(metrics)
        for metric in ("hit@1", "mrr@10"):
            cells[row][f"all {metric}"].append(m.get(metric))
            for q in QUARTILES:
                cells[row][f"{q} {metric}"].append(m.get(f"{CHARS}={q}/{metric}"))
        cells[row]["fallbacks"].append(sum((query.get("fallbacks") or {}).values()))
    columns = [f"{p} {metric}" for metric in ("hit@1", "mrr@10") for p in ("all", *QUARTILES)]
    order = sorted(cells, key=lambda r: (r.split(" + query=")[0], " + query=" in r, r))  # each pipeline raw first, then condensed
    rows = [{"pipeline": r, **{c: _stat(cells[r][c], 100) for c in columns},
             "fallbacks": _stat(cells[r]["fallbacks"], 1, 0)} for r in order]
    return pd.DataFrame(rows, columns=["pipeline", *columns, "fallbacks"])
