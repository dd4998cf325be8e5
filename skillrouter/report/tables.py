"""The paper tables, each declared once: which runs, rows, column dimensions, metrics, aggregation.

A table's cells come from the tidy run table. Column dimensions are choice keys (``tier``, ``topk``,
``fields``...); ``tier`` gains an ``avg`` column, the mean of the Easy and Hard runs of the same
system, defined only when both exist. A missing cell keeps the reason (which run is missing, or
the error of the run that failed) for the rendered footnote.

Seeds: a cell is every seed's run of its system (the latest run per seed), shown as the mean, the sample s.d. and
the number of seeds; the ``avg`` column averages Easy and Hard seed by seed. A cell with fewer seeds than the table's
others says which are missing, and a cell made by code that has changed since (:mod:`.freshness`) names the stages.
"""
from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from .collect import CHOICE_KEYS, of_sweep, per_query, unsynthesised, usable
from .significance import paired_randomization

ENCODER_ORDER = ("bm25", "minilm", "bge_large", "e5_large", "gte_large", "qwen3_emb_0.6b", "qwen3_emb_8b",
                 "trained", "trained_r3", "trained_r3_skip")
TIER_VALUES = ("easy", "hard")


# Reranker presets whose scoring head starts from random weights: a row of one is not a base reranker.
UNTRAINED_HEADS = {"minilm_ce": "MiniLM with a freshly initialised classification head"}
UNTRAINED = " (untrained head)"


def fusion_label(row: pd.Series) -> str:
    """`` + fusion α=0.3`` (a given weight), `` + fusion α (dev)`` (chosen on the dev split: the chosen weights are
    in the table's notes), `` + rrf``; nothing for the reranker's order alone."""
    method = row.get("fusion") or "none"
    if method == "interpolate":
        return " + fusion α (dev)" if row.get("fusion_chosen_on") == "dev" else f" + fusion α={float(row['fusion_alpha']):g}"
    return " + rrf" if method == "rrf" else ""


def system_label(row: pd.Series) -> str:
    label = str(row["encoder"])
    if row["reranker"] not in (None, "none"):
        label += " + " + (f"trained[{row['loss']}]" if row["reranker"] == "trained" else str(row["reranker"]))
        label += UNTRAINED if row["reranker"] in UNTRAINED_HEADS else ""
        label += fusion_label(row)
    return label


def loss_label(row: pd.Series) -> str:
    if row["reranker"] == "trained":
        return str(row["loss"]) + fusion_label(row)
    kind = UNTRAINED if row["reranker"] in UNTRAINED_HEADS else " (base, not fine-tuned)"
    return str(row["reranker"]) + kind + fusion_label(row)


def untrained_note(rows: list[str]) -> list[str]:
    """The footnote a table with a random-head row carries: what that row is."""
    shown = sorted({name for name in UNTRAINED_HEADS if any(name in r and r.endswith(UNTRAINED) for r in rows)})
    return [f"(untrained head): {name} is a {UNTRAINED_HEADS[name]}, never fine-tuned: its order is a random function of "
            "the text, a floor for the trained rows, not a base reranker." for name in shown]


# How the tables name metrics and column values (render.py and the notes both).
NAMES = {"hit@1": "Hit@1", "mrr@10": "MRR@10", "r@10": "R@10", "r@20": "R@20", "r@50": "R@50", "fc@10": "FC@10",
         "ndcg@10": "NDCG@10", "comp@10": "Comp@10", "set_compat": "Set-Compat", "easy": "Easy", "hard": "Hard",
         "avg": "Avg", "nd": "ND", "all": "All", "oracle_nd": "Oracle-ND"}


