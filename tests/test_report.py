"""Reports from run directories written on the spot: tidy collection, tables, LaTeX/Markdown/CSV,
missing-cell footnotes, significance, figure, byte-identical regeneration."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from skillrouter.cache.store import code_fingerprint
from skillrouter.pipeline.compose import SCORING_CODE
from skillrouter.report.__main__ import generate
from skillrouter.report.collect import collect
from skillrouter.report.render import plain_to_latex, plain_to_markdown, to_csv, to_latex, to_markdown
from skillrouter.report.reproduction import NOTES as REPRODUCTION_NOTES, reproduction_table
from skillrouter.report.significance import paired_randomization
from skillrouter.report.tables import TABLES, build_table, loss_label, reranker_contribution, system_label, untrained_note

from .conftest import pythonpath

SPECS = {t.name: t for t in TABLES}
SCORED_BY = {"key": "-", "cached": False, "seconds": 0.0, "code": code_fingerprint(SCORING_CODE), "modules": list(SCORING_CODE)}
PLAIN_TABLES = ("reranker_contribution", "reproduction", "synth", "downstream", "tuning", "cascade", "condensation")
BASE = {"data": "builtin", "reranker": "none", "loss": "listwise", "fields": "all", "topk": "20", "fn_filter": "on",
        "seed": "0", "tracking": "none"}


def make_run(root: Path, name: str, hits: list[int], status: str = "completed", split: dict | None = None,
             **choices) -> Path:
    run = root / name
    run.mkdir(parents=True)
    ch = {**BASE, **choices}
    if status != "completed":
        (run / "metrics.json").write_text(json.dumps({"choices": ch, "status": status, "error": "DataError: boom"}))
        return run
    mean = sum(hits) / len(hits)
    metrics = {m: mean for m in ("hit@1", "mrr@10", "r@10", "r@20", "r@50", "fc@10", "ndcg@10", "comp@10", "set_compat",
                                 "single/hit@1", "single/r@10", "single/fc@10", "multi/hit@1", "multi/r@10", "multi/fc@10")}
    (run / "metrics.json").write_text(json.dumps({"choices": ch, "status": status, "metrics": metrics,
                                                  "counts": {"all": len(hits), "single": len(hits), "multi": 0},
                                                  "recall_curve": [mean] * 50, "stages": {"evaluate": SCORED_BY},
                                                  **({"split": split} if split else {})}))
    (run / "per_query.json").write_text(json.dumps({f"q{i}": {m: float(h) for m in metrics if "/" not in m}
                                                    for i, h in enumerate(hits)}))
    return run


@pytest.fixture
def grid(tmp_path):
    root = tmp_path / "outputs" / "multirun" / "g"
    good, bad = [1] * 18 + [0] * 2, [1] * 6 + [0] * 14
    make_run(root, "0", good, encoder="minilm", tier="easy")
    make_run(root, "1", [1] * 16 + [0] * 4, encoder="minilm", tier="hard")
    make_run(root, "2", bad, encoder="bm25", tier="easy")
    make_run(root, "3", [], status="failed", encoder="bm25", tier="hard")
    make_run(root, "4", [1] * 20, encoder="minilm", tier="easy", reranker="trained")
    return tmp_path, root


def test_collect_lists_every_run_with_status(grid):
    base, root = grid
    runs = collect([root], base)
    assert len(runs) == 5 and sorted(runs["status"]) == ["completed"] * 4 + ["failed"]
    assert set(runs["run"]) == {f"outputs/multirun/g/{i}" for i in range(5)}


def test_encoder_table_values_average_and_missing_reason(grid):
    base, root = grid
    table = build_table(SPECS["encoder_results"], collect([root], base), base)
    v = table.values
    assert v.loc["minilm", ("easy", "hit@1")] == pytest.approx(0.9)
    assert v.loc["minilm", ("avg", "hit@1")] == pytest.approx((0.9 + 0.8) / 2)
    assert v.loc["bm25", ("easy", "hit@1")] == pytest.approx(0.3)
    assert "failed: DataError: boom" in table.missing[("bm25", ("hard",))]
    assert table.missing[("bm25", ("avg",))] == "needs both tier runs"
    latex = to_latex(table)
    assert r"\toprule" in latex and r"\textbf{90.0}" in latex and r"---\textsuperscript{a}" in latex
    assert "a: run outputs/multirun/g/3 failed" in latex.replace(r"\_", "_")
    md = to_markdown(table)
    assert "**90.0**" in md and "—<sup>a</sup>" in md


def test_missing_run_is_named(grid):
    base, root = grid
    table = build_table(SPECS["fn_filter"], collect([root], base), base)
    assert table.values.empty or table.values.isna().all().all()


def test_significance_marks_a_clear_difference(grid):
    base, root = grid
    table = build_table(SPECS["encoder_results"], collect([root], base), base, with_significance=True)
    assert ("bm25", ("easy", "hit@1")) in table.significant
    assert "paired randomization" in to_latex(table)


def test_paired_randomization():
    assert paired_randomization([1] * 30, [0] * 30) < 0.001
    assert paired_randomization([1, 0] * 10, [0, 1] * 10) > 0.5
    assert paired_randomization([1, 1], [1, 1]) == 1.0


def test_reranker_contribution_counts(grid):
    base, root = grid
    out = reranker_contribution(collect([root], base), base)
    (row,) = out.to_dict("records")
    assert {k: row[k] for k in ("system", "tier", "topk", "fixed", "degraded", "net", "queries", "n_seeds")} == {
        "system": "minilm + trained[listwise]", "tier": "easy", "topk": "20", "fixed": 2, "degraded": 0, "net": 2,
        "queries": 20, "n_seeds": 1}
    assert pd.isna(row["positives at top-1"])  # this run recorded no training positives


def test_reranker_contribution_compares_with_the_pipelines_own_first_stage(grid):
    """The baseline is the encoder-only run of the same first stage from the pipeline's own sweep: not an encoder
    trained on generated pairs under the same choice (``synth``), nor another sweep's run of it."""
    base, root = grid
    other = root.parent
    make_run(other / "h", "0", [1] * 10 + [0] * 10, encoder="minilm", tier="easy")
    make_run(other / "s", "0", [1] * 6 + [0] * 14, encoder="minilm", tier="easy", synth="stub")
    (row,) = reranker_contribution(collect([other], base), base).to_dict("records")
    assert (row["fixed"], row["degraded"], row["net"]) == (2, 0, 2)  # against g/0 (18 of 20), not h/0 or s/0


