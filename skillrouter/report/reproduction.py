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
NOTES = ["ours and published in %, diff = ours - published in percentage points (for a stated range: 0 inside it, else "
         "the distance to its nearer end); --- : no run (see the sweeps reproduce_skillrouter / reproduce_r3 / "
         "reproduce_r3_skillret / downstream) or no published value.",
         "Tiny stand-in models make the 'ours' column a format check, not a reproduction; with the real checkpoints "
         "(hub access) the same sweeps fill it for real."]


def paper_values() -> list[dict[str, Any]]:
    return yaml.safe_load(resources.files("skillrouter.report").joinpath("paper_values.yaml").read_text())


def _runs_for(runs: pd.DataFrame, system: dict[str, str] | None, tier: str) -> list[pd.Series] | None:
    if not system:  # a published system with no preset here
        return None
    mask = pd.Series(True, index=runs.index)
    for key, value in system.items():
        mask &= (runs[key] == value) if key in runs.columns else False
    tiers = TIER_VALUES if tier == "avg" else (tier,)
    chosen = []
    for t in tiers:
        hit = runs[mask & (runs["tier"] == t)]
        if hit.empty:
            return None
        chosen.append(hit.iloc[-1])
    return chosen


def _bounds(value: Any) -> tuple[float | None, float | None]:
    """A published value in %: a number, or ``[low, high]`` where the paper states a range (e.g. "71-73 %")."""
    if value is None:
        return None, None
    lo, hi = (value, value) if not isinstance(value, (list, tuple)) else value
    return 100 * lo, 100 * hi


def _off(ours: float, lo: float, hi: float) -> float:
    """Ours minus the published value; for a range, 0 inside it, else the distance to its nearer end (signed)."""
    return ours - lo if ours < lo else ours - hi if ours > hi else 0.0


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
            lo, hi = _bounds(published.get(metric))
            rows.append({"paper": entry["paper"], "table": entry["table"], "row": entry["row"], "tier": entry["tier"],
                         "metric": metric, "ours": None if ours is None else round(ours, 2),
                         "published": None if lo is None else round(lo, 2) if lo == hi else f"{lo:.1f}-{hi:.1f}",
                         "diff (pp)": None if ours is None or lo is None else round(_off(ours, lo, hi), 2),
                         "run": " + ".join(r["run"] for r in chosen) if chosen else None})
    return pd.DataFrame(rows, columns=COLUMNS)