def column_label(part: str) -> str:
    """How a table names a part of a column key: ``avg`` Avg, ``hit@1`` Hit@1, ``20`` K=20,
    ``gt_desc_words_quartile=Q1/hit@1`` Q1 Hit@1."""
    if part in NAMES:
        return NAMES[part]
    if part.isdigit():
        return f"K={part}"
    for prefix, word in (("single/", "Single "), ("multi/", "Multi ")):
        if part.startswith(prefix):
            return word + column_label(part[len(prefix):])
    stratum, sep, metric = part.partition("/")
    if sep and "=" in stratum:  # a breakdown key, <tag>=<value>/<metric>: "Q1 Hit@1"
        return f"{stratum.split('=', 1)[1]} {column_label(metric)}"
    return part


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
    # (row, row the papers have it at or above, where they do): each gets a note on whether this table agrees
    expected_orders: tuple[tuple[str, str, str], ...] = ()


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
              select={"reranker": ("trained", "minilm_cosine"), "topk": ("20",), "fields": ("all",), "fusion": ("none",)},
              rows="loss_label", significance_vs="pointwise",
              expected_orders=(("listwise", "pointwise", "both papers"),)),
    TableSpec("skip_ablation", "SKIP ablation (R3's four rows)", "skip_ablation", ("hit@1", "ndcg@10", "r@10", "set_compat"),
              select={"tier": ("easy",), "fields": ("all",)}, columns=(),
              row_specs=(("Embedding w/o SKIP", (("encoder", "trained_r3"), ("reranker", "none"))),
                         ("Embedding w/ SKIP", (("encoder", "trained_r3_skip"), ("reranker", "none"))),
                         ("Reranker w/o graded SKIP", (("encoder", "trained_r3"), ("reranker", "trained"), ("loss", "listwise"))),
                         ("Reranker w/ graded SKIP", (("encoder", "trained_r3"), ("reranker", "trained"), ("loss", "graded")))),
              expected_orders=(("Embedding w/o SKIP", "Embedding w/ SKIP", "R3's Table 10"),
                               ("Reranker w/ graded SKIP", "Reranker w/o graded SKIP", "R3's Table 10"))),
    TableSpec("topk_ablation", "Top-K ablation: Hit@1 by candidates reranked", "topk_ablation", ("hit@1",),
              select={"fields": ("all",), "fusion": ("none",)}, exclude={"reranker": ("none",)}, columns=("topk", "tier"),
              column_values={"topk": ("10", "20", "50")}, row_needs={"topk": ("10", "50")}),
    TableSpec("single_multi", "Single- vs multi-skill queries (Easy tier)", "pipeline_results",
              ("single/hit@1", "single/r@10", "single/fc@10", "multi/hit@1", "multi/r@10", "multi/fc@10"),
              select={"fields": ("all",), "tier": ("easy",), "topk": ("20",)}, columns=()),
)


@dataclass
class Table:
    spec: TableSpec
    values: pd.DataFrame                          # rows x (column dims..., metric): the mean over seeds, NaN where missing
    missing: dict[tuple[str, tuple], str]         # (row, column) -> reason
    significant: set[tuple[str, tuple]] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)
    sd: pd.DataFrame | None = None                # the sample s.d. over seeds (NaN for one seed)
    n: pd.DataFrame | None = None                 # the seeds behind each value
    marked: dict[tuple[str, tuple], list[str]] = field(default_factory=dict)  # shown cells' footnoted remarks

    @property
    def seeds(self) -> int:
        """The most seeds any cell has (1: a one-seed table, shown without s.d.)."""
        return int(self.n.max().max()) if self.n is not None and self.n.notna().any().any() else 1


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


def _seed_order(seed: str) -> tuple[int, str]:
    """Seeds, strings as a run's choices hold them, in the order of their numbers: 2 before 10."""
    return len(seed), seed


def _per_seed(hit: pd.DataFrame, metrics: tuple[str, ...]) -> dict[str, pd.Series]:
    """One run per seed among a cell's matching runs: the latest with the most of the table's metrics."""
    present = hit[[m for m in metrics if m in hit.columns]].notna().sum(axis=1)
    out = {}
    for seed, runs in hit.groupby(hit["seed"].fillna("0").astype(str), sort=True):
        best = present.loc[runs.index]
        out[str(seed)] = runs.loc[best[best == best.max()].index[-1]]
    return out