def test_generate_is_byte_identical_and_complete(grid, monkeypatch):
    base, root = grid
    monkeypatch.chdir(base)
    first = {p.name: p.read_bytes() for p in generate([root], base / "r1")}
    second = {p.name: p.read_bytes() for p in generate([root], base / "r2")}
    assert first == second
    expected = {f"{name}.{ext}" for name in [*(t.name for t in TABLES), *PLAIN_TABLES] for ext in ("tex", "md", "csv")}
    assert expected | {"runs.csv", "index.md", "recall_at_k.png", "recall_at_k.pdf", "efficiency.md", "efficiency.tex"} == set(first)
    assert b"outputs/multirun/g/3" in first["index.md"]
    assert b"Built on: not recorded (stages built before their cache entries named it) (5 runs)." in first["index.md"]
    assert all(f"- [{name}]({name})".encode() in first["index.md"] for name in first if name != "index.md")


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex not installed (.ci/run installs it)")
def test_latex_compiles_in_a_booktabs_document(grid, tmp_path):
    base, root = grid
    runs = collect([root], base)
    body = "\n".join(to_latex(build_table(spec, runs, base, with_significance=True)) for spec in TABLES)
    body += plain_to_latex(reproduction_table(runs), "reproduction", "Paper vs ours", REPRODUCTION_NOTES)
    body += plain_to_latex(reranker_contribution(runs, base), "reranker_contribution", "Reranker contribution")
    doc = tmp_path / "tables.tex"
    doc.write_text("\\documentclass{article}\n\\usepackage{booktabs}\n\\usepackage{graphicx}\n"
                   "\\begin{document}\n" + body + "\n\\end{document}\n")
    proc = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", doc.name], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:]


