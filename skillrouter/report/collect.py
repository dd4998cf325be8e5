"""Collect run directories into one tidy table: a row per run (choices + metrics + counts + status)."""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pandas as pd

log = logging.getLogger(__name__)
CHOICE_KEYS = ("data", "eval", "encoder", "reranker", "loss", "fields", "tier", "topk", "fn_filter", "seed")


def find_runs(roots: list[Path]) -> list[Path]:
    """Every run directory (one holding ``status.json`` or ``metrics.json``) under ``roots``."""
    found = {p.parent for root in roots for name in ("metrics.json", "status.json") for p in root.rglob(name)}
    return sorted(found, key=str)


def _row(run_dir: Path, root: Path | None) -> dict[str, Any]:
    source = run_dir / "metrics.json"
    data = json.loads((source if source.exists() else run_dir / "status.json").read_text())
    status = data.get("status", "unknown")
    if status == "running":
        status = "incomplete"  # a killed or still-running job: never silently dropped
    inside = root is not None and run_dir.resolve().is_relative_to(root.resolve())
    row: dict[str, Any] = {"run": str(run_dir.resolve().relative_to(root.resolve())) if inside else str(run_dir), "status": status,
                           "error": data.get("error")}
    row.update({k: str(data.get("choices", {}).get(k)) if k in data.get("choices", {}) else None for k in CHOICE_KEYS})
    row.update(data.get("metrics", {}))
    row.update({f"n_{k}": v for k, v in data.get("counts", {}).items()})
    return row


def collect(roots: list[Path], base: Path | None = None) -> pd.DataFrame:
    """One row per run, sorted; run paths relative to ``base`` so reports do not depend on where the
    project lives. Later duplicates of the same choices (reruns) are kept but marked ``superseded``."""
    rows = [_row(d, base) for d in find_runs(roots)]
    if not rows:
        return pd.DataFrame(columns=["run", "status", "error", *CHOICE_KEYS])
    df = pd.DataFrame(rows).sort_values("run", kind="stable").reset_index(drop=True)
    done = df["status"] == "completed"
    key = df[list(CHOICE_KEYS)].fillna("").astype(str).agg("|".join, axis=1)  # eval is absent from older runs
    latest = df[done].groupby(key[done]).tail(1).index
    df["superseded"] = done & ~df.index.isin(latest)
    return df


def usable(df: pd.DataFrame) -> pd.DataFrame:
    return df[(df["status"] == "completed") & ~df["superseded"]]


def per_query(run_root: Path, run: str) -> dict[str, dict[str, float]]:
    return json.loads((run_root / run / "per_query.json").read_text())


def recall_curve(run_root: Path, run: str) -> list[float]:
    return json.loads((run_root / run / "metrics.json").read_text()).get("recall_curve", [])