def _stat(values: list[float]) -> tuple[float, float, int]:
    """Mean, sample s.d. (NaN for one value) and count, NaNs left out."""
    kept = [v for v in values if not pd.isna(v)]
    if not kept:
        return np.nan, np.nan, 0
    return float(np.mean(kept)), float(np.std(kept, ddof=1)) if len(kept) > 1 else np.nan, len(kept)


def build_table(spec: TableSpec, runs: pd.DataFrame, run_root: Path, with_significance: bool = False) -> Table:
    all_runs = _with_labels(of_sweep(runs, spec.sweep))
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
    index = pd.Index(rows, name=spec.rows if not spec.row_specs else "row")
    values, sd, n = (pd.DataFrame(np.nan, index=index, columns=columns) for _ in range(3))
    missing: dict[tuple[str, tuple], str] = {}
    chosen: dict[tuple[str, tuple], dict[str, pd.Series]] = {}  # per cell, its run of each seed

    def put(row: str, col: tuple, m: str, per_seed: list[float]) -> None:
        key = (*col, m) if spec.columns else m
        values.loc[row, key], sd.loc[row, key], n.loc[row, key] = _stat(per_seed)

    for row, col in itertools.product(rows, col_keys):
        selector = {**row_sel[row], **{d: v for d, v in zip(spec.columns, col) if v != "avg"}}
        if "avg" in col:
            if parts := _tier_parts(chosen, row, col):
                for m in spec.metrics:
                    put(row, col, m, list(_seed_values(parts, m).values()))
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
        chosen[(row, col)] = per_seed = _per_seed(hit, spec.metrics)
        for m in spec.metrics:
            put(row, col, m, [r.get(m, np.nan) for r in per_seed.values()])
        absent = [m for m in spec.metrics if all(pd.isna(r.get(m, np.nan)) for r in per_seed.values())]
        if absent:  # a stratum no query falls in (tied quartile edges) has no metric
            missing[(row, col)] = f"no {', '.join(absent)} in the run (no query in that stratum)"
    if spec.drop:
        a, b = spec.drop
        for m in spec.metrics:
            values[(f"drop {a}-{b} (pp)", m)] = values[(a, m)] - values[(b, m)]
            sd[(f"drop {a}-{b} (pp)", m)], n[(f"drop {a}-{b} (pp)", m)] = np.nan, np.minimum(n[(a, m)], n[(b, m)])
    table = Table(spec, values, missing, notes=untrained_note(rows) + fusion_note(chosen) + training_note(chosen), sd=sd, n=n,
                  marked=_remarks(chosen))
    read = functools.cache(lambda run: per_query(run_root, run))  # each run's file once, for every metric and row
    if with_significance and spec.significance_vs in rows:
        _mark_significance(table, chosen, read)
    for order in spec.expected_orders if col_keys else ():
        table.notes += ordering_note(spec, order, col_keys[-1], chosen, read if with_significance else None)
    return table


def _tier_parts(chosen: dict[tuple[str, tuple], dict[str, pd.Series]], row: str, col: tuple) -> list[dict[str, pd.Series]]:
    """The runs by seed behind a cell: its own, or for an ``avg`` column the Easy and Hard cells' when both exist and
    share a seed (empty otherwise)."""
    parts = [chosen.get((row, tuple(t if v == "avg" else v for v in col))) for t in TIER_VALUES] if "avg" in col \
        else [chosen.get((row, col))]
    return parts if all(parts) and set.intersection(*(set(p) for p in parts)) else []


def _seed_values(parts: list[dict[str, pd.Series]], metric: str) -> dict[str, float]:
    """A cell's metric per seed (in seed order), averaged over its parts (the tiers of an ``avg`` column)."""
    seeds = sorted(set.intersection(*(set(p) for p in parts)), key=_seed_order)
    return {seed: float(np.mean([p[seed].get(metric, np.nan) for p in parts])) for seed in seeds}