def test_cli_without_runs_says_what_to_do(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "skillrouter.report"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 2 and "run a sweep first" in proc.stderr


def test_body_removal_rows_are_systems_that_ran_the_ablation(tmp_path):
    root = tmp_path / "g"
    make_run(root, "0", [1, 0, 0, 0], encoder="minilm", tier="easy", fields="nd")
    make_run(root, "1", [1, 1, 1, 0], encoder="minilm", tier="easy", fields="all")
    make_run(root, "2", [1, 1, 1, 1], encoder="trained", tier="easy", fields="all")  # no nd run: not a row
    table = build_table(SPECS["body_removal"], collect([root], tmp_path), tmp_path)
    assert list(table.values.index) == ["minilm"]
    assert table.values.loc["minilm", ("drop all-nd (pp)", "hit@1")] == pytest.approx(0.5)


def test_body_removal_strata_gives_the_nd_to_all_gap_per_quartile(tmp_path):
    root = tmp_path / "g"
    for name, fields, hits in (("0", "nd", (0.25, 0.5, 0.5, 1.0)), ("1", "all", (0.75, 0.75, 0.5, 1.0))):
        make_run(root, name, [1], encoder="minilm", tier="easy", fields=fields)
        data = json.loads((root / name / "metrics.json").read_text())
        data["metrics"].update({f"gt_desc_words_quartile=Q{i}/hit@1": h for i, h in enumerate(hits, start=1)})
        (root / name / "metrics.json").write_text(json.dumps(data))
    table = build_table(SPECS["body_removal_strata"], collect([root], tmp_path), tmp_path)
    gaps = [table.values.loc["minilm", ("drop all-nd (pp)", f"gt_desc_words_quartile=Q{i}/hit@1")] for i in range(1, 5)]
    assert gaps == pytest.approx([0.5, 0.25, 0.0, 0.0])
    assert "Q1 Hit@1" in to_markdown(table) and "Q4 Hit@1" in to_markdown(table)
    for name in ("0", "1"):  # every description as long as the others: the edges tie, every query lands in Q1
        data = json.loads((root / name / "metrics.json").read_text())
        data["metrics"] = {k: v for k, v in data["metrics"].items() if "=Q1/" in k or "=Q" not in k}
        (root / name / "metrics.json").write_text(json.dumps(data))
    table = build_table(SPECS["body_removal_strata"], collect([root], tmp_path), tmp_path)
    assert table.values.loc["minilm", ("drop all-nd (pp)", "gt_desc_words_quartile=Q1/hit@1")] == pytest.approx(0.5)
    assert pd.isna(table.values.loc["minilm", ("nd", "gt_desc_words_quartile=Q2/hit@1")])
    assert "no gt_desc_words_quartile=Q2/hit@1, gt_desc_words_quartile=Q3/hit@1" in to_markdown(table)


def test_reproduction_table_against_published_values(tmp_path):
    root = tmp_path / "g"
    sr = {"data": "skillrouter_core", "encoder": "skillrouter_emb_0.6b", "reranker": "skillrouter_rank_0.6b"}
    make_run(root, "0", [1] * 8 + [0] * 2, tier="easy", **sr)
    make_run(root, "1", [1] * 6 + [0] * 4, tier="hard", **sr)
    make_run(root, "2", [1] * 7 + [0] * 3, tier="easy", data="r3_skill", encoder="r3_emb_0.6b", eval="r3")
    table = reproduction_table(collect([root], tmp_path))
    pipeline = table[(table["row"].str.startswith("SkillRouter 1.2B")) & (table["metric"] == "hit@1")].iloc[0]
    assert (pipeline["ours"], pipeline["published"], pipeline["diff (pp)"]) == (70.0, 74.0, -4.0)
    r3 = table[(table["table"] == "Table 5") & (table["row"] == "R3-Embedding (ours)")].set_index("metric")
    assert r3.loc["hit@1", "ours"] == 70.0 and r3.loc["hit@1", "published"] == 72.07
    assert r3.loc["hit@1", "diff (pp)"] == pytest.approx(-2.07)
    assert pd.isna(r3.loc["ndcg@15", "ours"]) and r3.loc["ndcg@15", "published"] == 82.05  # the run has no nDCG@15
    reranked = table[table["table"].str.startswith("Table 7") & ~table["row"].str.startswith("(no reranker")]
    assert reranked["ours"].isna().all() and reranked["published"].notna().all()  # no run: paper column still filled
    cannot = table[table["row"].str.contains("cannot run")]
    assert set(cannot["row"].str.split(" \\(").str[0]) == {"BGE-M3", "Qwen3-Reranker-4B"} and cannot["run"].isna().all()
    by_direction = table[table["table"] == "Table 9 (by language direction: zh2zh)"].set_index(["row", "metric"])
    assert by_direction.loc[("+ R3-Reranker", "lang=zh2zh/set_compat"), "published"] == 60.0  # Table 9 is in %
    md = plain_to_markdown(table, "Paper vs ours")
    assert "| 74.00 " in md and "—" in md


def test_skillret_rows_pick_the_run_of_their_protocol(tmp_path):
    """The same cell scored under eval=skillret and eval=r3 is two runs (neither supersedes the other); each
    published row reads the run of its own protocol."""
    root = tmp_path / "g"
    cell = {"data": "skillret", "encoder": "skillret_emb_0.6b", "tier": "easy"}
    make_run(root, "0", [1] * 7 + [0] * 3, eval="skillret", **cell)
    make_run(root, "1", [1] * 5 + [0] * 5, eval="r3", **cell)
    runs = collect([root], tmp_path)
    assert not runs["superseded"].any()
    table = reproduction_table(runs)
    own = table[table["row"] == "SKILLRET-Embedding-0.6B"].set_index("metric")
    assert (own.loc["fc@10", "ours"], own.loc["fc@10", "published"]) == (70.0, 75.09) and own.loc["fc@10", "run"].endswith("0")
    # R3's Table 6 (in %): the same cell under SkillRet's protocol; its Comp@10 is SkillRet's Completeness@10 (fc@10)
    r3 = table[(table["table"] == "Table 6") & (table["row"] == "SkillRet-Embedding-0.6B")].set_index("metric")
    assert (r3.loc["fc@10", "ours"], r3.loc["fc@10", "published"]) == (70.0, 75.09) and r3.loc["fc@10", "run"].endswith("0")


def test_cases_are_selected_and_ordered_by_hand():
    from skillrouter.data.types import Query
    from skillrouter.report.cases import case_frame, find_cases

    queries = [Query("q1", "csv", ("a",)), Query("q2", "pdf", ("b",)), Query("q3", "img", ("c",)),
               Query("q4", "two", ("a", "b")), Query("q5", "none", ("z",)), Query("q6", "both", ("c",))]
    a = {"q1": ["x", "y", "a"], "q2": ["b", "x"], "q3": ["x", "c"], "q4": ["x", "y", "z", "w", "b"], "q5": ["x"], "q6": ["c"]}
    b = {"q1": ["a", "x"], "q2": ["x", "y", "b"], "q3": ["c"], "q4": ["b", "a"], "q5": ["y", "z"], "q6": ["c"]}
    cases = find_cases(queries, a, b)
    # rescues: q1 (A's best GT at 3), q3 (at 2), q4 (at 5): deepest first; q6 is a hit for both: no case
    assert [c.query.id for c in cases["rescue"]] == ["q4", "q1", "q3"]
    assert [c.query.id for c in cases["degrade"]] == ["q2"] and [c.query.id for c in cases["both_miss"]] == ["q5"]
    frame = case_frame(cases["rescue"], top=2)
    assert list(frame["query"]) == ["q4", "q1"]
    assert frame.iloc[0]["B top-5"] == "b (GT); a (GT)" and frame.iloc[0]["GT rank (A / B)"] == "a: - / 2; b: 5 / 1"


def test_cases_from_two_real_runs(tmp_path, monkeypatch):
    """Two cells of a tiny grid (name+description vs full text): a case file per kind, linked from nowhere
    else than its own folder; the query texts come from the runs' cache."""
    from skillrouter.report.cases import KINDS, write_cases

    sweep, cache = tmp_path / "grid", tmp_path / "cache"
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve().parents[1] / "launch.py"), "-m",
                           f"hydra.sweep.dir={sweep}", f"cache_dir={cache}", "progress=false", "data=tiny", "encoder=bm25",
                           "fields=nd,all"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    md, tex = write_cases(sweep / "0", sweep / "1", tmp_path / "cases", "nd-vs-all")
    text = md.read_text()
    assert text.count("### ") == len(KINDS) and "(GT)" in text and "{" not in text.replace("\\{", "")
    assert "\\begin{tabular}" in tex.read_text()
    monkeypatch.chdir(tmp_path)  # runs under the working directory are named relative to it: no checkout path
    text = write_cases(sweep / "0", sweep / "1", tmp_path / "cases", "relative")[0].read_text()
    assert "- A: grid/0 (" in text and str(tmp_path) not in text
    shutil.rmtree(cache)
    with pytest.raises(FileNotFoundError, match="load_data"):
        write_cases(sweep / "0", sweep / "1", tmp_path / "cases", "again")


