"""Recompute a run's metrics from its ``rankings.jsonl`` and the data it recorded, and compare with
its ``metrics.json``: ``python -m skillrouter.eval.rescore RUN_DIR [RUN_DIR ...]`` (exit 1 on mismatch)."""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from ..data.dataset import load_source
from ..rankings import read_rankings
from .metrics import aggregate, parse_metrics


def rescore(run_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return ``(recorded, recomputed)`` metric dicts for one run directory."""
    recorded = json.loads((run_dir / "metrics.json").read_text())
    data, tier = recorded["data"]["config"], recorded["data"]["tier"]
    dataset = load_source(data, tier["name"], bool(tier["distractors"]))
    rankings = read_rankings(run_dir / "rankings.jsonl")
    metrics, _ = aggregate({qid: r.ids for qid, r in rankings.items()}, dataset.queries,
                           parse_metrics(recorded["eval"]["metrics"]), recorded["eval"]["breakdown"])
    return recorded["metrics"], metrics


def mismatches(recorded: dict[str, Any], recomputed: dict[str, Any], tol: float = 1e-9) -> list[str]:
    out = []
    for name in sorted(set(recorded) | set(recomputed)):
        a, b = recorded.get(name), recomputed.get(name)
        if (a is None) != (b is None) or (a is not None and not math.isclose(a, b, abs_tol=tol)):
            out.append(f"{name}: recorded {a} recomputed {b}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("run_dirs", nargs="+", type=Path)
    bad = 0
    for run_dir in parser.parse_args().run_dirs:
        diff = mismatches(*rescore(run_dir))
        print(f"{run_dir}: {'OK' if not diff else 'MISMATCH'}")
        for line in diff:
            print(f"  {line}")
        bad += bool(diff)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