def ordering_note(spec: TableSpec, order: tuple[str, str, str], col: tuple,
                  chosen: dict[tuple[str, tuple], dict[str, pd.Series]], read: Callable[[str], dict] | None) -> list[str]:
    """Whether the table shows the order the papers report between two rows (``order``: the row they have at or above
    the other, where), on its first metric in ``col``, measured: the gap, seed by seed, against the seeds' s.d., the
    paired test over queries (``read``: a run's per-query metrics; None: no test), and the metrics each row leads on.
    A reversal within the seeds' noise is no finding."""
    high, low, who = order
    a, b = _tier_parts(chosen, high, col), _tier_parts(chosen, low, col)
    if not a or not b:
        return []

    def mean(parts: list[dict[str, pd.Series]], metric: str) -> float:
        return _stat(list(_seed_values(parts, metric).values()))[0]

    metric = spec.metrics[0]
    va, vb = _seed_values(a, metric), _seed_values(b, metric)
    (ma, sa, _), (mb, sb, _) = _stat(list(va.values())), _stat(list(vb.values()))
    gap, holds = 100 * (ma - mb), ma >= mb
    side = "at or above" if holds else "below"
    gaps = [100 * (va[s] - vb[s]) for s in va if s in vb]
    text = (f"{high} against {low} (at or above it in {who}): here, on "
            f"{' '.join(column_label(p) for p in (*col, metric))}, {high} is {side} it, {100 * ma:.1f} "
            f"against {100 * mb:.1f} ({gap:+.1f} points)")
    if len(gaps) > 1:
        text += (f"; seed by seed {', '.join(f'{g:+.1f}' for g in gaps)}: {side} in "
                 f"{sum((g >= 0) == holds for g in gaps)} of {len(gaps)} seeds")
    spreads = [s for s in (sa, sb) if not pd.isna(s)]
    noise = bool(spreads) and abs(gap) <= 100 * max(spreads)
    if spreads:
        text += f"; the gap is {'within' if noise else 'larger than'} one seed s.d. ({100 * max(spreads):.1f})"
    if read is not None:
        qa, qb = ({(i, q): v for i, part in enumerate(parts) for q, v in _query_means(part, read, metric).items()}
                  for parts in (a, b))
        common = sorted(set(qa) & set(qb))
        p = paired_randomization([qa[q] for q in common], [qb[q] for q in common]) if common else 1.0
        noise = noise and p >= 0.05
        text += (f"; over the {len(common)} queries{' (each averaged over the seeds)' if len(gaps) > 1 else ''}, "
                 f"paired randomization test: p = {p:.2f}, {'' if p < 0.05 else 'not '}significant")
    diffs = {m: mean(a, m) - mean(b, m) for m in spec.metrics}
    ahead = [f"{row} on {', '.join(column_label(m) for m, d in diffs.items() if sign * d > 0)}"
             for row, sign in ((high, 1), (low, -1)) if any(sign * d > 0 for d in diffs.values())]
    where = f" in the {' '.join(column_label(p) for p in col)} columns" if col else ""
    text += f"; ahead{where}: {'; '.join(ahead)}" if ahead else ""
    if not holds and noise:
        text += f". The reversal is within the seeds' noise: on this data it is no evidence against the order in {who}"
    return [text + "."]