def test_a_paper_table_keeps_the_systems_its_own_sweep_runs(tmp_path):
    """The SKIP ablation's Easy-only trained_r3 pipeline matches the pipeline table's selection, but its
    sweep (sweeps/pipeline_results.yaml: encoder minilm, trained) never runs it: not a row."""
    root = tmp_path / "g"
    for i, (encoder, tier) in enumerate((("minilm", "easy"), ("minilm", "hard"), ("trained_r3", "easy"))):
        make_run(root, str(i), [1, 0], encoder=encoder, tier=tier, reranker="trained")
    table = build_table(SPECS["pipeline_results"], collect([root], tmp_path), tmp_path)
    assert list(table.values.index) == ["minilm + trained[listwise]"]


def _latency(perf: Path, name: str, encoder: int, reranker: int, p50: float, topk: int = 20, **extra) -> None:
    figures = {"device": "cpu", "torch_threads": 2, "pool_skills": 100, "encoder": name, "reranker": "r", "rerank_topk": topk,
               "queries": 10, "total_ms": {"p50": p50, "p95": 2 * p50}, "peak_rss_mb": 900.0,
               "parameters": {"encoder": encoder, "reranker": reranker}, **extra}
    perf.mkdir(parents=True, exist_ok=True)
    (perf / f"serving_latency_{name}.json").write_text(json.dumps({"benchmark": f"serving_latency_{name}",
                                                                    "command": "c", "figures": figures}))


def test_efficiency_ratios_against_the_largest_row_by_hand(tmp_path):
    """The papers' form: 1.2B vs 16B parameters is 13.3x fewer, 100 vs 580 ms is 5.8x faster; the file of a
    run without parameter counts is no row; GPU memory is preferred where measured."""
    from skillrouter.report.efficiency import efficiency_table, read_runs, write_efficiency

    perf = tmp_path / "perf"
    _latency(perf, "big", 8_000_000_000, 8_000_000_000, 580.0)
    _latency(perf, "small", 600_000_000, 600_000_000, 100.0, peak_gpu_mb=3000.0,
             backends={"encoder": "bf16", "reranker": "torch"})
    _latency(perf, "alone", 600_000_000, 0, 20.0, topk=0)
    (perf / "serving_latency.json").write_text(json.dumps({"benchmark": "serving_latency", "command": "c",
                                                           "figures": {"device": "cpu"}}))
    table, ref = efficiency_table(read_runs(perf))
    rows = table.set_index("pipeline")
    assert ref == "big" and list(rows.index) == ["alone", "big", "small"]
    assert rows.loc["small", "fewer params (x)"] == 13.3 and rows.loc["small", "faster at p50 (x)"] == 5.8
    assert rows.loc["small", "total params (M)"] == 1200.0 and rows.loc["small", "peak memory (MB)"] == 3000.0
    assert rows.loc["alone", "reranker"] == "none" and rows.loc["alone", "fewer params (x)"] == 26.7
    assert rows.loc["big", "fewer params (x)"] == 1.0
    assert rows.loc["alone", "backends (encoder / reranker)"] == "not recorded / none"
    assert rows.loc["small", "backends (encoder / reranker)"] == "bf16 / torch" and rows.loc["small", "pool skills"] == 100
    assert efficiency_table(read_runs(perf), "small")[0].set_index("pipeline").loc["big", "faster at p50 (x)"] == 0.2
    with pytest.raises(ValueError, match="not a measured row"):
        efficiency_table(read_runs(perf), "huge")
    md, tex = write_efficiency(perf, tmp_path)
    assert "| small " in md.read_text() and "{" not in md.read_text() and "\\begin{tabular}" in tex.read_text()
    md, _ = write_efficiency(tmp_path / "nothing", tmp_path)
    assert "run benchmarks/serving_latency.py" in md.read_text()


