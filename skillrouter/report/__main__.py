"""Regenerate every paper table and the recall figure from whatever runs exist.

    python -m skillrouter.report [--runs DIR ...] [--out reports/] [--significance] [--tracking] [--fresh-only]
    python -m skillrouter.report --check [RUNS_CSV]     # the runs made by code that has changed since; exit 1 if any

Default runs: every multirun directory under outputs/multirun. Writes runs.csv (the tidy table, one
row per run, failed and incomplete runs included), one .tex/.md/.csv per table, the reranker
contribution table, the recall figure, and index.md showing every table, listing the failed runs and linking
every file under the output folder (the benchmarks' perf/ figures included). With
``--tracking`` the rendered tables and the figure also go to W&B as a ``report`` artifact (offline unless
``WANDB_MODE`` says otherwise).
"""
from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from ..data.jsonl import atomic_write_text
from .attention import write_attention, yes_no_reranker
from .cascade import CASCADE_NOTES, CONDENSE_NOTES, cascade_table, condensation_table
from .cases import case_pairs, write_cases
from .downstream import NOTES as DOWNSTREAM_NOTES, downstream_rows, downstream_table, write_downstream_cases
from .collect import collect, usable
from .freshness import stale_column, stale_runs
from .efficiency import write_efficiency
from .r3_stats import from_run, source_name, write_r3_stats
from .figures import recall_figure
from .render import plain_to_latex, plain_to_markdown, to_csv, to_latex, to_markdown
from .reproduction import NOTES as REPRODUCTION_NOTES, reproduction_table
from .synth import synth_table
from .tables import TABLES, build_table, reranker_contribution
from .tuning import NOTES as TUNING_NOTES, tuning_figure, tuning_table

if TYPE_CHECKING:
    import pandas as pd


SYNTHETIC_DATA = ("builtin", "tiny")
ATTENTION_PAIRS = 64


def hardware_line(runs: pd.DataFrame) -> str:
    """Which hardware built the runs' stages, with how many runs each: a table's ± is the spread over seeds on its
    hardware, and the same code and seeds train other models on other matmul units (bf16 rounds differently on AMX
    tiles than on AVX-512 BF16 units: README, "Which CPU made the tables")."""
    if not len(runs):
        return "Built on: no runs."
    unknown = "not recorded (stages built before their cache entries named it)"
    counts = Counter(runs["hardware"].fillna(unknown))  # every collected row has the column
    return ("Built on: " + "; ".join(f"{hw} ({counts[hw]} runs)" for hw in sorted(counts)) + ". A table's ± is the "
            "spread over seeds on that hardware: the same code and seeds train other models on other matmul units.")


