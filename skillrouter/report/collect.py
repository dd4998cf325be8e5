"""Collect run directories into one tidy table: a row per run (choices + metrics + counts + status)."""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Iterator

import pandas as pd

from ..data.columnar import read_dataset
from ..data.types import Dataset
from .freshness import code_column, stale_column

log = logging.getLogger(__name__)
CHOICE_KEYS = ("data", "synth", "eval", "encoder", "reranker", "loss", "fusion", "fields", "tier", "topk", "fn_filter", "seed",
               "agent", "query", "cascade")
# How a run scored the test split: with all training data, or with the dev split held out of training (a cell whose
# fusion weight or parameters were chosen on dev). Both are test figures; a study's trials score "dev".
TEST_SPLITS = ("test", "test, dev held out")


def find_runs(roots: list[Path]) -> list[Path]:
    """Every run directory (one holding ``status.json`` or ``metrics.json``) under ``roots``."""
    found = {p.parent for root in roots for name in ("metrics.json", "status.json") for p in root.rglob(name)}
    return sorted(found, key=str)


def completed_runs(roots: list[Path], data: str | None = None) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Each completed run under ``roots`` with its ``metrics.json`` (only those on ``data`` when given): what the
    tables that read runs' own sections (cascade, condensation, downstream) draw from."""
    for run in find_runs(roots):
        path = run / "metrics.json"
        if not path.exists():
            continue
        metrics = json.loads(path.read_text())
        if metrics.get("status") == "completed" and (not data or metrics.get("choices", {}).get("data") == data):
            yield run, metrics


def shown_path(run_dir: Path, root: Path | None = None) -> str:
    """A run as reports name it: relative to ``root`` (default: the working directory) when inside it, so a report
    does not carry the machine's checkout path."""
    root = Path.cwd() if root is None else root
    inside = run_dir.resolve().is_relative_to(root.resolve())
    return str(run_dir.resolve().relative_to(root.resolve())) if inside else str(run_dir)


def _row(run_dir: Path, root: Path | None) -> dict[str, Any]:
    source = run_dir / "metrics.json"
    data = json.loads((source if source.exists() else run_dir / "status.json").read_text())
    status = data.get("status", "unknown")
    if status == "running":
        status = "incomplete"  # a killed or still-running job: never silently dropped
    row: dict[str, Any] = {"run": shown_path(run_dir, root) if root is not None else str(run_dir), "status": status,
                           "error": data.get("error")}
    row.update({k: str(data.get("choices", {}).get(k)) if k in data.get("choices", {}) else None for k in CHOICE_KEYS})
    if status == "completed":
        row["fusion"] = row["fusion"] or "none"  # runs from before fusion: the reranker's order alone
    fusion = data.get("fusion") or {}
    row.update(fusion_alpha=fusion.get("alpha"), fusion_chosen_on=fusion.get("chosen_on"),
               fusion_flat=(fusion.get("dev") or {}).get("flat"))
    for stage, dev in ((name, (t or {}).get("dev") or {}) for name, t in (data.get("training") or {}).items()):
        short = stage.removeprefix("train_")  # encoder | reranker
        row.update({f"{short}_epochs": dev.get("epoch_kept"), f"{short}_epochs_run": dev.get("epochs_run"),
                    f"{short}_dev_flat": dev.get("flat"), f"{short}_dev_saturated": dev.get("saturated")})
    positives = data.get("training_positives") or {}
    row.update(tp_candidate_share=positives.get("candidate_share"), tp_top1_share=positives.get("top1_share"))
    row["code"] = code_column(data.get("stages", {}))
    row["hardware"] = hardware_column(data.get("stages", {}))
    split = data.get("split") or {}
    row["split"] = ("dev" if split.get("scored") == "dev" else TEST_SPLITS[1] if "dev" in split else TEST_SPLITS[0])
    row["study"] = in_study(run_dir)
    row.update(data.get("metrics", {}))
    row.update({f"n_{k}": v for k, v in data.get("counts", {}).items()})
    down = data.get("downstream") or {}
    row.update({f"success/{c['label']}": c["success"] for c in down.get("conditions", [])})
    row.update({f"uplift/{label}": v for label, v in (down.get("uplift_recovered") or {}).items()})
    return row


def hardware_column(stages: dict[str, dict[str, Any]]) -> str | None:
    """Where a run's stages were built (each stage's cache entry records it), the distinct ones joined by " | " (a grid
    dispatched by stage builds its models on GPU nodes and its data on CPU ones); None for runs from before entries
    recorded it."""
    built_on = sorted({rec["hardware"] for rec in stages.values() if rec.get("hardware")})
    return " | ".join(built_on) or None