def test_efficiency_rows_gain_the_served_figures_of_their_architecture(tmp_path):
    """benchmarks/route_load.py's figures join the row of the same encoder and reranker on the same device (a
    fine-tuned reranker's row too: its weights cost what the base's cost; a GPU run of the same presets is not the CPU
    row's); a row with no served run has empty served cells."""
    from skillrouter.report.efficiency import efficiency_table, read_runs, read_served, write_efficiency

    perf = tmp_path / "perf"
    _latency(perf, "big", 8, 8, 580.0)
    _latency(perf, "small", 6, 6, 100.0)
    for name in ("big", "small"):  # _latency names the encoder after the row; the reranker is "r"
        data = json.loads((perf / f"serving_latency_{name}.json").read_text())
        data["figures"]["reranker"] = "r (fine-tuned on built-in data)" if name == "small" else "other"
        (perf / f"serving_latency_{name}.json").write_text(json.dumps(data))
    served = {"encoder": "small", "reranker": "r", "pool_skills": 100, "topk": 20,
              "batched / concurrency 1": {"p50": 910.5}, "batched / concurrency 8": {"requests_per_s": 3.2},
              "batching gain in requests/s at concurrency 8 (x)": 1.4}
    (perf / "route_load.json").write_text(json.dumps({"benchmark": "route_load", "command": "c", "figures": served}))
    on_gpu = {**served, "device": "cuda", "batched / concurrency 1": {"p50": 40.0}}  # the same presets on a GPU, later
    (perf / "route_load_gpu.json").write_text(json.dumps({"benchmark": "route_load_gpu", "command": "c", "figures": on_gpu}))
    rows = efficiency_table(read_runs(perf), None, read_served(perf))[0].set_index("pipeline")
    assert rows.loc["small", ["served p50, 1 client (ms)", "served req/s, 8 clients", "batching gain, 8 clients (x)"]
                    ].tolist() == [910.5, 3.2, 1.4]
    assert rows.loc["big"].isna()["served p50, 1 client (ms)"]
    md, _ = write_efficiency(perf, tmp_path)
    assert "910.5" in md.read_text() and "route_load.py" in md.read_text()


def test_a_model_trained_on_synthesised_pairs_is_not_the_tables_trained_row(tmp_path):
    """A synth=skillrouter cell has the encoder table's choices (encoder=trained, data=builtin) but trained on
    generated pairs: it neither supersedes the sweep's own cell in a paper table nor stands in a case file."""
    from skillrouter.report.cases import case_pairs

    root = tmp_path / "g"
    make_run(root, "a", [1, 0], encoder="minilm", fields="all", tier="easy")
    make_run(root, "b", [1, 1], encoder="trained", fields="all", tier="easy", synth="none")
    make_run(root, "c", [0, 0], encoder="trained", fields="all", tier="easy", synth="skillrouter")  # the later one
    runs = collect([root], tmp_path)
    assert not runs["superseded"].any()
    table = build_table(SPECS["encoder_results"], runs, tmp_path)
    assert table.values.loc["trained", ("easy", "hit@1")] == 1.0
    assert case_pairs(runs) == [("encoder_results-trained-vs-minilm", "g/a", "g/b")]


def _downstream_run(root: Path, name: str, encoder: str, agent: str, routed: dict[str, float], none: dict[str, float],
                    gold: dict[str, float], use: tuple[float, float]) -> None:
    """``use``: the routed condition's skill use and GT skill use rates (the agents' own logs)."""
    run = make_run(root, name, [1, 0], encoder=encoder, agent=agent)
    metrics = json.loads((run / "metrics.json").read_text())

    def cond(label, condition, k, per_task, rates=(None, None)):
        return {"label": label, "condition": condition, "k": k, "success": sum(per_task.values()) / len(per_task),
                "per_task": per_task, "injected": {t: [f"{encoder}-{t}"] for t in per_task},
                "skill_use_rate": rates[0], "gt_skill_use_rate": rates[1]}

    metrics["downstream"] = {"agent": agent, "conditions": [cond("none", "none", None, none), cond("gold", "gold", None, gold),
                                                            cond("routed@1", "routed", 1, routed, use)]}
    (run / "metrics.json").write_text(json.dumps(metrics))


