"""The efficiency comparison in the papers' form ("13x fewer parameters, 5.8x faster"): one row per pipeline
preset measured by ``benchmarks/serving_latency.py``, with its parameters, per-query latency and peak
memory, and each row's ratios against a reference row.

    python -m skillrouter.report.efficiency [--perf reports/perf] [--reference NAME] [--out reports]

Rows: every ``serving_latency*.json`` under ``--perf`` (one per ``--name`` the benchmark ran with). Ratios
are reference / row, so a row with fewer parameters or lower latency than the reference reads ``> 1x``
("k times fewer", "k times faster"); the default reference is the row with the most parameters (the
large baseline a compact pipeline is compared against). Peak memory is the GPU's where the benchmark ran
on one, else the process's resident set. Rows measured on different devices, backends (bf16 autocast
against fp32 torch: about 2x on a CPU with native bf16) or pool sizes are not comparable: each is a column.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from ..data.jsonl import atomic_write_text
from .render import plain_to_latex, plain_to_markdown

PATTERN = "serving_latency*.json"
SERVED = "route_load*.json"  # benchmarks/route_load.py: the same pipeline served over HTTP
TITLE = "Efficiency: parameters, per-query latency and peak memory"
NOT_RECORDED = "not recorded"  # a run from before the benchmark recorded its backends (2026-12-05)


def read_runs(perf: Path) -> list[dict]:
    """The serving-latency figures that carry parameter counts (older files without them are skipped)."""
    runs = []
    for path in sorted(perf.glob(PATTERN)):
        payload = json.loads(path.read_text())
        figures = payload["figures"]
        if "parameters" in figures:
            runs.append({"row": payload["benchmark"].removeprefix("serving_latency").lstrip("_") or "default",
                         "command": payload["command"], **figures})
    return runs


def read_served(perf: Path) -> dict[tuple[str, str, str], dict]:
    """``route_load`` figures by (encoder, reranker) preset and device: the newest file for each (the file name breaks
    a tie, as in a fresh clone, where every file has the checkout's time)."""
    served = {}
    for path in sorted(perf.glob(SERVED), key=lambda p: (p.stat().st_mtime, p.name)):
        figures = json.loads(path.read_text())["figures"]
        served[(figures["encoder"], figures["reranker"], figures.get("device", "cpu"))] = figures
    return served


def served_columns(run: dict, served: dict[tuple[str, str, str], dict]) -> dict[str, float | str | None]:
    """The served figures of a row's encoder and reranker architecture (fine-tuned weights cost what the base costs)
    on the row's device: with the torch reranker, and with the fastest reranker backend the benchmark measured."""
    reranker = run["reranker"].split()[0] if run["rerank_topk"] else "none"
    s = served.get((run["encoder"], reranker, run.get("device", "cpu")))
    if s is None:
        return {"served p50, 1 client (ms)": None, "served req/s, 8 clients": None, "batching gain, 8 clients (x)": None,
                "fastest backend": None, "its p50, 1 client (ms)": None, "its req/s, 8 clients": None}
    backends = {k.removeprefix("backend "): v for k, v in s.items() if k.startswith("backend ")} or {"torch": s}
    torch_row = backends.get("torch") or next(iter(backends.values()))
    fastest = min(backends, key=lambda b: backends[b]["batched / concurrency 1"]["p50"])
    return {"served p50, 1 client (ms)": torch_row["batched / concurrency 1"]["p50"],
            "served req/s, 8 clients": torch_row["batched / concurrency 8"]["requests_per_s"],
            "batching gain, 8 clients (x)": torch_row["batching gain in requests/s at concurrency 8 (x)"],
            "fastest backend": fastest, "its p50, 1 client (ms)": backends[fastest]["batched / concurrency 1"]["p50"],
            "its req/s, 8 clients": backends[fastest]["batched / concurrency 8"]["requests_per_s"]}


def _millions(n: int) -> float:
    return round(n / 1e6, 1)


def efficiency_table(runs: list[dict], reference: str | None = None, served: dict | None = None
                     ) -> tuple[pd.DataFrame, str | None]:
    """The table and the reference row's name (None when there are no rows)."""
    if not runs:
        return pd.DataFrame(), None
    total = {r["row"]: r["parameters"]["encoder"] + r["parameters"]["reranker"] for r in runs}
    reference = reference or max(total, key=lambda k: (total[k], k))
    if reference not in total:
        raise ValueError(f"--reference {reference!r} is not a measured row; rows: {sorted(total)}")
    ref = next(r for r in runs if r["row"] == reference)
    rows = []
    for r in runs:
        backends = r.get("backends", {})
        reranker, rr_backend = (r["reranker"], backends.get("reranker", NOT_RECORDED)) if r["rerank_topk"] else ("none",) * 2
        memory = r.get("peak_gpu_mb", r["peak_rss_mb"])
        rows.append({"pipeline": r["row"], "encoder": r["encoder"], "reranker": reranker, "device": r["device"],
                     "backends (encoder / reranker)": f"{backends.get('encoder', NOT_RECORDED)} / {rr_backend}",
                     "pool skills": r["pool_skills"],
                     "encoder params (M)": _millions(r["parameters"]["encoder"]),
                     "reranker params (M)": _millions(r["parameters"]["reranker"]),
                     "total params (M)": _millions(total[r["row"]]),
                     "p50 latency (ms)": r["total_ms"]["p50"], "p95 latency (ms)": r["total_ms"]["p95"],
                     "peak memory (MB)": memory,
                     "fewer params (x)": round(total[reference] / total[r["row"]], 1) if total[r["row"]] else None,
                     "faster at p50 (x)": round(ref["total_ms"]["p50"] / r["total_ms"]["p50"], 1),
                     **(served_columns(r, served) if served else {})})
    return pd.DataFrame(rows), reference


def write_efficiency(perf: Path, out: Path, reference: str | None = None) -> list[Path]:
    """``<out>/efficiency.md`` and ``.tex`` (a note saying how to make rows when none is measured)."""
    runs, served = read_runs(perf), read_served(perf)
    table, ref = efficiency_table(runs, reference, served)
    if ref is None:
        notes = [f"No {PATTERN} with parameter counts in {perf.name}/: run benchmarks/serving_latency.py --name NAME "
                 "once per pipeline preset."]
        table = pd.DataFrame({"pipeline": []})
    else:
        ref_row = next(r for r in runs if r["row"] == ref)
        notes = [f"Ratios against {ref}: reference / row (parameters; p50 latency of the whole query: encode, search, "
                 f"rerank top-{ref_row['rerank_topk']}). Peak memory: GPU allocated on cuda, process RSS on cpu.",
                 *[f"{r['row']}: `{r['command']}` ({r['pool_skills']} skills, {r['queries']} queries, "
                   f"{r['torch_threads']} threads)" for r in runs],
                 *[f"served ({enc} + {rr}, {dev}): `route serve` over HTTP, micro-batched, {s['pool_skills']} skills, top-{s['topk']} "
                   "reranked (benchmarks/route_load.py; batching gain: requests/s against the same server unbatched"
                   + (f"; the same pipeline in-process in that run: p50 {s['in_process_unbatched_ms']['p50']} ms"
                      if "in_process_unbatched_ms" in s else "") + "; fastest backend: reranker.backend of the lowest p50)"
                   for (enc, rr, dev), s in served.items()]]
    md, tex = out / "efficiency.md", out / "efficiency.tex"
    atomic_write_text(md, plain_to_markdown(table, TITLE, notes))
    atomic_write_text(tex, plain_to_latex(table, "efficiency", TITLE, notes))
    return [md, tex]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m skillrouter.report.efficiency", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--perf", type=Path, default=Path("reports/perf"))
    parser.add_argument("--reference", default=None, help="the row the ratios compare against (default: most parameters)")
    parser.add_argument("--out", type=Path, default=Path("reports"))
    args = parser.parse_args(argv)
    for path in write_efficiency(args.perf, args.out, args.reference):
        print(path)


if __name__ == "__main__":
    main()