def _remarks(chosen: dict[tuple[str, tuple], dict[str, pd.Series]]) -> dict[tuple[str, tuple], list[str]]:
    """Per shown cell, what its footnote says: fewer seeds than the table's others (which ones are missing), runs made
    by code that has changed since (which stages)."""
    every = sorted({seed for per_seed in chosen.values() for seed in per_seed}, key=_seed_order)
    out: dict[tuple[str, tuple], list[str]] = {}
    for cell, per_seed in chosen.items():
        lack = [seed for seed in every if seed not in per_seed]
        if lack:
            out.setdefault(cell, []).append(f"{len(per_seed)} of {len(every)} seeds: no run of seed {', '.join(lack)}")
        stale = sorted({st for r in per_seed.values() for st in str(r.get("stale") or "").split(",") if st})
        if stale:
            out.setdefault(cell, []).append(f"made by code that has changed since: {', '.join(stale)} (rerun its sweep)")
    return out


def _in_runs(runs: list[pd.Series], column: str, said: str, why: str) -> str:
    """``; <said> in n of m runs: <why>`` where any run's ``column`` is true ("" where none's is)."""
    n = sum(1 for r in runs if r.get(column) is True)
    return f"; {said} in {n} of {len(runs)} runs: {why}" if n else ""


def _flat(runs: list[pd.Series], column: str) -> str:
    """Where any run's dev curve was flat: a choice made on a flat curve is no evidence."""
    return _in_runs(runs, column, "its dev curve was flat (every choice within one standard error of the best)",
                    "a choice made there is no evidence")


def fusion_note(chosen: dict[tuple[str, tuple], dict[str, pd.Series]]) -> list[str]:
    """What weights the rows whose fusion weight was chosen on the dev split got, and whether the curve could choose."""
    runs: dict[str, list[pd.Series]] = {}
    for (row, _), per_seed in sorted(chosen.items(), key=lambda kv: str(kv[0])):
        runs.setdefault(row, []).extend(r for r in per_seed.values() if r.get("fusion_chosen_on") == "dev")
    def alphas(rs: list[pd.Series]) -> str:
        return ", ".join(sorted({f"{float(r['fusion_alpha']):g}" for r in rs}, key=float))

    return [f"{row}: α chosen on the dev split (held out of every training) by the cell's objective, over 0, 0.1, ..., 1: "
            f"{alphas(rs)} across its runs" + _flat(rs, "fusion_flat") for row, rs in runs.items() if rs]


def training_note(chosen: dict[tuple[str, tuple], dict[str, pd.Series]]) -> list[str]:
    """The epochs early stopping kept for each row's trained reranker (and encoder), and whether the curve could
    choose."""
    notes = []
    for stage in ("reranker", "encoder"):
        trainings: dict[str, dict[str, pd.Series]] = {}  # a row's trainings by seed: its columns (tiers) share them
        for (row, _), per_seed in sorted(chosen.items(), key=lambda kv: str(kv[0])):
            trainings.setdefault(row, {}).update(
                {seed: r for seed, r in per_seed.items() if not pd.isna(r.get(f"{stage}_epochs", np.nan))})
        for row, by_seed in trainings.items():
            rs = [by_seed[seed] for seed in sorted(by_seed, key=_seed_order)]
            if rs:
                kept = ", ".join(str(int(r[f"{stage}_epochs"])) for r in rs)
                ran = max(int(r[f"{stage}_epochs_run"]) for r in rs)
                notes.append(f"{row}: the trained {stage} kept epoch {kept} (early stopping on the dev split, up to "
                             f"{ran} epoch{'' if ran == 1 else 's'} run)" + _flat(rs, f"{stage}_dev_flat")
                             + _in_runs(rs, f"{stage}_dev_saturated", "the epoch kept was within one standard error of "
                                        "a perfect dev objective", "training stopped there"))
    return notes


def _query_means(runs: dict[str, pd.Series], read: Callable[[str], dict], metric: str) -> dict[str, float]:
    """Each query's metric, averaged over a cell's seeds (the queries every seed scored); ``read``: a run's per-query
    metrics."""
    tables = [read(r["run"]) for r in runs.values()]
    qids = set.intersection(*(set(q for q in t if metric in t[q]) for t in tables))
    return {q: float(np.mean([t[q][metric] for t in tables])) for q in qids}