def test_the_downstream_table_has_the_papers_layout_and_hand_computed_values(tmp_path):
    from skillrouter.report.downstream import downstream_cases, downstream_rows, downstream_table

    root = tmp_path / "runs"
    none, gold = {"a": 0.0, "b": 0.0, "c": 0.0, "d": 1.0}, {"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0}  # 25 %, 100 %
    _downstream_run(root, "0", "bm25", "oracle", {"a": 1.0, "b": 0.0, "c": 0.0, "d": 1.0}, none, gold, (1.0, 0.5))  # 50 %
    _downstream_run(root, "1", "minilm", "oracle", {"a": 1.0, "b": 1.0, "c": 0.0, "d": 1.0}, none, gold, (1.0, 0.75))
    _downstream_run(root, "2", "minilm", "nop", {"a": 0.0, "b": 0.0, "c": 0.0, "d": 0.0}, {t: 0.0 for t in none},
                    {t: 0.0 for t in none}, (0.0, 0.0))  # oracle minilm: 75 %
    table = downstream_table(downstream_rows([root]))
    assert list(table.columns) == ["condition", "nop", "oracle", "average", "uplift recovered", "skill use", "GT skill use"]
    rows = table.set_index("condition")
    assert rows.loc["no skills", "oracle"] == 25.0 and rows.loc["gold skills", "oracle"] == 100.0
    assert rows.loc["bm25 top-1", "oracle"] == 50.0 and rows.loc["minilm top-1", "oracle"] == 75.0
    # uplift: (50 - 25) / (100 - 25) = 33.3 %; minilm: (75 - 25) / 75 = 66.7 % (nop has no uplift to share)
    assert rows.loc["bm25 top-1", "uplift recovered"] == 33.3 and rows.loc["minilm top-1", "uplift recovered"] == 66.7
    assert rows.loc["minilm top-1", "average"] == 37.5  # (0 + 75) / 2 over the two agents
    # use rates average over the agents too: minilm (100 + 0) / 2 and (75 + 0) / 2; none where no trial logged a read
    assert rows.loc["minilm top-1", ["skill use", "GT skill use"]].tolist() == [50.0, 37.5]
    assert rows.loc["bm25 top-1", ["skill use", "GT skill use"]].tolist() == [100.0, 50.0]
    assert rows.loc["no skills", ["skill use", "GT skill use"]].isna().all()
    cases = downstream_cases(downstream_rows([root]))
    assert "## oracle, top-1: bm25 vs minilm" in cases and "| b | 0.00 | 1.00 | bm25-b | minilm-b |" in cases


def test_a_published_range_is_met_inside_it_and_missed_by_the_distance_to_its_nearer_end():
    entry = {"paper": "P", "table": "T", "row": "R", "tier": "easy", "system": {"encoder": "e"},
             "values": {"uplift/routed@1": [0.71, 0.73]}}
    runs = pd.DataFrame([{"run": "r", "status": "completed", "superseded": False, "encoder": "e", "tier": "easy",
                          "uplift/routed@1": u} for u in (0.72,)])
    assert reproduction_table(runs, [entry]).iloc[0][["published", "diff (pp)"]].tolist() == ["71.0-73.0", 0.0]
    runs["uplift/routed@1"] = 0.60
    assert reproduction_table(runs, [entry]).iloc[0]["diff (pp)"] == -11.0


def test_the_loss_table_shows_the_trained_rerankers_base_and_a_random_head_is_labelled_untrained_with_a_footnote(tmp_path):
    root = tmp_path / "g"
    make_run(root, "0", [0, 1], encoder="trained", reranker="minilm_cosine", topk="20", fields="all")
    make_run(root, "1", [1, 1], encoder="trained", reranker="trained", loss="listwise", topk="20", fields="all")
    runs = collect([root], tmp_path)
    table = build_table(next(t for t in TABLES if t.name == "loss_ablation"), runs, tmp_path)
    assert set(table.values.index) == {"minilm_cosine (base, not fine-tuned)", "listwise"}
    assert not any(n.startswith("(untrained head)") for n in table.notes)
    # a grid of the papers' fresh classification head (reranker=minilm_ce) names it for what it is
    row = pd.Series({"encoder": "trained", "reranker": "minilm_ce", "loss": "listwise", "fusion": "none"})
    assert loss_label(row) == "minilm_ce (untrained head)" and system_label(row) == "trained + minilm_ce (untrained head)"
    assert untrained_note([system_label(row)])[0].startswith(
        "(untrained head): minilm_ce is a MiniLM with a freshly initialised classification head")


def test_a_table_shows_its_own_sweeps_runs_with_dev_held_out_not_a_studys_or_another_sweeps(tmp_path):
    """The showcase sweeps hold the dev split out of training (a fused row's weight is chosen on it): their test runs
    are the table's. The same choices run by another sweep (other epochs) or by a study's held-out test cell (a tuned
    learning rate) are neither shown in its place nor supersede it; the loss sweep's run of those choices is its own."""
    root = tmp_path / "outputs" / "multirun"
    held_out = {"scored": "test", "dev": {"source": "share", "share": 0.1, "seed": 0, "unit": "skill"}}
    cell = {"encoder": "trained", "reranker": "trained", "tier": "easy"}
    make_run(root / "pipeline_results", "0", [1] * 6 + [0] * 4, split=held_out, **cell)
    make_run(root / "loss_ablation", "0", [1] * 5 + [0] * 5, split=held_out, **cell)
    make_run(root / "field_attention", "0", [1] + [0] * 9, **cell)
    (root / "tune_lr").mkdir()
    (root / "tune_lr" / "study.db").touch()
    make_run(root / "tune_lr" / "test" / "trial_0", "0", [0] * 10, split=held_out, **cell)
    runs = collect([root], tmp_path)
    assert not runs["superseded"].any() and runs.set_index("run")["study"].to_dict() == {
        "outputs/multirun/field_attention/0": False, "outputs/multirun/loss_ablation/0": False,
        "outputs/multirun/pipeline_results/0": False, "outputs/multirun/tune_lr/test/trial_0/0": True}
    pipeline = build_table(SPECS["pipeline_results"], runs, tmp_path)
    assert pipeline.values.loc["trained + trained[listwise]", ("easy", "hit@1")] == pytest.approx(0.6)
    assert pipeline.n.loc["trained + trained[listwise]", ("easy", "hit@1")] == 1
    losses = build_table(SPECS["loss_ablation"], runs, tmp_path)
    assert losses.values.loc["listwise", ("easy", "hit@1")] == pytest.approx(0.5)


def test_seeds_aggregate_to_mean_sd_and_n_and_a_missing_seed_is_named(tmp_path):
    """Three seeds of minilm (Hit@1 .6 / .7 / .8) and two of the trained encoder (.9 / .7, seed 2 missing)."""
    root = tmp_path / "outputs" / "multirun" / "g"
    cells = [("minilm", "0", 6), ("minilm", "1", 7), ("minilm", "2", 8), ("trained", "0", 9), ("trained", "1", 7)]
    for i, (encoder, seed, hits) in enumerate(cells):
        make_run(root, str(i), [1] * hits + [0] * (10 - hits), encoder=encoder, tier="easy", seed=seed)
    table = build_table(SPECS["encoder_results"], collect([root], tmp_path), tmp_path)
    col = ("easy", "hit@1")
    assert table.values.loc["minilm", col] == pytest.approx(0.7) and table.sd.loc["minilm", col] == pytest.approx(0.1)
    assert table.n.loc["minilm", col] == 3 and table.seeds == 3
    assert table.values.loc["trained", col] == pytest.approx(0.8) and table.sd.loc["trained", col] == pytest.approx(0.141421, abs=1e-6)
    assert table.n.loc["trained", col] == 2
    assert table.marked[("trained", ("easy",))] == ["2 of 3 seeds: no run of seed 2"]
    md = to_markdown(table)
    assert "70.0 ± 10.0 (3)" in md and "**80.0** ± 14.1 (2)<sup>" in md and "2 of 3 seeds: no run of seed 2" in md
    assert r"\textbf{80.0} $\pm$ 14.1 (2)\textsuperscript{" in to_latex(table)
    csv = pd.read_csv(__import__("io").StringIO(to_csv(table)), index_col=0)
    assert csv.loc["minilm", "easy/hit@1"] == pytest.approx(0.7) and csv.loc["minilm", "easy/hit@1 sd"] == pytest.approx(0.1)
    assert csv.loc["trained", "n_seeds"] == 2 and csv.loc["minilm", "n_seeds"] == 3


def _fake_stage_run(root: Path, module_dir: Path) -> None:
    """A completed run whose train_encoder stage was made by the module ``fake_stage_code`` (as it is now)."""
    from skillrouter.cache.store import code_fingerprint

    sys.path.insert(0, str(module_dir))
    try:
        fingerprint = code_fingerprint(("fake_stage_code",))
    finally:
        sys.path.remove(str(module_dir))
    run = make_run(root, "0", [1, 0], encoder="trained", tier="easy")
    metrics = json.loads((run / "metrics.json").read_text())
    metrics["stages"] = {"train_encoder": {"key": "k", "cached": False, "seconds": 1.0, "code": fingerprint,
                                           "modules": ["fake_stage_code"]}}
    (run / "metrics.json").write_text(json.dumps(metrics))


def test_check_exits_1_once_a_stages_code_changed_after_its_runs(tmp_path, monkeypatch):
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "fake_stage_code.py").write_text("VALUE = 1\n")
    root = tmp_path / "outputs" / "multirun" / "g"
    _fake_stage_run(root, modules)
    monkeypatch.chdir(tmp_path)
    generate([root], tmp_path / "reports")
    env = {**__import__("os").environ, "PYTHONPATH": pythonpath(modules, Path(__file__).resolve().parents[1])}

    def check(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "skillrouter.report", "--check", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True)

    fresh = check("reports/runs.csv")
    assert fresh.returncode == 0 and "none made by code that has changed since" in fresh.stdout, fresh.stdout + fresh.stderr
    (modules / "fake_stage_code.py").write_text("VALUE = 2  # the stage's code changed\n")
    stale = check()  # the default: reports/runs.csv
    assert stale.returncode == 1 and "stale: outputs/multirun/g/0: train_encoder" in stale.stdout, stale.stdout + stale.stderr
    monkeypatch.syspath_prepend(str(modules))  # this process reads the changed module too: the table marks the run
    import skillrouter.cache.store as store

    store._source_hash.cache_clear()
    store._code_fingerprint.cache_clear()
    runs = collect([root], tmp_path)
    assert runs.loc[0, "stale"] == "train_encoder"
    table = build_table(SPECS["encoder_results"], runs, tmp_path)
    assert table.marked[("trained", ("easy",))] == ["made by code that has changed since: train_encoder (rerun its sweep)"]
    written = generate([root], tmp_path / "fresh", fresh_only=True)
    assert "1 runs were made by code that has changed since and are left out" in (tmp_path / "fresh" / "index.md").read_text()
    assert written and "trained" not in (tmp_path / "fresh" / "encoder_results.md").read_text()


