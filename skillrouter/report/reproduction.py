"""Paper vs ours: every published value in ``paper_values.yaml`` next to the value of the run that
reproduces its row (same data, encoder, reranker and tier; ``avg`` = mean of Easy and Hard), and
the difference in percentage points."""
from __future__ import annotations

from importlib import resources
from typing import Any

import pandas as pd
import yaml

from .collect import usable
from .tables import TIER_VALUES

COLUMNS = ["paper", "table", "row", "tier", "metric", "ours", "published", "diff (pp)", "run"]
NOTES = ["ours and published in %, diff = ours - published in percentage points; --- : no run (see the sweeps "
         "reproduce_skillrouter / reproduce_r3 / reproduce_r3_skillret) or no published value.",
         "Tiny stand-in models make the 'ours' column a format check, not a reproduction; with the real checkpoints "
         "(hub access) the same sweeps fill it for real."]


def paper_values() -> list[dict[str, Any]]:
    return yaml.safe_load(resources.files("skillrouter.report").joinpath("paper_values.yaml").read_text())


def _runs_for(runs: pd.DataFrame, system: dict[str, str], tier: str) -> list[pd.Series] | None:
    mask = pd.Series(True, index=runs.index)
    for key, value in system.items():
        mask &= runs[key] == value
    tiers = TIER_VALUES if tier == "avg" else (tier,)
    chosen = []
    for t in tiers:
        hit = runs[mask & (runs["tier"] == t)]
        if hit.empty:
            return None
        chosen.append(hit.iloc[-1])
    return chosen


def reproduction_table(runs: pd.DataFrame, entries: list[dict[str, Any]] | None = None) -> pd.DataFrame:
    ok = usable(runs)
    rows = []
    for entry in entries if entries is not None else paper_values():
        chosen = _runs_for(ok, entry["system"], entry["tier"])
        published = entry.get("values") or {}
        metrics = list(published) or ["hit@1"]
        for metric in metrics:
            ours = None
            if chosen and metric in ok.columns and all(pd.notna(r[metric]) for r in chosen):
                ours = 100 * sum(float(r[metric]) for r in chosen) / len(chosen)
            paper = 100 * published[metric] if metric in published else None
            rows.append({"paper": entry["paper"], "table": entry["table"], "row": entry["row"], "tier": entry["tier"],
                         "metric": metric, "ours": None if ours is None else round(ours, 2),
                         "published": None if paper is None else round(paper, 2),
                         "diff (pp)": None if ours is None or paper is None else round(ours - paper, 2),
                         "run": " + ".join(r["run"] for r in chosen) if chosen else None})
    return pd.DataFrame(rows, columns=COLUMNS)