def generate(run_roots: list[Path], out: Path, significance: bool = False, data: str = "builtin",
             fresh_only: bool = False) -> list[Path]:
    """Every report file from the runs under ``run_roots``; the paper tables use the runs on ``data``
    (the reproduction table picks each row's own data). ``fresh_only``: runs made by code that has changed since are
    left out (else their cells carry a footnote naming the stages)."""
    base = Path.cwd()
    runs = collect(run_roots, base=base)
    stale = stale_runs(runs)
    if fresh_only and len(stale):
        runs = runs.drop(index=stale.index).reset_index(drop=True)
    on_data = runs[runs["data"] == data] if len(runs) else runs
    written: list[Path] = []

    def write(name: str, text: str) -> None:
        atomic_write_text(out / name, text)
        written.append(out / name)

    write("runs.csv", runs.to_csv(index=False, float_format="%.6f"))
    index = ["# skillrouter reports", "", f"{len(runs)} runs collected ({int((runs['status'] == 'completed').sum())} completed); "
             f"the paper tables use the runs on data={data}.", ""]
    if len(stale):
        index += [f"{len(stale)} runs were made by code that has changed since "
                  + ("and are left out (--fresh-only)." if fresh_only else "(their cells carry a footnote naming the stages; "
                     "`python -m skillrouter.report --check reports/runs.csv` lists them)."), ""]
    if data in SYNTHETIC_DATA:
        index += ["The built-in data is a small synthetic format demo: these figures show the tables' format and the "
                  "pipeline's plumbing, not model quality.", ""]
    index += [hardware_line(runs), ""]
    for spec in TABLES:
        table = build_table(spec, on_data, base, with_significance=significance)
        write(f"{spec.name}.tex", to_latex(table))
        write(f"{spec.name}.csv", to_csv(table))
        md = to_markdown(table)
        write(f"{spec.name}.md", md)
        index += [md, f"Regenerate its runs: `python launch.py -m -cd sweeps -cn {spec.sweep}`", ""]
    plain = {"reranker_contribution": ("Reranker contribution (Hit@1 against the encoder alone)",
                                       reranker_contribution(on_data, base), []),
             "reproduction": ("Paper vs ours", reproduction_table(runs), REPRODUCTION_NOTES),
             "synth": ("Data synthesis: what each generation stage made, filtered and spent", synth_table(run_roots),
                       ["One row per generated artifact (shared by every cell that used it); tokens as the server counted them."]),
             "downstream": ("Downstream agents: task success with no, gold and routed skills",
                            downstream_table(downstream_rows(run_roots, data)), DOWNSTREAM_NOTES),
             "tuning": ("Tuning: Optuna studies on a dev split, and their best trial on test",
                        tuning_table(run_roots, base), TUNING_NOTES),
             "cascade": ("Rerank cascades: each step's depth, the GT it can reach, the latency it adds",
                         cascade_table(run_roots, data), CASCADE_NOTES),
             "condensation": ("Query condensation: raw against condensed queries by instruction length",
                              condensation_table(run_roots, data), CONDENSE_NOTES)}
    for name, (title, df, notes) in plain.items():
        write(f"{name}.csv", df.to_csv(index=False))
        write(f"{name}.tex", plain_to_latex(df, name, title, notes))
        md = plain_to_markdown(df, title, notes)
        write(f"{name}.md", md)
        index += [md, ""]
    written += write_efficiency(out / "perf", out)
    index += [(out / "efficiency.md").read_text(), ""]
    index += _section("Cases (per-query: rescues, degradations, common misses)", _cases(on_data, base, out),
                      "no comparable runs", written)
    index += _section("Downstream cases (per task: routed sets that ended differently)",
                      [("downstream", lambda: write_downstream_cases(downstream_rows(run_roots, data), out),
                        "- [downstream](cases/downstream.md)")], "no run has agent trials", written)
    index += _section("Field attention (yes/no LM rerankers)", _attention(runs, base, out),
                      "no run reranks with a yes/no LM (sweeps/field_attention.yaml runs one)", written)
    index += _section("R3 dataset statistics", _r3_stats(runs, base, out),
                      "no run read synth=r3 output or the R3-Skill release", written)
    bad = runs[runs["status"] != "completed"]
    index += ["### Failed or incomplete runs", ""]
    index += [f"- `{r['run']}` {r['status']}: {r['error']}" for _, r in bad.iterrows()] or ["- none"]
    if len(on_data):
        written += recall_figure(on_data, base, out)
    written += tuning_figure(run_roots, out, base)
    index += ["", "### Every file here", ""] + _files(out)
    write("index.md", "\n".join(index) + "\n")
    return written


def _files(out: Path) -> list[str]:
    """A line per file under ``out`` (this run's and the benchmarks' ``perf/`` figures alike), linked."""
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file() and p.name != "index.md")
    return [f"- [{name}]({name})" for name in files]


Job = tuple[str, Callable[[], list[Path]], str]  # (name, write its files, its index line)


def _section(title: str, jobs: Iterable[Job], none: str, written: list[Path]) -> list[str]:
    """An index section: each job's files written (a failure is a line naming it, never a lost report)."""
    lines = [f"### {title}", ""]
    for name, write, link in jobs:
        try:
            written += write()
        except (OSError, KeyError, ValueError) as exc:
            lines.append(f"- {name}: not written ({exc})")
            continue
        lines.append(link)
    return lines + ([f"- none: {none}"] if len(lines) == 2 else []) + [""]