def test_a_runs_csv_without_code_records_is_stale(tmp_path):
    (tmp_path / "runs.csv").write_text("run,status\nold/0,completed\n")
    proc = subprocess.run([sys.executable, "-m", "skillrouter.report", "--check", str(tmp_path / "runs.csv")],
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "every run is stale" in proc.stdout


@pytest.mark.slow
def test_a_two_seed_grid_on_tiny_data_aggregates_its_trained_row_in_the_report_and_in_wandb(tmp_path, monkeypatch):
    import os

    from skillrouter.models import hardware
    from skillrouter.tracking.offline import offline_runs, table

    sweep = tmp_path / "outputs" / "multirun" / "seeds"
    env = {**{k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"}, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve().parents[1] / "launch.py"), "-m", "data=tiny",
                           "encoder=minilm,trained", "seed=0,1", "tracking=wandb", f"hydra.sweep.dir={sweep}",
                           f"cache_dir={tmp_path / 'cache'}", "progress=false", "allow_noop_overrides=true"],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    monkeypatch.chdir(tmp_path)
    generate([sweep], tmp_path / "reports", data="tiny")
    csv = pd.read_csv(tmp_path / "reports" / "encoder_results.csv", index_col=0)
    assert csv.loc["trained", "n_seeds"] == 2 and csv.loc["minilm", "n_seeds"] == 2
    assert not pd.isna(csv.loc["trained", "easy/hit@1 sd"]) and csv.loc["minilm", "easy/hit@1 sd"] == 0.0
    built_on = hardware()  # each stage's cache entry names it, the cell's metrics.json and the report show it
    stages = [s for f in sweep.glob("*/metrics.json") for s in json.loads(f.read_text())["stages"].values()]
    assert {s.get("hardware") for s in stages if s["key"] != "-"} == {built_on}
    assert set(pd.read_csv(tmp_path / "reports" / "runs.csv")["hardware"]) == {built_on}
    assert f"Built on: {built_on} (4 runs)." in (tmp_path / "reports" / "index.md").read_text()
    (grid,) = [r for r in offline_runs(sweep / "grid") if r.job_type == "grid"]
    seeds = table(grid, "cells_over_seeds")
    rows = {r[seeds["columns"].index("encoder")]: r for r in seeds["data"]}
    assert rows["trained"][seeds["columns"].index("n_seeds")] == 2 and set(rows) == {"minilm", "trained"}


def test_the_training_note_counts_the_epochs_kept_flat_and_saturated_curves():
    """Two seeds of one row, in two columns (tiers) that share its trainings: each training counted once, in seed
    order; the reranker kept epochs 2 and 3 of up to 4 run, one curve flat; the encoder stopped after its first
    epoch, saturated in both (its best within one standard error of a perfect dev objective)."""
    from skillrouter.report.tables import training_note

    def run(seed: int, kept: int, ran: int, flat: bool, saturated: bool) -> pd.Series:
        return pd.Series({"reranker_epochs": kept, "reranker_epochs_run": ran, "reranker_dev_flat": flat,
                          "reranker_dev_saturated": False, "encoder_epochs": 1, "encoder_epochs_run": 1,
                          "encoder_dev_flat": False, "encoder_dev_saturated": saturated, "seed": seed})

    seeds = {"10": run(10, 3, 4, True, True), "2": run(2, 2, 3, False, True)}  # listed as numbers sort: 2, then 10
    notes = training_note({("trained + trained", ("easy",)): seeds, ("trained + trained", ("hard",)): seeds})
    assert notes == [
        "trained + trained: the trained reranker kept epoch 2, 3 (early stopping on the dev split, up to 4 epochs run); "
        "its dev curve was flat (every choice within one standard error of the best) in 1 of 2 runs: a choice made "
        "there is no evidence",
        "trained + trained: the trained encoder kept epoch 1, 1 (early stopping on the dev split, up to 1 epoch run); "
        "the epoch kept was within one standard error of a perfect dev objective in 2 of 2 runs: training stopped there"]


def test_the_loss_table_says_whether_listwise_is_at_or_above_pointwise_and_whether_a_reversal_is_noise(tmp_path):
    """Two seeds of ten queries per tier. Listwise: Avg Hit@1 .5 and .7 (Easy 6 / 8, Hard 4 / 6 hits); pointwise:
    .6 and .7. Gap -5.0 points (seeds -10.0, +0.0), within listwise's s.d. of 14.1 points. Per query, averaged over
    the seeds, the rows differ only on Easy q6 and Hard q4 (-.5 each), so two sign flips of four reach the observed
    mean: p = .5. Every metric of a fake run is its Hit@1, so pointwise leads on all four."""
    root = tmp_path / "outputs" / "multirun" / "loss_ablation"
    hits = {"listwise": {"0": (6, 4), "1": (8, 6)}, "pointwise": {"0": (7, 5), "1": (8, 6)}}
    for loss, seeds in hits.items():
        for seed, tiers in seeds.items():
            for tier, k in zip(("easy", "hard"), tiers):
                make_run(root, f"{loss}-{seed}-{tier}", [1] * k + [0] * (10 - k), encoder="trained", reranker="trained",
                         loss=loss, seed=seed, tier=tier)
    runs = collect([root], tmp_path)
    table = build_table(SPECS["loss_ablation"], runs, tmp_path, with_significance=True)
    note = next(n for n in table.notes if n.startswith("listwise against pointwise"))
    assert note == (
        "listwise against pointwise (at or above it in both papers): here, on Avg Hit@1, listwise is below it, 60.0 "
        "against 65.0 (-5.0 points); seed by seed -10.0, +0.0: below in 1 of 2 seeds; the gap is within one seed s.d. "
        "(14.1); over the 20 queries (each averaged over the seeds), paired randomization test: "
        f"p = {paired_randomization([-0.5, -0.5] + [0.0] * 18, [0.0] * 20):.2f}, not significant; ahead in the Avg "
        "columns: pointwise on Hit@1, MRR@10, R@10, FC@10. The reversal is within the seeds' noise: on this data it is "
        "no evidence against the order in both papers.")
    assert paired_randomization([-0.5, -0.5] + [0.0] * 18, [0.0] * 20) == pytest.approx(0.5, abs=0.02)
    plain = next(n for n in build_table(SPECS["loss_ablation"], runs, tmp_path).notes if n.startswith("listwise against"))
    assert "paired randomization" not in plain and plain.endswith("no evidence against the order in both papers.")
    # seed 1 alone (.7 against .7): no seeds to compare or spread to weigh the gap by, and no reversal to call noise
    one = runs[runs["seed"] == "1"]
    assert next(n for n in build_table(SPECS["loss_ablation"], one, tmp_path, with_significance=True).notes
                if n.startswith("listwise against")) == (
        "listwise against pointwise (at or above it in both papers): here, on Avg Hit@1, listwise is at or above it, "
        "70.0 against 70.0 (+0.0 points); over the 20 queries, paired randomization test: p = 1.00, not significant.")