def _mark_significance(table: Table, chosen: dict[tuple[str, tuple], dict[str, pd.Series]],
                       read: Callable[[str], dict]) -> None:
    ref = table.spec.significance_vs
    for (row, col), runs in chosen.items():
        base = chosen.get((ref, col))
        if row == ref or base is None:
            continue
        for m in table.spec.metrics:
            a, b = _query_means(runs, read, m), _query_means(base, read, m)
            qids = sorted(set(a) & set(b))
            if qids and paired_randomization([a[q] for q in qids], [b[q] for q in qids]) < 0.05:
                table.significant.add((row, (*col, m)))
    table.notes.append(f"† p < 0.05 against {ref}, two-sided paired randomization test over queries (10,000 sign flips)"
                       + (", each query's metric averaged over the seeds." if table.seeds > 1 else "."))


def reranker_contribution(runs: pd.DataFrame, run_root: Path) -> pd.DataFrame:
    """Per pipeline (and tier, topk): queries the reranker fixed (encoder miss -> Hit@1), degraded (hit -> miss), and
    the net change, averaged over the seeds, against the encoder-only run of the same first stage (data, generated
    data, evaluator, encoder, fields, tier, FN filter, seed): the pipeline's own sweep's where it has one, else one of
    the same split (whether its model left the dev split out), else any. Without ``synth`` in the match an encoder
    trained on generated pairs (``synth_demo``) had stood in for the pipeline's own, and the table counted fixes
    against a weaker model. Also where a trained reranker put its training positives: their share of the reranked
    candidates and of its top-1 picks (a reranker that learned which skills were positives puts them first far
    beyond their share)."""
    df = _with_labels(usable(runs))
    df = df.assign(synth=df["synth"].where(~unsynthesised(df), "none"))
    base_keys = ["data", "synth", "eval", "encoder", "fields", "tier", "fn_filter", "seed"]  # every run has them
    encoder_only: dict[tuple, list[pd.Series]] = {}
    for _, r in df[df["reranker"] == "none"].iterrows():
        encoder_only.setdefault(tuple(r[base_keys].fillna("")), []).append(r)
    out = []
    for _, r in df[df["reranker"] != "none"].iterrows():
        candidates = encoder_only.get(tuple(r[base_keys].fillna("")), [])
        if not candidates:
            continue
        sweep = Path(r["run"]).parent
        base = max(reversed(candidates), key=lambda c: (Path(c["run"]).parent == sweep, c["split"] == r["split"]))
        a, b = per_query(run_root, r["run"]), per_query(run_root, base["run"])
        fixed = sum(1 for q in a if a[q]["hit@1"] > b.get(q, {}).get("hit@1", 0))
        degraded = sum(1 for q in a if a[q]["hit@1"] < b.get(q, {}).get("hit@1", 0))
        out.append({"system": r["system"], "tier": r["tier"], "topk": r["topk"], "seed": r["seed"], "fixed": fixed,
                    "degraded": degraded, "net": fixed - degraded, "queries": len(a),
                    "positives in candidates": r.get("tp_candidate_share"), "positives at top-1": r.get("tp_top1_share")})
    cols = ["system", "tier", "topk", "fixed", "degraded", "net", "queries", "n_seeds", "positives in candidates",
            "positives at top-1"]
    if not out:
        return pd.DataFrame(columns=cols)
    per_run = pd.DataFrame(out).drop_duplicates(["system", "tier", "topk", "seed"], keep="last")
    table = per_run.groupby(["system", "tier", "topk"], sort=True).agg(
        fixed=("fixed", "mean"), degraded=("degraded", "mean"), net=("net", "mean"), queries=("queries", "first"),
        n_seeds=("seed", "nunique"), **{c: (c, "mean") for c in ("positives in candidates", "positives at top-1")})
    return table.reset_index()[cols]


__all__ = ["CHOICE_KEYS", "TABLES", "Table", "TableSpec", "build_table", "reranker_contribution"]