def _cases(runs, base: Path, out: Path) -> Iterator[Job]:
    """The case files of each paper table's comparisons (encoder vs base, pipeline vs encoder)."""
    for name, a, b in case_pairs(runs):
        yield (name, lambda name=name, a=a, b=b: write_cases(base / a, base / b, out / "cases", name),
               f"- [{name}](cases/{name}.md) (A = `{a}`, B = `{b}`)")


def _attention(runs, base: Path, out: Path) -> Iterator[Job]:
    """Field attention of every completed run with a yes/no LM reranker (its first query-GT pairs)."""
    for run in (runs[runs["status"] == "completed"]["run"] if len(runs) else []):  # superseded ones too: the choices
        if yes_no_reranker(base / run):                                         # do not name the reranker's base
            name = str(run).strip("/").replace("/", "-")
            yield (name, lambda run=run, name=name: write_attention(base / run, out / "attention", name, ATTENTION_PAIRS),
                   f"- [{name}](attention/{name}.md) (first {ATTENTION_PAIRS} query-GT pairs)")


def _r3_stats(runs, base: Path, out: Path) -> Iterator[Job]:
    """R3's dataset statistics, once per R3 source any completed run read (a synth=r3 output, the release)."""
    done: set[str] = set()
    for run in (usable(runs)["run"] if len(runs) else []):
        name = source_name(base / run)
        if name is not None and name not in done:
            done.add(name)
            yield (name, lambda run=run, name=name: write_r3_stats(from_run(base / run), out / "r3_stats", name),
                   f"- [{name}](r3_stats/{name}.md) (first read by `{run}`)")


def check(runs_csv: Path) -> int:
    """List the runs of ``runs_csv`` made by code that has changed since (recomputed from its ``code`` column against
    this checkout); 1 if there are any."""
    import pandas as pd

    if not runs_csv.is_file():
        print(f"skillrouter: no {runs_csv} (python -m skillrouter.report writes it)", file=sys.stderr)
        return 2
    runs = pd.read_csv(runs_csv, dtype=str, keep_default_na=False)
    missing = [c for c in ("run", "status", "superseded", "code") if c not in runs.columns]
    if missing:
        print(f"{runs_csv}: no {', '.join(missing)} column (written before runs recorded their code): every run is stale")
        return 1
    runs["superseded"] = runs["superseded"].str.lower() == "true"
    runs["stale"] = stale_column(runs["code"], runs["status"])
    stale = stale_runs(runs)
    for _, r in stale.iterrows():
        print(f"stale: {r['run']}: {r['stale']}")
    shown = int(((runs["status"] == "completed") & ~runs["superseded"]).sum())
    print(f"{len(stale)} of {shown} runs made by code that has changed since" if len(stale)
          else f"{shown} runs, none made by code that has changed since")
    return 1 if len(stale) else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", nargs="+", type=Path, default=None, help="multirun directories (default: outputs/multirun/*)")
    parser.add_argument("--out", type=Path, default=Path("reports"))
    parser.add_argument("--significance", action="store_true", help="mark cells that differ significantly from the table's reference row")
    parser.add_argument("--tracking", action="store_true", help="log the rendered files to W&B as a report artifact")
    parser.add_argument("--data", default="builtin", help="the data choice whose runs fill the paper tables (default: builtin)")
    parser.add_argument("--fresh-only", action="store_true", help="leave out runs made by code that has changed since")
    parser.add_argument("--check", nargs="?", type=Path, const=Path("reports/runs.csv"), metavar="RUNS_CSV",
                        help="list the runs of RUNS_CSV (default reports/runs.csv) made by code that has changed since; "
                             "exit 1 if there are any")
    args = parser.parse_args()
    if args.check is not None:
        sys.exit(check(args.check))
    roots = args.runs or sorted(p for p in Path("outputs/multirun").glob("*") if p.is_dir())
    if not roots:
        parser.error("no runs: pass --runs DIR or run a sweep first (python launch.py -m -cd sweeps -cn encoder_results)")
    written = generate(roots, args.out, args.significance, args.data, args.fresh_only)
    for path in written:
        print(path)
    if args.tracking:
        from ..tracking.grid_run import log_report

        log_report(written, roots, args.out)


if __name__ == "__main__":
    main()
