"""The tuning table and figure, from the ``study.json`` every Optuna study writes in its sweep folder
(:mod:`skillrouter.tuning`): per study, the best parameters, the objective on the split it was tuned on, and the
best trial's test metrics, scored once; the figure draws each study's objective over its trials."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from .collect import shown_path
from .figures import save_figure

NOTES = ["Objective and test metrics in %. The objective is scored on the dev split the study held out of training "
         "(its source, size and seed in the split column); the test columns score the best trial once, on the "
         "test queries, with that split still held out.",
         "A study marked 'tuned on test' chose its trial on the test split (allow_test_tuning=true): its test "
         "columns are not an unbiased estimate."]


SHOWN_TRIALS = 12  # more than this: the figure shows the objective over trials


def studies(run_roots: list[Path]) -> list[tuple[Path, dict[str, Any]]]:
    """Every study under ``run_roots``: its sweep folder and summary."""
    found = sorted({p for root in run_roots for p in Path(root).rglob("study.json")})
    return [(p.parent, json.loads(p.read_text())) for p in found]


def _number(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _split(split: dict[str, Any] | None) -> str:
    if not split or split.get("scored") == "test":
        return "test (tuned on test)"
    dev = split.get("dev") or {}
    source = f"file {Path(dev['file']).name}" if dev.get("source") == "file" else \
        f"{dev.get('share')} of training {'positive skills' if dev.get('unit', 'query') == 'skill' else 'queries'}, seed {dev.get('seed')}"
    return f"dev: {dev.get('n_queries')} queries ({source})"


def tuning_table(run_roots: list[Path], base: Path | None = None) -> pd.DataFrame:
    rows = []
    for sweep_dir, study in studies(run_roots):
        best, objective = study.get("best") or {}, study["objective"]
        test = (study.get("test") or {}).get("metrics", {})
        values = [100 * t["value"] for t in study["trials"] if t["state"] == "COMPLETE"]
        rows.append({
            "study": shown_path(sweep_dir, base), "trials": f"{len(values)}/{len(study['trials'])}",
            "split": _split(study.get("split")), "best trial": best.get("number"),
            "best parameters": ", ".join(f"{k}={_number(v)}" for k, v in best.get("params", {}).items()) or None,
            f"{objective} (objective)": None if best.get("value") is None else 100 * best["value"],
            "objective over trials": ", ".join(f"{v:.1f}" for v in values) if len(values) <= SHOWN_TRIALS
            else f"{len(values)} trials: see tuning_objective.png",
            f"test {objective}": None if test.get(objective) is None else 100 * test[objective],
            "test hit@1": None if test.get("hit@1") is None else 100 * test["hit@1"],
        })
    columns = ["study", "trials", "split", "best trial", "best parameters"]
    return pd.DataFrame(rows) if rows else pd.DataFrame(columns=columns)


def tuning_figure(run_roots: list[Path], out_dir: Path, base: Path | None = None) -> list[Path]:
    """Each study's objective per finished trial (points) and the best so far (line); nothing without a study."""
    found = studies(run_roots)
    if not found:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for sweep_dir, study in found:
        done = [(t["number"], 100 * t["value"]) for t in study["trials"] if t["state"] == "COMPLETE"]
        if not done:
            continue
        numbers, values = zip(*done)
        best = [max(values[: i + 1]) for i in range(len(values))]
        line, = ax.plot(numbers, best, drawstyle="steps-post", label=shown_path(sweep_dir, base))
        ax.plot(numbers, values, marker="o", linestyle="none", color=line.get_color(), alpha=0.6)
    ax.set_xlabel("trial")
    ax.set_ylabel(f"objective (%), {found[0][1]['objective']}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    return save_figure(fig, out_dir / "tuning_objective")