def in_study(run_dir: Path) -> bool:
    """A trial or held-out test cell of an Optuna study (its sweep folder, up to three levels up, holds the study's
    database): the tuning table's, not a paper table's, though its choices may match a showcase cell's."""
    return any((parent / "study.db").exists() for parent in list(run_dir.parents)[:3])


def collect(roots: list[Path], base: Path | None = None) -> pd.DataFrame:
    """One row per run, sorted; run paths relative to ``base`` so reports do not depend on where the
    project lives. Later duplicates of the same choices in the same grid folder (reruns) are kept but marked
    ``superseded``; the same choices in another sweep's folder are that sweep's own run."""
    rows = [_row(d, base) for d in find_runs(roots)]
    if not rows:
        return pd.DataFrame(columns=["run", "status", "error", "split", *CHOICE_KEYS, "superseded", "stale", "code"])
    df = pd.DataFrame(rows).sort_values("run", kind="stable").reset_index(drop=True)
    done = df["status"] == "completed"
    key = df[[*CHOICE_KEYS, "split", "fusion_alpha"]].fillna("").astype(str).agg("|".join, axis=1)  # eval: absent from older runs
    key = df["run"].map(lambda run: str(Path(run).parent)) + "|" + key
    strata = [c for c in df.columns if "=" in c]  # breakdown metrics: a run scored by other strata is not a rerun
    if strata:
        key = key + "|" + df[strata].notna().apply(lambda r: ",".join(r.index[r]), axis=1)
    latest = df[done].groupby(key[done]).tail(1).index
    df["superseded"] = done & ~df.index.isin(latest)
    df["stale"] = stale_column(df["code"], df["status"])
    return df


def usable(df: pd.DataFrame) -> pd.DataFrame:
    """The runs the paper tables show: completed, the latest of their choices, scored on the test split (a study's
    dev-scored trials and its held-out test cells are in the tuning table)."""
    split = df["split"].fillna("test") if "split" in df else pd.Series("test", index=df.index)  # runs from before splits
    study = df["study"].fillna(False).astype(bool) if "study" in df else pd.Series(False, index=df.index)
    return df[(df["status"] == "completed") & ~df["superseded"] & split.isin(TEST_SPLITS) & ~study]


def of_sweep(df: pd.DataFrame, sweep: str) -> pd.DataFrame:
    """The runs of ``sweep``'s own folder (``outputs/multirun/<sweep>``, as ``sweeps/<sweep>.yaml`` sets it) when there
    are any, else every run: a paper table shows the cells its sweep ran, not another sweep's runs whose choices happen
    to match while their other parameters (epochs, a tuned learning rate) differ."""
    own = df["run"].map(lambda run: sweep in Path(run).parts) if len(df) else pd.Series(dtype=bool)
    return df[own] if own.any() else df


def unsynthesised(df: pd.DataFrame) -> pd.Series:
    """Runs whose data came as it is (``synth=none``, or a run from before ``synth`` existed): the paper tables' and
    cases' systems; a model trained on generated pairs is another system under the same encoder choice."""
    return df["synth"].fillna("none").isin(["none", "None"])


def per_query(run_root: Path, run: str) -> dict[str, dict[str, float]]:
    return json.loads((run_root / run / "per_query.json").read_text())


def recall_curve(run_root: Path, run: str) -> list[float]:
    return json.loads((run_root / run / "metrics.json").read_text()).get("recall_curve", [])


def run_config(run: Path) -> dict[str, Any]:
    """The resolved (secret-scrubbed) config a run was composed from."""
    return json.loads((run / "provenance.json").read_text())["config"]


def run_stage_entry(run: Path, stage: str, kind: str | None = None) -> Path:
    """The cache entry a run's stage ``stage`` (its name in ``metrics.json``; ``kind``: its cache folder
    where the two differ) left: analyses read a run's parsed data and trained weights from the cache it
    used, never by recomputing them."""
    key = json.loads((run / "metrics.json").read_text()).get("stages", {}).get(stage, {}).get("key")
    cache = run_config(run)["cache_dir"]
    entry = Path(cache) / (kind or stage) / str(key)
    if not key or not entry.is_dir():
        raise FileNotFoundError(f"{run}: its {stage} stage ({key}) is not in {cache}; rerun the cell (only what is "
                                "missing is rebuilt) or point cache_dir at the cache it used")
    return entry


def run_dataset(run: Path) -> Dataset:
    """The parsed dataset (pool and queries with their GT) a run scored, from its ``load_data`` cache entry."""
    return read_dataset(run_stage_entry(run, "load_data"))
