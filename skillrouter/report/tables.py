"""The paper tables, each declared once: which runs, rows, column dimensions, metrics, aggregation.

A table's cells come from the tidy run table. Column dimensions are choice keys (``tier``, ``topk``,
``fields``...); ``tier`` gains an ``avg`` column, the mean of the Easy and Hard runs of the same
system, defined only when both exist. A missing cell keeps the reason (which run is missing, or
the error of the run that failed) for the rendered footnote.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from .collect import CHOICE_KEYS, per_query, unsynthesised, usable
from .significance import paired_randomization

ENCODER_ORDER = ("bm25", "minilm", "bge_large", "e5_large", "gte_large", "qwen3_emb_0.6b", "qwen3_emb_8b",
                 "trained", "trained_r3", "trained_r3_skip")
TIER_VALUES = ("easy", "hard")


# Reranker presets whose scoring head starts from random weights: a row of one is not a base reranker.
UNTRAINED_HEADS = {"minilm_ce": "MiniLM with a freshly initialised classification head"}
UNTRAINED = " (untrained head)"


def system_label(row: pd.Series) -> str:
    label = str(row["encoder"])
    if row["reranker"] not in (None, "none"):
        label += " + " + (f"trained[{row['loss']}]" if row["reranker"] == "trained" else str(row["reranker"]))
        label += UNTRAINED if row["reranker"] in UNTRAINED_HEADS else ""
    return label


def loss_label(row: pd.Series) -> str:
    return str(row["loss"]) if row["reranker"] == "trained" else str(row["reranker"]) + UNTRAINED


def untrained_note(rows: list[str]) -> list[str]:
    """The footnote a table with a random-head row carries: what that row is."""
    shown = sorted({name for name in UNTRAINED_HEADS if any(name in r and r.endswith(UNTRAINED) for r in rows)})
    return [f"(untrained head): {name} is a {UNTRAINED_HEADS[name]}, never fine-tuned: its order is a random function of "
            "the text, a floor for the trained rows, not a base reranker." for name in shown]


DERIVED: dict[str, Callable[[pd.Series], str]] = {"system": system_label, "loss_label": loss_label}


@dataclass(frozen=True)
class TableSpec:
    name: str
    title: str
    sweep: str                                    # sweeps/<sweep>.yaml runs exactly what the table needs
    metrics: tuple[str, ...]
    select: dict[str, tuple[str, ...]] = field(default_factory=dict)   # choice -> allowed values
    exclude: dict[str, tuple[str, ...]] = field(default_factory=dict)  # choice -> forbidden values
    rows: str = "system"                          # a choice key or a DERIVED label
    row_specs: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()  # explicit (label, selector) rows
    columns: tuple[str, ...] = ("tier",)
    column_values: dict[str, tuple[str, ...]] = field(default_factory=dict)
    significance_vs: str | None = None            # row label every other row is tested against
    drop: tuple[str, str] | None = None           # add a column (a - b) over the first column dimension
    row_needs: dict[str, tuple[str, ...]] = field(default_factory=dict)  # a row needs a run with one of these


TABLES: tuple[TableSpec, ...] = (
    TableSpec("encoder_results", "Encoder results (Easy / Hard / average)", "encoder_results",
              ("hit@1", "mrr@10", "r@10", "r@20", "r@50", "fc@10"),
              select={"reranker": ("none",), "fields": ("all",)}, rows="encoder", significance_vs="minilm"),
    TableSpec("pipeline_results", "Retrieve-and-rerank pipelines at top-20", "pipeline_results",
              ("hit@1", "mrr@10", "r@10", "r@20", "r@50", "fc@10"),
              select={"fields": ("all",), "topk": ("20",)}, exclude={"reranker": ("none",)}),
    TableSpec("body_removal", "Body removal: Hit@1 with name+description only, full text, and Oracle-ND", "body_removal",
              ("hit@1",), columns=("fields",), column_values={"fields": ("nd", "all", "oracle_nd")},
              select={"tier": ("easy",)}, drop=("all", "nd"), row_needs={"fields": ("nd", "oracle_nd")}),
    TableSpec("body_removal_strata", "Body removal by GT description length: Hit@1 per quartile of description words, "
              "name+description only vs full text", "body_removal",
              tuple(f"gt_desc_words_quartile=Q{i}/hit@1" for i in range(1, 5)), columns=("fields",),
              column_values={"fields": ("nd", "all")}, select={"tier": ("easy",)}, drop=("all", "nd"),
              row_needs={"fields": ("nd",)}),
    TableSpec("fn_filter", "False-negative filter ablation (trained encoder)", "fn_filter", ("hit@1", "mrr@10"),
              select={"encoder": ("trained",), "reranker": ("none",), "fields": ("all",)}, rows="fn_filter"),
    TableSpec("loss_ablation", "Reranker loss ablation (top-20)", "loss_ablation", ("hit@1", "mrr@10", "r@10", "fc@10"),
              select={"reranker": ("trained", "minilm_ce"), "topk": ("20",), "fields": ("all",)}, rows="loss_label",
              significance_vs="pointwise"),
    TableSpec("skip_ablation", "SKIP ablation (R3's four rows)", "skip_ablation", ("hit@1", "ndcg@10", "r@10", "set_compat"),
              select={"tier": ("easy",), "fields": ("all",)}, columns=(),
              row_specs=(("Embedding w/o SKIP", (("encoder", "trained_r3"), ("reranker", "none"))),
                         ("Embedding w/ SKIP", (("encoder", "trained_r3_skip"), ("reranker", "none"))),
                         ("Reranker w/o graded SKIP", (("encoder", "trained_r3"), ("reranker", "trained"), ("loss", "listwise"))),
                         ("Reranker w/ graded SKIP", (("encoder", "trained_r3"), ("reranker", "trained"), ("loss", "graded"))))),
    TableSpec("topk_ablation", "Top-K ablation: Hit@1 by candidates reranked", "topk_ablation", ("hit@1",),
              select={"fields": ("all",)}, exclude={"reranker": ("none",)}, columns=("topk", "tier"),
              column_values={"topk": ("10", "20", "50")}, row_needs={"topk": ("10", "50")}),
    TableSpec("single_multi", "Single- vs multi-skill queries (Easy tier)", "pipeline_results",
              ("single/hit@1", "single/r@10", "single/fc@10", "multi/hit@1", "multi/r@10", "multi/fc@10"),
              select={"fields": ("all",), "tier": ("easy",), "topk": ("20",)}, columns=()),
)


@dataclass
class Table:
    spec: TableSpec
    values: pd.DataFrame                          # rows x (column dims..., metric), NaN where missing
    missing: dict[tuple[str, tuple], str]         # (row, column) -> reason
    significant: set[tuple[str, tuple]] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)


def _matches(df: pd.DataFrame, selector: dict[str, tuple[str, ...]], negate: bool = False) -> pd.Series:
    mask = pd.Series(True, index=df.index)
    for key, allowed in selector.items():
        hit = df[key].isin(allowed)
        mask &= ~hit if negate else hit
    return mask


def _with_labels(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    for name, fn in DERIVED.items():
        df[name] = df.apply(fn, axis=1) if len(df) else pd.Series(dtype=str)
    return df


def _order(labels: list[str]) -> list[str]:
    rank = {e: i for i, e in enumerate(ENCODER_ORDER)}
    return sorted(set(labels), key=lambda s: (rank.get(s.split(" + ")[0], len(rank)), s))


def _dim_values(spec: TableSpec, dim: str, scoped: pd.DataFrame) -> tuple[str, ...]:
    if dim == "tier":
        return TIER_VALUES
    return spec.column_values.get(dim) or tuple(sorted(set(scoped[dim]), key=lambda v: (len(v), v)))


SWEEPS = Path(__file__).resolve().parents[2] / "sweeps"
SYSTEM_KEYS = ("encoder", "reranker", "loss")  # what a row is; a table keeps the values its own sweep runs


def sweep_systems(sweep: str) -> dict[str, tuple[str, ...]]:
    """The encoder / reranker / loss values ``sweeps/<sweep>.yaml`` sweeps (empty when the file is not here, or the
    sweep goes by experiments): a paper table shows the rows its sweep defines, not a neighbouring sweep's cells
    that happen to match its selection (the SKIP ablation's Easy-only R3 pipelines in the pipeline table)."""
    import yaml

    path = SWEEPS / f"{sweep}.yaml"
    if not path.exists():
        return {}
    params = (yaml.safe_load(path.read_text()).get("hydra") or {}).get("sweeper", {}).get("params") or {}
    return {k: tuple(str(v).split(",")) for k, v in params.items() if k in SYSTEM_KEYS}


def build_table(spec: TableSpec, runs: pd.DataFrame, run_root: Path, with_significance: bool = False) -> Table:
    all_runs = _with_labels(runs)
    ok = all_runs[all_runs.index.isin(usable(runs).index)]
    scoped = ok[_matches(ok, spec.select) & _matches(ok, spec.exclude, negate=True) & _matches(ok, sweep_systems(spec.sweep))
                & unsynthesised(ok)]
    if spec.row_specs:
        row_sel = {label: dict(sel) for label, sel in spec.row_specs}
        rows = list(row_sel)
    else:
        keep = scoped[_matches(scoped, spec.row_needs)] if spec.row_needs else scoped
        row_sel = {label: {spec.rows: label} for label in keep[spec.rows]}
        rows = _order(list(row_sel))
    dims = [_dim_values(spec, d, scoped) for d in spec.columns]
    col_keys = list(itertools.product(*[vals + (("avg",) if d == "tier" else ()) for d, vals in zip(spec.columns, dims)]))
    columns = pd.MultiIndex.from_tuples([(*c, m) for c in col_keys for m in spec.metrics], names=[*spec.columns, "metric"]) \
        if spec.columns else pd.Index(spec.metrics, name="metric")
    values = pd.DataFrame(np.nan, index=pd.Index(rows, name=spec.rows if not spec.row_specs else "row"), columns=columns)
    missing: dict[tuple[str, tuple], str] = {}
    chosen: dict[tuple[str, tuple], pd.Series] = {}
    for row, col in itertools.product(rows, col_keys):
        selector = {**row_sel[row], **{d: v for d, v in zip(spec.columns, col) if v != "avg"}}
        if "avg" in col:
            parts = [chosen.get((row, tuple(t if v == "avg" else v for v in col))) for t in TIER_VALUES]
            if all(p is not None for p in parts):
                for m in spec.metrics:
                    values.loc[row, (*col, m) if spec.columns else m] = float(np.mean([p[m] for p in parts]))
            else:
                missing[(row, col)] = "needs both tier runs"
            continue
        hit = scoped[_matches(scoped, {k: (v,) for k, v in selector.items()})]
        if hit.empty:
            failed = all_runs[_matches(all_runs, {k: (v,) for k, v in selector.items()}) & (all_runs["status"] != "completed")]
            desc = ", ".join(f"{k}={v}" for k, v in selector.items())
            missing[(row, col)] = (f"run {failed.iloc[-1]['run']} {failed.iloc[-1]['status']}: {failed.iloc[-1]['error']}"
                                   if len(failed) else f"no completed run with {desc} (sweeps/{spec.sweep}.yaml)")
            continue
        present = hit[[m for m in spec.metrics if m in hit.columns]].notna().sum(axis=1)
        chosen[(row, col)] = run = hit.loc[present[present == present.max()].index[-1]]  # the latest with the most
        for m in spec.metrics:
            values.loc[row, (*col, m) if spec.columns else m] = run.get(m, np.nan)
        absent = [m for m in spec.metrics if pd.isna(run.get(m, np.nan))]
        if absent:  # a stratum no query falls in (tied quartile edges) has no metric
            missing[(row, col)] = f"no {', '.join(absent)} in the run (no query in that stratum)"
    if spec.drop:
        a, b = spec.drop
        for m in spec.metrics:
            values[(f"drop {a}-{b} (pp)", m)] = values[(a, m)] - values[(b, m)]
    table = Table(spec, values, missing, notes=untrained_note(rows))
    if with_significance and spec.significance_vs in rows:
        _mark_significance(table, chosen, run_root)
    return table


def _mark_significance(table: Table, chosen: dict[tuple[str, tuple], pd.Series], run_root: Path) -> None:
    ref = table.spec.significance_vs
    for (row, col), run in chosen.items():
        base = chosen.get((ref, col))
        if row == ref or base is None:
            continue
        a, b = per_query(run_root, run["run"]), per_query(run_root, base["run"])
        for m in table.spec.metrics:
            qids = sorted(q for q in a if m in a[q] and q in b and m in b[q])
            if qids and paired_randomization([a[q][m] for q in qids], [b[q][m] for q in qids]) < 0.05:
                table.significant.add((row, (*col, m)))
    table.notes.append(f"† p < 0.05 against {ref}, two-sided paired randomization test over queries (10,000 sign flips).")


def reranker_contribution(runs: pd.DataFrame, run_root: Path) -> pd.DataFrame:
    """Per pipeline run: queries the reranker fixed (encoder miss -> Hit@1), degraded (hit -> miss),
    and the net change, against the encoder-only run with the same encoder, fields, tier and data."""
    df = _with_labels(usable(runs))
    base_keys = ["data", "encoder", "fields", "tier", "fn_filter", "seed"]
    encoder_only = {tuple(r[k] for k in base_keys): r for _, r in df[df["reranker"] == "none"].iterrows()}
    out = []
    for _, r in df[df["reranker"] != "none"].iterrows():
        base = encoder_only.get(tuple(r[k] for k in base_keys))
        if base is None:
            continue
        a, b = per_query(run_root, r["run"]), per_query(run_root, base["run"])
        fixed = sum(1 for q in a if a[q]["hit@1"] > b.get(q, {}).get("hit@1", 0))
        degraded = sum(1 for q in a if a[q]["hit@1"] < b.get(q, {}).get("hit@1", 0))
        out.append({"system": r["system"], "tier": r["tier"], "topk": r["topk"], "fixed": fixed, "degraded": degraded,
                    "net": fixed - degraded, "queries": len(a)})
    cols = ["system", "tier", "topk", "fixed", "degraded", "net", "queries"]
    table = pd.DataFrame(out, columns=cols).drop_duplicates(["system", "tier", "topk"], keep="last")
    return table.sort_values(["system", "tier", "topk"], kind="stable").reset_index(drop=True)


__all__ = ["CHOICE_KEYS", "TABLES", "Table", "TableSpec", "build_table", "reranker_contribution"]
