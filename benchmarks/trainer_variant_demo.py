"""`make report-demo` from a cold cache with the trainer change that ``train_step_variants.py`` and
``trainer_variant_cell.py`` measured (no hidden dropout in either training, eager attention in the reranker's): what
issue 43's 40 min would be, measured before the change is made here (it changes every trained model, so every table).

    python benchmarks/trainer_variant_demo.py [--tree DIR] [--name trainer_variant_demo]

The run happens in a git worktree of HEAD with ``benchmarks/trainer_variant.patch`` applied, beside this checkout (so
``scripts/demo_reports.py`` finds ../shared/data as it does here), with its own stage cache, so cold. ``--tree DIR``
reuses such a tree (a run that was killed resumes with ``demo_reports.py --from`` there, then this collects it); the
tree must differ from HEAD by the patch alone. Its tables stay in the tree; what comes back are figures: the run's
steps and total beside the committed run's (``reports/perf/report_demo.json``, which names its CPU: on another kind
the two differ by the CPU too), and the rows of the three-seed tables (encoders, pipeline, loss), the variant's beside
the committed ones. Figures: reports/perf/<name>.*
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import PERF, ROOT, write_figures  # noqa: E402

PATCH = Path(__file__).with_name("trainer_variant.patch")
# the three-seed tables, each by its row label: the ones the change moves most, and the ones the README's goals read
TABLES = {"encoder_results": "encoder", "pipeline_results": "system", "loss_ablation": "loss_label"}
METRICS = ("avg/hit@1", "avg/mrr@10")


def prepared_tree(tree: Path) -> Path:
    """A worktree of HEAD with the patch applied, made if absent; refused if its code differs from HEAD otherwise
    (remove it with ``git worktree remove --force DIR``)."""
    if not tree.exists():
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), "HEAD"], cwd=ROOT, check=True)
        subprocess.run(["git", "apply", str(PATCH)], cwd=tree, check=True)
    diff = subprocess.run(["git", "diff", "HEAD", "--", ".", ":(exclude)reports"], cwd=tree, capture_output=True,
                          text=True, check=True).stdout  # reports/ is what the run regenerates
    if diff != PATCH.read_text():
        sys.exit(f"{tree} differs from HEAD by more or less than {PATCH.name}: not the variant this measures")
    return tree


def head(tree: Path) -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True, text=True,
                          check=True).stdout.strip()


def table_rows(reports: Path, table: str) -> dict[str, str]:
    """``row: "hit@1 mean ± sd, mrr@10 mean ± sd"`` for every row of a table (Avg of the tiers)."""
    with (reports / f"{table}.csv").open() as f:
        rows = list(csv.DictReader(f))
    return {row[TABLES[table]]: ", ".join(f"{m.split('/')[1]} {float(row[m]):.3f} ± {float(row[m + ' sd']):.3f}"
                                          for m in METRICS)
            for row in rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, default=ROOT.parent / f"{ROOT.name}-trainer-variant")
    parser.add_argument("--name", default="trainer_variant_demo")
    args = parser.parse_args()
    tree = prepared_tree(args.tree)
    timing = tree / "reports" / "perf" / "report_demo.json"
    if not (timing.exists() and json.loads(timing.read_text())["figures"]["complete"]):
        subprocess.run([sys.executable, "scripts/demo_reports.py"], cwd=tree, check=False)
    variant = json.loads(timing.read_text())
    committed = json.loads((PERF / "report_demo.json").read_text())
    figures = {
        "variant": {"cpu": variant["cpu"], "date": variant["date"], "tree at": head(tree) + " + " + PATCH.name,
                    **{k: variant["figures"][k] for k in ("total_min", "complete", "steps_s", "failed")}},
        "committed run": {"cpu": committed["cpu"], "date": committed["date"],
                          **{k: committed["figures"][k] for k in ("total_min", "steps_s")}},
        "tables": {table: {"variant": table_rows(tree / "reports", table),
                           "committed": table_rows(ROOT / "reports", table)} for table in TABLES},
    }
    command = f"python benchmarks/trainer_variant_demo.py --tree {os.path.relpath(tree, ROOT)} --name {args.name}"
    write_figures(args.name, figures, command)


if __name__ == "__main__":
    main()
