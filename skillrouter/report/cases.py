"""Per-query cases of two systems on the same queries, SkillRouter's way of explaining a pipeline.

    python -m skillrouter.report.cases --a RUN --b RUN [--top 5] [--out reports/cases] [--name NAME]

Kinds (by Hit@1 over the scored GT): ``rescue`` — B has a GT at rank 1 where A had none (a reranker rescue,
an encoder advantage); ``degrade`` — A had one, B has not (e.g. pointwise degradation); ``both_miss`` —
neither (a system limitation). Within a kind the most telling come first: a rescue by how deep A had its
best GT (absent counts as deepest), a degradation by how deep B pushed it, a common miss by the better of
the two ranks; ties by query id. Each case shows the query (capped), its GT skills, each system's top-5
with GT marked, and each GT's rank under both (``-``: not in the ranking). The query texts and GT come
from the runs' parsed dataset in the cache (``load_data``), so a case file needs the cache the runs used.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..data.jsonl import atomic_write_text
from ..data.types import Query
from ..rankings import read_rankings
from .collect import run_dataset, shown_path, unsynthesised, usable
from .render import plain_to_latex, plain_to_markdown

KINDS = ("rescue", "degrade", "both_miss")
TITLES = {"rescue": "B rescues what A missed at rank 1", "degrade": "B loses what A had at rank 1",
          "both_miss": "Both miss at rank 1"}
QUERY_CAP, TOP = 160, 5


def rank_of(ranked: list[str], sid: str) -> int | None:
    return ranked.index(sid) + 1 if sid in ranked else None


def best_rank(ranked: list[str], gt: tuple[str, ...]) -> float:
    """The rank of the first GT in ``ranked`` (infinite when none is there)."""
    ranks = [r for g in gt if (r := rank_of(ranked, g)) is not None]
    return min(ranks) if ranks else float("inf")


@dataclass(frozen=True)
class Case:
    kind: str
    query: Query
    a: list[str]
    b: list[str]


def kind_of(gt: tuple[str, ...], a: list[str], b: list[str]) -> str | None:
    hit_a, hit_b = bool(a) and a[0] in gt, bool(b) and b[0] in gt
    return "rescue" if hit_b and not hit_a else "degrade" if hit_a and not hit_b else "both_miss" if not hit_a else None


def find_cases(queries: list[Query], a: dict[str, list[str]], b: dict[str, list[str]]) -> dict[str, list[Case]]:
    """Every query of each kind, most telling first (see the module docstring)."""
    out: dict[str, list[Case]] = {k: [] for k in KINDS}
    for q in queries:
        ra, rb = a.get(q.id, []), b.get(q.id, [])
        kind = kind_of(q.gt, ra, rb)
        if kind:
            out[kind].append(Case(kind, q, ra, rb))
    order = {"rescue": lambda c: -best_rank(c.a, c.query.gt), "degrade": lambda c: -best_rank(c.b, c.query.gt),
             "both_miss": lambda c: -min(best_rank(c.a, c.query.gt), best_rank(c.b, c.query.gt))}
    return {k: sorted(v, key=lambda c: (order[k](c), c.query.id)) for k, v in out.items()}


def _top(ranked: list[str], gt: tuple[str, ...]) -> str:
    return "; ".join(f"{sid} (GT)" if sid in gt else sid for sid in ranked[:TOP])


def case_frame(cases: list[Case], top: int) -> pd.DataFrame:
    rows = [{"query": c.query.id, "text": c.query.text[:QUERY_CAP] + ("..." if len(c.query.text) > QUERY_CAP else ""),
             "GT": "; ".join(c.query.gt), f"A top-{TOP}": _top(c.a, c.query.gt), f"B top-{TOP}": _top(c.b, c.query.gt),
             "GT rank (A / B)": "; ".join(f"{g}: {rank_of(c.a, g) or '-'} / {rank_of(c.b, g) or '-'}" for g in c.query.gt)}
            for c in cases[:top]]
    return pd.DataFrame(rows, columns=["query", "text", "GT", f"A top-{TOP}", f"B top-{TOP}", "GT rank (A / B)"])


def write_cases(a: Path, b: Path, out: Path, name: str, top: int = 5) -> list[Path]:
    """``<out>/<name>.md`` and ``.tex``: the top cases of each kind."""
    queries = list(run_dataset(a).queries)
    ranked_a = {qid: r.ids for qid, r in read_rankings(a / "rankings.jsonl").items()}
    ranked_b = {qid: r.ids for qid, r in read_rankings(b / "rankings.jsonl").items()}
    cases = find_cases(queries, ranked_a, ranked_b)
    shown = ("encoder", "reranker", "loss", "fields", "tier", "topk")
    notes = []
    for side, run in (("A", a), ("B", b)):
        choices = json.loads((run / "metrics.json").read_text())["choices"]
        notes.append(f"{side}: {shown_path(run)} (" + ", ".join(f"{k}={choices[k]}" for k in shown if k in choices) + ")")
    md, tex = [f"# Cases: {name}", ""], []
    for kind in KINDS:
        title = f"{TITLES[kind]} ({len(cases[kind])} queries; top {min(top, len(cases[kind]))})"
        frame = case_frame(cases[kind], top)
        md += [plain_to_markdown(frame, title, notes), ""]
        tex.append(plain_to_latex(frame, f"cases-{name}-{kind}", title, notes))
    written = [out / f"{name}.md", out / f"{name}.tex"]
    atomic_write_text(written[0], "\n".join(md))
    atomic_write_text(written[1], "\n".join(tex))
    return written


def case_pairs(runs: pd.DataFrame) -> list[tuple[str, str, str]]:
    """The comparisons the report index links, as ``(file name, run A, run B)`` on the Easy tier with full
    text: each encoder against the encoder table's reference (``minilm``: trained vs base), and each
    top-20 pipeline against its encoder alone."""
    done = usable(runs) if len(runs) else runs
    done = done[unsynthesised(done)] if len(done) else done
    if not len(done):
        return []
    easy = done[(done["tier"] == "easy") & (done["fields"] == "all")]
    alone = easy[easy["reranker"] == "none"]
    pairs: dict[str, tuple[str, str]] = {}  # a system run by several sweeps: its latest run, as the tables take
    reference = alone[alone["encoder"] == "minilm"]
    for _, row in alone[alone["encoder"] != "minilm"].iterrows():
        base = reference[(reference["data"] == row["data"]) & (reference["fn_filter"] == row["fn_filter"])]
        if len(base):
            pairs[f"encoder_results-{row['encoder']}-vs-minilm"] = (base.iloc[-1]["run"], row["run"])
    for _, row in easy[(easy["reranker"] != "none") & (easy["topk"] == "20")].iterrows():
        base = alone[(alone["encoder"] == row["encoder"]) & (alone["data"] == row["data"])
                     & (alone["fn_filter"] == row["fn_filter"])]
        if len(base):
            system = f"{row['encoder']}+{row['reranker']}" + (f"-{row['loss']}" if row["reranker"] == "trained" else "")
            pairs[f"pipeline_results-{system}-vs-{row['encoder']}"] = (base.iloc[-1]["run"], row["run"])
    return [(name, a, b) for name, (a, b) in pairs.items()]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m skillrouter.report.cases", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--a", type=Path, required=True, help="run directory of system A (the reference)")
    parser.add_argument("--b", type=Path, required=True, help="run directory of system B")
    parser.add_argument("--top", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("reports/cases"))
    parser.add_argument("--name", default=None, help="file name (default: <A run>-vs-<B run>)")
    args = parser.parse_args(argv)
    name = args.name or f"{args.a.name}-vs-{args.b.name}"
    for path in write_cases(args.a, args.b, args.out, name, args.top):
        print(path)


if __name__ == "__main__":
    main()
