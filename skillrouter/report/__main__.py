"""Regenerate every paper table and the recall figure from whatever runs exist.

    python -m skillrouter.report [--runs DIR ...] [--out reports/] [--significance] [--tracking]

Default runs: every multirun directory under outputs/multirun. Writes runs.csv (the tidy table, one
row per run, failed and incomplete runs included), one .tex/.md/.csv per table, the reranker
contribution table, the recall figure, and index.md listing everything plus the failed runs. With
``--tracking`` the rendered tables and the figure also go to W&B as a ``report`` artifact (offline unless
``WANDB_MODE`` says otherwise).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from ..data.jsonl import atomic_write_text
from .cases import case_pairs, write_cases
from .collect import collect
from .figures import recall_figure
from .render import plain_to_latex, plain_to_markdown, to_csv, to_latex, to_markdown
from .reproduction import NOTES as REPRODUCTION_NOTES, reproduction_table
from .synth import synth_table
from .tables import TABLES, build_table, reranker_contribution


SYNTHETIC_DATA = ("builtin", "tiny")


def generate(run_roots: list[Path], out: Path, significance: bool = False, data: str = "builtin") -> list[Path]:
    """Every report file from the runs under ``run_roots``; the paper tables use the runs on ``data``
    (the reproduction table picks each row's own data)."""
    base = Path.cwd()
    runs = collect(run_roots, base=base)
    on_data = runs[runs["data"] == data] if len(runs) else runs
    written: list[Path] = []

    def write(name: str, text: str) -> None:
        atomic_write_text(out / name, text)
        written.append(out / name)

    write("runs.csv", runs.to_csv(index=False, float_format="%.6f"))
    index = ["# skillrouter reports", "", f"{len(runs)} runs collected ({int((runs['status'] == 'completed').sum())} completed); "
             f"the paper tables use the runs on data={data}.", ""]
    if data in SYNTHETIC_DATA:
        index += ["The built-in data is a small synthetic format demo: these figures show the tables' format and the "
                  "pipeline's plumbing, not model quality.", ""]
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
                       ["One row per generated artifact (shared by every cell that used it); tokens as the server counted them."])}
    for name, (title, df, notes) in plain.items():
        write(f"{name}.csv", df.to_csv(index=False))
        write(f"{name}.tex", plain_to_latex(df, name, title, notes))
        md = plain_to_markdown(df, title, notes)
        write(f"{name}.md", md)
        index += [md, ""]
    index += _cases(on_data, base, out, written)
    bad = runs[runs["status"] != "completed"]
    index += ["### Failed or incomplete runs", ""]
    index += [f"- `{r['run']}` {r['status']}: {r['error']}" for _, r in bad.iterrows()] or ["- none"]
    write("index.md", "\n".join(index) + "\n")
    if len(on_data):
        written += recall_figure(on_data, base, out)
    return written


def _cases(runs, base: Path, out: Path, written: list[Path]) -> list[str]:
    """Write the case files of each paper table's comparisons (encoder vs base, pipeline vs encoder) and
    return the index lines linking them."""
    lines = ["### Cases (per-query: rescues, degradations, common misses)", ""]
    for name, a, b in case_pairs(runs):
        try:
            files = write_cases(base / a, base / b, out / "cases", name)
        except (OSError, KeyError, ValueError) as exc:
            lines.append(f"- {name}: not written ({exc})")
            continue
        written += files
        lines.append(f"- [{name}](cases/{name}.md) (A = `{a}`, B = `{b}`)")
    return lines + (["- none: no comparable runs"] if len(lines) == 2 else []) + [""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", nargs="+", type=Path, default=None, help="multirun directories (default: outputs/multirun/*)")
    parser.add_argument("--out", type=Path, default=Path("reports"))
    parser.add_argument("--significance", action="store_true", help="mark cells that differ significantly from the table's reference row")
    parser.add_argument("--tracking", action="store_true", help="log the rendered files to W&B as a report artifact")
    parser.add_argument("--data", default="builtin", help="the data choice whose runs fill the paper tables (default: builtin)")
    args = parser.parse_args()
    roots = args.runs or sorted(p for p in Path("outputs/multirun").glob("*") if p.is_dir())
    if not roots:
        parser.error("no runs: pass --runs DIR or run a sweep first (python launch.py -m -cd sweeps -cn encoder_results)")
    written = generate(roots, args.out, args.significance, args.data)
    for path in written:
        print(path)
    if args.tracking:
        from ..tracking.grid_run import log_report

        log_report(written, roots, args.out)


if __name__ == "__main__":
    main()
