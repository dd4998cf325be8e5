"""Regenerate every paper table and the recall figure from whatever runs exist.

    python -m skillrouter.report [--runs DIR ...] [--out reports/] [--significance]

Default runs: every multirun directory under outputs/multirun. Writes runs.csv (the tidy table, one
row per run, failed and incomplete runs included), one .tex/.md/.csv per table, the reranker
contribution table, the recall figure, and index.md listing everything plus the failed runs.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from ..data.jsonl import atomic_write_text
from .collect import collect
from .figures import recall_figure
from .render import to_csv, to_latex, to_markdown
from .tables import TABLES, build_table, reranker_contribution


def generate(run_roots: list[Path], out: Path, significance: bool = False) -> list[Path]:
    base = Path.cwd()
    runs = collect(run_roots, base=base)
    written: list[Path] = []

    def write(name: str, text: str) -> None:
        atomic_write_text(out / name, text)
        written.append(out / name)

    write("runs.csv", runs.to_csv(index=False, float_format="%.6f"))
    index = ["# skillrouter reports", "", f"{len(runs)} runs collected ({int((runs['status'] == 'completed').sum())} completed).", ""]
    for spec in TABLES:
        table = build_table(spec, runs, base, with_significance=significance)
        write(f"{spec.name}.tex", to_latex(table))
        write(f"{spec.name}.csv", to_csv(table))
        md = to_markdown(table)
        write(f"{spec.name}.md", md)
        index += [md, f"Regenerate its runs: `python launch.py -m -cd sweeps -cn {spec.sweep}`", ""]
    contribution = reranker_contribution(runs, base)
    write("reranker_contribution.csv", contribution.to_csv(index=False))
    index += ["### Reranker contribution (Hit@1 against the encoder alone)", "", contribution.to_markdown(index=False), ""]
    bad = runs[runs["status"] != "completed"]
    index += ["### Failed or incomplete runs", ""]
    index += [f"- `{r['run']}` {r['status']}: {r['error']}" for _, r in bad.iterrows()] or ["- none"]
    write("index.md", "\n".join(index) + "\n")
    if len(runs):
        written += recall_figure(runs, base, out)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", nargs="+", type=Path, default=None, help="multirun directories (default: outputs/multirun/*)")
    parser.add_argument("--out", type=Path, default=Path("reports"))
    parser.add_argument("--significance", action="store_true", help="mark cells that differ significantly from the table's reference row")
    args = parser.parse_args()
    roots = args.runs or sorted(p for p in Path("outputs/multirun").glob("*") if p.is_dir())
    if not roots:
        parser.error("no runs: pass --runs DIR or run a sweep first (python launch.py -m -cd sweeps -cn encoder_results)")
    for path in generate(roots, args.out, args.significance):
        print(path)


if __name__ == "__main__":
    main()
